import type { CliCommand } from './command.js';

/** `awc unmount <target>` (alias `umount`). */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('unmount <target>')
      .alias('umount')
      .description('unmount a workspace (by id, name or mount path)')
      .option('--discard', 'drop changes that are not checkpointed')
      .option('--force', 'detach even when busy (lazy unmount)')
      .action((target: string, opts: { discard?: boolean; force?: boolean }) =>
        ctx.withAwc(async (awc, o) => {
          const r = await awc.unmount(target, opts).catch(async (err: unknown) => {
            const { AwcError } = await import('../../core/errors.js');
            // the busy error names the processes to end; this caller can also detach lazily
            if (err instanceof AwcError && err.code === 'E_TARGET_BUSY' && err.details?.holders !== undefined && !opts.force)
              throw new AwcError(err.code, err.message, {
                hint: `${err.hint} Or pass --force to detach it lazily (the processes keep a detached view until they exit).`,
                details: err.details,
                cause: err,
              });
            throw err;
          });
          for (const k of r.kept ?? []) o.warn(`${k.path}: secret, kept on this host at ${k.keptAt} (awc kept ls)`);
          o.result(
            r,
            () =>
              `${r.workspace} unmounted from ${r.path}${r.holders ? ` (detached lazily: still used by ${r.holders.map((h) => `pid ${h.pid} ${h.command}`).join(', ')}; it cannot be mounted again until they exit)` : r.pending ? ' (uncheckpointed changes kept on this host; the next mount resumes them)' : ''}`,
          );
        }),
      );
  },
};
