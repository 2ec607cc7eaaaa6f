import * as fs from 'node:fs';
import { AwcError } from '../../core/errors.js';
import { DirFd } from '../../core/dir-fd.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { openOwnedDir } from '../../host/mount/owned-target.js';
import { fdPath } from '../../core/dir-fd.js';

/** A dependency directory of an attached worktree: its path relative to the worktree, and whether attach made the mount point. */
export interface AttachBind {
  rel: string;
  /** Absolute mount point (`<worktree>/<rel>`). */
  target: string;
  /** attach created the (empty) mount point, so detach removes it. */
  created: boolean;
}

/**
 * Checks that `rel` is a plain relative slash path (no `..`, `.`, empty or absolute part).
 * @throws E_USAGE
 */
export function checkEnvDir(rel: string): void {
  if (rel === '' || rel.startsWith('/') || rel.split('/').some((p) => p === '' || p === '.' || p === '..'))
    throw new AwcError('E_USAGE', `dependency directory ${JSON.stringify(rel)} is not a plain relative path`, {
      hint: 'The awc.env-dirs label lists relative paths such as node_modules or packages/app/.venv, comma-separated.',
    });
}

/**
 * Checks where a dependency directory will be bind-mounted in the worktree `root` (a real
 * path): every component of `rel` is walked with O_NOFOLLOW from `root` (a symlinked parent
 * or target is refused: a bind mount through it would land elsewhere); the target itself
 * must be missing (attach creates it) or an empty directory that is not a mount point.
 * Nothing is changed.
 * @returns whether the mount point must be created
 * @throws E_SYMLINK, E_TARGET_EXISTS (a file, or a non-empty directory), E_TARGET_BUSY (a mount point), E_SOURCE_NOT_FOUND (a parent is missing)
 */
export function checkBindTarget(root: string, rel: string, uid?: number): { create: boolean } {
  checkEnvDir(rel);
  const cut = rel.lastIndexOf('/');
  const parentRel = cut < 0 ? '' : rel.slice(0, cut);
  const name = rel.slice(cut + 1);
  const opened = openWorktree(root, uid);
  let parent: DirFd;
  try {
    parent = opened.dir.openRel(parentRel);
    // an ordinary user's worktree: every directory on the way is theirs
    const parts = parentRel === '' ? [] : parentRel.split('/');
    try {
      if (uid !== undefined) for (let i = 1; i <= parts.length; i++) ownedBy(opened.dir, parts.slice(0, i).join('/'), root, uid);
    } catch (err) {
      parent.close();
      throw err;
    }
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_PATH_TRAVERSAL') {
      const st = fs.lstatSync(`${root}/${parentRel}`, { throwIfNoEntry: false });
      if (!st)
        throw new AwcError('E_SOURCE_NOT_FOUND', `${root}/${parentRel} does not exist`, { hint: 'Check out the worktree fully first.' });
      throw symlinkError(`${root}/${parentRel}`);
    }
    throw err;
  } finally {
    opened.dir.close();
  }
  try {
    const st = parent.lstat(name);
    const target = `${root}/${rel}`;
    if (!st) return { create: true };
    if (st.isSymbolicLink()) throw symlinkError(target);
    if (uid !== undefined && Number(st.uid) !== uid) throw notYours(target, Number(st.uid));
    if (!st.isDirectory())
      throw new AwcError('E_TARGET_EXISTS', `${target} exists and is not a directory`, {
        hint: `Remove it (rm ${target}) and attach again.`,
      });
    const f = parent.open(name, st);
    if (f?.type !== 'dir') throw symlinkError(target);
    try {
      if (f.dir.list().length > 0)
        throw new AwcError('E_TARGET_EXISTS', `${target} is not empty (dependencies installed there already?)`, {
          hint: `Attach mounts the prepared dependencies over an empty or missing ${name}; remove it (rm -rf ${target}) and attach again.`,
          details: { path: target },
        });
    } finally {
      f.dir.close();
    }
    if (isMounted(target)) throw new AwcError('E_TARGET_BUSY', `${target} is already a mount point`, { details: { path: target } });
    return { create: false };
  } finally {
    parent.close();
  }
}

