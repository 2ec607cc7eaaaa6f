import { AwcError } from '../../core/errors.js';
import type { AwcApi } from '../../service/workspace/awc-api.js';
import type { GitExportResult } from '../../service/git/git-export.js';
import { formatBytes, type Output } from '../output/output.js';

/** The git options of `awc export` and `awc checkpoint` (commander's parse). */
export interface GitExportCliOptions {
  git?: string;
  branch?: string;
  gitBranch?: string;
  message?: string;
  force?: boolean;
  allowChanging?: boolean;
}

/** Warns about each changed path the export left as in the parent. */
function warnLeftOut(o: Output, g: GitExportResult): void {
  for (const l of g.leftOut) o.warn(`${l.path}: not exported (${l.reason}; left as in the parent commit)`);
}

/** The human line of an export to git. */
function report(g: GitExportResult): string {
  const skipped = [g.ignored ? `${g.ignored} ignored by git` : '', g.gitDir ? `${g.gitDir} under .git` : ''].filter(Boolean);
  const what = g.created
    ? `commit ${g.commit.slice(0, 12)} on ${g.branch} (parent ${g.parent.slice(0, 12)}): ${g.changes.length} paths changed`
    : `no change git would track: ${g.branch} is the base commit ${g.parent.slice(0, 12)}`;
  return `${what}${skipped.length ? `; not exported: ${skipped.join(', ')}` : ''}`;
}

/** `awc export <ref> --git <repo> --branch B [-m MSG] [--force]`. @throws E_USAGE (no --branch, --tar/--dir too), as Awc.exportGit */
export async function runExportGit(
  awc: AwcApi,
  o: Output,
  ref: string,
  opts: GitExportCliOptions & { tar?: string; dir?: string },
): Promise<void> {
  if (opts.branch === undefined)
    throw new AwcError('E_USAGE', 'export --git needs --branch <name>', { hint: 'awc export <ref> --git <repo> --branch <B> [-m MSG]' });
  if (opts.tar !== undefined || opts.dir !== undefined) throw new AwcError('E_USAGE', 'pass one of --tar, --dir or --git');
  const g = await awc.exportGit(ref, { repo: opts.git!, branch: opts.branch, message: opts.message, force: opts.force });
  warnLeftOut(o, g);
  o.result(g, () => report(g));
}

/** `awc checkpoint <ws> --git-branch B [--git <repo>] [-m MSG] [--force]`: the checkpoint's warnings and line, then the export's. */
export async function runCheckpointGit(awc: AwcApi, o: Output, ws: string, opts: GitExportCliOptions): Promise<void> {
  if (opts.gitBranch === undefined)
    throw new AwcError('E_USAGE', `${opts.git !== undefined ? '--git' : '--force'} goes with --git-branch <B>`, {
      hint: 'awc checkpoint <workspace> --git-branch <B> [--git <repo>] [-m MSG] [--force]',
    });
  const r = await awc.checkpointGit(ws, {
    branch: opts.gitBranch!,
    repo: opts.git,
    message: opts.message,
    force: opts.force,
    allowChanging: opts.allowChanging,
  });
  const c = r.checkpoint;
  warnLeftOut(o, r.git);
  for (const k of c.secrets) o.warn(`${k.path}: secret, not stored (it stays on this host; opt it in with "allowSecrets" in .awc.json)`);
  o.result(r, () => {
    const cp = c.changed
      ? `${c.id}: ${c.files} files, ${formatBytes(c.bytes)}; stored ${formatBytes(c.newBytes)} new`
      : `${c.id}: no changes since the head`;
    return `${cp}\n${report(r.git)}`;
  });
}
