/**
 * How export --dir writes a regular file's bytes (src/host/tree/export-dir.ts), so that importing
 * the result records the same entry again (src/core/sparse.ts):
 *
 * - a dense file: runs of whole zero blocks shorter than MIN_HOLE (1 MiB) are left as holes
 *   (a capture stores those as zeros); longer runs are written as zeros, since a capture would
 *   record a hole of 1 MiB or more as a hole and give the file another digest;
 * - a sparse file: each data extent is written whole, zeros included, at its offset; the holes
 *   between are never written (the file is truncated to its size by the caller).
 */
import type { FileHandle } from 'node:fs/promises';
import { MIN_HOLE, type Extent } from '../../core/sparse.js';
import { isExtentMismatch, placeExtents } from '../../store/content/sparse-read.js';

/** Holes are left for whole zero blocks of this many bytes, aligned in the file. */
const HOLE_BLOCK = 4096;
const ZERO = Buffer.alloc(HOLE_BLOCK);
const ZEROS = Buffer.alloc(MIN_HOLE);

/**
 * Writes a dense file's content (see the module doc: zero runs under 1 MiB left as holes).
 * @returns the bytes it held
 */
export async function writeDense(fh: FileHandle, body: AsyncIterable<Buffer>): Promise<number> {
  let pos = 0;
  let zeroFrom = -1; // start of the pending run of skipped zero blocks, or -1
  const endRun = async (at: number): Promise<void> => {
    if (zeroFrom >= 0 && at - zeroFrom >= MIN_HOLE) await writeZeros(fh, zeroFrom, at);
    zeroFrom = -1;
  };
  for await (const buf of body) {
    let run = -1; // start (in buf) of the pending non-zero run, or -1
    for (let i = 0; i < buf.length;) {
      const end = Math.min(buf.length, (Math.floor((pos + i) / HOLE_BLOCK) + 1) * HOLE_BLOCK - pos);
      const zero = end - i === HOLE_BLOCK && buf.subarray(i, end).equals(ZERO);
      if (zero) {
        if (run >= 0) await writeAll(fh, buf, run, i, pos);
        run = -1;
        if (zeroFrom < 0) zeroFrom = pos + i;
      } else {
        await endRun(pos + i);
        if (run < 0) run = i;
      }
      i = end;
    }
    if (run >= 0) await writeAll(fh, buf, run, buf.length, pos);
    pos += buf.length;
  }
  await endRun(pos);
  return pos;
}

/**
 * Writes a sparse file's data (`body`: its extents concatenated) at its extents, whole.
 * @returns `size` when the data fit the extents exactly, else -1
 */
export async function writeExtents(fh: FileHandle, body: AsyncIterable<Buffer>, extents: readonly Extent[], size: number): Promise<number> {
  try {
    for await (const p of placeExtents(size, extents, body)) if (p.data) await writeAll(fh, p.data, 0, p.data.length, p.offset);
  } catch (err) {
    if (isExtentMismatch(err)) return -1;
    throw err;
  }
  return size;
}

/** Writes `buf[from, to)` at file offset `base + from`. */
async function writeAll(fh: FileHandle, buf: Buffer, from: number, to: number, base: number): Promise<void> {
  while (from < to) from += (await fh.write(buf, from, to - from, base + from)).bytesWritten;
}

/** Writes zeros over [from, to) of the file. */
async function writeZeros(fh: FileHandle, from: number, to: number): Promise<void> {
  for (let at = from; at < to;) {
    const n = Math.min(ZEROS.length, to - at);
    await writeAll(fh, ZEROS, 0, n, at);
    at += n;
  }
}
