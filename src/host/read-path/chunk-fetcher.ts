import { EventEmitter } from 'node:events';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { ChunkRef } from '../../core/tree.js';
import { BlobDecoder } from '../../store/pack/blob-decoder.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { DEFAULT_PACK_INDEX_BYTES } from '../../store/pack/pack-index-cache.js';
import type { BlobIndex, BlobLocation } from '../../store/pack/pack-types.js';
import { MERGE_GAP_BYTES, MERGE_MAX_BYTES, RangePlanner } from '../../store/pack/range-plan.js';
import type { ChunkCache } from './chunk-cache.js';
import {
  DEFAULT_READ_AHEAD_MIN_BYTES,
  ReadAhead,
  type Group,
  type ReadAheadEvents,
  type ReadAheadSource,
  type ReadAheadStats,
  type Want,
  type WantAt,
} from './read-ahead.js';
import { Semaphore } from '../../core/semaphore.js';
import { Singleflight } from './singleflight.js';

/** Payload of the `'backend-read'` event: one ranged read of a pack (offset and bytes in bytes). */
export interface BackendReadEvent {
  pack: string;
  offset: number;
  /** Bytes the store returned. */
  bytes: number;
  /** True for the single-blob re-read after a verification failure. */
  refetch: boolean;
  /** `'blobs'`: stored blobs (asked for, or read ahead); `'pack-index'`: the tail of a pack (its index and footer). */
  kind: 'blobs' | 'pack-index';
}

/** Payload of the `'fetch'` event: a chunk (raw size in bytes) fetched from the backend and verified. */
export interface FetchEvent {
  digest: Digest;
  bytes: number;
  /** True for a chunk read ahead (kept in memory, asked for by nobody yet). */
  readAhead?: boolean;
}

/** Payload of the `'join'` event: a caller shared a read already in flight. */
export interface JoinEvent {
  /** `'chunk'`: same chunk digest; `'range'`: same (pack, offset, length); `'window'`: a read-ahead window covering the chunk. */
  kind: 'chunk' | 'range' | 'window';
  key: string;
}

/** Payload of the `'refetch'`, `'integrity-error'` and `'read-ahead-drop'` events: a blob of a pack and what was wrong with it. */
export interface BlobErrorEvent {
  digest: Digest;
  pack: string;
  error: unknown;
}

/** Payload of the `'cache-error'` event: a verified chunk the cache could not write (it was still returned). */
export interface CacheErrorEvent {
  digest: Digest;
  error: unknown;
}

/** Payload of the `'pack-index-error'` event: a pack's index is unusable (no read-ahead there for a minute). */
export interface PackIndexErrorEvent {
  pack: string;
  error: unknown;
}

/** The events of a `ChunkFetcher` (typed `EventEmitter` map; payloads above). */
export type ChunkFetcherEvents = {
  'backend-read': [BackendReadEvent];
  fetch: [FetchEvent];
  join: [JoinEvent];
  refetch: [BlobErrorEvent];
  'integrity-error': [BlobErrorEvent];
  'cache-error': [CacheErrorEvent];
  'read-ahead-drop': [BlobErrorEvent];
  'pack-index-error': [PackIndexErrorEvent];
  /** A chunk whose pack the store no longer has is looked up again (gc repacked it). */
  relocate: [RelocateEvent];
};

/** Payload of the `'relocate'` event: the chunk and the pack the store no longer has. */
export interface RelocateEvent {
  digest: Digest;
  pack: string;
}

/** Counters of a `ChunkFetcher` (monotonic; the read-ahead's counters are in ReadAheadStats). */
export interface ChunkFetcherStats extends ReadAheadStats {
  /** Ranged reads issued to the store (refetches and pack-index reads included). */
  backendReads: number;
  /** Bytes returned by those reads. */
  backendBytes: number;
  /** Blobs that failed verification once and were read again on their own. */
  refetches: number;
  /** Blobs that failed verification twice (reported as E_INTEGRITY). */
  integrityErrors: number;
  /** Verified chunks that could not be written to the cache (still returned to the caller). */
  cacheErrors: number;
  /** Chunks looked up again because the store no longer had the pack they were located in. */
  relocations: number;
  /** Ranged reads of pack tails (pack indexes) for read-ahead (also in backendReads). */
  packIndexReads: number;
}

