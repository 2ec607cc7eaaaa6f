/**
 * Worker threads that chunk and hash file contents for ContentWriter (issue 26: an import
 * uses every core). The main thread reads a file in windows and posts each window to one
 * worker (a SharedArrayBuffer: neither copied nor transferred, which costs the main thread a
 * GC of external memory per window); the worker (./chunk-worker.ts) cuts it with FastCDC,
 * hashes every chunk and the whole content with SHA-256 and answers with the chunk lengths
 * and digests. Dedup lookups, compression (libuv's pool)
 * and pack appends stay with the writer on the main thread. The results are the ones the
 * writer computes inline (same cut points: FastCDC's cuts do not depend on how the input is
 * split), so digests, chunks and trees do not depend on the pool.
 *
 * A file is one session, fed in order to one worker. Bytes in flight are the writer's
 * windows (its files in flight × 2 windows of READ_SIZE). A worker that dies fails the
 * sessions it held with E_INTERNAL (never a hang) and is replaced for later sessions.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';

/** A window posted to a worker: session `sid`, its first `len` bytes of `buf` (shared), `final` for the file's last window. */
export interface ChunkRequest {
  id: number;
  sid: number;
  buf: SharedArrayBuffer;
  len: number;
  final: boolean;
}

/** The chunks this window completed (lengths in bytes, digests), and with `final` the whole content's digest. */
export interface ChunkReply {
  id: number;
  lens: number[];
  digests: Digest[];
  whole?: Digest;
}

/** A window the worker could not process (`error`: its message). */
export interface ChunkFailure {
  id: number;
  error: string;
}

/** What a window gave: the chunks it completed (lengths in bytes, digests) and, for the last, the whole content's digest. */
export interface ChunkResult {
  lens: number[];
  digests: Digest[];
  whole?: Digest;
}

interface Pending {
  resolve(r: ChunkResult): void;
  reject(err: unknown): void;
}

/** One worker thread and its requests in flight. */
class PoolWorker {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  dead: AwcError | undefined;

  constructor(name: string, onDead: (w: PoolWorker) => void) {
    this.worker = new Worker(new URL('./chunk-worker.js', import.meta.url), { name });
    this.worker.unref(); // referenced only while requests are in flight
    this.worker.on('message', (m: ChunkReply | ChunkFailure) => this.settle(m));
    const die = (why: string): void => {
      if (this.dead) return;
      this.dead = new AwcError('E_INTERNAL', `a chunking worker thread died: ${why}`);
      onDead(this);
      for (const p of this.pending.values()) p.reject(this.dead);
      this.pending.clear();
    };
    this.worker.on('error', (err) => die(err.message));
    this.worker.on('exit', (code) => die(`exit code ${code}`));
  }

  post(req: ChunkRequest): Promise<ChunkResult> {
    if (this.dead) return Promise.reject(this.dead);
    return new Promise<ChunkResult>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(req.id, { resolve, reject });
      this.worker.postMessage(req);
    });
  }

  private settle(m: ChunkReply | ChunkFailure): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (this.pending.size === 0) this.worker.unref();
    if ('error' in m) p.reject(new AwcError('E_INTERNAL', `chunking failed in a worker thread: ${m.error}`));
    else p.resolve({ lens: m.lens, digests: m.digests, whole: m.whole });
  }
}

/** A fixed number of chunking workers, started on first use. */
export class ChunkPool {
  private readonly workers: (PoolWorker | undefined)[];
  private nextId = 1;
  private nextSid = 1;
  private turn = 0;

  /** @param size worker threads (≥ 1) */
  constructor(readonly size: number) {
    this.workers = new Array<PoolWorker | undefined>(Math.max(1, size)).fill(undefined);
  }

  /**
   * The process's shared pool: one worker per core beyond the first (os.availableParallelism() − 1,
   * or AWC_CHUNK_WORKERS), undefined when that is 0 (the writer then chunks inline).
   */
  static shared(): ChunkPool | undefined {
    if (sharedPool === undefined) {
      const env = process.env.AWC_CHUNK_WORKERS;
      const n = env !== undefined && /^\d+$/.test(env) ? Number(env) : availableParallelism() - 1;
      sharedPool = n > 0 ? new ChunkPool(n) : null;
    }
    return sharedPool ?? undefined;
  }

  /** A new session (one file's windows, in order) on the next worker in turn. */
  session(): ChunkSession {
    const i = this.turn++ % this.workers.length;
    let w = this.workers[i];
    if (!w || w.dead) {
      w = new PoolWorker(`awc-chunker-${i}`, (dead) => {
        if (this.workers[i] === dead) this.workers[i] = undefined;
      });
      this.workers[i] = w;
    }
    return new ChunkSession(w, this.nextSid++, () => this.nextId++);
  }

  /** Stops the workers (tests; a process exits with them unreferenced). */
  async close(): Promise<void> {
    const ws = this.workers.filter((w): w is PoolWorker => w !== undefined);
    this.workers.fill(undefined);
    await Promise.all(ws.map((w) => w.worker.terminate()));
  }

  /** Test hook: the worker threads started so far. */
  threads(): Worker[] {
    return this.workers.filter((w): w is PoolWorker => w !== undefined).map((w) => w.worker);
  }
}

let sharedPool: ChunkPool | null | undefined;

/** A window of `bytes` bytes that a ChunkSession can post: a Buffer over a new SharedArrayBuffer. */
export function newWindow(bytes: number): Buffer {
  return Buffer.from(new SharedArrayBuffer(bytes));
}

/** One file's windows on one worker, posted in order; `abort` drops an unfinished one. */
export class ChunkSession {
  private done = false;

  constructor(
    private readonly w: PoolWorker,
    private readonly sid: number,
    private readonly id: () => number,
  ) {}

  /**
   * Posts the first `len` bytes of `buf`, a Buffer over a whole SharedArrayBuffer (see
   * newWindow); do not modify them until this resolved.
   * @throws E_INTERNAL when the worker failed or died, or `buf` is not shared
   */
  push(buf: Buffer, len: number, final: boolean): Promise<ChunkResult> {
    if (!(buf.buffer instanceof SharedArrayBuffer) || buf.byteOffset !== 0)
      throw new AwcError('E_INTERNAL', 'ChunkSession.push: the window must be a whole SharedArrayBuffer');
    if (final) this.done = true;
    return this.w.post({ id: this.id(), sid: this.sid, buf: buf.buffer, len, final });
  }

  /** Drops the session in its worker when it did not end with a final push. */
  abort(): void {
    if (this.done || this.w.dead) return;
    this.done = true;
    this.w.worker.postMessage({ abort: this.sid });
  }
}
