/**
 * Reading a file through a ChunkPool (./chunk-pool.ts): the content writer's read path when
 * it has worker threads. The file is read in windows of READ_SIZE bytes; each window goes
 * to the file's worker session, which returns the chunks it completed; their bytes are
 * views of the window (or, for a chunk that spans two windows, a copy of both parts), handed
 * to `store` before the previous window is reused. Windows (shared memory) are recycled: fresh
 * memory costs a page fault per 4 KiB on first touch; at most WINDOW_CACHE of them are kept.
 */
import type { Hash } from 'node:crypto';
import type { ChunkRef } from '../../core/tree.js';
import type { Digest } from '../../core/digest.js';
import { newWindow, type ChunkPool, type ChunkResult } from './chunk-pool.js';
import { readFully } from './fd-io.js';

/** Size in bytes of one read window (4 MiB, the writer's READ_SIZE). */
export const WINDOW_SIZE = 4 * 1024 * 1024;
/** Idle windows kept for reuse (each WINDOW_SIZE bytes). */
const WINDOW_CACHE = 16;
const idle: Buffer[] = [];

function takeWindow(): Buffer {
  return idle.pop() ?? newWindow(WINDOW_SIZE);
}

function giveWindow(b: Buffer): void {
  if (idle.length < WINDOW_CACHE && b.length === WINDOW_SIZE) idle.push(b);
}

/** A window's bytes and where they start in the file (bytes). */
interface Placed {
  buf: Buffer;
  start: number;
  len: number;
}

/** The bytes [start, start+len) of the file, from the current window and the one before it. */
function sliceOf(prev: Placed | undefined, cur: Placed, start: number, len: number): Uint8Array {
  if (start >= cur.start) return cur.buf.subarray(start - cur.start, start - cur.start + len);
  const p = prev!;
  if (start + len <= cur.start) return p.buf.subarray(start - p.start, start - p.start + len);
  return Buffer.concat([p.buf.subarray(start - p.start, p.len), cur.buf.subarray(0, start + len - cur.start)]);
}

/** A batch of chunks to store: digest and bytes (views valid until `store` resolves). */
export type StoreBatch = (batch: { digest: Digest; data: Uint8Array }[]) => Promise<void>;

/**
 * Reads up to `limit` bytes of the file open at `fd` (positional reads from 0; a short read
 * ends it), chunked and hashed by one session of `pool`; `h` is fed the same bytes.
 * @returns the content's digest, size (bytes read) and chunks; every chunk went through `store`.
 * @throws what reads, the worker (E_INTERNAL) or `store` throw
 */
export async function readPooled(
  fd: number,
  limit: number,
  pool: ChunkPool,
  store: StoreBatch,
  h?: Hash,
): Promise<{ digest: Digest; size: number; chunks: ChunkRef[] }> {
  const s = pool.session();
  const refs: ChunkRef[] = [];
  let prev: Placed | undefined;
  let pos = 0;
  let next = 0; // where the next chunk starts
  try {
    for (;;) {
      const want = Math.min(WINDOW_SIZE, limit - pos);
      const win = takeWindow();
      const n = want > 0 ? await readFully(fd, win.subarray(0, want), pos) : 0;
      if (n > 0) h?.update(win.subarray(0, n));
      const final = n < want || pos + n >= limit;
      const r: ChunkResult = await s.push(win, n, final);
      const cur: Placed = { buf: win, start: pos, len: n };
      pos += n;
      const batch = r.lens.map((len, i) => {
        const data = sliceOf(prev, cur, next, len);
        next += len;
        refs.push({ digest: r.digests[i], size: len });
        return { digest: r.digests[i], data };
      });
      if (batch.length > 0) await store(batch);
      if (prev) giveWindow(prev.buf);
      prev = cur;
      if (final) return { digest: r.whole!, size: pos, chunks: refs };
    }
  } finally {
    s.abort();
    if (prev) giveWindow(prev.buf);
  }
}
