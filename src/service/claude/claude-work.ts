import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { withGitSandbox, type GitSandbox } from '../git/git-sandbox.js';
import { gitEnv } from '../git/git-run.js';

/** Who the hook runs git as (the calling user; absent: this process's user). */
export interface RunAs {
  uid: number;
  gid: number;
}

/**
 * Runs git in the workspace checked out at `cwd` (as `runAs` when given) with git in a
 * sandbox (src/service/git/git-sandbox.ts): the workspace's HEAD, index, refs and objects
 * are git's to read (and, for `checkout -b`, write), but the configuration and hooks git
 * reads are AWC's, and none of the caller's GIT_* variables reach it. The caller makes sure
 * `cwd/.git` is a directory. `code` is the error of a git that fails (or runs over
 * GIT_TIMEOUT_MS: it is killed).
 * @returns git's stdout. @throws `code` with git's message (or when git is not installed)
 */
export async function gitIn(cwd: string, args: string[], code: 'E_BRANCH_FAILED' | 'E_GIT_FAILED', runAs?: RunAs): Promise<string> {
  return withGit(cwd, code, runAs, (git) => git(args));
}

/** {@link gitIn} for several commands in one sandbox: `fn` gets a git to run in `cwd`. */
async function withGit<T>(
  cwd: string,
  code: 'E_BRANCH_FAILED' | 'E_GIT_FAILED',
  runAs: RunAs | undefined,
  fn: (git: (args: string[]) => Promise<string>) => Promise<T>,
): Promise<T> {
  const dir = join(cwd, '.git');
  return withGitSandbox({ gitDir: dir, commonDir: dir }, { workTree: cwd, owner: runAs }, (sandbox) =>
    fn((args) => run(cwd, args, sandbox, code, runAs)),
  );
}

/** The longest one git command may take in a worktree (ms): a hostile snapshot's FIFO must not hang a hook. */
const GIT_TIMEOUT_MS = 120_000;

/**
 * Runs git in `cwd` as `runAs` (absent: this process's user) the way the user's own git runs:
 * the project's configuration and hooks, the user's global configuration, this process's
 * environment without its GIT_* variables (an outer git's GIT_DIR or GIT_INDEX_FILE would
 * redirect it). For the project's own repository and its registered worktrees only, never a
 * snapshot's `.git` (gitIn sandboxes that).
 * @returns git's stdout. @throws `code` with git's message (or when git is not installed)
 */
export function userGit(cwd: string, args: string[], code: 'E_BRANCH_FAILED' | 'E_GIT_FAILED', runAs?: RunAs): Promise<string> {
  const env = gitEnv() as Record<string, string>;
  return run(cwd, args, { dir: '', args: [], env }, code, runAs);
}

function run(
  cwd: string,
  args: string[],
  sandbox: Pick<GitSandbox, 'args' | 'env'> & { dir: string },
  code: 'E_BRANCH_FAILED' | 'E_GIT_FAILED',
  runAs?: RunAs,
): Promise<string> {
  return new Promise((resolveRun, reject) => {
    const child = spawn('git', [...sandbox.args, ...args], {
      cwd,
      env: sandbox.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: GIT_TIMEOUT_MS,
      killSignal: 'SIGKILL',
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString('latin1')));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.on('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'ENOENT' ? new AwcError(code, 'git is not installed (needed in the worktree)', { hint: 'Install git.' }) : err),
    );
    child.on('close', (exit, signal) =>
      exit === 0
        ? resolveRun(stdout)
        : reject(
            new AwcError(
              code,
              `git ${args.join(' ')} failed in ${cwd}: ${stderr.trim() || (signal ? `killed (${signal}, over ${GIT_TIMEOUT_MS / 1000} s?)` : `exit ${exit}`)}`,
              {
                details: { path: cwd, git: stderr.trim() },
              },
            ),
          ),
    );
  });
}

/** True when `dir/.git` is a directory (a checkout AWC runs git in; a `.git` file names a repository elsewhere). */
export async function isGitCheckout(dir: string): Promise<boolean> {
  return (await lstat(join(dir, '.git')).catch(() => undefined))?.isDirectory() === true;
}

/**
 * A digest (sha256, hex) of every ref of the checkout at `dir` and of its HEAD (the branch it
 * names and the commit): it changes when a commit is made, a branch or tag is made, moved or
 * deleted, or work is stashed. The hook records it when it made the worktree's branch
 * (label `awc.claude.refs`).
 * @throws E_GIT_FAILED
 */
