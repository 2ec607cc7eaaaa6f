import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError } from '../core/errors.js';
import { redactUrl } from '../config/backend-url.js';
import type { Labels } from '../catalog/labels.js';
import { withSourcePath } from './run-target.js';
import type { ImportOptions, ImportResult } from './import-snapshot.js';
import { GitFailure, isRemoteRepo, openLocalRepo, runGit, summarise, withPrivateTemp, type LocalRepo } from './git-run.js';

/** Snapshot label holding the repository a `--git` import came from (a real path, or a URL without its password). */
export const GIT_ORIGIN_LABEL = 'awc.git.origin';
/** Snapshot label holding the commit id a `--git` import checked out: the base commit of later `--git` exports. */
export const GIT_COMMIT_LABEL = 'awc.git.commit';

/** Options of {@link importGit}. */
export interface GitImportOptions {
  /** Revision to check out (a branch, tag or commit; default HEAD of the repository). */
  rev?: string;
  name?: string;
  message?: string;
  labels?: Labels;
  onProgress?: ImportOptions['onProgress'];
  onWarning?: ImportOptions['onWarning'];
}

/** The result of a `--git` import: the import's, plus the origin and commit recorded as labels. */
export interface GitImportResult extends ImportResult {
  git: { origin: string; commit: string; branch: string | null };
}

/** What importGit needs of the service. */
export interface GitImportDeps {
  /** The home's paths: the private temporary clone goes under `hostDir/git-tmp` (0700). */
  paths: { hostDir: string };
  importSnapshot(dir: string, opts: ImportOptions): Promise<ImportResult>;
}

/**
 * `awc snapshot import --git <repo> [--rev R]`: clones the repository (`git clone
 * --no-hardlinks --no-checkout` into a private temporary directory under the home), checks
 * out R (a branch of the origin as that local branch, anything else detached), imports the
 * clone with its `.git` through the directory importer, and removes the clone. The snapshot
 * carries the labels `awc.git.origin` and `awc.git.commit` (docs/explanation/git.md).
 * @throws E_GIT_NOT_A_REPO (no such repository, or git cannot clone it), E_GIT_BAD_REV (no such revision),
 *   E_GIT_FAILED (another git failure, git's message summarised), and what importSnapshot throws
 */
export async function importGit(deps: GitImportDeps, repo: string, opts: GitImportOptions = {}): Promise<GitImportResult> {
  const remote = isRemoteRepo(repo);
  const local = remote ? undefined : await openLocalRepo(repo);
  const source = local ? local.path : repo;
  const origin = remote ? redactUrl(repo) : source;
  const rev = opts.rev ?? 'HEAD';
  if (rev.startsWith('-')) throw badRev(repo, rev, 'a revision may not start with "-"');
  return withPrivateTemp(join(deps.paths.hostDir, 'git-tmp'), async (tmp) => {
    const work = join(tmp, 'clone');
    try {
      await runGit(['clone', '--quiet', '--no-hardlinks', '--no-checkout', '--', source, work], {
        safeDir: local?.path,
        env: local ? await safeForUploadPack(tmp, local) : undefined,
      });
    } catch (err) {
      if (err instanceof GitFailure)
        throw new AwcError('E_GIT_NOT_A_REPO', `cannot clone ${origin}: ${summarise(err.stderr)}`, {
          hint: 'Pass the path of a git repository (its top level) or a URL git can clone without a prompt.',
          details: { repo: origin },
        });
      throw err;
    }
    const at = { cwd: work };
    const branchRef = `refs/remotes/origin/${rev}`;
    const isBranch = rev !== 'HEAD' && (await succeeds(['show-ref', '--verify', '--quiet', branchRef], at));
    let commit: string;
    try {
      commit = (await runGit(['rev-parse', '--verify', '--end-of-options', `${isBranch ? branchRef : rev}^{commit}`], at)).stdout.trim();
    } catch (err) {
      if (err instanceof GitFailure)
        throw badRev(origin, rev, rev === 'HEAD' ? 'the repository has no commit yet' : 'no such branch, tag or commit');
      throw err;
    }
    let branch: string | null = null;
    try {
      if (isBranch) {
        await runGit(['checkout', '--quiet', '-B', rev, '--track', branchRef], at);
        branch = rev;
      } else if (rev === 'HEAD') {
        await runGit(['checkout', '--quiet'], at);
        branch = (await runGit(['symbolic-ref', '--quiet', '--short', 'HEAD'], at).catch(() => ({ stdout: '' }))).stdout.trim() || null;
      } else await runGit(['checkout', '--quiet', '--detach', commit], at);
    } catch (err) {
      if (err instanceof GitFailure) throw new AwcError('E_GIT_FAILED', `cannot check out ${rev} of ${origin}: ${summarise(err.stderr)}`);
      throw err;
    }
    // a local repository's path is the stable path of `awc run` (never the temporary clone's)
    const labels = withSourcePath({ ...opts.labels, [GIT_ORIGIN_LABEL]: origin, [GIT_COMMIT_LABEL]: commit }, remote ? undefined : source);
    const r = await deps.importSnapshot(work, {
      recordPath: false,
      name: opts.name,
      message: opts.message ?? `import git ${origin} at ${commit.slice(0, 12)}${branch ? ` (${branch})` : ''}`,
      labels,
      onProgress: opts.onProgress,
      onWarning: opts.onWarning,
    });
    return { ...r, git: { origin, commit, branch } };
  });
}

/**
 * The environment that marks a local repository (one another user may own) safe for a clone
 * of it: a private global configuration file in `tmp` naming its work tree and git directory
 * as `safe.directory`. A `-c safe.directory` does not reach the `git upload-pack` a local
 * clone runs (git clears `GIT_CONFIG_PARAMETERS` for a local transport), and that process
 * checks the git directory's owner: "dubious ownership" otherwise. That clone reads no other global configuration.
 */
async function safeForUploadPack(tmp: string, repo: LocalRepo): Promise<Record<string, string>> {
  const quote = (p: string): string => `"${p.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
  const file = join(tmp, 'safe.gitconfig');
  await writeFile(file, `[safe]\n\tdirectory = ${quote(repo.path)}\n\tdirectory = ${quote(repo.gitDir)}\n`, { mode: 0o600, flag: 'wx' });
  return { GIT_CONFIG_GLOBAL: file };
}

/** Whether a git command exits 0 (a query such as `show-ref --verify --quiet`). */
async function succeeds(args: string[], opts: { cwd: string }): Promise<boolean> {
  try {
    await runGit(args, opts);
    return true;
  } catch (err) {
    if (err instanceof GitFailure) return false;
    throw err;
  }
}

function badRev(repo: string, rev: string, why: string): AwcError {
  return new AwcError('E_GIT_BAD_REV', `${repo} has no revision ${JSON.stringify(rev)} (${why})`, {
    hint: 'Pass --rev with a branch, tag or commit id of that repository (`git -C <repo> log --oneline` lists them).',
    details: { repo, rev },
  });
}
