import { execFile, spawn } from 'node:child_process';
import { lstat, mkdir, mkdtemp, realpath, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { GitSandbox } from './git-sandbox.js';

/**
 * Git as a child process, for `--git` import and export (docs/explanation/git.md).
 *
 * Every run is `execFile`/`spawn` of `git` (no shell), with the caller's GIT_* variables
 * removed (GIT_DIR, GIT_INDEX_FILE, GIT_WORK_TREE… of an outer git would redirect us),
 * no terminal prompt, `core.hooksPath=/dev/null` (no hook of the repository runs as us) and
 * `protocol.ext.allow=never` (no arbitrary command through an `ext::` URL).
 */

/** What a finished git run printed (as text). */
export interface GitOutput {
  stdout: string;
  stderr: string;
}

/** A failed git run: the exit status and git's stderr, summarised (first lines, no stack). */
export class GitFailure extends Error {
  constructor(
    readonly args: readonly string[],
    readonly status: number | null,
    readonly stderr: string,
  ) {
    super(`git ${args.find((a) => !a.startsWith('-') && !a.includes('=')) ?? ''} failed (${status}): ${summarise(stderr)}`);
  }
}

/** The first lines of git's stderr, without its `fatal: ` / `error: ` prefixes (at most 300 characters). */
export function summarise(stderr: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.replace(/^(fatal|error|warning): /, '').trim())
    .filter((l) => l !== '' && !l.startsWith('hint:'));
  const s = lines.slice(0, 3).join('; ');
  return s.length > 300 ? `${s.slice(0, 297)}...` : s || 'no message';
}

/** The environment git runs with: this process's minus every GIT_* variable, no prompts, C messages. */
export function gitEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GIT_')) env[k] = v;
  return { ...env, LC_ALL: 'C', GIT_TERMINAL_PROMPT: '0', ...extra };
}

function envOf(opts: RunGitOptions): NodeJS.ProcessEnv {
  return opts.sandbox ? { ...opts.sandbox.env, ...opts.env } : gitEnv(opts.env);
}

/** `-c` options of every run; `safeDirs` mark repositories another user owns as safe for this run only. */
export function gitConfigArgs(...safeDirs: (string | undefined)[]): string[] {
  const args = ['-c', 'core.hooksPath=/dev/null', '-c', 'protocol.ext.allow=never', '-c', 'core.fsmonitor=false'];
  for (const d of safeDirs) if (d !== undefined) args.push('-c', `safe.directory=${d}`);
  return args;
}

function fullArgs(args: readonly string[], opts: RunGitOptions): string[] {
  if (opts.sandbox) return [...opts.sandbox.args, ...args];
  return [...gitConfigArgs(opts.gitDir, opts.safeDir), ...(opts.gitDir !== undefined ? [`--git-dir=${opts.gitDir}`] : []), ...args];
}

/** Options of {@link runGit}. */
export interface RunGitOptions {
  /** Passed as `--git-dir=` (and `safe.directory`). */
  gitDir?: string;
  /** Working directory of the run. */
  cwd?: string;
  /** Extra environment (GIT_INDEX_FILE of a private index, GIT_WORK_TREE). */
  env?: Record<string, string>;
  /** Written to git's stdin. */
  input?: string;
  /** A repository path (besides gitDir) marked `safe.directory` for this run: one another user owns. */
  safeDir?: string;
  /**
   * Run on a snapshot's repository (src/service/git/git-sandbox.ts): the sandbox's environment
   * (whole, `env` added) and options; `gitDir` and `safeDir` are not used.
   */
  sandbox?: GitSandbox;
  /** How stdout is decoded: `utf8` (default), or `latin1`, one character per byte, for output that holds raw path bytes. */
  encoding?: 'utf8' | 'latin1';
  /**
   * Milliseconds after which git is killed (SIGKILL) and the run fails with E_GIT_FAILED
   * (details.timeoutMs). Default: none, or {@link SANDBOX_GIT_TIMEOUT_MS} with `sandbox` (a
   * snapshot's repository may hold a FIFO where git expects a file: a read that never ends).
   */
  timeoutMs?: number;
}

/** The default time limit of a sandboxed git run (a snapshot's repository), in milliseconds: 10 minutes. */
export const SANDBOX_GIT_TIMEOUT_MS = 600_000;

/**
 * Runs `git <args>` and resolves with its output.
 * @throws GitFailure (the caller maps it to an AwcError), E_GIT_FAILED (git is not installed, or
 *   it ran longer than `timeoutMs` and was killed)
 */
