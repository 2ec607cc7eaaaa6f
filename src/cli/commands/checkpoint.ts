import { type GitExportCliOptions } from './git-export-cli.js';
import { formatBytes } from '../output/output.js';
import type { CliCommand } from './command.js';

/** `awc checkpoint <workspace>` (with `--git-branch`: then a git export of the new head). */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('checkpoint <workspace>')
      .description("turn a workspace's current state into a new snapshot and move its head there")
      .option('-m, --message <msg>', 'message')
      .option('--allow-changing', 'store files that keep changing while read as read (listed in "changing") instead of failing')
      .option('--git-branch <branch>', 'then export the new head as a commit on this branch (docs/how-to/git-in-and-out.md)')
      .option('--git <repo>', 'with --git-branch: the local repository (default: the recorded origin)')
      .option('--force', 'with --git-branch: move the branch even when its tip is not the base commit')
      .action((ws: string, opts: GitExportCliOptions) =>
        ctx.withAwc(async (awc, o) => {
          if (opts.gitBranch !== undefined || opts.git !== undefined || opts.force)
            return (await import('./git-export-cli.js')).runCheckpointGit(awc, o, ws, opts);
          const r = await awc.checkpoint(ws, opts);
          for (const p of r.changing ?? []) o.warn(`${p}: kept changing while read; stored as last read`);
          for (const k of r.skipped) o.warn(`${k.path}: skipped (${k.reason}: a snapshot cannot hold it)`);
          for (const k of r.secrets)
            o.warn(`${k.path}: secret, not stored (it stays on this host; opt it in with "allowSecrets" in .awc.json)`);
          for (const k of r.dropped) o.warn(`${k.path}: scratch, dropped (${k.files} files, ${formatBytes(k.bytes)})`);
          o.result(r, () =>
            r.changed
              ? `${r.id}: ${r.files} files, ${formatBytes(r.bytes)}; read ${r.filesRead} changed files, stored ${formatBytes(r.newBytes)} new`
              : `${r.id}: no changes since the head`,
          );
        }),
      );
  },
};
