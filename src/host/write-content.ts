/** How export --dir writes a regular file's bytes (src/host/export-dir.ts): dense files with zero blocks left as holes, sparse files by their extents. */
import type { FileHandle } from 'node:fs/promises';
import type { Extent } from '../core/sparse.js';

/** Holes are left for whole zero blocks of this many bytes, aligned in the file. */
const HOLE_BLOCK = 4096;
const ZERO = Buffer.alloc(HOLE_BLOCK);

/** Writes a dense file's content; zero blocks left as holes (writeSparse). @returns the bytes it held */
export async function writeDense(fh: FileHandle, body: AsyncIterable<Buffer>): Promise<number> {
  let pos = 0;
  for await (const buf of body) {
    await writeSparse(fh, buf, pos);
    pos += buf.length;
  }
  return pos;
}

/** Writes a sparse file's data (`body`: its extents concatenated) at its extents. @returns `size` when the data fit the extents exactly, else -1 */
export async function writeExtents(fh: FileHandle, body: AsyncIterable<Buffer>, extents: readonly Extent[], size: number): Promise<number> {
  let i = 0;
  let done = 0; // bytes of extents[i] written
  for await (let buf of body) {
    while (buf.length > 0) {
      if (i >= extents.length) return -1;
      const [o, l] = extents[i];
      const n = Math.min(buf.length, l - done);
      await writeSparse(fh, buf.subarray(0, n), o + done);
      buf = buf.subarray(n);
      done += n;
      if (done === l) [i, done] = [i + 1, 0];
    }
  }
  return i === extents.length ? size : -1;
}

/** Writes `buf` at file offset `pos`, skipping (leaving holes for) aligned all-zero blocks of HOLE_BLOCK bytes. */
async function writeSparse(fh: FileHandle, buf: Buffer, pos: number): Promise<void> {
  const writeAll = async (from: number, to: number): Promise<void> => {
    while (from < to) from += (await fh.write(buf, from, to - from, pos + from)).bytesWritten;
  };
  let run = -1; // start of the pending non-zero run, or -1
  for (let i = 0; i < buf.length;) {
    const end = Math.min(buf.length, (Math.floor((pos + i) / HOLE_BLOCK) + 1) * HOLE_BLOCK - pos);
    const zero = end - i === HOLE_BLOCK && buf.subarray(i, end).equals(ZERO);
    if (zero) {
      if (run >= 0) await writeAll(run, i);
      run = -1;
    } else if (run < 0) {
      run = i;
    }
    i = end;
  }
  if (run >= 0) await writeAll(run, buf.length);
}
