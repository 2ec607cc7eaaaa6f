import type { CliCommand } from './command.js';

/** `awc diff <from> [to]`. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('diff <from> [to]')
      .description('compare snapshots or workspaces (a mounted workspace means its live state)')
      .option('--patch', 'print a git-style patch')
      .option('--binary', 'with --patch: full git binary patches, so that `git apply` can apply binary changes')
      .option('--metadata', 'also report owner, mtime and xattr changes')
      .action((from: string, to: string | undefined, opts: { patch?: boolean; binary?: boolean; metadata?: boolean }) =>
        ctx.withAwc(async (awc, o) => {
          const { formatChanges } = await import('../../service/diff/diff.js');
          const { formatLeftOut } = await import('../../service/diff/diff-secrets.js');
          const r = await awc.diff(from, to, { patch: opts.patch, binary: opts.binary, metadata: opts.metadata });
          const left = r.secrets ? { secrets: r.secrets, dropped: r.dropped } : {};
          const leftOut = formatLeftOut(r.secrets ?? [], r.dropped ?? []);
          if (opts.patch && !o.json) {
            // the patch holds stored changes only (never a secret's bytes); what a checkpoint leaves out goes to stderr
            process.stdout.write(r.patch ?? '');
            process.stderr.write(leftOut);
          } else
            o.result({ changes: r.changes, ...left, ...(opts.patch ? { patch: r.patch } : {}) }, () => formatChanges(r.changes) + leftOut);
        }),
      );
  },
};
