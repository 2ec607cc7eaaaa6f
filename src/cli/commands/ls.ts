import { collectLabel, labelsOf } from './label.js';
import { formatWorkspaceTable } from '../output/workspace-table.js';
import type { CliCommand } from './command.js';

/** `awc ls`: the workspaces, with their leases and labels (text: a table, src/cli/output/workspace-table.ts; JSON unchanged). */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('ls')
      .description('list workspaces')
      .option('--label <key=value>', 'only workspaces with this label (repeatable: all must match)', collectLabel, [])
      .action((opts: { label: string[] }) =>
        ctx.withAwc(async (awc, o) => {
          const withLeases = await awc.leases.list(await awc.listWorkspaces({ labels: labelsOf(opts.label) }));
          o.result({ workspaces: withLeases }, () => formatWorkspaceTable(withLeases, Date.now(), opts.label.length > 0));
        }),
      );
  },
};
