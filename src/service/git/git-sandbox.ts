import { constants } from 'node:fs';
import { lchown, lstat, mkdir, mkdtemp, open, readdir, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { within } from '../../core/path-within.js';

/**
 * Git on a snapshot's repository without the snapshot's configuration
 * (docs/explanation/security.md "Snapshot content never runs", docs/explanation/git.md
 * "Running git safely").
 *
 * Git always reads `config` (and what it includes), `hooks/` and `info/attributes` from its
 * common directory. A sandbox is a private directory (0700, under the system's temporary
 * directory, owned by whom git runs as) holding a common directory AWC writes: a `config`
 * of AWC's own (no remote, no promisor, no extension but the object format, no filter,
 * textconv, pager, editor, askpass, fsmonitor, credential helper; `protocol.allow=never`),
 * an `objects` directory whose `info/alternates` names the repository's objects (read, never
 * written), and links to the repository's `refs`, `packed-refs`, `logs` and `shallow`
 * (data git parses, nothing it runs). Git runs with `GIT_DIR` at the repository's own git
 * directory (its HEAD and index) and `GIT_COMMON_DIR` at the sandbox's, from an environment
 * AWC builds whole: the host's PATH, `HOME` and `XDG_CONFIG_HOME` an empty private
 * directory, `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`, no prompt, and none of
 * the caller's `GIT_*` or `SSH_*` variables. So nothing the snapshot wrote in its `config`,
 * in a file it includes or in its hooks is ever read, and a missing object is an error,
 * never a fetch.
 */

/** What git runs with in a sandbox: its environment (whole) and `-c` options. */
export interface GitSandbox {
  /** The sandbox directory (removed by {@link closeGitSandbox}). */
  dir: string;
  /** The whole environment of git (nothing of the caller's but PATH). */
  env: Record<string, string>;
  /** `-c` options given before git's command. */
  args: string[];
}

/** Options of {@link openGitSandbox}. */
export interface GitSandboxOptions {
  /** The work tree (absolute), or none (a bare view). */
  workTree?: string;
  /** Who git runs as: the sandbox is made theirs (absent: this process's user). */
  owner?: { uid: number; gid: number };
  /**
   * Where git's HEAD and index are read: the repository's own git directory (default) or
   * `common`, the sandbox's (then HEAD is `head`, written by AWC: a bare view to clone from).
   */
  gitDir?: 'repository' | 'common';
  /** HEAD's content when `gitDir` is `common`. */
  head?: string;
}

/** Where a repository keeps its objects and refs: its git directory and its common directory (a linked worktree's main one). */
export interface RepoDirs {
  gitDir: string;
  commonDir: string;
}

/**
 * The git directory and common directory of the repository at `top` (a checkout with a
 * `.git` directory or file, or a bare repository), found without running git and so without
 * reading its configuration: `.git` (a directory; a file `gitdir: <path>`), and the git
 * directory's `commondir` file. Returns undefined when `top` is no repository.
 */
export async function findRepoDirs(top: string): Promise<RepoDirs | undefined> {
  let gitDir: string | undefined;
  const dot = join(top, '.git');
  const st = await lstat(dot).catch(() => undefined);
  if (st?.isDirectory()) gitDir = dot;
  else if (st?.isFile()) {
    const m = /^gitdir: (.+)$/m.exec(await readSmallFile(dot));
    if (m) gitDir = resolve(top, m[1]!.trim());
  } else if (await isGitDir(top)) gitDir = top;
  if (gitDir === undefined || !(await isGitDir(gitDir))) return undefined;
  const common = (await readSmallFile(join(gitDir, 'commondir'))).trim();
  return { gitDir, commonDir: common === '' ? gitDir : resolve(gitDir, common) };
}

/** How deep git follows `objects/info/alternates` (an alternate's own alternates, and so on). */
const ALTERNATES_DEPTH = 5;

/**
 * Refuses a repository whose git data lies outside its top directory `top` (its real path):
 * its git directory (a `.git` file's `gitdir:`), its common directory (`commondir`), the
 * objects, refs, packed-refs, logs, shallow, HEAD and index git reads there, a symbolic link
 * among its refs, and every object directory its `objects/info/alternates` names (followed as
 * git does, up to 5 deep), each once symbolic links are resolved. For a run as another user
 * than the repository's owner (root's `snapshot import --git` of a user's repository): git
 * would otherwise read, with root's rights, files anywhere on the host that the owner could
 * not (docs/explanation/security.md "Snapshot content never runs"). `shown` names the
 * repository in messages.
 * @throws E_PERMISSION (details: repo, path: the real path outside, what)
 */
export async function confineToRepository(top: string, dirs: RepoDirs, shown = top): Promise<void> {
  const refuse = (what: string, real: string) =>
    new AwcError('E_PERMISSION', `${shown} is not yours and ${what} is outside it (${real}): it is not read for you`, {
      hint: 'Import it as its owner (they run `awc snapshot import --git`), or a repository whose git directory, common directory and alternates all lie inside it (`git repack -a -d` then removing objects/info/alternates makes a clone self-contained).',
      details: { repo: shown, path: real, what },
    });
  const outside = async (path: string, what: string): Promise<string | undefined> => {
    const real = await realpath(path).catch(() => undefined);
    if (real !== undefined && !within(top, real)) throw refuse(what, real);
    return real;
  };
  await outside(dirs.gitDir, 'its git directory');
  await outside(dirs.commonDir, 'its common directory (commondir)');
  for (const name of ['HEAD', 'index']) await outside(join(dirs.gitDir, name), `its ${name}`);
  for (const name of ['objects', 'refs', 'packed-refs', 'logs', 'shallow']) await outside(join(dirs.commonDir, name), `its ${name}`);
  const refs = async (dir: string, depth: number): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = join(dir, e.name);
      if (e.isSymbolicLink()) await outside(p, `its ref ${e.name}`);
      else if (e.isDirectory() && depth < 32) await refs(p, depth + 1);
    }
  };
  await refs(join(dirs.commonDir, 'refs'), 0);
  const seen = new Set<string>();
  const alternates = async (objects: string, depth: number): Promise<void> => {
    if (depth > ALTERNATES_DEPTH || seen.has(objects)) return;
    seen.add(objects);
    const file = await outside(join(objects, 'info', 'alternates'), 'its objects/info/alternates');
    const text = file === undefined ? '' : await readSmallFile(file);
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) continue;
      if (line.startsWith('"')) throw refuse('an alternate object directory (a C-quoted path, not read)', line);
      const alt = await outside(resolve(objects, line), 'an alternate object directory (objects/info/alternates)');
      if (alt !== undefined) await alternates(alt, depth + 1);
    }
  };
  const objects = await realpath(join(dirs.commonDir, 'objects')).catch(() => undefined);
  if (objects !== undefined) await alternates(objects, 0);
}

