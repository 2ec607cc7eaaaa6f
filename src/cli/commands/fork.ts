import { collectLabel, labelsOf } from './label.js';
import { AwcError } from '../../core/errors.js';
import type { CliCommand } from './command.js';

/** `awc fork <snapshot>`: new workspaces of a snapshot. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('fork <snapshot>')
      .description('create workspaces from a snapshot (catalog rows only, constant time)')
      .option('--name <name>', 'name (with --count K: <name>-1 … <name>-K)')
      .option('--count <k>', 'how many workspaces', '1')
      .option('--label <key=value>', 'label every new workspace (repeatable)', collectLabel, [])
      .action((snap: string, opts: { name?: string; count: string; label: string[] }) =>
        ctx.withAwc(async (awc, o) => {
          if (!/^\d+$/.test(opts.count))
            throw new AwcError('E_USAGE', `--count must be a whole number from 1 to 100000, got ${JSON.stringify(opts.count)}`);
          const count = Number(opts.count);
          const rows = await awc.fork(snap, { name: opts.name, count, labels: labelsOf(opts.label) });
          o.result({ workspaces: rows.map((w) => ({ id: w.id, name: w.name })) }, () =>
            rows.map((w) => `${w.id}${w.name ? `  ${w.name}` : ''}`).join('\n'),
          );
        }),
      );
  },
};
