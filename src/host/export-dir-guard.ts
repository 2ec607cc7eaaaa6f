import * as fs from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { AwcError, toAwcError } from '../core/errors.js';
import { mountPoints } from '../host/mount-table.js';

/**
 * The checks `export --dir` makes before it touches anything (issue 7 item 8): the target
 * must not be, hold or lie inside the AWC home, and must not be a mount point nor have one
 * below it (replacing it would delete another file system's files, or fail half-way with
 * EBUSY). Paths are compared as real paths (symlinks and `..` resolved).
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
