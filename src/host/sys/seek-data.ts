/**
 * Where a file's data is: lseek(2) with SEEK_DATA and SEEK_HOLE, through koffi (Node has no
 * binding for them). Used when a file is captured (import dir, checkpoint) to record the holes
 * of a sparse file (src/core/sparse.ts) instead of reading them.
 */
import type { BigIntStats } from 'node:fs';
import { recordedExtents, MIN_HOLE, type Extent } from '../../core/sparse.js';
import { libcCalls } from './libc.js';

const SEEK_DATA = 3;
const SEEK_HOLE = 4;
const ENXIO = 6;

/**
 * The recorded extents (holes of at least MIN_HOLE; src/core/sparse.ts `recordedExtents`) of
 * the regular file open at `fd`, whose fstat is `st`, found with SEEK_DATA/SEEK_HOLE. Files
 * whose allocated blocks cover their size (the common case) are not probed. The descriptor's
 * offset moves (callers read with positional reads).
 * @returns the extents, or undefined when the file is dense (or holes cannot be found here:
 *   no koffi, or a file system without SEEK_DATA, which then reads as dense).
 */
export function findDataExtents(fd: number, st: BigIntStats): Extent[] | undefined {
  const size = Number(st.size);
  if (size < MIN_HOLE || st.blocks * 512n >= st.size) return undefined;
  const c = libcCalls();
  if (!c) return undefined;
  const ranges: Extent[] = [];
  let pos = 0;
  while (pos < size) {
    const d = Number(c.lseek(fd, BigInt(pos), SEEK_DATA));
    if (d < 0) {
      if (c.errno() === ENXIO) break; // only a hole from here to the end
      return undefined;
    }
    if (d >= size) break;
    let h = Number(c.lseek(fd, BigInt(d), SEEK_HOLE));
    if (h < 0) return undefined;
    if (h > size) h = size;
    ranges.push([d, h - d]);
    pos = h;
  }
  return recordedExtents(size, ranges);
}
