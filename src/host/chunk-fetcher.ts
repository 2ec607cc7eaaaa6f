import { EventEmitter } from 'node:events';
import type { Digest } from '../core/digest.js';
import { AwcError } from '../core/errors.js';
import type { ChunkRef } from '../core/tree.js';
import type { ObjectStore } from '../store/object-store.js';
import { decodeBlob } from '../store/pack.js';
import type { BlobIndex, BlobLocation } from '../store/pack-types.js';
import type { ChunkCache } from './chunk-cache.js';
import { Singleflight } from './singleflight.js';

/** Options of a {@link ChunkFetcher}. */
export interface ChunkFetcherOptions {
  /** Where packs are read from (ranged GETs). */
  store: ObjectStore;
  /** The host chunk cache (opened). */
  cache: ChunkCache;
  /** Largest merged ranged read in bytes; default 8 MiB. A single larger blob is still read whole. */
  maxMergeBytes?: number;
  /** Largest gap in bytes between two blobs of one merged read (read and discarded); default 128 KiB. */
  maxGapBytes?: number;
  /** Most backend reads in flight at once; default 16. */
  maxConcurrentReads?: number;
}

/** Payload of the `'backend-read'` event: one ranged read of a pack (offset and bytes in bytes). */
export interface BackendReadEvent {
  pack: string;
  offset: number;
  /** Bytes the store returned. */
  bytes: number;
  /** True for the single-blob re-read after a verification failure. */
  refetch: boolean;
}

/** Payload of the `'fetch'` event: a chunk (raw size in bytes) fetched from the backend and verified. */
export interface FetchEvent {
  digest: Digest;
  bytes: number;
}

/** Payload of the `'join'` event: a caller shared a read already in flight. */
export interface JoinEvent {
  /** `'chunk'`: same chunk digest; `'range'`: same (pack, offset, length). */
  kind: 'chunk' | 'range';
  key: string;
}

/** Counters of a {@link ChunkFetcher} (monotonic). */
export interface ChunkFetcherStats {
  /** Ranged reads issued to the store (refetches included). */
  backendReads: number;
  /** Bytes returned by those reads. */
  backendBytes: number;
  /** Blobs that failed verification once and were read again on their own. */
  refetches: number;
  /** Blobs that failed verification twice (reported as E_INTEGRITY). */
  integrityErrors: number;
  /** Verified chunks that could not be written to the cache (still returned to the caller). */
  cacheErrors: number;
}

/** Default largest merged read (8 MiB). */
export const DEFAULT_MAX_MERGE_BYTES = 8 * 1024 * 1024;
/** Default largest gap inside a merged read (128 KiB). */
export const DEFAULT_MAX_GAP_BYTES = 128 * 1024;
/** Digests per index lookup. */
const LOOKUP_BATCH = 1024;

/** A missing chunk waiting for the next plan. */
interface Want {
  digest: Digest;
  index: BlobIndex;
  resolve(b: Buffer): void;
  reject(e: unknown): void;
}

/** One planned ranged read: [start, end) of a pack and the blobs in it, by offset. */
interface Group {
  pack: string;
  start: number;
  end: number;
  items: { loc: BlobLocation; want: Want }[];
}

/**
 * Fetches chunks for the host: from the {@link ChunkCache} when present, else from packs in
 * the object store, verified, and then cached.
 *
 * - Misses of every caller that arrive in the same event-loop turn are planned together
 *   (one `setImmediate`): their locations are resolved with batched index lookups (one per
 *   index, 1024 digests each), grouped by pack, sorted by offset, and neighbours (gap ≤
 *   maxGapBytes, span ≤ maxMergeBytes) merged into ONE ranged `store.get`.
 * - Singleflight twice over: per chunk digest (a chunk being fetched for anyone is joined,
 *   across workspaces, snapshots and namespaces — bytes are verified by digest), and per
 *   (pack, offset, length) range. N concurrent callers asking for the same cold chunks cause
 *   one backend read per distinct range.
 * - Every blob is decoded and verified (decodeBlob). A blob that fails (or a short read) is
 *   read once more with its own ranged read; if that fails too the chunk's callers get
 *   E_INTEGRITY, and nothing is cached or returned for it.
 * - Fetched chunks are put in the cache in the background; they are returned to the callers
 *   whether or not the cache keeps them (a budget smaller than one request still works).
 *   New backend reads wait while the cache's write backlog is high (ChunkCache.writable).
 *
 * Returned Buffers are shared between the callers of one chunk (and may be views of one
 * ranged read): treat them as read-only.
 *
 * Events (never prints): `'backend-read'` (BackendReadEvent), `'fetch'` (FetchEvent), `'join'` (JoinEvent),
 * `'refetch'` ({digest, pack, error}), `'integrity-error'` ({digest, pack, error}),
 * `'cache-error'` ({digest, error}).
 */
