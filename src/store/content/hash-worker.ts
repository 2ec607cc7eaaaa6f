/**
 * A hash worker thread of a ContentWriter (src/store/content/hash-pool.ts): reads a file by
 * the descriptor number the main thread sends (descriptors are process-wide; the main thread
 * owns it and closes it after this job's `done`), chunks it (FastCDC), hashes every chunk and
 * the whole content (sha256, and git's blob id when asked), encodes each chunk for a pack
 * (lz4 when it pays) and posts the chunks batch by batch, one ArrayBuffer per batch,
 * transferred. A job posts its next batch only after the main thread acknowledged the one
 * before, so at most two batches (≤ 4 MiB of data each) of a job are held at once.
 */
import { createHash, type Hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { sha256 } from '../../core/digest.js';
import type { ChunkRef } from '../../core/tree.js';
import { Chunker } from '../../core/fastcdc.js';
import { encodeBlob } from '../pack/pack.js';
import { readSync } from 'node:fs';
import { captureSparseFd, type SparseChunk } from './sparse-capture.js';
import type { HashBatchChunk, HashJob, HashWorkerIn, HashWorkerOut } from './hash-pool.js';

/** Size in bytes of one read from a file (4 MiB, as the writer's READ_SIZE). */
const READ_SIZE = 4 * 1024 * 1024;

const port = parentPort!;
/** Per job: the acknowledgement awaited before its next batch is posted. */
const acks = new Map<number, () => void>();

/** Messages (and the buffers they transfer) queued in this turn, posted together at its end. */
let outbox: HashWorkerOut[] = [];
let transfers: ArrayBuffer[] = [];

function post(msg: HashWorkerOut, transfer: ArrayBuffer[] = []): void {
  outbox.push(msg);
  transfers.push(...transfer);
  if (outbox.length > 1) return;
  setImmediate(() => {
    const [ms, ts] = [outbox, transfers];
    outbox = [];
    transfers = [];
    port.postMessage(ms, ts);
  });
}

/** Encodes a batch of chunks with their digests for the main thread (views the caller reuses afterwards: their bytes are copied into one buffer). */
function encodeBatch(job: HashJob, chunks: readonly SparseChunk[]): { chunks: HashBatchChunk[]; bytes: ArrayBuffer } {
  const out: HashBatchChunk[] = [];
  const parts: Uint8Array[] = [];
  let total = 0;
  for (const { digest, data: c } of chunks) {
    let codec: HashBatchChunk['codec'] = 'none';
    let stored: Uint8Array | undefined;
    if (job.mode === 'compress') ({ codec, stored } = encodeBlob(c));
    else if (job.mode === 'raw') stored = c;
    out.push({ digest, size: c.length, codec, offset: total, length: stored?.length ?? 0 });
    if (stored) {
      parts.push(stored);
      total += stored.length;
    }
  }
  const buf = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    buf.set(p, at);
    at += p.length;
  }
  return { chunks: out, bytes: buf.buffer };
}

/** Posts one batch of chunks (see encodeBatch), once the one before was acknowledged. */
async function postBatch(job: HashJob, chunks: readonly SparseChunk[], waitPrev: () => Promise<void>): Promise<void> {
  if (chunks.length === 0) return;
  const b = encodeBatch(job, chunks);
  await waitPrev();
  post({ t: 'batch', id: job.id, ...b }, [b.bytes]);
}

/**
 * Reads into `buf` from file offset `position` until it is full or the file ends; returns the
 * bytes read. Synchronous: this thread is the reader (an asynchronous read would hand each
 * read to libuv's thread pool and back, two thread switches per read).
 */
function readFullySync(fd: number, buf: Buffer, position: number): number {
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got;
}

/** Reads, chunks and posts one job; resolves with its `done` message (and the buffer it transfers). */
async function runJob(job: HashJob): Promise<[HashWorkerOut, ArrayBuffer[]]> {
  let ackWait: Promise<void> = Promise.resolve();
  let first = true;
  const waitPrev = async (): Promise<void> => {
    if (!first) await ackWait;
    first = false;
    ackWait = new Promise<void>((r) => acks.set(job.id, r));
  };
  const send = (chunks: readonly SparseChunk[]): Promise<void> => postBatch(job, chunks, waitPrev);
  if (job.extents) {
    const c = await captureSparseFd(job.fd, job.size, job.extents, send);
    return [{ t: 'done', id: job.id, digest: c.digest, size: c.size, chunks: c.chunks, extents: c.extents }, []];
  }
  const also: Hash | undefined = job.gitAlgo ? createHash(job.gitAlgo).update(`blob ${job.size}\0`) : undefined;
  const limit = job.size + 1;
  const chunker = new Chunker();
  const whole = createHash('sha256');
  const buf = Buffer.allocUnsafe(Math.min(READ_SIZE, limit));
  const refs: ChunkRef[] = [];
  let pos = 0;
  // One read holds the whole file: its digest is then taken once at the end (none for a single chunk).
  const oneRead = limit <= buf.length;
  // One read: the chunks go with `done` in one message, which needs no acknowledgement.
  let held: SparseChunk[] = [];
  const take = async (chunks: Uint8Array[]): Promise<void> => {
    const batch = chunks.map((c) => ({ digest: sha256(c), data: c }));
    for (const b of batch) refs.push({ digest: b.digest, size: b.data.length });
    if (oneRead) held = held.concat(batch);
    else await send(batch);
  };
  while (pos < limit) {
    const want = Math.min(buf.length, limit - pos);
    const n = readFullySync(job.fd, want === buf.length ? buf : buf.subarray(0, want), pos);
    if (n === 0) break;
    const view = buf.subarray(0, n);
    if (!oneRead) whole.update(view);
    also?.update(view);
    pos += n;
    await take(chunker.push(view));
    if (n < want) break;
  }
  const last = chunker.finish();
  if (last) await take([last]);
  const digest = refs.length === 1 ? refs[0]!.digest : oneRead ? sha256(buf.subarray(0, pos)) : (`sha256:${whole.digest('hex')}` as const);
  const done = { t: 'done', id: job.id, digest, size: pos, chunks: refs, also: also?.digest('hex') } as const;
  if (held.length === 0) return [done, []];
  const b = encodeBatch(job, held);
  return [{ ...done, batch: b }, [b.bytes]];
}

port.on('message', (msgs: HashWorkerIn[]) => {
  for (const msg of msgs) handle(msg);
});

function handle(msg: HashWorkerIn): void {
  if (msg.t === 'ack') {
    const r = acks.get(msg.id);
    acks.delete(msg.id);
    r?.();
    return;
  }
  runJob(msg)
    .then(([done, transfer]) => post(done, transfer))
    .catch((err: unknown) => {
      const e = err as NodeJS.ErrnoException;
      post({ t: 'error', id: msg.id, message: String(e?.message ?? err), code: e?.code, errno: e?.errno, syscall: e?.syscall });
    })
    .finally(() => acks.delete(msg.id));
}