/** Options of a {@link ChunkFetcher}. */
export interface ChunkFetcherOptions {
  /** Where packs are read from (ranged GETs). */
  store: ObjectStore;
  /** The host chunk cache (opened). */
  cache: ChunkCache;
  /** Largest merged ranged read in bytes; default MERGE_MAX_BYTES (8 MiB). A single larger blob is still read whole. */
  maxMergeBytes?: number;
  /** Largest gap in bytes between two blobs of one merged read (read and discarded); default MERGE_GAP_BYTES (128 KiB). */
  maxGapBytes?: number;
  /** Most backend reads in flight at once; default 16. */
  maxConcurrentReads?: number;
  /**
   * Pack read-ahead (see ReadAhead): the largest window in bytes read from a pack on a miss,
   * the missing blobs first and the blobs after them up to this many bytes from the first;
   * those are decoded, verified and kept in the cache's memory tier. Default 0: off (a miss
   * reads only the blobs asked for).
   */
  readAheadBytes?: number;
  /**
   * The first window of a read stream in bytes; it doubles each time a reader goes on where
   * the last window ended, up to readAheadBytes. Default min(readAheadBytes, 512 KiB).
   */
  readAheadMinBytes?: number;
  /** Most bytes of pack indexes (read from pack tails for read-ahead) kept in memory; default 16 MiB. */
  packIndexBytes?: number;
}

/**
 * Fetches chunks for the host: from the {@link ChunkCache} when present, else from packs in
 * the object store, verified, and then cached.
 *
 * - Misses of every caller that arrive in the same event-loop turn are planned together
 *   (one `setImmediate`): their locations are resolved with batched index lookups (one per
 *   index, 1024 digests each), grouped by pack, sorted by offset, and neighbours (gap ≤
 *   maxGapBytes, span ≤ maxMergeBytes) merged into ONE ranged `store.get` (RangePlanner).
 * - Singleflight twice over: per chunk digest (a chunk being fetched for anyone is joined,
 *   across workspaces, snapshots and namespaces — bytes are verified by digest), and per
 *   (pack, offset, length) range. N concurrent callers asking for the same cold chunks cause
 *   one backend read per distinct range. At most maxConcurrentReads reads run at once.
 * - Every blob is decoded and verified (BlobDecoder). A blob that fails (or a short read) is
 *   read once more with its own ranged read; if that fails too the chunk's callers get
 *   E_INTEGRITY, and nothing is cached or returned for it.
 * - Fetched chunks are put in the cache in the background; they are returned to the callers
 *   whether or not the cache keeps them (a budget smaller than one request still works).
 *   New backend reads wait while the cache's write backlog is high (ChunkCache.writable).
 * - With readAheadBytes > 0, a miss reads a window of its pack (ReadAhead, see there).
 *   Read-ahead reads count as backend reads and bytes like any other.
 *
 * Returned Buffers are shared between the callers of one chunk: treat them as read-only.
 *
 * Events (ChunkFetcherEvents; never prints): `'backend-read'`, `'fetch'`, `'join'`,
 * `'refetch'`, `'integrity-error'`, `'cache-error'`, `'read-ahead-drop'`, `'pack-index-error'`
 * (read-ahead is off for that pack for a minute), `'relocate'` (a chunk's pack was gone from
 * the store, e.g. repacked and deleted by gc: the chunk is looked up in the index again, once).
 */
export class ChunkFetcher extends EventEmitter<ChunkFetcherEvents> {
  /** Counters (see ChunkFetcherStats); live. */
  readonly stats: ChunkFetcherStats = {
    backendReads: 0,
    backendBytes: 0,
    refetches: 0,
    integrityErrors: 0,
    cacheErrors: 0,
    packIndexReads: 0,
    readAheadWindows: 0,
    readAheadAsync: 0,
    readAheadChunks: 0,
    readAheadBytes: 0,
    readAheadDropped: 0,
    relocations: 0,
  };

