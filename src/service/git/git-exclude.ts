import { appendFile, lchown, lstat, mkdir, readFile, stat } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';

/**
 * The git directory shared by every worktree of the repository checked out at `dir` (git's
 * "common dir"), found without running git: `dir/.git` when it is a directory; for a linked
 * worktree (`.git` a file `gitdir: <path>`), the directory its `commondir` file names.
 * Null when `dir` has no `.git` (not the top of a git checkout).
 */
export async function gitCommonDir(dir: string): Promise<string | null> {
  const dotGit = join(dir, '.git');
  const st = await lstat(dotGit).catch(() => undefined);
  if (st?.isDirectory()) return dotGit;
  if (!st?.isFile()) return null;
  const m = /^gitdir:\s*(.+?)\s*$/m.exec(await readFile(dotGit, 'utf8'));
  if (!m) return null;
  const gitDir = resolve(dir, m[1]!);
  const common = await readFile(join(gitDir, 'commondir'), 'utf8').catch(() => undefined);
  if (common === undefined) return gitDir;
  const c = common.trim();
  return isAbsolute(c) ? c : resolve(gitDir, c);
}

/**
 * Makes git ignore `pattern` (a gitignore line, e.g. `/.awc/`) in the checkout at `dir`
 * without touching a file the project commits: the line is appended to the repository's
 * `info/exclude` (machine-local, shared by its worktrees) unless it is there already.
 * @returns the exclude file, or null when `dir` is not a git checkout (nothing to do)
 * @throws E_SYMLINK (info/exclude is a symbolic link: never written through)
 */
export async function excludeFromGit(dir: string, pattern: string): Promise<string | null> {
  const common = await gitCommonDir(dir);
  if (common === null) return null;
  const file = join(common, 'info', 'exclude');
  const st = await lstat(file).catch(() => undefined);
  if (st?.isSymbolicLink()) throw new AwcError('E_SYMLINK', `${file} is a symbolic link; awc init never writes through one`);
  const text = st ? await readFile(file, 'utf8') : '';
  if (text.split('\n').some((l) => l.trim() === pattern)) return file;
  await mkdir(dirname(file), { recursive: true });
  await appendFile(file, `${text === '' || text.endsWith('\n') ? '' : '\n'}${pattern}\n`);
  // root writing into a user's repository: a new file is the repository's owner's
  if (!st && process.getuid?.() === 0) {
    const owner = await stat(common);
    await lchown(file, owner.uid, owner.gid);
  }
  return file;
}
