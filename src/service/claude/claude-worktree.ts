import * as fs from 'node:fs';
import { chown, mkdtemp, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { gitIndexUnrewritable, parseGitIndex, rewriteGitIndexStat, type GitHashAlgo } from '../../core/git-index.js';
import { userGit, type RunAs } from './claude-work.js';
import { pointWorktreeRegistration, writeWorktreeGitFile } from '../git/worktree-link.js';

/**
 * A hook workspace as a git worktree of the project (docs/explanation/claude-code.md#a-git-worktree-of-the-project):
 * registered in the project's repository as `git worktree add` registers one, its tracked
 * files brought to the project's HEAD by rewriting only the paths that differ from the
 * prepared snapshot's index. Git runs as the calling user with the project's configuration
 * (userGit); the snapshot's own `.git` is never run git on: only its index is read, as data.
 */

/** The project's repository as a create sees it. */
export interface ProjectRepo {
  /** The commit HEAD names (full hex). */
  head: string;
  /** The object format (`git rev-parse --show-object-format`). */
  algo: GitHashAlgo;
  /**
   * The branch projectRepo was asked about (absent: none) and the commit `refs/heads/<name>`
   * names (full hex), or null when it does not exist (or names no commit).
   */
  branch?: { name: string; tip: string | null };
}

/** What registerWorktree made. */
export interface RegisteredWorktree {
  /** The branch checked out (`worktree-<name>`). */
  branch: string;
  /** The commit the worktree's files are (HEAD of the project, or the tip of a branch that existed). */
  commit: string;
  /** True when this create made the branch (false: it existed and is checked out as it is). */
  madeBranch: boolean;
  /** The worktree's administrative directory, `<project>/.git/worktrees/<id>`. */
  admin: string;
  /** True when the snapshot's index was taken as the worktree's (only differing files were written). */
  seeded: boolean;
}

/** The largest snapshot index the hook reads (bytes): a 1M-entry index is about 100 MiB. */
const MAX_INDEX_BYTES = 512 * 1024 * 1024;

/**
 * The repository the project is the top of a work tree of, or null when it is none (not a
 * git checkout, a directory inside one, a repository without a commit yet). With `branch`,
 * the same one git process also tells whether `refs/heads/<branch>` exists and the commit it
 * names (`branch`): `rev-parse --revs-only` prints a revision that resolves and drops one
 * that does not, where `--verify` would have needed a git of its own.
 * @throws E_GIT_FAILED (git is not installed)
 */
export async function projectRepo(project: string, runAs?: RunAs, branch?: string): Promise<ProjectRepo | null> {
  if (!fs.existsSync(join(project, '.git'))) return null;
  const args = ['rev-parse', '--show-toplevel', '--show-object-format', 'HEAD^{commit}'];
  if (branch !== undefined) args.push('--revs-only', `refs/heads/${branch}^{commit}`);
  let out: string[];
  try {
    out = (await userGit(project, args, 'E_GIT_FAILED', runAs)).trim().split('\n');
  } catch (err) {
    if (err instanceof AwcError && /not installed/.test(err.message)) throw err;
    return null;
  }
  const [top, format, head, tip] = out;
  if (top === undefined || head === undefined || fs.realpathSync(top) !== project) return null;
  const repo: ProjectRepo = { head, algo: format === 'sha256' ? 'sha256' : 'sha1' };
  // exactly one more line, an object id: a name git reads as a range (`a..b`) prints two and is no branch
  const found = out.length === 4 && tip !== undefined && /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(tip);
  if (branch !== undefined) repo.branch = { name: branch, tip: found ? tip : null };
  return repo;
}

/** True when `p` (a slash path of an index entry) stays inside the work tree and out of any `.git`. */
function safeEntryPath(p: string): boolean {
  if (p === '' || isAbsolute(p)) return false;
  return p.split('/').every((s) => s !== '' && s !== '.' && s !== '..' && s.toLowerCase() !== '.git');
}

/**
 * The snapshot's index (`dir/.git/index`, a regular file read without following a symlink or
 * blocking on a FIFO) as an index the worktree can start from, or undefined when there is
 * none or it is not plain: every entry at stage 0, checked out, of a file, symlink or gitlink,
 * at a path inside the work tree and outside any `.git`; no split index. Only the kept
 * extensions stay (core/git-index.ts rewriteGitIndexStat); the stat data is the snapshot's,
 * which the overlay layer (built on the host, or a shared image) set to what the mount shows
 * (src/drivers/overlay/layer-git-index.ts).
 */
export function snapshotIndex(dir: string, algo: GitHashAlgo): Buffer | undefined {
  let fd: number;
  try {
    if (!fs.lstatSync(join(dir, '.git')).isDirectory()) return undefined;
    fd = fs.openSync(join(dir, '.git', 'index'), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile() || st.size > MAX_INDEX_BYTES) return undefined;
    const bytes = fs.readFileSync(fd);
    const ix = parseGitIndex(bytes, algo);
    if (gitIndexUnrewritable(ix)) return undefined;
    const plain = ix.entries.every(
      (e) => e.stage === 0 && !e.notCheckedOut && [0o100644, 0o100755, 0o120000, 0o160000].includes(e.mode) && safeEntryPath(e.path),
    );
    return plain ? rewriteGitIndexStat(bytes, ix, algo, new Map()) : undefined;
  } catch {
    return undefined;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Registers `target` as a worktree of the project: `git worktree add --no-checkout` at a
 * private path beside it (git refuses a directory that exists, as the mount is), then the
 * `.git` file naming the administrative directory is written into `target` and the
 * registration's `gitdir` is pointed at it (git/worktree-link.ts). The branch is made at `head`
 * when `tip` is null, or checked out as it is (at `tip`, the commit projectRepo found it at) when it exists.
 * @returns the administrative directory, the commit (of an existing branch: where projectRepo saw it), and whether the branch was made
 * @throws E_BRANCH_FAILED (git refused: the branch is checked out elsewhere, was made meanwhile, a bad name…)
 */
async function addWorktree(
  project: string,
  target: string,
  branch: string,
  at: { head: string; tip: string | null },
  runAs?: RunAs,
): Promise<{ admin: string; madeBranch: boolean; commit: string }> {
  const exists = at.tip !== null;
  const tmp = await mkdtemp(join(dirname(target), '.awc-add-'));
  if (runAs) await chown(tmp, runAs.uid, runAs.gid);
  const place = join(tmp, basename(target));
  let admin: string | undefined;
  try {
    const how = exists ? [place, branch] : ['-b', branch, place, at.head];
    await userGit(project, ['worktree', 'add', '--no-checkout', '--quiet', ...how], 'E_BRANCH_FAILED', runAs);
    admin = /^gitdir: (.+)$/m.exec(await readFile(join(place, '.git'), 'utf8'))![1]!.trim();
    // the snapshot's .git (a directory on the mount) goes; the file naming the registration takes its place,
    // and the registration names it before the private path git made it at goes (it never names a missing path)
    await writeWorktreeGitFile(target, admin, runAs);
    await pointWorktreeRegistration(admin, target, runAs);
    return { admin, madeBranch: !exists, commit: at.tip ?? at.head };
  } catch (err) {
    if (admin !== undefined) await undoWorktree(project, admin, exists ? null : branch, runAs);
    throw err;
  } finally {
    await rm(join(place, '.git'), { force: true });
    await rmdir(place).catch(() => undefined);
    await rmdir(tmp).catch(() => undefined);
  }
}

/**
 * Undoes a registration that failed half-way: its administrative directory, and the branch
 * when it made it (`branch` null: it did not). Never throws.
 */
export async function undoWorktree(project: string, admin: string, branch: string | null, runAs?: RunAs): Promise<void> {
  await rm(admin, { recursive: true, force: true }).catch(() => undefined);
  if (branch !== null) await userGit(project, ['branch', '-D', branch], 'E_GIT_FAILED', runAs).catch(() => undefined);
}

/**
 * Makes the workspace mounted at `target` (the prepared snapshot's files) a worktree of the
 * project on `branch` (addWorktree), and brings its tracked files to the branch's commit
 * (the project's HEAD for a new branch) writing only what differs: the worktree's index
 * starts as the snapshot's (snapshotIndex, read before its `.git` is replaced), and
 * `git read-tree --reset -u` rewrites the paths whose content or mode differ, deletes the
 * ones the commit does not have and keeps every other file and its stat data, so the first
 * `git status` has nothing to re-read. Without a usable index (or with the copy driver, whose
 * files carry new stat data) git first refreshes the index, reading each file once. Last,
 * the snapshot's untracked files that git does not ignore are removed (`git clean -fd`): the
 * worktree holds what `git worktree add` would, plus the ignored files (`node_modules`).
 * On failure the registration and a branch it made are undone.
 * @throws E_BRANCH_FAILED (git refused the worktree or the branch)
 */
export async function registerWorktree(
  project: string,
  repo: ProjectRepo,
  target: string,
  branch: string,
  opts: { runAs?: RunAs; copy: boolean; onLog?: (line: string) => void },
): Promise<RegisteredWorktree> {
  const index = snapshotIndex(target, repo.algo);
  // projectRepo tells whether the branch exists in the same git process, when it was asked about this branch
  const known = repo.branch?.name === branch ? repo.branch : (await projectRepo(project, opts.runAs, branch))?.branch;
  const w = await addWorktree(project, target, branch, { head: repo.head, tip: known?.tip ?? null }, opts.runAs);
  const git = (args: string[]) => userGit(target, args, 'E_BRANCH_FAILED', opts.runAs);
  try {
    if (index) {
      await writeFile(join(w.admin, 'index'), index, { mode: 0o644 });
      if (opts.runAs) await chown(join(w.admin, 'index'), opts.runAs.uid, opts.runAs.gid);
    } else await git(['read-tree', 'HEAD']);
    // refreshed: a file whose stat data the index does not match is read once, and written only when it differs
    if (!index || opts.copy) await git(['update-index', '-q', '--ignore-missing', '--refresh']).catch(() => undefined);
    // HEAD, not w.commit: an existing branch that moved since projectRepo looked is brought to where it is now
    await git(['read-tree', '--reset', '-u', 'HEAD']);
    await git(['clean', '-fdq']);
  } catch (err) {
    await undoWorktree(project, w.admin, w.madeBranch ? branch : null, opts.runAs);
    throw err;
  }
  opts.onLog?.(
    `registered as a worktree of ${project} on ${w.madeBranch ? 'new ' : ''}branch ${branch} at ${w.commit.slice(0, 12)}${index ? '' : ' (no usable snapshot index: every file was read)'}`,
  );
  return { branch, commit: w.commit, madeBranch: w.madeBranch, admin: w.admin, seeded: index !== undefined };
}

/**
 * Unregisters the worktree whose administrative directory is `admin` once its directory
 * `path` is unmounted (what `git worktree prune` does for it): removes `admin` when it still
 * names `path/.git` and is a registration (`<repository>/worktrees/<id>` with a `commondir`):
 * another worktree that took the name since, or a directory that is none, is left alone.
 * Gone already: done (false).
 * @throws what removing the directory throws
 */
export async function unregisterWorktree(admin: string, path: string, _runAs?: RunAs): Promise<boolean> {
  // only a worktree registration (`<repository>/worktrees/<id>`, with its commondir) that names this path
  if (!isAbsolute(admin) || basename(dirname(admin)) !== 'worktrees' || !fs.existsSync(join(admin, 'commondir'))) return false;
  const named = await readFile(join(admin, 'gitdir'), 'utf8').catch(() => undefined);
  if (named === undefined) return false;
  if (named.trim() !== join(path, '.git')) return false;
  await rm(admin, { recursive: true, force: true });
  return true;
}
