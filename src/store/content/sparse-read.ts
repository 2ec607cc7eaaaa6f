import { AwcError } from '../../core/errors.js';
import type { Extent } from '../../core/sparse.js';

/** Zeros handed out for holes (1 MiB, shared: never modify a Buffer a file read yields). */
const ZEROS = Buffer.alloc(1024 * 1024);

/**
 * A run of a sparse file's logical content: `data` placed at byte `offset`, or a hole of
 * `hole` zero bytes starting at byte `offset`.
 */
export type SparsePiece = { offset: number; data: Buffer; hole?: undefined } | { offset: number; hole: number; data?: undefined };

/** The errors placeExtents throws for data that does not fit the extents (see isExtentMismatch). */
const mismatches = new WeakSet<object>();

/** True for the E_INTEGRITY error placeExtents throws when the data stream does not fill its extents exactly. */
export function isExtentMismatch(err: unknown): boolean {
  return typeof err === 'object' && err !== null && mismatches.has(err);
}

function mismatch(message: string): AwcError {
  const err = new AwcError('E_INTEGRITY', message);
  mismatches.add(err);
  return err;
}

/**
 * Walks a sparse file of `size` bytes: places its data stream (its extents' bytes
 * concatenated, e.g. its chunks in order) at its extents, in file order, with the holes
 * between (empty holes left out). A hole is yielded as soon as the extent before it is
 * complete, before more data is read; empty data Buffers are skipped.
 * @throws E_INTEGRITY (isExtentMismatch) when the stream holds fewer or more bytes than the
 *   extents; the stream's errors
 */
export async function* placeExtents(size: number, extents: readonly Extent[], data: AsyncIterable<Buffer>): AsyncIterable<SparsePiece> {
  let i = 0;
  let done = 0; // bytes of extents[i] placed
  let pos = 0; // end of the last extent completed
  // completes the extents of no (more) length and yields the hole before the next one
  const next = function* (): Iterable<SparsePiece> {
    while (i < extents.length && done === extents[i][1]) [pos, i, done] = [extents[i][0] + done, i + 1, 0];
    const to = i < extents.length ? extents[i][0] : pos;
    if (to > pos) yield { offset: pos, hole: to - pos };
  };
  yield* next();
  for await (let buf of data) {
    while (buf.length > 0) {
      if (i >= extents.length) throw mismatch('sparse file: its chunks hold more than its extents');
      const [o, l] = extents[i];
      const n = Math.min(buf.length, l - done);
      yield { offset: o + done, data: buf.subarray(0, n) };
      buf = buf.subarray(n);
      done += n;
      if (done === l) yield* next();
    }
  }
  if (i < extents.length) throw mismatch(`sparse file: its chunks end before its extents (${extents[i][1] - done} bytes short)`);
  if (size > pos) yield { offset: pos, hole: size - pos };
}

/**
 * The logical content of a sparse file from the stream of its data (its chunks in order):
 * the data placed at its extents, holes as zero Buffers (views of one shared zero buffer, up
 * to 1 MiB each), `size` bytes in all. Yields as many zero bytes as the holes hold: callers
 * that can keep holes (export --dir, the FUSE server, tar's sparse format) read the extents.
 * @throws E_INTEGRITY when the data stream holds other than the extents' bytes; the stream's errors
 */
export async function* withHoles(size: number, extents: readonly Extent[], data: AsyncIterable<Buffer>): AsyncIterable<Buffer> {
  for await (const p of placeExtents(size, extents, data)) {
    if (p.data) yield p.data;
    else yield* zeros(p.hole);
  }
}

function* zeros(n: number): Iterable<Buffer> {
  while (n > 0) {
    const k = Math.min(n, ZEROS.length);
    yield ZEROS.subarray(0, k);
    n -= k;
  }
}
