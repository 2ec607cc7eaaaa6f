import { closeSync, readSync } from 'node:fs';
import type { DirFd } from './dir-fd.js';

/** How much of a file a capture filter looks at: a `.gitignore`, `.awc.json` or credential file is far smaller. */
export const SMALL_FILE_BYTES = 1024 * 1024;

/** Up to `max` bytes (default 64 KiB) from the start of the file open at `fd`, read by position (the descriptor's offset is not moved). */
export function peekFd(fd: number, max = 64 * 1024): Buffer {
  const buf = Buffer.alloc(max);
  let n = 0;
  while (n < max) {
    const r = readSync(fd, buf, n, max - n, n);
    if (r === 0) break;
    n += r;
  }
  return buf.subarray(0, n);
}

/**
 * The text of regular file `name` in `dir` (never through a symlink: DirFd.open), at most
 * SMALL_FILE_BYTES; undefined when there is none or it is not a regular file.
 * @throws as DirFd.open (E_CHANGED_DURING_READ, E_PERMISSION)
 */
export function readSmallText(dir: DirFd, name: string): string | undefined {
  const found = dir.open(name, undefined);
  if (found?.type === 'dir') found.dir.close();
  if (found?.type !== 'file') return undefined;
  try {
    return peekFd(found.fd, SMALL_FILE_BYTES).toString('utf8');
  } finally {
    closeSync(found.fd);
  }
}
