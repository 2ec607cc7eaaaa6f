import * as fs from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { DirFd } from '../../core/dir-fd.js';

/**
 * What a worktree's `.git` is, read without following a symlink (the worktree belongs to a
 * tool, or to a user): `dir` (a repository of its own, or a Claude Code hook workspace
 * holding a private `.git`), `file` (a linked worktree: `gitdir: <path>` names its
 * registration in the project, `<project>/.git/worktrees/<name>`; `gitdir` is that path,
 * absolute), `missing` (no `.git`, or no directory at all: `gone`), `other` (a symlink, a
 * FIFO, a file that names no git directory).
 */
export type GitLink = { kind: 'dir' } | { kind: 'file'; gitdir: string } | { kind: 'missing' } | { kind: 'gone' } | { kind: 'other' };

/** The most a `.git` file is read (git writes one line). */
const LINK_MAX_BYTES = 4096;

/**
 * Reads `<dir>/.git` (see GitLink). `dir` is opened as its path says (an absolute real path
 * the caller recorded), its `.git` with O_NOFOLLOW through the opened directory, a regular
 * file only (a FIFO never blocks the read).
 */
export function readGitLink(dir: string): GitLink {
  let opened: ReturnType<typeof DirFd.openRoot>;
  try {
    opened = DirFd.openRoot(dir);
  } catch {
    return { kind: 'gone' };
  }
  if (!opened) return { kind: 'gone' };
  try {
    const st = opened.dir.lstat('.git');
    if (!st) return { kind: 'missing' };
    if (st.isDirectory()) return { kind: 'dir' };
    if (!st.isFile() || st.size > BigInt(LINK_MAX_BYTES)) return { kind: 'other' };
    const found = opened.dir.open('.git', st);
    if (found?.type !== 'file') return { kind: 'other' };
    let text: string;
    try {
      const buf = Buffer.alloc(LINK_MAX_BYTES);
      text = buf.subarray(0, fs.readSync(found.fd, buf, 0, LINK_MAX_BYTES, 0)).toString('utf8');
    } finally {
      fs.closeSync(found.fd);
    }
    const m = /^gitdir:\s*(.+?)\s*$/m.exec(text);
    if (!m) return { kind: 'other' };
    return { kind: 'file', gitdir: isAbsolute(m[1]!) ? resolve(m[1]!) : resolve(dir, m[1]!) };
  } catch {
    return { kind: 'other' };
  } finally {
    opened.dir.close();
  }
}

/**
 * Whether git's registration of a linked worktree is still there: the directory `gitdir`
 * names (`<project>/.git/worktrees/<name>`) exists and holds its `gitdir` back-link (what
 * `git worktree prune` and `git worktree remove` delete). Only looked at (lstat), never
 * read or followed at its last component.
 */
export function registrationExists(gitdir: string): boolean {
  const st = fs.lstatSync(gitdir, { throwIfNoEntry: false });
  if (!st?.isDirectory()) return false;
  return fs.lstatSync(join(gitdir, 'gitdir'), { throwIfNoEntry: false })?.isFile() === true;
}

/** Why a worktree is no longer the git worktree it was: `.git` gone, or its registration in the project gone. */
export type WorktreeGone = 'not-a-worktree' | 'unregistered';

/**
 * Judges the git side of a worktree at `dir` that was a git worktree: `not-a-worktree` when its `.git` is gone (git's removal
 * deletes it first), `unregistered` when it is a linked worktree whose registration in the
 * project is gone (`git worktree prune` / `remove` ran); undefined while it is one (or the
 * directory itself is gone: the caller's own reason). Works whether `.git` is a directory
 * or a `gitdir:` file (`was` is kept for the record; a `.git` that changed kind is judged as it is now).
 */
export function worktreeGone(dir: string): WorktreeGone | undefined {
  const now = readGitLink(dir);
  if (now.kind === 'gone') return undefined;
  if (now.kind === 'missing') return 'not-a-worktree';
  if (now.kind === 'file' && !registrationExists(now.gitdir)) return 'unregistered';
  return undefined;
}
