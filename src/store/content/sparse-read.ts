import { AwcError } from '../../core/errors.js';
import type { Extent } from '../../core/sparse.js';

/** Zeros handed out for holes (1 MiB, shared: never modify a Buffer a file read yields). */
const ZEROS = Buffer.alloc(1024 * 1024);

/**
 * The logical content of a sparse file from the stream of its data (its chunks in order):
 * the data placed at its extents, holes as zero Buffers (views of one shared zero buffer, up
 * to 1 MiB each), `size` bytes in all. Yields as many zero bytes as the holes hold: callers
 * that can keep holes (export --dir, the FUSE server, tar's sparse format) read the extents.
 * @throws E_INTEGRITY when the data stream holds other than the extents' bytes; the stream's errors
 */
export async function* withHoles(size: number, extents: readonly Extent[], data: AsyncIterable<Buffer>): AsyncIterable<Buffer> {
  const it = data[Symbol.asyncIterator]();
  let cur: Buffer | undefined;
  let pos = 0;
  for (const [o, l] of extents) {
    yield* zeros(o - pos);
    let left = l;
    while (left > 0) {
      if (!cur || cur.length === 0) {
        const n = await it.next();
        if (n.done) throw new AwcError('E_INTEGRITY', `sparse file: its chunks end before its extents (${left} bytes short)`);
        cur = n.value;
        continue;
      }
      const take = Math.min(left, cur.length);
      yield cur.subarray(0, take);
      cur = cur.subarray(take);
      left -= take;
    }
    pos = o + l;
  }
  if ((cur && cur.length > 0) || !(await it.next()).done)
    throw new AwcError('E_INTEGRITY', 'sparse file: its chunks hold more than its extents');
  yield* zeros(size - pos);
}

function* zeros(n: number): Iterable<Buffer> {
  while (n > 0) {
    const k = Math.min(n, ZEROS.length);
    yield ZEROS.subarray(0, k);
    n -= k;
  }
}
