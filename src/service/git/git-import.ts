import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { redactUrl } from '../../config/backend-url.js';
import type { Labels } from '../../catalog/port/labels.js';
import { withSourcePath } from '../refs/run-target.js';
import type { ImportOptions, ImportResult } from '../import/import-snapshot.js';
import { GitFailure, isRemoteRepo, notARepo, realRepoPath, runGit, summarise, withPrivateTemp, type RunGitOptions } from './git-run.js';
import {
  closeGitSandbox,
  confineToRepository,
  findRepoDirs,
  openGitSandbox,
  readSmallFile,
  type GitSandbox,
  type RepoDirs,
} from './git-sandbox.js';

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
 *
 * A local repository is read as a snapshot is (src/service/git/git-sandbox.ts): git never reads
 * its configuration, hooks or attributes. Its git directory is found without git, and the
 * clone (`--no-local`) is made from a bare view AWC writes (its HEAD, its refs and its objects
 * as alternates, AWC's configuration); the clone and the checkout then run with AWC's
 * configuration only (no system or global file, no remote, no filter). A missing object (a
 * partial clone) fails the clone; it is never fetched. A URL is cloned as the user's own
 * git would (their configuration: credentials, ssh).
 * Another user's local repository (root importing it) is read only inside it: a git directory,
 * common directory or alternate elsewhere is refused (E_PERMISSION), never read with root's rights.
 * @throws E_GIT_NOT_A_REPO (no such repository, or git cannot clone it), E_GIT_BAD_REV (no such revision),
 *   E_PERMISSION (another user's repository whose git data lies outside it),
 *   E_GIT_FAILED (another git failure, git's message summarised), and what importSnapshot throws
 */
export async function importGit(deps: GitImportDeps, repo: string, opts: GitImportOptions = {}): Promise<GitImportResult> {
  const remote = isRemoteRepo(repo);
  const local = remote ? undefined : await openSource(repo);
  const source = local?.path ?? repo;
  const origin = remote ? redactUrl(repo) : source;
  const rev = opts.rev ?? 'HEAD';
  if (rev.startsWith('-')) throw badRev(repo, rev, 'a revision may not start with "-"');
  const view = local && (await openGitSandbox(local.dirs, { gitDir: 'common', head: local.head }));
  try {
    return await cloneAndImport(deps, view, source, origin, rev, opts);
  } finally {
    if (view) await closeGitSandbox(view);
  }
}

/** importGit from a clone of `source` (a URL), or of the bare `view` of a local source. */
async function cloneAndImport(
  deps: GitImportDeps,
  view: GitSandbox | undefined,
  source: string,
  origin: string,
  rev: string,
  opts: GitImportOptions,
): Promise<GitImportResult> {
  const remote = view === undefined;
  // a local source: every run in the clone has AWC's configuration only (no system or global file)
  const own = view && noRepo(view);
  return withPrivateTemp(join(deps.paths.hostDir, 'git-tmp'), async (tmp) => {
    const work = join(tmp, 'clone');
    try {
      if (own === undefined) await runGit(['clone', '--quiet', '--no-hardlinks', '--no-checkout', '--', source, work]);
      else {
        const from = view!.env.GIT_COMMON_DIR!;
        await runGit(['-c', 'protocol.file.allow=always', 'clone', '--quiet', '--no-local', '--no-checkout', '--', from, work], {
          sandbox: own,
        });
      }
    } catch (err) {
      if (err instanceof GitFailure)
        throw new AwcError('E_GIT_NOT_A_REPO', `cannot clone ${origin}: ${summarise(err.stderr)}`, {
          hint: 'Pass the path of a git repository (its top level) or a URL git can clone without a prompt.',
          details: { repo: origin },
        });
      throw err;
    }
    const at: RunGitOptions = { cwd: work, sandbox: own };
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
      if (!remote) await runGit(['config', 'remote.origin.url', source], at);
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

/** Whether a git command exits 0 (a query such as `show-ref --verify --quiet`). */
async function succeeds(args: string[], opts: RunGitOptions): Promise<boolean> {
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

/** A local source: its real path, where git keeps its objects and refs, and its HEAD (the text of the file). */
interface LocalSource {
  path: string;
  dirs: RepoDirs;
  head: string;
}

/**
 * Finds a local repository without running git in it (src/service/git/git-sandbox.ts findRepoDirs).
 * Another user's repository (root importing it) must keep its git data inside it
 * (confineToRepository).
 * @throws E_USAGE (a name starting with "-"), E_GIT_NOT_A_REPO, E_PERMISSION (another user's, with git data outside it)
 */
async function openSource(repo: string): Promise<LocalSource> {
  const path = await realRepoPath(repo);
  const dirs = await findRepoDirs(path);
  if (dirs === undefined) throw notARepo(repo, 'no .git directory, and not a bare repository');
  // another user's repository (root importing it): git reads nothing of it outside it
  const owner = (await stat(path)).uid;
  if (process.getuid !== undefined && owner !== process.getuid()) await confineToRepository(path, dirs, repo);
  const head = await readSmallFile(join(dirs.gitDir, 'HEAD'));
  if (!/^(ref: refs\/[^\n]+|[0-9a-f]{40}|[0-9a-f]{64})\n?$/.test(head)) throw notARepo(repo, 'its HEAD is not a ref or a commit id');
  return { path, dirs, head };
}

/** The sandbox's settings without its repository: git finds the repository (AWC's clone) from its working directory. */
function noRepo(s: GitSandbox): GitSandbox {
  const env = { ...s.env };
  delete env.GIT_DIR;
  delete env.GIT_COMMON_DIR;
  delete env.GIT_WORK_TREE;
  return { ...s, env };
}