export class ChunkFetcher extends EventEmitter {
  /** Counters (see ChunkFetcherStats); live. */
  readonly stats: ChunkFetcherStats = { backendReads: 0, backendBytes: 0, refetches: 0, integrityErrors: 0, cacheErrors: 0 };

  private readonly store: ObjectStore;
  private readonly cache: ChunkCache;
  private readonly maxMerge: number;
  private readonly maxGap: number;
  private readonly maxReads: number;
  private readonly chunkFlights = new Singleflight<Digest, Buffer>();
  private readonly rangeFlights = new Singleflight<string, Buffer>();
  private queue: Want[] = [];
  private scheduled = false;
  private reading = 0;
  private readonly readWaiters: (() => void)[] = [];

  /** @throws E_USAGE for a non-positive maxMergeBytes / maxConcurrentReads or a negative maxGapBytes. */
  constructor(opts: ChunkFetcherOptions) {
    super();
    this.store = opts.store;
    this.cache = opts.cache;
    this.maxMerge = opts.maxMergeBytes ?? DEFAULT_MAX_MERGE_BYTES;
    this.maxGap = opts.maxGapBytes ?? DEFAULT_MAX_GAP_BYTES;
    this.maxReads = opts.maxConcurrentReads ?? 16;
    if (!(this.maxMerge > 0) || !(this.maxGap >= 0) || !(this.maxReads >= 1)) {
      throw new AwcError('E_USAGE', `invalid ChunkFetcher options (maxMergeBytes ${this.maxMerge}, maxGapBytes ${this.maxGap}, maxConcurrentReads ${this.maxReads})`);
    }
    this.chunkFlights.on('join', (key: string) => this.emit('join', { kind: 'chunk', key } satisfies JoinEvent));
    this.rangeFlights.on('join', (key: string) => this.emit('join', { kind: 'range', key } satisfies JoinEvent));
  }

  /** Callers that joined a chunk or range read already in flight. */
  get joins(): number {
    return this.chunkFlights.joins + this.rangeFlights.joins;
  }

  /** Chunks being fetched right now. */
  get inFlight(): number {
    return this.chunkFlights.inFlight;
  }

  /**
   * Resolves once no chunk is being fetched and the cache has finished writing what was
   * fetched (for shutdown and tests); never rejects.
   */
  async idle(): Promise<void> {
    while (this.queue.length > 0 || this.chunkFlights.inFlight > 0 || this.rangeFlights.inFlight > 0) {
      if (this.queue.length > 0) await new Promise((r) => setImmediate(r));
      await this.chunkFlights.settled();
      await this.rangeFlights.settled();
    }
    await this.cache.idle();
  }

  /** The chunk's bytes from the cache (verified), or undefined (also when its size differs from `ref.size`). Never touches the store. */
  getSync(ref: ChunkRef): Buffer | undefined {
    const b = this.cache.getSync(ref.digest);
    return b !== undefined && b.length === ref.size ? b : undefined;
  }

  /**
   * The raw bytes of `refs`, one Buffer per ref, in order (each `ref.size` bytes, verified).
   * Cache hits are served from the cache; misses are located in `index` (the caller's
   * namespace) and fetched as described on the class.
   * @throws (rejects) E_OBJECT_NOT_FOUND when a chunk is not in the index (or its pack is
   *   missing); E_INTEGRITY when a chunk fails verification twice or its size differs from
   *   `ref.size`; store errors as the store reports them. Chunks that were fetched are cached
   *   even when the call as a whole fails.
   */
  get(refs: readonly ChunkRef[], index: BlobIndex): Promise<Buffer[]> {
    return this.resolve(refs, index, true);
  }