/**
 * Creates the empty mount point `<root>/<rel>` (mode 0755, owned like its parent, so the
 * worktree's owner finds it as if they had made it), never through a symlink.
 * @throws E_SYMLINK, the mkdir error
 */
export function createMountPoint(root: string, rel: string, uid?: number): void {
  const cut = rel.lastIndexOf('/');
  const opened = openWorktree(root, uid);
  try {
    const parent = opened.dir.openRel(cut < 0 ? '' : rel.slice(0, cut));
    try {
      const pst = fs.fstatSync(parent.fd);
      const made = parent.mkdirOpen(rel.slice(cut + 1), 0o755);
      try {
        fs.fchmodSync(made.fd, 0o755);
        fs.fchownSync(made.fd, pst.uid, pst.gid);
      } finally {
        made.close();
      }
    } finally {
      parent.close();
    }
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_PATH_TRAVERSAL') throw symlinkError(`${root}/${rel}`);
    throw err;
  } finally {
    opened.dir.close();
  }
}

/**
 * Removes the empty mount point `<root>/<rel>` attach made, through descriptors (never
 * through a symlink; rmdir never removes content).
 * @returns whether it is gone (removed, or missing)
 */
export function removeMountPoint(root: string, rel: string, uid?: number): boolean {
  const cut = rel.lastIndexOf('/');
  let opened: { dir: DirFd };
  try {
    opened = openWorktree(root, uid);
  } catch {
    return false;
  }
  try {
    const parent = opened.dir.openRel(cut < 0 ? '' : rel.slice(0, cut));
    try {
      fs.rmdirSync(parent.path(rel.slice(cut + 1)));
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT';
    } finally {
      parent.close();
    }
  } catch {
    return false;
  } finally {
    opened.dir.close();
  }
}

/**
 * Opens the worktree `root`: as its path says (root's own attach), or, for an ordinary user
 * (`uid`), walked from `/` without following any symlink and owned by them (openOwnedDir).
 * @throws E_SOURCE_NOT_FOUND, E_PERMISSION (a symlink on the way, not theirs)
 */
function openWorktree(root: string, uid: number | undefined): { dir: DirFd } {
  if (uid === undefined) {
    const opened = DirFd.openRoot(root);
    if (!opened) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${root}`);
    return opened;
  }
  const owned = openOwnedDir(root, uid);
  try {
    // the very directory the walk opened (its magic link), not the path again
    const opened = DirFd.openRoot(fdPath(owned.fd), { follow: true });
    if (!opened) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${root}`);
    return opened;
  } finally {
    owned.close();
  }
}

/** @throws E_PERMISSION unless the directory `rel` below `dir` belongs to `uid` (E_SYMLINK: a symlink) */
function ownedBy(dir: DirFd, rel: string, root: string, uid: number): void {
  let d: DirFd;
  try {
    d = dir.openRel(rel);
  } catch {
    throw symlinkError(`${root}/${rel}`);
  }
  try {
    const st = fs.fstatSync(d.fd);
    if (st.uid !== uid) throw notYours(`${root}/${rel}`, st.uid);
  } finally {
    d.close();
  }
}

/** E_PERMISSION for a directory of a user's worktree that is not theirs. */
function notYours(path: string, owner: number): AwcError {
  return new AwcError('E_PERMISSION', `${path} is not yours (owner uid ${owner}): attach mounts only into directories you own`, {
    details: { path },
  });
}

/** E_SYMLINK for a path attach would have to follow. */
function symlinkError(path: string): AwcError {
  return new AwcError('E_SYMLINK', `${path} is (or lies under) a symbolic link; attach never mounts through one`, {
    details: { path },
  });
}
