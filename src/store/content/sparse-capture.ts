import type { Digest } from '../../core/digest.js';
import { sha256 } from '../../core/digest.js';
import { Chunker } from '../../core/fastcdc.js';
import { dataBytes, sparseDigest, type Extent } from '../../core/sparse.js';
import type { ChunkRef } from '../../core/tree.js';
import { readFully } from './fd-io.js';

/** A chunk waiting to be stored: its digest and its bytes (a view the caller may reuse after the store call). */
export interface SparseChunk {
  digest: Digest;
  data: Uint8Array;
}

/** The content of a sparse file as captured: logical size, recorded extents, the chunks of its data, its sparse digest. */
export interface SparseContent {
  digest: Digest;
  size: number;
  chunks: ChunkRef[];
  extents: Extent[];
}

/** Size in bytes of one read of a sparse file's data (4 MiB). */
const READ_SIZE = 4 * 1024 * 1024;

/**
 * Reads only the data extents of the file open at `fd` (positional reads of up to 4 MiB),
 * chunks their concatenation and hands each batch of chunks to `store` before the next read
 * reuses the buffer. The holes are never read.
 * @returns the content; `size` is the logical `size` when every extent was read whole, less
 *   when the file ended early (it shrank: the caller reads it again)
 * @throws the read's errors (errno as Node reports them)
 */
export async function captureSparseFd(
  fd: number,
  size: number,
  extents: readonly Extent[],
  store: (batch: SparseChunk[]) => Promise<void>,
): Promise<SparseContent> {
  const chunker = new Chunker();
  const buf = Buffer.allocUnsafe(READ_SIZE);
  const refs: ChunkRef[] = [];
  const push = async (chunks: Uint8Array[]): Promise<void> => {
    const batch = chunks.map((c) => ({ digest: sha256(c), data: c }));
    for (const b of batch) refs.push({ digest: b.digest, size: b.data.length });
    if (batch.length > 0) await store(batch);
  };
  let short = false;
  for (const [o, l] of extents) {
    let pos = 0;
    while (pos < l) {
      const want = Math.min(READ_SIZE, l - pos);
      const n = await readFully(fd, buf.subarray(0, want), o + pos);
      if (n > 0) await push(chunker.push(buf.subarray(0, n)));
      pos += n;
      if (n < want) {
        short = true;
        break;
      }
    }
    if (short) break;
  }
  const last = chunker.finish();
  if (last) await push([last]);
  const ext = extents.map(([o, l]): Extent => [o, l]);
  const data = refs.reduce((a, r) => a + r.size, 0);
  return {
    digest: sparseDigest(size, ext, refs),
    size: short || data !== dataBytes(ext) ? Math.min(size - 1, data) : size,
    chunks: refs,
    extents: ext,
  };
}

/**
 * Chunks a stream of a sparse file's data (the concatenation of its extents, e.g. a GNU sparse
 * tar member's body) and hands each batch to `store`. The stream's buffers are kept until
 * `store` has been called for their chunks (do not modify them afterwards).
 * @returns the content; its `size` is the logical `size` (the caller checks that the stream held
 *   dataBytes(extents) bytes: `chunks` sum to what it held)
 */
export async function captureSparseStream(
  src: AsyncIterable<Uint8Array>,
  size: number,
  extents: readonly Extent[],
  store: (batch: SparseChunk[]) => Promise<void>,
): Promise<SparseContent> {
  const chunker = new Chunker();
  const refs: ChunkRef[] = [];
  const push = async (chunks: Uint8Array[]): Promise<void> => {
    const batch = chunks.map((c) => ({ digest: sha256(c), data: c }));
    for (const b of batch) refs.push({ digest: b.digest, size: b.data.length });
    if (batch.length > 0) await store(batch);
  };
  for await (const b of src) if (b.length > 0) await push(chunker.push(b));
  const last = chunker.finish();
  if (last) await push([last]);
  const ext = extents.map(([o, l]): Extent => [o, l]);
  return { digest: sparseDigest(size, ext, refs), size, chunks: refs, extents: ext };
}