  /**
   * As {@link get}, for refs the caller has just found missing with {@link getSync} (in the
   * same synchronous run): skips the second cache lookup (and its second `'miss'`).
   * @throws as get.
   */
  fetch(refs: readonly ChunkRef[], index: BlobIndex): Promise<Buffer[]> {
    return this.resolve(refs, index, false);
  }

  // ---------------------------------------------------------------------------------------

  private async resolve(refs: readonly ChunkRef[], index: BlobIndex, checkCache: boolean): Promise<Buffer[]> {
    const out: Buffer[] = new Array(refs.length);
    const known = new Map<Digest, Buffer | Promise<Buffer>>();
    const waits: Promise<void>[] = [];
    for (let i = 0; i < refs.length; i++) {
      const ref = refs[i];
      let b = known.get(ref.digest);
      if (b === undefined) {
        b = (checkCache ? this.cache.getSync(ref.digest) : undefined) ?? this.chunkFlights.do(ref.digest, () => this.enqueue(ref.digest, index));
        known.set(ref.digest, b);
      }
      if (b instanceof Promise) {
        waits.push(b.then((v) => void (out[i] = checkSize(v, ref))));
      } else if (b.length === ref.size) {
        out[i] = b;
      } else {
        waits.push(Promise.reject(sizeError(b, ref))); // rejected with the others, never unhandled
      }
    }
    if (waits.length > 0) await Promise.all(waits);
    return out;
  }

  /** Queues a missing chunk for the next plan (all misses of one event-loop turn are planned together). */
  private enqueue(digest: Digest, index: BlobIndex): Promise<Buffer> {
    return new Promise<Buffer>((resolve, reject) => {
      this.queue.push({ digest, index, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flushQueue());
      }
    });
  }

  private flushQueue(): void {
    const q = this.queue;
    this.queue = [];
    this.scheduled = false;
    const byIndex = new Map<BlobIndex, Want[]>();
    for (const w of q) {
      const list = byIndex.get(w.index);
      if (list) list.push(w);
      else byIndex.set(w.index, [w]);
    }
    for (const [index, wants] of byIndex) void this.plan(index, wants);
  }

  /** Locates `wants` (distinct digests) in `index`, groups them into ranged reads and runs those. Never rejects. */
  private async plan(index: BlobIndex, wants: Want[]): Promise<void> {
    const locs = new Map<Digest, BlobLocation>();
    try {
      for (let i = 0; i < wants.length; i += LOOKUP_BATCH) {
        const found = await index.lookup(wants.slice(i, i + LOOKUP_BATCH).map((w) => w.digest));
        for (const [d, loc] of found) locs.set(d, loc);
      }
    } catch (err) {
      for (const w of wants) w.reject(err);
      return;
    }
    const byPack = new Map<string, { loc: BlobLocation; want: Want }[]>();
    for (const want of wants) {
      const loc = locs.get(want.digest);
      if (!loc) {
        want.reject(new AwcError('E_OBJECT_NOT_FOUND', `chunk ${want.digest} is not in the index`, { details: { digest: want.digest } }));
        continue;
      }
      const list = byPack.get(loc.pack);
      if (list) list.push({ loc, want });
      else byPack.set(loc.pack, [{ loc, want }]);
    }
    for (const [pack, items] of byPack) {
      items.sort((a, b) => a.loc.offset - b.loc.offset);
      let g: Group | undefined;
      for (const it of items) {
        const end = it.loc.offset + it.loc.storedLength;
        if (g && it.loc.offset - g.end <= this.maxGap && Math.max(g.end, end) - g.start <= this.maxMerge) {
          g.end = Math.max(g.end, end);
          g.items.push(it);
        } else {
          if (g) void this.readGroup(g);
          g = { pack, start: it.loc.offset, end, items: [it] };
        }
      }
      if (g) void this.readGroup(g);
    }
  }

