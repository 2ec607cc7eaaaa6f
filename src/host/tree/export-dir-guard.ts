import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { DirFd } from '../../core/dir-fd.js';
import { basename, dirname, join, resolve } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { mountPoints } from '../mount/mount-table.js';

/**
 * The checks `export --dir` makes before it touches anything (docs/decisions.md,
 * "`export --dir` writes beside the target"): the target must not be, hold or lie inside the
 * AWC home, and must not be a mount point nor have one below it (replacing it would delete
 * another file system's files, or fail half-way with EBUSY). Paths are compared as real
 * paths (symlinks and `..` resolved). Then the target's own checks and, once the tree is
 * complete, its move into place (moveInPlace).
 */

/** Real path of `path`, or of its nearest existing ancestor joined with the rest when it does not exist yet. */
function realOf(path: string): string {
  try {
    return fs.realpathSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw toAwcError(err);
    const parent = dirname(path);
    return parent === path ? path : join(realOf(parent), basename(path));
  }
}

/** True when `inner` is `outer` or below it (both real, absolute). */
function within(inner: string, outer: string): boolean {
  return inner === outer || outer === '/' || inner.startsWith(outer + '/');
}

/**
 * Refuses an export target (absolute `target`, shown to the user as `shown`) that is, holds
 * or is inside `home` (when given), or that is a mount point or has one below it.
 * @throws AwcError E_USAGE (the home), E_TARGET_BUSY (a mount point at or below the target)
 */
export function checkExportTarget(target: string, shown: string, home: string | undefined): void {
  const real = realOf(target);
  if (home !== undefined) {
    const h = realOf(home);
    const hint = 'Export to a directory outside the AWC data directory (--home) that does not hold it either.';
    if (within(real, h)) throw new AwcError('E_USAGE', `${shown} is inside the AWC home ${h}`, { hint });
    if (within(h, real)) throw new AwcError('E_USAGE', `${shown} holds the AWC home ${h}`, { hint });
  }
  for (const m of mountPoints()) {
    if (m === real)
      throw new AwcError('E_TARGET_BUSY', `${shown} is a mount point`, {
        hint: 'Export to a directory that is not a mount point (export --dir replaces the directory itself), or unmount it first.',
      });
    if (within(m, real))
      throw new AwcError('E_TARGET_BUSY', `${shown} has a mount point below it: ${m}`, {
        hint: 'Unmount it first, or export to another directory: export --dir never replaces a tree that holds a mount.',
      });
  }
}

/**
 * Rewrites the descriptor paths (`/proc/self/fd/N`) in an error's message into the paths
 * they name now (readlink of the magic link; `<export directory>` when it is closed), so
 * no internal path reaches the user. Call it while the descriptors are still open.
 */
export function userError(err: unknown): AwcError {
  const e = toAwcError(err);
  const message = e.message.replace(/\/proc\/self\/fd\/\d+/g, (m) => {
    try {
      const now = fs.readlinkSync(m);
      if (now.startsWith('/')) return now; // not a pipe, socket or anon inode that reuses the number
    } catch {
      // closed meanwhile
    }
    return '<export directory>';
  });
  return message === e.message ? e : new AwcError(e.code, message, { hint: e.hint, details: e.details, cause: e.cause ?? err });
}

/** Refuses a target that is not missing or an empty directory (a non-empty one is fine with `overwrite`). @returns whether it exists. */
export function checkTarget(parent: DirFd, name: string, shown: string, overwrite: boolean): boolean {
  const st = parent.lstat(name);
  if (!st) return false;
  if (!st.isDirectory()) throw notADirectory(shown);
  if (overwrite) return true;
  const found = parent.open(name, st);
  if (found?.type === 'file') fs.closeSync(found.fd);
  if (found?.type !== 'dir') return checkTarget(parent, name, shown, overwrite);
  try {
    if (found.dir.list().length > 0) throw new AwcError('E_TARGET_EXISTS', `${shown} is not empty`);
  } finally {
    found.dir.close();
  }
  return true;
}

/** The target exists and is a file or the like: nothing replaces it, not even `overwrite`. */
function notADirectory(shown: string): AwcError {
  return new AwcError('E_TARGET_EXISTS', `${shown} exists and is not a directory`, {
    hint: 'Export to a new or empty directory; --overwrite replaces only a directory, never a file.',
  });
}

