import { collectLabel, labelsOf, labelWords } from './label.js';
import { leaseWords } from '../output/lease-words.js';
import type { CliCommand } from './command.js';

/** `awc ls`: the workspaces, with their leases and labels. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('ls')
      .description('list workspaces')
      .option('--label <key=value>', 'only workspaces with this label (repeatable: all must match)', collectLabel, [])
      .action((opts: { label: string[] }) =>
        ctx.withAwc(async (awc, o) => {
          const withLeases = await awc.leases.list(await awc.listWorkspaces({ labels: labelsOf(opts.label) }));
          o.result({ workspaces: withLeases }, () =>
            withLeases
              .map(
                (w) =>
                  `${w.id}  ${w.name ?? '-'}  head ${w.headSnapshotId}  ${w.mountState === 'mounted' ? `mounted at ${w.mountPath} (${w.mountDriver}) on ${w.mountHost}` : 'unmounted'}${leaseWords(w.lease)}${labelWords(w.labels)}`,
              )
              .join('\n'),
          );
        }),
      );
  },
};
