import { collectLabel, labelsOf, labelWords } from './label.js';
import type { ImportCliOptions } from '../output/git-options.js';
import { formatBytes } from '../output/output.js';
import { progress, type CliCommand } from './command.js';

/** `awc snapshot import` and `awc snapshot ls`. */
export const command: CliCommand = {
  register(program, ctx) {
    const snapshot = program.command('snapshot').description('import and list snapshots');
    snapshot
      .command('import [source]')
      .description('import a directory or a tar file (or, with --git, a git repository) as a new snapshot')
      .option('--name <name>', 'name the snapshot')
      .option('-m, --message <msg>', 'message')
      .option('--allow-changing', 'store files that keep changing while read as read (listed in "changing") instead of failing')
      .option('--label <key=value>', 'label the snapshot (repeatable)', collectLabel, [])
      .option('--git <repo>', 'import a git repository (path or URL) at --rev, with its .git: forks are working clones')
      .option('--rev <rev>', 'with --git: the branch, tag or commit to check out (default HEAD)')
      .action((source: string | undefined, opts: ImportCliOptions) =>
        ctx.withAwc(
          async (awc, o) => {
            const { checkImportSource } = await import('../output/git-options.js');
            checkImportSource(source, opts);
            const common = { name: opts.name, message: opts.message, labels: labelsOf(opts.label), onProgress: progress(o, 'importing') };
            const onWarning = (w: { path: string; message: string }) => o.warn(`${w.path}: ${w.message}`);
            const r =
              opts.git !== undefined
                ? await awc.importGit(opts.git, { ...common, rev: opts.rev, onWarning })
                : await awc.importSnapshot(source!, { ...common, allowChanging: opts.allowChanging, onWarning });
            o.progressDone();
            for (const p of r.changing ?? []) o.warn(`${p}: kept changing while read; stored as last read`);
            for (const k of r.secrets) o.warn(`${k.path}: secret, not stored (opt it in with "allowSecrets" in .awc.json)`);
            if (r.imageSkipped?.reason === 'failed')
              o.warn(
                `${r.imageSkipped.message} (${r.imageSkipped.code}); the snapshot is imported, and a host shares its image once it builds its layer`,
              );
            o.result(
              r,
              () =>
                `${r.id}${r.name ? ` (${r.name})` : ''}: ${r.files} files, ${formatBytes(r.bytes)}; stored ${formatBytes(r.storedBytes)} new`,
            );
          },
          { create: true },
        ),
      );
    snapshot
      .command('ls')
      .description('list snapshots, newest first')
      .option('--label <key=value>', 'only snapshots with this label (repeatable: all must match)', collectLabel, [])
      .action((opts: { label: string[] }) =>
        ctx.withAwc(async (awc, o) => {
          const rows = await awc.listSnapshots({ labels: labelsOf(opts.label) });
          o.result({ snapshots: rows }, () =>
            rows
              .map(
                (s) =>
                  `${s.id}  ${s.name ?? '-'}  ${s.fileCount} files  ${formatBytes(s.byteCount)}  ${s.createdAt}  ${s.message ?? ''}${labelWords(s.labels)}`,
              )
              .join('\n'),
          );
        }),
      );
  },
};