  private readonly store: ObjectStore;
  private readonly cache: ChunkCache;
  private readonly planner: RangePlanner;
  private readonly decoder: BlobDecoder;
  private readonly reads: Semaphore;
  private readonly chunkFlights = new Singleflight<Digest, Buffer>();
  private readonly rangeFlights = new Singleflight<string, Buffer>();
  private queue: Want[] = [];
  private scheduled = false;
  /** Pack read-ahead, when on. */
  private readonly ahead: ReadAhead | undefined;
  /** The read-ahead's triggers (chunks whose first hit starts a window), empty when it is off. */
  private readonly triggers: Map<Digest, unknown>;

  /**
   * @throws E_USAGE for a non-positive maxMergeBytes / maxConcurrentReads, a negative
   *   maxGapBytes / readAheadBytes / packIndexBytes, or a readAheadMinBytes that is not positive.
   */
  constructor(opts: ChunkFetcherOptions) {
    super();
    this.store = opts.store;
    this.cache = opts.cache;
    const maxMerge = opts.maxMergeBytes ?? MERGE_MAX_BYTES;
    const maxGap = opts.maxGapBytes ?? MERGE_GAP_BYTES;
    const maxReads = opts.maxConcurrentReads ?? 16;
    const readAheadMax = opts.readAheadBytes ?? 0;
    const readAheadMin = Math.min(readAheadMax, opts.readAheadMinBytes ?? DEFAULT_READ_AHEAD_MIN_BYTES);
    const packIndexBytes = opts.packIndexBytes ?? DEFAULT_PACK_INDEX_BYTES;
    if (
      !(maxMerge > 0) ||
      !(maxGap >= 0) ||
      !(maxReads >= 1) ||
      !(readAheadMax >= 0) ||
      !(packIndexBytes >= 0) ||
      (readAheadMax > 0 && !(readAheadMin > 0))
    ) {
      throw new AwcError(
        'E_USAGE',
        `invalid ChunkFetcher options (maxMergeBytes ${maxMerge}, maxGapBytes ${maxGap}, maxConcurrentReads ${maxReads}, readAheadBytes ${readAheadMax}, readAheadMinBytes ${readAheadMin}, packIndexBytes ${packIndexBytes})`,
      );
    }
    this.planner = new RangePlanner({ maxMergeBytes: maxMerge, maxGapBytes: maxGap });
    this.reads = new Semaphore(maxReads);
    this.decoder = new BlobDecoder((pack, offset, length, refetch) => this.readRange(pack, offset, length, refetch), {
      refetch: (loc, error) => {
        this.stats.refetches++;
        this.emit('refetch', { digest: loc.digest, pack: loc.pack, error });
      },
      integrityError: (loc, error) => {
        this.stats.integrityErrors++;
        this.emit('integrity-error', { digest: loc.digest, pack: loc.pack, error });
      },
    });
    this.ahead =
      readAheadMax > 0
        ? new ReadAhead(this.readAheadSource(), { maxBytes: readAheadMax, minBytes: readAheadMin, packIndexBytes })
        : undefined;
    this.triggers = this.ahead?.triggers ?? new Map();
    this.chunkFlights.on('join', (key: string) => this.emit('join', { kind: 'chunk', key }));
    this.rangeFlights.on('join', (key: string) => this.emit('join', { kind: 'range', key }));
    // A read-ahead chunk is written to disk by the cache when first asked for: report failures here.
    this.cache.on('write-error', (e) => {
      this.stats.cacheErrors++;
      this.emit('cache-error', e);
    });
  }

  /** Callers that joined a chunk or range read (or a read-ahead window) already in flight. */
  get joins(): number {
    return this.chunkFlights.joins + this.rangeFlights.joins + (this.ahead?.windowJoins ?? 0);
  }

  /** Chunks being fetched right now. */
  get inFlight(): number {
    return this.chunkFlights.inFlight;
  }

