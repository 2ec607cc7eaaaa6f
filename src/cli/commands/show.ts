import { labelWords } from './label.js';
import { leaseWords } from '../output/lease-words.js';
import { type LeaseView } from '../../service/workspace/lease-guard.js';
import { type Labels } from '../../catalog/port/labels.js';
import type { CliCommand } from './command.js';

/**
 * A workspace as `awc show` shows it; a released one (docs/explanation/lifecycle.md#idle-release)
 * also gets `released`: when, the snapshot holding its work, where it was mounted and the
 * command that resumes it there.
 */
function withRelease<W extends { id: string; mountState: string; labels: Labels }>(w: W): W & { released?: string } {
  const at = w.labels['awc.released-at'];
  if (w.mountState === 'mounted' || at === undefined) return w;
  const path = w.labels['awc.released-path'] ?? '<dir>';
  const word = /^[\w@%+=:,./-]+$/.test(path) ? path : `'${path.replaceAll("'", "'\\''")}'`;
  const snap = w.labels['awc.released-snapshot'] ?? '?';
  return { ...w, released: `${at}, work in ${snap}; to resume: awc mount ${w.id} ${word}` };
}

/** `awc show <ref>`: a snapshot or a workspace. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('show <ref>')
      .description('show a snapshot or a workspace')
      .action((ref: string) =>
        ctx.withAwc(async (awc, o) => {
          const r = await awc.resolve(ref);
          const data = r.kind === 'snapshot' ? { kind: 'snapshot', ...r.snapshot } : withRelease(await awc.leases.show(r.workspace));
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
