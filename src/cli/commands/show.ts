import { labelWords } from './label.js';
import { leaseWords } from '../output/lease-words.js';
import { type LeaseView } from '../../service/workspace/lease-guard.js';
import { type Labels } from '../../catalog/port/labels.js';
import type { CliCommand } from './command.js';

/** `awc show <ref>`: a snapshot or a workspace. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('show <ref>')
      .description('show a snapshot or a workspace')
      .action((ref: string) =>
        ctx.withAwc(async (awc, o) => {
          const r = await awc.resolve(ref);
          const data = r.kind === 'snapshot' ? { kind: 'snapshot', ...r.snapshot } : await awc.leases.show(r.workspace);
          o.result(data, () =>
            Object.entries(data)
              .map(([k, v]) =>
                k === 'lease'
                  ? `lease:${leaseWords(v as LeaseView)}`
                  : k === 'labels'
                    ? `labels:${labelWords(v as Labels) || ' -'}`
                    : `${k}: ${v ?? '-'}`,
              )
              .join('\n'),
          );
        }),
      );
  },
};