  /** Bytes of pack indexes held in memory for read-ahead. */
  get packIndexMemory(): number {
    return this.ahead?.packIndexMemory ?? 0;
  }

  /**
   * Resolves once no chunk is being fetched, no read-ahead is in progress, and the cache has
   * finished writing what was fetched (for shutdown and tests); never rejects.
   */
  async idle(): Promise<void> {
    const ahead = this.ahead;
    while (this.queue.length > 0 || this.chunkFlights.inFlight > 0 || this.rangeFlights.inFlight > 0 || (ahead?.pending ?? 0) > 0) {
      if (this.queue.length > 0) await new Promise((r) => setImmediate(r));
      await this.chunkFlights.settled();
      await this.rangeFlights.settled();
      await ahead?.settled();
    }
    await this.cache.idle();
  }

  /** The chunk's bytes from the cache (verified), or undefined (also when its size differs from `ref.size`). Never touches the store. */
  getSync(ref: ChunkRef): Buffer | undefined {
    const b = this.cache.getSync(ref.digest);
    if (b !== undefined && this.triggers.size > 0) this.ahead!.trigger(ref.digest);
    return b !== undefined && b.length === ref.size ? b : undefined;
  }

  /**
   * Records that a chunk was served from elsewhere (the FUSE workers' arena) without reading
   * it: the cache's bookkeeping as for a hit (ChunkCache.markUsed), and the read-ahead
   * trigger it may be. Never touches the store.
   * @returns false when the cache no longer holds the chunk.
   */
  noteUse(ref: ChunkRef): boolean {
    const held = this.cache.markUsed(ref.digest);
    if (held && this.triggers.size > 0) this.ahead!.trigger(ref.digest);
    return held;
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

  /** This fetcher as its read-ahead sees it (ReadAheadSource). */
  private readAheadSource(): ReadAheadSource {
    return {
      cache: this.cache,
      planner: this.planner,
      stats: this.stats,
      emit: (event, ...args) => void this.emit<keyof ReadAheadEvents>(event, ...args),
      packSize: (pack) => this.store.size(pack),
      readRange: (pack, offset, length, kind) => this.readRange(pack, offset, length, false, kind),
      deliverBlob: (want, loc, span, spanStart) => this.deliverBlob(want, loc, span, spanStart),
      requeue: (want) => this.push(want),
    };
  }

  private async resolve(refs: readonly ChunkRef[], index: BlobIndex, checkCache: boolean): Promise<Buffer[]> {
    const out: Buffer[] = new Array(refs.length);
    const known = new Map<Digest, Buffer | Promise<Buffer>>();
    const waits: Promise<void>[] = [];
    for (let i = 0; i < refs.length; i++) {
      const ref = refs[i];
      let b = known.get(ref.digest);
      if (b === undefined) {
        const hit = checkCache ? this.cache.getSync(ref.digest) : undefined;
        if (hit !== undefined && this.triggers.size > 0) this.ahead!.trigger(ref.digest);
        b = hit ?? this.chunkFlights.do(ref.digest, () => this.enqueue(ref.digest, index));
        known.set(ref.digest, b);
      }
      if (b instanceof Promise) {
        waits.push(b.then((v) => void (out[i] = BlobDecoder.checkSize(v, ref))));
      } else if (b.length === ref.size) {
        out[i] = b;
      } else {
        waits.push(Promise.reject(BlobDecoder.sizeError(b, ref))); // rejected with the others, never unhandled
      }
    }
    if (waits.length > 0) await Promise.all(waits);
    return out;
  }

  /** Queues a missing chunk for the next plan (all misses of one event-loop turn are planned together). */
  private enqueue(digest: Digest, index: BlobIndex): Promise<Buffer> {
    return new Promise<Buffer>((resolve, reject) => this.push({ digest, index, resolve, reject }));
  }

  private push(want: Want): void {
    this.queue.push(want);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flushQueue());
    }
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
      const unknown: Digest[] = [];
      for (const w of wants) if (w.loc === undefined) unknown.push(w.digest);
      if (unknown.length > 0) await RangePlanner.locate(index, unknown, locs);
    } catch (err) {
      for (const w of wants) w.reject(err);
      return;
    }
    const byPack = new Map<string, WantAt[]>();
    for (const w of wants) {
      const loc = w.loc ?? locs.get(w.digest);
      if (!loc) {
        w.reject(new AwcError('E_OBJECT_NOT_FOUND', `chunk ${w.digest} is not in the index`, { details: { digest: w.digest } }));
        continue;
      }
      const want = w.relocated ? w : this.relocating(w, loc);
      const list = byPack.get(loc.pack);
      if (list) list.push({ loc, want });
      else byPack.set(loc.pack, [{ loc, want }]);
    }
    for (const [pack, items] of byPack) {
      items.sort((a, b) => a.loc.offset - b.loc.offset);
      if (this.ahead) this.ahead.plan(pack, items);
      else for (const g of this.planner.plan(items)) void this.readGroup(g);
    }
  }

  /**
   * `w`, whose reject looks the chunk up again once (docs/explanation/gc.md#readers-after-a-repack)
   * when the read failed because the store no longer has `loc`'s pack (E_OBJECT_NOT_FOUND: gc
   * repacked and deleted it after the location was found, or while read-ahead held it).
   */
  private relocating(w: Want, loc: BlobLocation): Want {
    return {
      ...w,
      reject: (err: unknown) => {
        if (!(err instanceof AwcError) || err.code !== 'E_OBJECT_NOT_FOUND') return w.reject(err);
        this.stats.relocations++;
        this.emit('relocate', { digest: w.digest, pack: loc.pack });
        this.push({ ...w, loc: undefined, relocated: true });
      },
    };
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
    this.deliverGroup(g, span);
  }

  /** Decodes, verifies and delivers the asked-for blobs of a group from its span (refetching a bad one alone). */
  private deliverGroup(g: Group, span: Buffer): void {
    for (const { loc, want } of g.items) this.deliverBlob(want, loc, span, g.start);
  }

  /** Decodes, verifies and delivers one blob from a span read from byte `spanStart` (refetched alone when bad). */
  private deliverBlob(want: Want, loc: BlobLocation, span: Buffer, spanStart: number): void {
    let raw: Buffer | Promise<Buffer>;
    try {
      raw = this.decoder.fromSpan(span, spanStart, loc);
    } catch (err) {
      want.reject(err);
      return;
    }
    if (raw instanceof Promise) raw.then((b) => this.deliver(want, b), want.reject);
    else this.deliver(want, raw);
  }

  /** Hands a verified chunk to its callers and puts it in the cache in the background. */
  private deliver(want: Want, raw: Buffer): void {
    this.emit('fetch', { digest: want.digest, bytes: raw.length });
    // The decoder has just verified `raw` against the digest: the cache need not hash it again.
    this.cache.put(want.digest, raw, { verified: true }).catch((error: unknown) => {
      this.stats.cacheErrors++;
      this.emit('cache-error', { digest: want.digest, error });
    });
    want.resolve(raw);
  }

  /** One ranged read, singleflighted per (pack, offset, length) — refetches in their own key space. */
  private readRange(
    pack: string,
    offset: number,
    length: number,
    refetch: boolean,
    kind: BackendReadEvent['kind'] = 'blobs',
  ): Promise<Buffer> {
    const key = `${refetch ? 'refetch:' : ''}${pack}@${offset}+${length}`;
    return this.rangeFlights.do(key, async () => {
      // Backpressure: do not fetch faster than the cache can write (memory stays bounded).
      const room = this.cache.writable();
      if (room) await room;
      await this.reads.acquire();
      try {
        const b = await this.store.get(pack, { offset, length });
        this.stats.backendReads++;
        this.stats.backendBytes += b.length;
        if (kind === 'pack-index') this.stats.packIndexReads++;
        this.emit('backend-read', { pack, offset, bytes: b.length, refetch, kind });
        return b;
      } finally {
        this.reads.release();
      }
    });
  }
}
