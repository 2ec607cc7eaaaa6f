/**
 * The hash workers of a ContentWriter: worker threads (hash-worker.ts) that read, chunk, hash
 * and lz4-encode files, so that an import works on every core while the main thread walks the
 * tree, looks chunks up in the index and fills packs (docs/explanation/performance.md#import).
 *
 * A job names a file by its descriptor number (descriptors are process-wide): the caller
 * opened it and keeps it open until the job settled, then closes it; the worker never closes
 * it. Each job posts its chunks in batches (one transferred ArrayBuffer per batch, no copy);
 * the pool hands each batch to the job's `onBatch` and acknowledges it once that resolved,
 * and a worker posts a job's next batch only after that acknowledgement: at most two batches
 * of ≤ 4 MiB of data (stored form) per job are held, and the caller bounds the jobs.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { Extent } from '../../core/sparse.js';
import type { ChunkRef } from '../../core/tree.js';
import type { Codec } from '../pack/pack-types.js';

/**
 * What a job returns in its batches: `none` no bytes (a dry run that keeps nothing), `raw` each
 * chunk's raw bytes (codec `none`), `compress` each chunk's stored bytes for a pack (lz4 when it pays).
 */
export type HashMode = 'none' | 'raw' | 'compress';

/** A job sent to a worker: read the file open at `fd` (dense up to `size`+1 bytes, or by `extents`). */
export interface HashJob {
  t: 'job';
  id: number;
  fd: number;
  /** Size in bytes at the fstat before the read. */
  size: number;
  /** Recorded data extents of a sparse file (only those are read), else absent. */
  extents?: Extent[];
  /** Also compute git's blob id with this algorithm (`sha1`, `sha256`); dense files only. */
  gitAlgo?: string;
  mode: HashMode;
}

/** One chunk of a batch: its digest and raw size, its codec, and where its stored bytes are in the batch's buffer (bytes; length 0 in mode `none`). */
export interface HashBatchChunk {
  digest: Digest;
  size: number;
  codec: Codec;
  offset: number;
  length: number;
}

/** Messages to a worker (posted in arrays: what one turn of the event loop queued, one postMessage). */
export type HashWorkerIn = HashJob | { t: 'ack'; id: number };

/** Messages from a worker (posted in arrays, as HashWorkerIn): a batch, the end of a job (its content), or its failure (the errno fields of the error). */
export type HashWorkerOut =
  | { t: 'batch'; id: number; chunks: HashBatchChunk[]; bytes: ArrayBuffer }
  | {
      t: 'done';
      id: number;
      digest: Digest;
      size: number;
      chunks: ChunkRef[];
      extents?: Extent[];
      also?: string;
      /** The job's only batch (a file read in one read), handed over with its end: no acknowledgement. */
      batch?: { chunks: HashBatchChunk[]; bytes: ArrayBuffer };
    }
  | { t: 'error'; id: number; message: string; code?: string; errno?: number; syscall?: string };

/** A chunk handed to `onBatch`: digest, raw size (bytes), codec and stored bytes (a view of the batch's buffer; empty in mode `none`). */
export interface HashedChunk {
  digest: Digest;
  size: number;
  codec: Codec;
  stored: Uint8Array;
}

/** What a job read: the content's digest (sha256, or the sparse digest), the bytes read, its chunks, extents, and git's blob id (hex) when asked. */
export interface HashResult {
  digest: Digest;
  size: number;
  chunks: ChunkRef[];
  extents?: Extent[];
  also?: string;
}

/** Default number of hash workers: the cores Node may use (os.availableParallelism()). */
export const DEFAULT_HASH_WORKERS = availableParallelism();
/** A pool with no job for this long (ms) stops its workers (they start again on the next job). */
const IDLE_STOP_MS = 2000;

interface Pending {
  worker: number;
  onBatch: (chunks: HashedChunk[]) => Promise<void>;
  /** Batches are handled in order, one at a time. */
  chain: Promise<void>;
  /** The first failure of `onBatch` (the job fails with it once the worker is done). */
  error?: unknown;
  resolve: (r: HashResult) => void;
  reject: (err: unknown) => void;
}

/** A set of hash worker threads, started on the first job and stopped when idle or closed. */
export class HashPool {
  private workers: Worker[] = [];
  private load: number[] = [];
  private readonly jobs = new Map<number, Pending>();
  private nextId = 1;
  private idle: NodeJS.Timeout | undefined;
  /** Per worker: messages queued in this turn, posted together at its end (a postMessage wakes a thread: tens of µs each). */
  private outbox: HashWorkerIn[][] = [];
  private flushQueued = false;

  /** @param size worker threads (≥ 1) */
  constructor(private readonly size: number) {}