/** The largest snapshot file {@link readSmallFile} reads (1 MiB). */
export const SMALL_FILE_MAX = 1024 * 1024;

/**
 * The text (utf8) of a snapshot's file that AWC reads itself (`.git`, `commondir`, `config`,
 * `HEAD`): only a regular file of at most {@link SMALL_FILE_MAX} bytes, opened without following
 * a symlink and without blocking; anything else (missing, a FIFO, a device, a directory, a
 * symlink, a larger file, unreadable) reads as '' (absent). Never throws.
 */
export async function readSmallFile(path: string): Promise<string> {
  const st = await lstat(path).catch(() => undefined);
  if (!st?.isFile() || st.size > SMALL_FILE_MAX) return '';
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(() => undefined);
  if (!fh) return '';
  try {
    const again = await fh.stat();
    if (!again.isFile() || again.size > SMALL_FILE_MAX) return '';
    const buf = Buffer.alloc(SMALL_FILE_MAX + 1);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    return bytesRead > SMALL_FILE_MAX ? '' : buf.subarray(0, bytesRead).toString('utf8');
  } catch {
    return '';
  } finally {
    await fh.close().catch(() => undefined);
  }
}

async function isGitDir(dir: string): Promise<boolean> {
  const has = async (name: string) => (await lstat(join(dir, name)).catch(() => undefined)) !== undefined;
  return (await has('HEAD')) && ((await has('objects')) || (await has('commondir')));
}

/** The configuration git reads in a sandbox (and nothing else). */
function sandboxConfig(hooks: string, sha256: boolean, logRefs: boolean): string {
  return [
    '[core]',
    `\trepositoryformatversion = ${sha256 ? 1 : 0}`,
    '\tbare = false',
    '\tfilemode = true',
    '\tsymlinks = true',
    `\tlogAllRefUpdates = ${logRefs}`,
    `\thooksPath = ${hooks}`,
    '\tfsmonitor = false',
    '\tuntrackedCache = false',
    '\tpager = cat',
    '\teditor = true',
    '\taskPass = true',
    '\tsshCommand = false',
    '[gc]',
    '\tauto = 0',
    '[maintenance]',
    '\tauto = false',
    '[protocol]',
    '\tallow = never',
    ...(sha256 ? ['[extensions]', '\tobjectFormat = sha256'] : []),
    '',
  ].join('\n');
}

