import { constants as osConstants } from 'node:os';
import { type GitExportCliOptions } from './git-export-cli.js';
import { formatBytes } from '../output/output.js';
import { progress, type CliCommand } from './command.js';

/** `awc export <ref>`: a tar file, a directory or (with `--git`) a git commit. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('export <ref>')
      .description('write a snapshot (or a workspace head) out as a tar file or a directory')
      .option('--tar <file>', 'tar file (pax, exact mtimes; - for stdout)')
      .option('--dir <dir>', 'new or empty directory (appears only when complete)')
      .option('--overwrite', 'with --dir: replace a non-empty directory')
      .option('--keep-privileges', 'with --dir: keep setuid/setgid bits and device nodes (left out by default)')
      .option('--git <repo>', 'write the changes against the base commit as one commit in this local repository (with --branch)')
      .option('--branch <branch>', 'with --git: the branch to write (new, at the base commit, or moved with --force)')
      .option('-m, --message <msg>', 'with --git: the commit message')
      .option('--force', 'with --git: move the branch even when its tip is not the base commit')
      .action((ref: string, opts: { tar?: string; dir?: string; overwrite?: boolean; keepPrivileges?: boolean } & GitExportCliOptions) =>
        ctx.withAwc(async (awc, o) => {
          if (opts.git !== undefined) return (await import('./git-export-cli.js')).runExportGit(awc, o, ref, opts);
          const { PendingFile } = await import('../../service/tar/pending-file.js');
          // Ctrl-C or a kill: remove the half-written archive, then exit as the signal would (128 + n)
          for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
            process.once(sig, () => {
              PendingFile.removeAllSync();
              process.exit(128 + osConstants.signals[sig]);
            });
          }
          const r = await awc.export(ref, { ...opts, onProgress: progress(o, 'exporting') });
          o.progressDone();
          for (const l of r.leftOut ?? []) o.warn(`${l.path}: left out: ${l.reason} (pass --keep-privileges to keep it)`);
          if (opts.tar !== '-') o.result(r, () => `${r.id}: ${r.files} files, ${formatBytes(r.bytes)} written to ${opts.tar ?? opts.dir}`);
        }),
      );
  },
};
