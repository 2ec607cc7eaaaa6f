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
          const r = await awc.unmount(target, opts);
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