/** The `-c` options of every sandboxed run (the same as the config: command-line options are read last). */
function sandboxArgs(hooks: string, workTree: string | undefined): string[] {
  const kv = ['core.hooksPath=' + hooks, 'core.fsmonitor=false', 'protocol.allow=never', 'core.pager=cat', 'core.editor=true'];
  if (workTree !== undefined) kv.push(`safe.directory=${workTree}`);
  return kv.flatMap((s) => ['-c', s]);
}

/**
 * Whether the repository's objects are SHA-256 ones: the one fact taken from its
 * configuration, read as text here (git never reads that file in a sandbox).
 */
async function usesSha256(commonDir: string): Promise<boolean> {
  const text = await readSmallFile(join(commonDir, 'config'));
  return /^\s*objectformat\s*=\s*sha256\s*$/im.test(text);
}

/**
 * Makes a sandbox for git on the repository `repo` (see the module comment).
 * @throws E_GIT_FAILED (a path that cannot be an alternate), the fs error when the temporary directory cannot be made
 */
export async function openGitSandbox(repo: RepoDirs, opts: GitSandboxOptions = {}): Promise<GitSandbox> {
  if (!isAbsolute(repo.gitDir) || !isAbsolute(repo.commonDir)) throw new Error('git sandbox: absolute paths only');
  // one line of objects/info/alternates names the objects (a line starting with `"` is C-quoted: never, as the path is absolute)
  if (repo.commonDir.includes('\n'))
    throw new AwcError('E_GIT_FAILED', `git cannot read the objects of ${JSON.stringify(repo.commonDir)}: its path holds a newline`, {
      hint: 'Move or rename the repository to a path without a newline.',
    });
  const dir = await mkdtemp(join(tmpdir(), 'awc-git-'));
  try {
    const home = join(dir, 'home');
    const hooks = join(dir, 'hooks');
    const common = join(dir, 'common');
    for (const d of [home, hooks, common, join(common, 'objects'), join(common, 'objects', 'info')]) await mkdir(d, { mode: 0o700 });
    await writeFile(join(common, 'objects', 'info', 'alternates'), `${join(repo.commonDir, 'objects')}\n`, { mode: 0o600 });
    const exists = async (name: string) => (await lstat(join(repo.commonDir, name)).catch(() => undefined)) !== undefined;
    await symlink(join(repo.commonDir, 'refs'), join(common, 'refs'));
    for (const name of ['packed-refs', 'logs', 'shallow'])
      if (await exists(name)) await symlink(join(repo.commonDir, name), join(common, name));
    const logRefs = opts.gitDir !== 'common' && (await exists('logs'));
    await writeFile(join(common, 'config'), sandboxConfig(hooks, await usesSha256(repo.commonDir), logRefs), { mode: 0o600 });
    if (opts.gitDir === 'common') await writeFile(join(common, 'HEAD'), opts.head ?? '', { mode: 0o600 });
    if (opts.owner) await chownTree(dir, opts.owner);
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
      LC_ALL: 'C',
      HOME: home,
      XDG_CONFIG_HOME: home,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_TERMINAL_PROMPT: '0',
      GIT_PAGER: 'cat',
      GIT_EDITOR: 'true',
      GIT_ASKPASS: 'true',
      GIT_ATTR_NOSYSTEM: '1',
      GIT_COMMON_DIR: common,
      GIT_DIR: opts.gitDir === 'common' ? common : repo.gitDir,
      ...(opts.workTree !== undefined ? { GIT_WORK_TREE: opts.workTree } : {}),
    };
    return { dir, env, args: sandboxArgs(hooks, opts.workTree) };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Removes a sandbox (never throws). */
export async function closeGitSandbox(s: GitSandbox): Promise<void> {
  await rm(s.dir, { recursive: true, force: true }).catch(() => undefined);
}

/** Runs `fn` with a sandbox, removed afterwards whatever happens. */
export async function withGitSandbox<T>(repo: RepoDirs, opts: GitSandboxOptions, fn: (s: GitSandbox) => Promise<T>): Promise<T> {
  const s = await openGitSandbox(repo, opts);
  try {
    return await fn(s);
  } finally {
    await closeGitSandbox(s);
  }
}

async function chownTree(path: string, o: { uid: number; gid: number }): Promise<void> {
  await lchown(path, o.uid, o.gid);
  const st = await lstat(path);
  if (!st.isDirectory()) return;
  for (const name of await readdir(path)) await chownTree(join(path, name), o);
}
