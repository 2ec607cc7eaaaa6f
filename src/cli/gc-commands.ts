import type { Command } from 'commander';
import type { Awc } from '../service/awc.js';
import type { Output } from './output.js';

/** How a command runs with an open service (main.ts `withAwc`). */
export type WithAwc = <T>(fn: (awc: Awc, o: Output) => Promise<T>) => Promise<T>;

/**
 * Registers `awc rm` and `awc gc` (docs/reference/rm-gc.md) on `program`.
 */
export function registerGcCommands(program: Command, withAwc: WithAwc): void {
  program
    .command('rm <ref>')
    .description('remove a workspace or a snapshot (catalog rows only; the bytes go with `awc gc`)')
    .option(
      '--force',
      'unmount a workspace mounted here and drop its uncheckpointed changes; remove a snapshot that is a base or has named children',
    )
    .action((ref: string, opts: { force?: boolean }) =>
      withAwc(async (awc, o) => {
        const r = await awc.rm(ref, opts);
        o.result(r, () => {
          const extra = [
            r.unmounted ? 'unmounted first' : '',
            r.discarded ? 'uncheckpointed changes dropped' : '',
            r.reparented?.length ? `${r.reparented.length} child snapshot(s) re-parented` : '',
            r.rebased?.length ? `${r.rebased.length} workspace(s) re-based` : '',
          ].filter(Boolean);
          return `removed ${r.kind} ${r.id}${extra.length ? ` (${extra.join('; ')})` : ''}`;
        });
      }),
    );
}