  /**
   * Runs one job on the least busy worker. `onBatch` is called with each batch of chunks in
   * file order (never two at once); its rejection fails the job.
   * @returns the content read. @throws the read's error as Node reports it (errno `code`;
   *   the caller maps it), or E_INTERNAL when a worker died.
   */
  run(job: Omit<HashJob, 't' | 'id'>, onBatch: (chunks: HashedChunk[]) => Promise<void>): Promise<HashResult> {
    if (this.workers.length === 0) this.start();
    clearTimeout(this.idle);
    let w = 0;
    for (let i = 1; i < this.load.length; i++) if (this.load[i]! < this.load[w]!) w = i;
    const id = this.nextId++;
    if (this.load[w]!++ === 0) this.workers[w]!.ref();
    return new Promise<HashResult>((resolve, reject) => {
      this.jobs.set(id, { worker: w, onBatch, chain: Promise.resolve(), resolve, reject });
      this.send(w, { t: 'job', id, ...job });
    });
  }

  /** Stops the workers now (a later job starts them again). */
  async close(): Promise<void> {
    clearTimeout(this.idle);
    const ws = this.workers;
    this.workers = [];
    this.load = [];
    this.outbox = [];
    for (const [, p] of this.jobs) p.reject(new AwcError('E_INTERNAL', 'hash pool closed while a file was read'));
    this.jobs.clear();
    await Promise.all(ws.map((w) => w.terminate()));
  }

  /** Queues a message to worker `w`; the queue goes out at the end of this turn. */
  private send(w: number, msg: HashWorkerIn): void {
    if (w < 0 || !this.outbox[w]) return;
    this.outbox[w]!.push(msg);
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(() => {
      this.flushQueued = false;
      this.outbox.forEach((q, i) => {
        if (q.length === 0) return;
        this.outbox[i] = [];
        this.workers[i]?.postMessage(q);
      });
    });
  }

  private start(): void {
    const url = new URL('./hash-worker.js', import.meta.url);
    for (let i = 0; i < Math.max(1, this.size); i++) {
      const w = new Worker(url, { name: `awc-hash-${i}` });
      w.unref(); // referenced only while it has jobs
      w.on('message', (ms: HashWorkerOut[]) => {
        for (const m of ms) this.onMessage(w, m);
      });
      w.on('error', (err) => this.fail(w, err));
      w.on('exit', (code) => this.fail(w, new AwcError('E_INTERNAL', `hash worker exited (${code})`)));
      this.workers.push(w);
      this.load.push(0);
      this.outbox.push([]);
    }
  }

  private onMessage(w: Worker, m: HashWorkerOut): void {
    const p = this.jobs.get(m.id);
    if (!p) return;
    if (m.t === 'batch' || (m.t === 'done' && m.batch)) {
      const b = m.t === 'batch' ? m : m.batch!;
      const chunks = b.chunks.map((c) => ({
        digest: c.digest,
        size: c.size,
        codec: c.codec,
        stored: new Uint8Array(b.bytes, c.offset, c.length),
      }));
      // After a failed batch the rest are acknowledged unread: the job ends (and the caller may close its descriptor) only once the worker is done with it.
      p.chain = p.chain
        .then(() => (p.error === undefined ? p.onBatch(chunks) : undefined))
        .catch((err: unknown) => {
          p.error ??= err;
        });
      if (m.t === 'batch') {
        const i = this.workers.indexOf(w);
        p.chain = p.chain.then(() => this.send(i, { t: 'ack', id: m.id }));
        return;
      }
    }
    void p.chain.then(() => {
      if (!this.finished(m.id, p)) return;
      if (m.t === 'error') p.reject(errnoError(m));
      else if (p.error !== undefined) p.reject(p.error);
      else p.resolve(m);
    });
  }

  /** Forgets a settled job; false when it was already failed (its worker died, or the pool closed). */
  private finished(id: number, p: Pending): boolean {
    if (!this.jobs.delete(id)) return false;
    const w = p.worker;
    if (--this.load[w]! === 0) this.workers[w]?.unref();
    if (this.jobs.size === 0) {
      this.idle = setTimeout(() => void this.close(), IDLE_STOP_MS);
      this.idle.unref();
    }
    return true;
  }

  /** A worker failed: its jobs fail with E_INTERNAL, and the pool starts afresh on the next job. */
  private fail(w: Worker, err: unknown): void {
    const i = this.workers.indexOf(w);
    if (i < 0) return;
    for (const [id, p] of this.jobs) {
      if (p.worker !== i) continue;
      this.jobs.delete(id);
      p.reject(err instanceof AwcError ? err : new AwcError('E_INTERNAL', `hash worker failed: ${String(err)}`, { cause: err }));
    }
    void this.close();
  }
}

/** The worker's error as an Error carrying its errno fields (so toAwcError maps it as the read's own error). */
function errnoError(m: { message: string; code?: string; errno?: number; syscall?: string }): Error {
  const e = new Error(m.message) as NodeJS.ErrnoException;
  if (m.code !== undefined) e.code = m.code;
  if (m.errno !== undefined) e.errno = m.errno;
  if (m.syscall !== undefined) e.syscall = m.syscall;
  return e;
}