export function runGit(args: readonly string[], opts: RunGitOptions = {}): Promise<GitOutput> {
  const full = fullArgs(args, opts);
  const timeout = opts.timeoutMs ?? (opts.sandbox ? SANDBOX_GIT_TIMEOUT_MS : 0);
  return new Promise((resolvePromise, reject) => {
    const child = execFile(
      'git',
      full,
      { cwd: opts.cwd, env: envOf(opts), maxBuffer: 256 * 1024 * 1024, encoding: opts.encoding ?? 'utf8', timeout, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        if (!err) return resolvePromise({ stdout, stderr });
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return reject(noGit());
        if (timeout > 0 && err.killed) return reject(timedOut(args, timeout));
        reject(new GitFailure(args, typeof err.code === 'number' ? err.code : null, stderr));
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

/** E_GIT_FAILED for a git run killed after `ms` milliseconds. */
function timedOut(args: readonly string[], ms: number): AwcError {
  const cmd = args.find((a) => !a.startsWith('-') && !a.includes('=')) ?? '';
  return new AwcError('E_GIT_FAILED', `git ${cmd} did not finish within ${Math.round(ms / 1000)} s and was stopped`, {
    hint: 'A file of the repository may never end (a FIFO where git expects a file), or it is very large: check the repository.',
    details: { git: cmd, timeoutMs: ms },
  });
}

/** E_GIT_FAILED for a host without git. */
export function noGit(): AwcError {
  return new AwcError('E_GIT_FAILED', 'git is not installed on this host (no `git` in PATH)', {
    hint: 'Install git (e.g. `apt-get install git`) and run the command again.',
  });
}

/**
 * Spawns a long-running git that reads a stream on stdin (`git fast-import`); the caller
 * writes stdin and awaits `done` (rejects with GitFailure on a non-zero exit).
 */
export function spawnGit(args: readonly string[], opts: RunGitOptions): { stdin: NodeJS.WritableStream; done: Promise<GitOutput> } {
  const full = fullArgs(args, opts);
  const child = spawn('git', full, { cwd: opts.cwd, env: envOf(opts), stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  child.stdin.on('error', () => undefined); // git exiting early: its status says why
  const done = new Promise<GitOutput>((resolvePromise, reject) => {
    child.on('error', (err: NodeJS.ErrnoException) => reject(err.code === 'ENOENT' ? noGit() : err));
    child.on('close', (status) => (status === 0 ? resolvePromise({ stdout, stderr }) : reject(new GitFailure(args, status, stderr))));
  });
  return { stdin: child.stdin, done };
}

/** A URL or scp-like address git clones over the network (`https://…`, `ssh://…`, `user@host:path`), not a local path. */
export function isRemoteRepo(repo: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(repo) || /^[^/:]+@[^/:]+:/.test(repo);
}

/** A local repository: its real path (symlinks resolved once, here), its git directory and whether it is bare. */
export interface LocalRepo {
  path: string;
  gitDir: string;
  bare: boolean;
}

/**
 * Resolves a local repository path: the path is resolved to its real path once (git is then
 * given that path, so no symlink in it is followed later), and git says where its git
 * directory is.
 * @throws E_GIT_NOT_A_REPO (no such path, or not a git repository), E_USAGE (a name starting with "-")
 */
export async function openLocalRepo(repo: string): Promise<LocalRepo> {
  const real = await realRepoPath(repo);
  try {
    const { stdout } = await runGit(['rev-parse', '--absolute-git-dir', '--is-bare-repository'], {
      cwd: real,
      safeDir: real,
      env: { GIT_CEILING_DIRECTORIES: dirname(real) },
    });
    const [gitDir, bare] = stdout.trim().split('\n');
    return { path: real, gitDir: await realpath(gitDir!), bare: bare === 'true' };
  } catch (err) {
    if (err instanceof GitFailure) throw notARepo(repo, summarise(err.stderr));
    throw err;
  }
}

/**
 * The real path of a local repository path as the user gave it (git import and export alike).
 * @throws E_USAGE (a name starting with "-"), E_GIT_NOT_A_REPO (no such file or directory)
 */
export async function realRepoPath(repo: string): Promise<string> {
  if (repo.startsWith('-')) throw new AwcError('E_USAGE', `a repository path may not start with "-": ${JSON.stringify(repo)}`);
  try {
    await lstat(repo);
    return await realpath(repo);
  } catch {
    throw notARepo(repo, 'no such file or directory');
  }
}

/** E_GIT_NOT_A_REPO for the local repository path `repo`, saying `why`. */
export function notARepo(repo: string, why: string): AwcError {
  return new AwcError('E_GIT_NOT_A_REPO', `${repo} is not a git repository (${why})`, {
    hint: 'Pass the path of a git checkout or bare repository (its top level), or a URL git can clone.',
    details: { repo },
  });
}

/**
 * Runs `fn` with a new private (0700) directory under `parent` (created 0700 when missing),
 * removed afterwards whatever happens.
 */
export async function withPrivateTemp<T>(parent: string, fn: (dir: string) => Promise<T>): Promise<T> {
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(parent, 'git-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