export async function refsDigest(dir: string, runAs?: RunAs): Promise<string> {
  return withGit(dir, 'E_GIT_FAILED', runAs, digestOf);
}

/** The refs digest (see refsDigest) with `git`. */
async function digestOf(git: (args: string[]) => Promise<string>): Promise<string> {
  const refs = await git(['for-each-ref', '--format=%(objectname) %(refname)']);
  const head = await git(['rev-parse', '--symbolic-full-name', 'HEAD', 'HEAD']);
  return createHash('sha256').update(refs).update('\0').update(head).digest('hex');
}

/** Whether a worktree holds work that exists nowhere else, and why. */
export interface WorkCheck {
  /** True: keep it (checkpoint); false: nothing to keep; null: git cannot tell (not a checkout, no recorded refs). */
  work: boolean | null;
  /** Why, for the hook's log. */
  why: string;
}

/**
 * Does the checkout at `dir` hold work: uncommitted changes (`git status`: tracked files
 * changed, or untracked files git does not ignore; ignored ones, such as `node_modules`, are
 * reconstructible and do not count) or commits and refs made in it (the refs digest differs
 * from `recordedRefs`, the one taken when it was made). What git ignores is what the
 * checkout's `.gitignore` files and `.git/info/exclude` say (the sandbox reads no user or
 * system configuration, so a user's global excludes file is not read: such files count as
 * work, a checkpoint too many, never one too few). Git runs without optional locks, so the
 * check writes nothing into the checkout.
 * @throws E_GIT_FAILED
 */
export async function checkWork(dir: string, recordedRefs: string | undefined, runAs?: RunAs): Promise<WorkCheck> {
  if (!(await isGitCheckout(dir))) return { work: null, why: 'not a git checkout' };
  return checkSnapshotCheckout(dir, recordedRefs, runAs);
}

/** The uncommitted paths `git status` lists (porcelain, `-z`): tracked changes and untracked files git does not ignore. */
const STATUS_ARGS = ['status', '--porcelain', '-z', '--untracked-files=all', '--no-renames'];

/** The WorkCheck of uncommitted `paths` (none: undefined). */
function uncommitted(paths: string[]): WorkCheck | undefined {
  if (paths.length === 0) return undefined;
  return { work: true, why: `uncommitted changes (${paths.length} path(s): ${paths[0]!.slice(3)}${paths.length > 1 ? ', …' : ''})` };
}

/**
 * Does the registered worktree of the project at `dir` (its `.git` a file naming the
 * project's repository: claude-worktree.ts) hold uncommitted work: tracked files changed, or
 * untracked files git does not ignore (`git status` as the user, with the project's
 * configuration and excludes, without optional locks). Its commits, branches and tags are in
 * the project's repository already and never count.
 * @throws E_GIT_FAILED
 */
export async function checkWorktree(dir: string, runAs?: RunAs): Promise<WorkCheck> {
  const paths = (await userGit(dir, ['--no-optional-locks', ...STATUS_ARGS], 'E_GIT_FAILED', runAs)).split('\0').filter(Boolean);
  return uncommitted(paths) ?? { work: false, why: "nothing uncommitted (its commits are in the project's repository)" };
}

/** checkWork of a checkout with the snapshot's own `.git` directory (a hook workspace made before worktrees were registered). */
async function checkSnapshotCheckout(dir: string, recordedRefs: string | undefined, runAs?: RunAs): Promise<WorkCheck> {
  return withGit(dir, 'E_GIT_FAILED', runAs, async (git) => {
    // the sandbox's common directory is AWC's: the checkout's own info/exclude (data, never run) is named to
    // git, when it is a regular file (a FIFO would block the read)
    const exclude = join(dir, '.git', 'info', 'exclude');
    const regular = (await lstat(exclude).catch(() => undefined))?.isFile() === true;
    const args = ['--no-optional-locks', ...(regular ? ['-c', `core.excludesFile=${exclude}`] : []), ...STATUS_ARGS];
    const found = uncommitted((await git(args)).split('\0').filter(Boolean));
    if (found) return found;
    if (recordedRefs === undefined) return { work: null, why: 'no refs recorded when it was made' };
    if ((await digestOf(git)) !== recordedRefs) return { work: true, why: 'commits or refs made in it' };
    return { work: false, why: 'nothing uncommitted and no new commits' };
  });
}