  /** One ranged read for a group; each blob decoded, verified, refetched alone once if it fails. Never rejects. */
  private async readGroup(g: Group): Promise<void> {
    let span: Buffer;
    try {
      span = await this.readRange(g.pack, g.start, g.end - g.start, false);
    } catch (err) {
      for (const it of g.items) it.want.reject(err);
      return;
    }
    for (const { loc, want } of g.items) {
      const from = loc.offset - g.start;
      let raw: Buffer;
      try {
        raw = decodeBlob(span.subarray(from, from + loc.storedLength), loc);
      } catch (err) {
        if (!isBadBytes(err)) {
          want.reject(err);
          continue;
        }
        this.stats.refetches++;
        this.emit('refetch', { digest: loc.digest, pack: loc.pack, error: err });
        this.refetch(loc).then((b) => this.deliver(want, b), want.reject);
        continue;
      }
      this.deliver(want, raw);
    }
  }

  /** Reads one blob again on its own (never joining a first read). @throws E_INTEGRITY when it fails again. */
  private async refetch(loc: BlobLocation): Promise<Buffer> {
    const stored = await this.readRange(loc.pack, loc.offset, loc.storedLength, true);
    try {
      return decodeBlob(stored, loc);
    } catch (err) {
      if (!isBadBytes(err)) throw err;
      this.stats.integrityErrors++;
      this.emit('integrity-error', { digest: loc.digest, pack: loc.pack, error: err });
      throw new AwcError('E_INTEGRITY', `chunk ${loc.digest} in ${loc.pack} failed verification twice: ${(err as Error).message}`, {
        cause: err,
        details: { digest: loc.digest, pack: loc.pack, offset: loc.offset },
      });
    }
  }

  /** Hands a verified chunk to its callers and puts it in the cache in the background. */
  private deliver(want: Want, raw: Buffer): void {
    this.emit('fetch', { digest: want.digest, bytes: raw.length } satisfies FetchEvent);
    // decodeBlob has just verified `raw` against the digest: the cache need not hash it again.
    this.cache.put(want.digest, raw, { verified: true }).catch((error: unknown) => {
      this.stats.cacheErrors++;
      this.emit('cache-error', { digest: want.digest, error });
    });
    want.resolve(raw);
  }

  /** One ranged read, singleflighted per (pack, offset, length) — refetches in their own key space. */
  private readRange(pack: string, offset: number, length: number, refetch: boolean): Promise<Buffer> {
    const key = `${refetch ? 'refetch:' : ''}${pack}@${offset}+${length}`;
    return this.rangeFlights.do(key, async () => {
      // Backpressure: do not fetch faster than the cache can write (memory stays bounded).
      const room = this.cache.writable();
      if (room) await room;
      await this.acquire();
      try {
        const b = await this.store.get(pack, { offset, length });
        this.stats.backendReads++;
        this.stats.backendBytes += b.length;
        this.emit('backend-read', { pack, offset, bytes: b.length, refetch } satisfies BackendReadEvent);
        return b;
      } finally {
        this.release();
      }
    });
  }

  private acquire(): Promise<void> | void {
    if (this.reading < this.maxReads) {
      this.reading++;
      return;
    }
    return new Promise<void>((resolve) => this.readWaiters.push(resolve));
  }

  private release(): void {
    const next = this.readWaiters.shift();
    if (next) next(); // the slot passes to the next waiter
    else this.reading--;
  }
}

/** True for the errors worth one refetch: bytes that failed verification, or a short read. */
function isBadBytes(err: unknown): boolean {
  return err instanceof AwcError && (err.code === 'E_INTEGRITY' || err.code === 'E_FORMAT');
}

function sizeError(b: Buffer, ref: ChunkRef): AwcError {
  return new AwcError('E_INTEGRITY', `chunk ${ref.digest} has ${b.length} bytes, the file lists ${ref.size}`, { details: { digest: ref.digest } });
}

function checkSize(b: Buffer, ref: ChunkRef): Buffer {
  if (b.length !== ref.size) throw sizeError(b, ref);
  return b;
}