/** Where an `export --dir` writes: the target, its name and parent directory (open, the caller closes it) and the temporary name beside it. */
export interface ExportPlace {
  target: string;
  name: string;
  parentPath: string;
  parent: DirFd;
  /** The parent's device (bigint fstat): a target on another is a mount point. */
  dev: bigint;
  tmp: string;
}

/**
 * The first steps of every `export --dir` (root's, src/host/tree/export-dir.ts, and an ordinary
 * user's, src/service/tar/extract-tar-dir.ts): resolves `dir`, refuses `/`, the home and mount
 * points ({@link checkExportTarget}), makes the parent (the caller's own path, so followed)
 * and opens it; everything below it then goes through descriptors.
 * @throws AwcError E_USAGE (`/`, the home), E_TARGET_BUSY (a mount point), E_SOURCE_NOT_FOUND (the parent vanished), mapped errno errors
 */
export function openExportPlace(dir: string, home: string | undefined): ExportPlace {
  const target = resolve(dir);
  const name = basename(target);
  if (name === '' || target === '/') throw new AwcError('E_USAGE', `cannot export onto ${target}`);
  checkExportTarget(target, dir, home);
  try {
    fs.mkdirSync(dirname(target), { recursive: true });
  } catch (err) {
    throw toAwcError(err);
  }
  const parent = DirFd.openRoot(dirname(target), { follow: true });
  if (!parent) throw new AwcError('E_SOURCE_NOT_FOUND', `the directory ${dirname(target)} vanished`);
  return { target, name, parentPath: dirname(target), parent: parent.dir, dev: parent.st.dev, tmp: tmpName('export') };
}

/** Hex suffix for names beside the target. */
export function tmpName(kind: string): string {
  return `.awc-${kind}-${randomBytes(8).toString('hex')}`;
}

/**
 * Renames the finished tree `tmp` onto `name`; with `overwrite` an existing directory is
 * renamed aside first and removed after (never across a file-system boundary). Any failure
 * after the rename aside puts the old tree back (the new one goes back to `tmp`, which the
 * caller removes); when that fails too, the original error says where the old tree is.
 */
export function moveInPlace(parent: DirFd, o: { tmp: string; name: string; shown: string; parentPath: string; overwrite: boolean }): void {
  const { tmp, name, shown } = o;
  const st = parent.lstat(name);
  let old: string | undefined;
  /** Puts the old tree back at `name` and throws `e` (naming where the old tree is when that fails). */
  const putBack = (e: AwcError): never => {
    if (old === undefined) throw e;
    try {
      fs.renameSync(parent.path(old), parent.path(name));
    } catch {
      throw new AwcError(e.code, `${e.message}; the old contents of ${shown} could not be put back and are at ${join(o.parentPath, old)}`, {
        hint: e.hint,
        details: e.details,
        cause: e,
      });
    }
    throw e;
  };
  try {
    if (st && o.overwrite) {
      if (!st.isDirectory()) throw notADirectory(shown);
      old = tmpName('old');
      fs.renameSync(parent.path(name), parent.path(old));
    }
    fs.renameSync(parent.path(tmp), parent.path(name)); // onto nothing, or onto an empty directory
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const e =
      code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR'
        ? new AwcError('E_TARGET_EXISTS', `${shown} was filled while exporting`, { cause: err })
        : code === 'EBUSY'
          ? new AwcError('E_TARGET_BUSY', `${shown} is busy (a mount point?)`, { cause: err })
          : userError(err);
    putBack(e);
  }
  if (old === undefined || !st) return;
  try {
    parent.removeTree(old, { dev: st.dev });
  } catch (err) {
    const e = userError(err);
    try {
      fs.renameSync(parent.path(name), parent.path(tmp)); // the new tree aside again
    } catch {
      throw new AwcError(
        e.code,
        `${e.message}; ${shown} holds the new export, what is left of its old contents is at ${join(o.parentPath, old)}`,
        { hint: e.hint, cause: e },
      );
    }
    putBack(
      new AwcError(
        e.code,
        `could not remove the old contents of ${shown} (${e.message}); the export was undone, ${shown} holds what is left of them`,
        { hint: e.hint, details: e.details, cause: e },
      ),
    );
  }
}
