import * as fs from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { fdPath } from '../../core/dir-fd.js';
import { isMounted } from './mount-table.js';

const C = fs.constants;
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;

/** A mount target opened for an ordinary user: its descriptor (mount through it) and its canonical path. */
export interface OwnedTarget {
  fd: number;
  path: string;
  close(): void;
}

/** The caller's groups, for the search check of {@link openOwnedDir}. */
export interface CallerGroups {
  gid: number;
  groups: readonly number[];
}

/** True when the directory `st` may be searched (x) by `uid` with `who`'s groups, as the kernel decides by its mode bits. */
function searchable(st: fs.Stats, uid: number, who: CallerGroups): boolean {
  if (st.uid === uid) return (st.mode & 0o100) !== 0;
  if (st.gid === who.gid || who.groups.includes(st.gid)) return (st.mode & 0o010) !== 0;
  return (st.mode & 0o001) !== 0;
}

/**
 * Opens the directory `name` in the directory open at `fd`, never following a symlink (`path`
 * names the whole target in errors).
 * @throws E_PERMISSION (a symlink), E_TARGET_BUSY (missing, not a directory)
 */
function openChildDir(fd: number, name: string, path: string): number {
  try {
    return fs.openSync(`${fdPath(fd)}/${name}`, DIR_FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') {
      const st = fs.lstatSync(`${fdPath(fd)}/${name}`, { throwIfNoEntry: false });
      if (st?.isSymbolicLink())
        throw new AwcError('E_PERMISSION', `${path}: ${name} is a symlink; a mount target is named without symlinks`, {
          hint: 'Give the real path of a directory you own.',
        });
      throw new AwcError('E_TARGET_BUSY', `${path} is not a directory`);
    }
    if (code === 'ENOENT') throw new AwcError('E_TARGET_BUSY', `${path} does not exist`, { hint: 'Create an empty directory first.' });
    throw toAwcError(err);
  }
}

/**
 * Opens the directory `target` of user `uid` for the root daemon without following any
 * symlink (see openOwnedTarget): every component from `/` is opened relative to its parent
 * with O_NOFOLLOW|O_DIRECTORY; the last must be owned by `uid`. With `who`, each directory on
 * the way must also be one `uid` may search (its mode bits; ACLs are not read, so an ACL grant
 * is not honoured), checked before the next name is looked up: root then tells nothing of a
 * place the caller cannot reach, whatever is there. Close it after use.
 * @throws E_USAGE (not absolute), E_PERMISSION (a symlink on the way, not owned by `uid`, not
 *   reachable by them), E_TARGET_BUSY (missing, not a directory)
 */
export function openOwnedDir(target: string, uid: number, who?: CallerGroups): OwnedTarget {
  if (!isAbsolute(target)) throw new AwcError('E_USAGE', `target must be absolute: ${target}`);
  const path = resolve(target);
  let fd = fs.openSync('/', DIR_FLAGS);
  try {
    for (const name of path.split('/').filter((n) => n !== '')) {
      if (who && !searchable(fs.fstatSync(fd), uid, who))
        throw new AwcError('E_PERMISSION', `${path} cannot be reached by you (a directory on the way is not searchable for uid ${uid})`, {
          hint: 'Give a directory of your own, on a path you can reach.',
        });
      const next = openChildDir(fd, name, path);
      fs.closeSync(fd);
      fd = next;
    }
    const st = fs.fstatSync(fd);
    if (st.uid !== uid)
      throw new AwcError('E_PERMISSION', `${path} is not yours (owner uid ${st.uid}): a workspace is mounted only on a directory you own`, {
        hint: 'Create an empty directory of your own (mkdir) and mount there.',
      });
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
  const opened = fd;
  return { fd: opened, path, close: () => fs.closeSync(opened) };
}

/**
 * Opens the mount target `target` of user `uid` for the root daemon without following any
 * symlink: every component from `/` is opened relative to its parent's descriptor with
 * O_NOFOLLOW|O_DIRECTORY (src/core/dir-fd.ts), so a component swapped for a symlink fails
 * instead of redirecting the walk. The last one must be a directory owned by `uid`, empty
 * and not a mount point. Mount through `/proc/self/fd/<fd>` of the result (see
 * mountOverlay's `fd`), so a swap after this check cannot redirect the mount either.
 * Close it once mounted.
 * @throws E_USAGE (not absolute), E_PERMISSION (a symlink on the way, or not owned by `uid`),
 *   E_TARGET_BUSY (missing, not a directory, not empty, a mount point)
 */
export function openOwnedTarget(target: string, uid: number): OwnedTarget {
  const opened = openOwnedDir(target, uid);
  try {
    if (fs.readdirSync(fdPath(opened.fd)).length > 0) throw new AwcError('E_TARGET_BUSY', `${opened.path} is not empty`);
    if (isMounted(opened.path)) throw new AwcError('E_TARGET_BUSY', `${opened.path} is already a mount point`);
  } catch (err) {
    opened.close();
    throw err;
  }
  return opened;
}
