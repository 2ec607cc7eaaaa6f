import * as fs from 'node:fs';
import { basename, dirname } from 'node:path';
import { DirFd } from './dir-fd.js';
import { toAwcError } from './errors.js';
import { fsPath } from './raw-name.js';

/**
 * Removing a directory tree that may be deeper than PATH_MAX (docs/decisions.md "Paths longer
 * than PATH_MAX"). `fs.rm` builds each entry's full path, so below 4096 bytes it fails with
 * ENAMETOOLONG; then the rest is removed by a walk through directory descriptors
 * (`DirFd.removeTree`: names as raw bytes, symlinks removed and never followed). Missing is
 * fine.
 */

/** Whether `err` is ENAMETOOLONG (or an AwcError mapped from it). */
function tooLong(err: unknown): boolean {
  const e = err as { code?: string };
  return e.code === 'ENAMETOOLONG' || e.code === 'E_NAME_TOO_LONG';
}

/** The DirFd walk: removes `path` (an absolute or cwd-relative path of modest length) through its parent's descriptor. */
function removeByDescriptors(path: string, opts: { dev?: bigint }): void {
  const parent = DirFd.openRoot(dirname(path), { follow: true });
  if (!parent) return;
  try {
    parent.dir.removeTree(basename(path), opts);
  } finally {
    parent.dir.close();
  }
}

/**
 * Removes `path` and everything below it (`rm -rf`), at any depth. With `dev` the descriptor
 * walk never crosses into another file system (a mount point stops it).
 * @param path the tree's own path (its parent's path must be shorter than PATH_MAX)
 * @throws AwcError E_TARGET_BUSY (with `dev`, an entry on another file system); E_PERMISSION, … on other failures
 */
export function removeTreeSync(path: string, opts: { dev?: bigint } = {}): void {
  if (opts.dev === undefined) {
    try {
      fs.rmSync(fsPath(path), { recursive: true, force: true });
      return;
    } catch (err) {
      if (!tooLong(err)) throw toAwcError(err);
    }
  }
  removeByDescriptors(path, opts);
}

/** {@link removeTreeSync} with `fs.promises.rm` first (the descriptor walk, when needed, is synchronous). Same throws. */
export async function removeTree(path: string, opts: { dev?: bigint } = {}): Promise<void> {
  if (opts.dev === undefined) {
    try {
      await fs.promises.rm(fsPath(path), { recursive: true, force: true });
      return;
    } catch (err) {
      if (!tooLong(err)) throw toAwcError(err);
    }
  }
  removeByDescriptors(path, opts);
}
