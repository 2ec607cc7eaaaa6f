import { lstat } from 'node:fs/promises';
import { closeSync, type BigIntStats } from 'node:fs';
import { DirFd } from './dir-fd.js';
import { nameFromBytes } from './raw-name.js';

/** Options of {@link allocatedBytesOf}. */
export interface AllocatedOptions {
  /** Inodes with several links are counted once across every call sharing this set (`dev:ino` keys). Absent: each name counts. */
  seen?: Set<string>;
  /** Count `root` itself only. */
  shallow?: boolean;
  /** A slash path below `root` that is neither counted nor entered. */
  skipRel?: string;
  /** Do not count or enter what lies on another file system than `root` (a mount point below it). */
  oneFileSystem?: boolean;
}

/** lstat (bigint) of `p`; undefined when it is gone. @throws the fs error otherwise */
async function lstatOrUndefined(p: string | Buffer): Promise<BigIntStats | undefined> {
  try {
    return await lstat(p, { bigint: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

/**
 * Allocated bytes (`st_blocks × 512`) of `root` and everything below it, never following a
 * symlink, walked through directory descriptors (src/core/dir-fd.ts) so a tree deeper than
 * PATH_MAX is measured too. Entries vanishing during the walk count 0; a missing `root` is 0.
 * Holds one descriptor per level of depth. lstat calls are made 64 at a time.
 * @param root a path of the caller's (its last component is not followed)
 * @returns bytes
 * @throws AwcError / the fs error on failures other than vanishing (E_PERMISSION, …)
 */
export async function allocatedBytesOf(root: string, opts: AllocatedOptions = {}): Promise<number> {
  const st = await lstatOrUndefined(root);
  if (!st) return 0;
  const count = (s: BigIntStats): number => {
    if (opts.seen && s.nlink > 1n && !s.isDirectory()) {
      const key = `${s.dev}:${s.ino}`;
      if (opts.seen.has(key)) return 0;
      opts.seen.add(key);
    }
    return Number(s.blocks) * 512;
  };
  let total = count(st);
  if (opts.shallow || !st.isDirectory()) return total;
  const walk = async (dir: DirFd): Promise<void> => {
    const names = dir.list().map((b) => nameFromBytes(b));
    for (let i = 0; i < names.length; i += 64) {
      const batch = names.slice(i, i + 64);
      const stats = await Promise.all(batch.map((n) => lstatOrUndefined(dir.path(n))));
      for (let j = 0; j < batch.length; j++) {
        const s = stats[j];
        const name = batch[j]!;
        if (!s || (opts.oneFileSystem && s.dev !== st.dev) || dir.childRel(name) === opts.skipRel) continue;
        total += count(s);
        if (!s.isDirectory()) continue;
        const found = dir.open(name, s);
        if (found?.type === 'dir') {
          try {
            await walk(found.dir);
          } finally {
            found.dir.close();
          }
        } else if (found?.type === 'file') {
          closeSync(found.fd); // swapped for a file since the lstat: counted as it was
        }
      }
    }
  };
  const opened = DirFd.openRoot(root);
  if (!opened) return total;
  try {
    await walk(opened.dir);
  } finally {
    opened.dir.close();
  }
  return total;
}
