import { EventEmitter } from 'node:events';
import type { Digest } from '../core/digest.js';
import { AwcError } from '../core/errors.js';
import type { ChunkRef } from '../core/tree.js';
import type { ObjectStore } from '../store/object-store.js';
import { decodeBlob, PACK_FOOTER_SIZE, parsePackFooter, parsePackIndex } from '../store/pack.js';
import type { BlobIndex, BlobLocation, PackIndexEntry } from '../store/pack-types.js';
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
  /**
   * Pack read-ahead (see class doc): the largest window in bytes read from a pack on a miss,
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

/** Counters of a {@link ChunkFetcher} (monotonic). */
export interface ChunkFetcherStats {
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
  /** Ranged reads of pack tails (pack indexes) for read-ahead (also in backendReads). */
  packIndexReads: number;
  /** Reads that went on past the blobs asked for (read-ahead windows). */
  readAheadWindows: number;
  /** Of those, windows read in the background, before any miss, for a reader half way through the previous one. */
  readAheadAsync: number;
  /** Chunks read ahead: decoded, verified and kept in memory before anyone asked for them. */
  readAheadChunks: number;
  /** Raw bytes of those chunks. */
  readAheadBytes: number;
  /** Read-ahead chunks that failed verification: dropped, never served (a request refetches them). */
  readAheadDropped: number;
}

/** Default largest merged read (8 MiB). */
export const DEFAULT_MAX_MERGE_BYTES = 8 * 1024 * 1024;
/** Default largest gap inside a merged read (128 KiB). */
export const DEFAULT_MAX_GAP_BYTES = 128 * 1024;
/** Default first read-ahead window of a stream (512 KiB; never more than readAheadBytes). */
export const DEFAULT_READ_AHEAD_MIN_BYTES = 512 * 1024;
/** Default memory for pack indexes (16 MiB). */
export const DEFAULT_PACK_INDEX_BYTES = 16 * 1024 * 1024;
/** Digests per index lookup. */
const LOOKUP_BATCH = 1024;
/**
 * First guess of a pack's tail length (index + footer) in bytes: 1/64 of the pack (an index
 * entry per 3.3 KiB of pack), at least 64 KiB (1 260 entries), at most 1 MiB; a longer index
 * takes a second read.
 */
function tailGuess(packSize: number): number {
  return Math.min(packSize, Math.max(64 * 1024, Math.min(1024 * 1024, Math.ceil(packSize / 64))));
}
/** A pack index that could not be read is tried again after this many ms. */
const PACK_INDEX_RETRY_MS = 60_000;
/** Read streams remembered per pack. */
const STREAMS_PER_PACK = 8;
/** Pack states kept (most of them hold no index). */
const MAX_PACK_STATES = 4096;
/** Read-ahead triggers remembered (chunks whose first hit starts the next window). */
const MAX_TRIGGERS = 1024;
/** Kind code of a chunk in a pack index (pack format v1). */
const KIND_CHUNK = 1;
/**
 * Stored bytes of read-ahead chunks decoded and verified per event-loop turn (256 KiB, about
 * 0.5 ms): a window of 8 MiB is kept in slices, so requests arriving meanwhile are answered
 * between slices instead of waiting ~15 ms behind the whole window.
 */
const KEEP_SLICE_BYTES = 256 * 1024;
/**
 * At most this long (ms) after a window's bytes are here, requests past its middle wait for
 * the next window to be arranged (the pack's index read); then they are served regardless.
 */
const PLAN_WAIT_MS = 1000;

/** A missing chunk waiting for the next plan (`loc` when already located). */
interface Want {
  digest: Digest;
  index: BlobIndex;
  loc?: BlobLocation;
  resolve(b: Buffer): void;
  reject(e: unknown): void;
}

/** One planned ranged read: [start, end) of a pack and the blobs asked for in it, by offset. */
interface Group {
  pack: string;
  start: number;
  end: number;
  items: { loc: BlobLocation; want: Want }[];
}

/** A pack's index in compact form (pack format v1 order: by offset). */
interface PackIndexInfo {
  count: number;
  offsets: Float64Array;
  stored: Uint32Array;
  raw: Uint32Array;
  kinds: Uint8Array;
  /** 0 none, 1 lz4. */
  codecs: Uint8Array;
  /** 32 bytes per entry. */
  digests: Buffer;
  /** Approximate memory held, in bytes. */
  bytes: number;
}

/** A read of a pack in flight with read-ahead: requests for blobs inside wait for it. */
interface Window {
  start: number;
  /** End of the bytes read; cut back to the window's last whole blob once the pack's index is known. */
  end: number;
  /** Settles once the bytes are here, with them (`span` set), or with undefined when the read failed. */
  arrived: Promise<Buffer | undefined>;
  /** The bytes read, while the window's chunks are being kept (then the window is gone). */
  span?: Buffer;
  /**
   * True once the read of the next window is arranged (its trigger registered) or known not
   * to be wanted; `whenPlanned` settles then. Readers past the window's middle wait for it, so
   * that the reader who gets there first always starts the next window in the background.
   */
  planned: boolean;
  whenPlanned: Promise<void>;
  /** Settles once the window is gone (no longer in its pack's `windows`). */
  gone: Promise<void>;
}

/** What the fetcher knows about one pack (for read-ahead). */
interface PackState {
  /** undefined: not read yet; null: unusable until retryAt (no read-ahead there meanwhile). */
  index?: PackIndexInfo | null;
  retryAt: number;
  loading?: Promise<PackIndexInfo | null>;
  /** Where recent windows ended (`next`) and how big the next window of that stream is. */
  streams: { next: number; size: number }[];
  /** Windows being read. */
  windows: Window[];
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
 * Read-ahead (readAheadBytes > 0): files snapshotted together sit together in packs, so a
 * miss reads a window of the pack: the blobs asked for, then the following blobs, whole, up
 * to the window size from the first one (asked-for blobs up to readAheadBytes apart share a
 * window too). The window of a read stream starts at readAheadMinBytes and doubles each time a
 * reader goes on where the last window ended (a miss at, or within maxGapBytes after, its
 * end), up to readAheadBytes; another miss starts a new stream. Blob boundaries come from
 * the pack's own index, read once per pack from its tail (`store.size`, then one ranged read
 * of the tail, rarely two) and kept in memory (packIndexBytes, least recently used packs
 * out); the first window of a pack is read before its index is known, and a window that
 * reaches the end of the pack brings the index along (no tail read). The blobs asked for are
 * delivered first; then every chunk of the window that is not already held is decoded,
 * verified against its digest and kept in the cache's memory tier (ChunkCache.remember),
 * where a later miss finds it synchronously; the cache writes it to disk once it is asked
 * for. That keeping is done in slices of 256 KiB per event-loop turn, so requests arriving
 * meanwhile are not stuck behind a whole 8 MiB window. A read-ahead chunk that fails
 * verification is dropped (`'read-ahead-drop'`), never served: a request for it reads it
 * again on its own, with the usual refetch. A request for a blob inside a window being read
 * waits for the window's bytes and is then decoded from them at once (`'join'`, kind
 * `'window'`), whether or not the slices have reached it yet. A
 * window stops before blobs another window is reading, and before a run of more than
 * maxGapBytes of chunks already held. The first hit on the chunk half way through a window
 * starts the stream's next window in the background (asynchronous read-ahead), so that a
 * reader going through the pack in order does not wait for it. Read-ahead reads count as backend reads and bytes like
 * any other. The pack index is only used to find blob boundaries and digests: a wrong one
 * costs wasted bytes, never wrong bytes (every kept chunk matches its digest).
 *
 * Returned Buffers are shared between the callers of one chunk: treat them as read-only.
 *
 * Events (never prints): `'backend-read'` (BackendReadEvent), `'fetch'` (FetchEvent), `'join'` (JoinEvent),
 * `'refetch'` ({digest, pack, error}), `'integrity-error'` ({digest, pack, error}),
 * `'cache-error'` ({digest, error}), `'read-ahead-drop'` ({digest, pack, error}),
 * `'pack-index-error'` ({pack, error}: read-ahead is off for that pack for a minute).
 */
export class ChunkFetcher extends EventEmitter {
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
  };

  private readonly store: ObjectStore;
  private readonly cache: ChunkCache;
  private readonly maxMerge: number;
  private readonly maxGap: number;
  private readonly maxReads: number;
  private readonly readAheadMax: number;
  private readonly readAheadMin: number;
  private readonly packIndexBytes: number;
  private readonly chunkFlights = new Singleflight<Digest, Buffer>();
  private readonly rangeFlights = new Singleflight<string, Buffer>();
  private queue: Want[] = [];
  private scheduled = false;
  private reading = 0;
  private readonly readWaiters: (() => void)[] = [];
  /** Read-ahead state per pack, least recently used first. */
  private readonly packs = new Map<string, PackState>();
  /** Chunks half way through a read-ahead window → where the stream's next window starts (see trigger). */
  private readonly triggers = new Map<Digest, { pack: string; at: number }>();
  private packIndexUsed = 0;
  private windowJoins = 0;
  /** Read-ahead work in flight (windows, index loads), for idle(). */
  private readonly background = new Set<Promise<unknown>>();

  /**
   * @throws E_USAGE for a non-positive maxMergeBytes / maxConcurrentReads, a negative
   *   maxGapBytes / readAheadBytes / packIndexBytes, or a readAheadMinBytes that is not positive.
   */
  constructor(opts: ChunkFetcherOptions) {
    super();
    this.store = opts.store;
    this.cache = opts.cache;
    this.maxMerge = opts.maxMergeBytes ?? DEFAULT_MAX_MERGE_BYTES;
    this.maxGap = opts.maxGapBytes ?? DEFAULT_MAX_GAP_BYTES;
    this.maxReads = opts.maxConcurrentReads ?? 16;
    this.readAheadMax = opts.readAheadBytes ?? 0;
    this.readAheadMin = Math.min(this.readAheadMax, opts.readAheadMinBytes ?? DEFAULT_READ_AHEAD_MIN_BYTES);
    this.packIndexBytes = opts.packIndexBytes ?? DEFAULT_PACK_INDEX_BYTES;
    if (
      !(this.maxMerge > 0) ||
      !(this.maxGap >= 0) ||
      !(this.maxReads >= 1) ||
      !(this.readAheadMax >= 0) ||
      !(this.packIndexBytes >= 0) ||
      (this.readAheadMax > 0 && !(this.readAheadMin > 0))
    ) {
      throw new AwcError(
        'E_USAGE',
        `invalid ChunkFetcher options (maxMergeBytes ${this.maxMerge}, maxGapBytes ${this.maxGap}, maxConcurrentReads ${this.maxReads}, readAheadBytes ${this.readAheadMax}, readAheadMinBytes ${this.readAheadMin}, packIndexBytes ${this.packIndexBytes})`,
      );
    }
    this.chunkFlights.on('join', (key: string) => this.emit('join', { kind: 'chunk', key } satisfies JoinEvent));
    this.rangeFlights.on('join', (key: string) => this.emit('join', { kind: 'range', key } satisfies JoinEvent));
    // A read-ahead chunk is written to disk by the cache when first asked for: report failures here.
    this.cache.on('write-error', (e: { digest: Digest; error: unknown }) => {
      this.stats.cacheErrors++;
      this.emit('cache-error', e);
    });
  }

  /** Callers that joined a chunk or range read (or a read-ahead window) already in flight. */
  get joins(): number {
    return this.chunkFlights.joins + this.rangeFlights.joins + this.windowJoins;
  }

  /** Chunks being fetched right now. */
  get inFlight(): number {
    return this.chunkFlights.inFlight;
  }

  /** Bytes of pack indexes held in memory for read-ahead. */
  get packIndexMemory(): number {
    return this.packIndexUsed;
  }

  /**
   * Resolves once no chunk is being fetched, no read-ahead is in progress, and the cache has
   * finished writing what was fetched (for shutdown and tests); never rejects.
   */
  async idle(): Promise<void> {
    while (this.queue.length > 0 || this.chunkFlights.inFlight > 0 || this.rangeFlights.inFlight > 0 || this.background.size > 0) {
      if (this.queue.length > 0) await new Promise((r) => setImmediate(r));
      await this.chunkFlights.settled();
      await this.rangeFlights.settled();
      if (this.background.size > 0) await Promise.allSettled([...this.background]);
    }
    await this.cache.idle();
  }

  /** The chunk's bytes from the cache (verified), or undefined (also when its size differs from `ref.size`). Never touches the store. */
  getSync(ref: ChunkRef): Buffer | undefined {
    const b = this.cache.getSync(ref.digest);
    if (b !== undefined && this.triggers.size > 0) this.trigger(ref.digest);
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
    if (held && this.triggers.size > 0) this.trigger(ref.digest);
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

  private async resolve(refs: readonly ChunkRef[], index: BlobIndex, checkCache: boolean): Promise<Buffer[]> {
    const out: Buffer[] = new Array(refs.length);
    const known = new Map<Digest, Buffer | Promise<Buffer>>();
    const waits: Promise<void>[] = [];
    for (let i = 0; i < refs.length; i++) {
      const ref = refs[i];
      let b = known.get(ref.digest);
      if (b === undefined) {
        const hit = checkCache ? this.cache.getSync(ref.digest) : undefined;
        if (hit !== undefined && this.triggers.size > 0) this.trigger(ref.digest);
        b = hit ?? this.chunkFlights.do(ref.digest, () => this.enqueue(ref.digest, index));
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
      const unknown = wants.filter((w) => w.loc === undefined);
      for (let i = 0; i < unknown.length; i += LOOKUP_BATCH) {
        const found = await index.lookup(unknown.slice(i, i + LOOKUP_BATCH).map((w) => w.digest));
        for (const [d, loc] of found) locs.set(d, loc);
      }
    } catch (err) {
      for (const w of wants) w.reject(err);
      return;
    }
    const byPack = new Map<string, { loc: BlobLocation; want: Want }[]>();
    for (const want of wants) {
      const loc = want.loc ?? locs.get(want.digest);
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
      if (this.readAheadMax > 0) {
        this.planWindows(pack, items);
        continue;
      }
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
    this.deliverGroup(g, span);
  }

  /** Decodes, verifies and delivers the asked-for blobs of a group from its span (refetching a bad one alone). */
  private deliverGroup(g: Group, span: Buffer): void {
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
      // Do not let a chunk kept in memory pin the whole span.
      if (loc.codec === 'none' && raw.length < span.length) raw = Buffer.from(raw);
      this.deliver(want, raw);
    }
  }

  // ---- read-ahead -------------------------------------------------------------------------

  /** Plans the reads of one pack's missing blobs (sorted by offset) with read-ahead. */
  private planWindows(pack: string, items: { loc: BlobLocation; want: Want }[]): void {
    const ps = this.packState(pack);
    const groups: Group[] = [];
    let g: Group | undefined;
    for (const it of items) {
      const { loc } = it;
      // Read ahead by a window that completed since this chunk was found missing?
      if (this.cache.has(it.want.digest)) {
        const b = this.cache.getSync(it.want.digest, { quiet: true });
        if (b) {
          if (this.triggers.size > 0) this.trigger(it.want.digest);
          it.want.resolve(b);
          continue;
        }
      }
      const end = loc.offset + loc.storedLength;
      const w = ps.windows.find((x) => x.start <= loc.offset && end <= x.end);
      if (w) {
        this.joinWindow(w, it.want, loc);
        continue;
      }
      // Blobs asked for up to readAheadBytes apart share one read (what lies between is read
      // ahead anyway), unless a window in flight lies between them.
      if (
        g &&
        ((loc.offset - g.end <= this.maxGap && Math.max(g.end, end) - g.start <= this.maxMerge) ||
          Math.max(g.end, end) - g.start <= this.readAheadMax) &&
        !ps.windows.some((x) => x.start < loc.offset && x.end > g!.end)
      ) {
        g.end = Math.max(g.end, end);
        g.items.push(it);
      } else {
        g = { pack, start: loc.offset, end, items: [it] };
        groups.push(g);
      }
    }
    // A window stops where the next one of this plan starts (no byte read twice).
    for (let i = 0; i < groups.length; i++) this.startWindow(ps, groups[i], i + 1 < groups.length ? groups[i + 1].start : Infinity);
  }

  /**
   * A request for a blob inside a window being read: served from the window's bytes as soon
   * as they are here (without waiting for the rest of the window to be kept), or queued again
   * when the read failed.
   */
  private joinWindow(w: Window, want: Want, loc: BlobLocation): void {
    this.windowJoins++;
    this.emit('join', { kind: 'window', key: `${loc.pack}@${w.start}+${w.end - w.start}` } satisfies JoinEvent);
    // `held`: the window's bytes, kept by a request that waited while the window ended
    const serve = (held?: Buffer): void => {
      const span = w.span ?? held;
      // Past the middle before the next window is arranged (the pack's index still loading):
      // wait for it, so that this reader's arrival starts the next window in the background.
      if (!w.planned && span && loc.offset >= w.start + (span.length >> 1)) {
        void w.whenPlanned.then(() => serve(span));
        return;
      }
      const b = this.cache.getSync(want.digest, { quiet: true });
      if (b) {
        if (this.triggers.size > 0) this.trigger(want.digest);
        want.resolve(b);
        return;
      }
      const from = loc.offset - w.start;
      if (span && from >= 0 && from + loc.storedLength <= span.length) {
        let raw: Buffer;
        try {
          raw = decodeBlob(span.subarray(from, from + loc.storedLength), loc);
        } catch (err) {
          if (!isBadBytes(err)) return want.reject(err);
          // bad bytes: read it once more on its own, as deliverGroup does
          this.stats.refetches++;
          this.emit('refetch', { digest: loc.digest, pack: loc.pack, error: err });
          this.refetch(loc).then((b) => this.deliver(want, b), want.reject);
          return;
        }
        if (loc.codec === 'none') raw = Buffer.from(raw); // a copy: do not pin the span
        this.deliver(want, raw);
        if (this.triggers.size > 0) this.trigger(want.digest);
        return;
      }
      // The read failed or came back short: read it on its own once the window is gone
      // (planned while it is still there, the request would only join it again).
      void w.gone.then(() => this.push({ ...want, loc }));
    };
    if (w.span) serve();
    else void w.arrived.then((span) => serve(span));
  }

  /**
   * Chooses the window of a group (stream size, blob boundaries; never past `limit` nor into
   * a window in flight), registers it and reads it.
   * @returns false when there was nothing to read (a group asking for nothing, whose window would be empty).
   */
  private startWindow(ps: PackState, g: Group, limit: number): boolean {
    const stream = this.streamAt(ps, g.start, g.end);
    const index = this.usableIndex(ps);
    for (const w of ps.windows) if (w.start >= g.end && w.start < limit) limit = w.start;
    let end: number;
    if (index) end = this.windowEnd(ps, index, g, Math.min(g.start + stream.size, limit));
    else if (index === null)
      end = g.end; // no index: no read-ahead in this pack for now
    else end = Math.max(g.end, Math.min(g.start + stream.size, limit)); // index not known yet: boundaries found afterwards
    if (end <= g.start) return false;
    stream.next = end;
    let arrive!: (span: Buffer | undefined) => void;
    let leave!: () => void;
    let plan!: () => void;
    const w: Window = {
      start: g.start,
      end,
      arrived: new Promise<Buffer | undefined>((r) => (arrive = r)),
      gone: new Promise<void>((r) => (leave = r)),
      planned: false,
      whenPlanned: new Promise<void>((r) => (plan = r)),
    };
    const planned = (): void => {
      w.planned = true;
      plan();
    };
    ps.windows.push(w);
    if (index === null) planned(); // no index, no next window to arrange
    // The pack's index (needed to read ahead past this window) is read alongside the window,
    // not after it: the trigger for the next window is then ready about when the bytes are.
    if (index === undefined && end > g.end) void this.loadIndex(g.pack, ps);
    // Requests past the middle never wait more than PLAN_WAIT_MS after the bytes are here
    // (an index read that hangs must not hold them).
    let cap: NodeJS.Timeout | undefined;
    void w.arrived.then(() => {
      if (!w.planned) (cap = setTimeout(planned, PLAN_WAIT_MS)).unref();
    });
    const run = this.readWindow(ps, g, w, index, arrive, planned).finally(() => {
      ps.windows.splice(ps.windows.indexOf(w), 1);
      w.span = undefined;
      arrive(undefined);
      planned();
      clearTimeout(cap);
      leave();
    });
    this.track(run);
    return true;
  }

  /** Reads a window: delivers the asked-for blobs, then keeps the other chunks in it. Never rejects. */
  private async readWindow(
    ps: PackState,
    g: Group,
    w: Window,
    index: PackIndexInfo | null | undefined,
    arrive: (span: Buffer) => void,
    planned: () => void,
  ): Promise<void> {
    const length = w.end - w.start;
    let span: Buffer;
    try {
      span = await this.readRange(g.pack, w.start, length, false);
    } catch (err) {
      for (const it of g.items) it.want.reject(err);
      return;
    }
    w.span = span;
    arrive(span);
    this.deliverGroup({ ...g, end: w.end }, span);
    if (index === null) return;
    // Anything in the span besides the blobs asked for (after them, or between them)?
    let asked = 0;
    for (const it of g.items) asked += it.loc.storedLength;
    if (asked >= span.length) return;
    this.stats.readAheadWindows++;
    // An index already here is used without an await: the next window's trigger is then
    // registered before any request that joined this window is served.
    if (index === undefined) index = ps.index !== undefined ? ps.index : await this.loadIndex(g.pack, ps);
    if (!index) return;
    await this.keepAhead(ps, g, w, index, span, planned);
  }

  /**
   * Decodes, verifies and keeps in memory every chunk of `span` (window `w`'s bytes) that nobody
   * asked for and the cache lacks, in slices of KEEP_SLICE_BYTES per event-loop turn; first
   * registers the trigger that starts the next window and calls `planned`. Never rejects.
   */
  private async keepAhead(ps: PackState, g: Group, w: Window, index: PackIndexInfo, span: Buffer, planned: () => void): Promise<void> {
    const start = w.start;
    const asked = new Set<number>();
    for (const it of g.items) asked.add(it.loc.offset);
    // The index must agree with the catalog on the first blob asked for, else it is not trusted.
    const first = g.items.length > 0 ? g.items[0].loc : undefined;
    const at = first ? firstAtOrAfter(index, first.offset) : 0;
    if (first && (at >= index.count || index.offsets[at] !== first.offset || digestAt(index, at) !== first.digest)) {
      this.emit('pack-index-error', {
        pack: g.pack,
        error: new AwcError('E_FORMAT', `pack ${g.pack}: its index does not list ${first.digest} at ${first.offset}`),
      });
      if (ps.index === index) {
        this.packIndexUsed -= index.bytes;
        ps.index = null;
        ps.retryAt = Date.now() + PACK_INDEX_RETRY_MS;
      }
      return;
    }
    const end = start + span.length;
    const middle = start + (span.length >> 1);
    const first0 = firstAtOrAfter(index, start);
    let last = first0; // first blob not wholly inside the span
    while (last < index.count && index.offsets[last] + index.stored[last] <= end) last++;
    // A window read before the index was known may end inside a blob. From now on it ends at
    // its last whole blob: the next window starts there, and its stream goes on.
    if (last < index.count && index.offsets[last] < w.end) {
      const stream = ps.streams.find((s) => s.next === w.end);
      w.end = index.offsets[last];
      if (stream) stream.next = w.end;
    }
    // A reader that gets half way through this window will want the next one: read it then, in
    // the background. Registered before any slice is kept: a reader may get there first.
    if (last < index.count) {
      for (let i = first0; i < last; i++) {
        if (index.offsets[i] < middle || index.kinds[i] !== KIND_CHUNK || asked.has(index.offsets[i])) continue;
        const digest = digestAt(index, i);
        if (this.cache.has(digest)) continue;
        this.triggers.set(digest, { pack: g.pack, at: index.offsets[last] });
        if (this.triggers.size > MAX_TRIGGERS) this.triggers.delete(this.triggers.keys().next().value as Digest);
        break;
      }
    }
    planned();
    let slice = 0;
    for (let i = first0; i < last; i++) {
      const offset = index.offsets[i];
      const storedLength = index.stored[i];
      if (index.kinds[i] !== KIND_CHUNK || asked.has(offset)) continue;
      if (slice >= KEEP_SLICE_BYTES) {
        slice = 0;
        await new Promise<void>((r) => setImmediate(r));
      }
      const digest = digestAt(index, i);
      // (A chunk others wait for is kept too: requests that joined this window find it in memory.)
      if (this.cache.has(digest)) continue;
      slice += storedLength;
      const from = offset - start;
      const entry = { digest, codec: index.codecs[i] === 1 ? ('lz4' as const) : ('none' as const), storedLength, rawLength: index.raw[i] };
      let raw: Buffer;
      try {
        raw = decodeBlob(span.subarray(from, from + storedLength), entry);
      } catch (err) {
        this.stats.readAheadDropped++;
        this.emit('read-ahead-drop', { digest, pack: g.pack, error: err });
        continue;
      }
      if (entry.codec === 'none') raw = Buffer.from(raw); // a copy: do not pin the span
      if (this.cache.remember(digest, raw, { verified: true })) {
        this.stats.readAheadChunks++;
        this.stats.readAheadBytes += raw.length;
        this.emit('fetch', { digest, bytes: raw.length, readAhead: true } satisfies FetchEvent);
      }
    }
  }

  /** A hit on a chunk half way through a read-ahead window: starts the stream's next window now. */
  private trigger(digest: Digest): void {
    const t = this.triggers.get(digest);
    if (!t) return;
    this.triggers.delete(digest);
    const ps = this.packs.get(t.pack);
    if (!ps || !ps.index || ps.windows.some((w) => w.start <= t.at && t.at < w.end)) return;
    if (this.startWindow(ps, { pack: t.pack, start: t.at, end: t.at, items: [] }, Infinity)) this.stats.readAheadAsync++;
  }

  /**
   * End of a window starting at `g.start`: past the blobs asked for, whole blobs up to
   * `limit`, stopping before blobs another window is reading and before a run of more than
   * maxGapBytes of chunks already held.
   */
  private windowEnd(ps: PackState, index: PackIndexInfo, g: Group, limit: number): number {
    let end = g.end;
    let heldRun = 0;
    for (let i = firstAtOrAfter(index, g.end); i < index.count; i++) {
      const offset = index.offsets[i];
      const e = offset + index.stored[i];
      if (e > limit) break;
      if (ps.windows.some((w) => offset < w.end && e > w.start)) break;
      if (index.kinds[i] === KIND_CHUNK && this.cache.has(digestAt(index, i))) {
        heldRun += e - offset;
        if (heldRun > this.maxGap) break;
        continue; // not the new end yet: do not end a window on chunks already held
      }
      heldRun = 0;
      end = e;
    }
    return end;
  }

  /** The read stream a window [start, end) continues (the closest one whose last window ended at most maxGapBytes before `start`, or inside the window: its next window, twice as big), or a new one. */
  private streamAt(ps: PackState, start: number, end: number): { next: number; size: number } {
    let i = -1;
    for (let k = 0; k < ps.streams.length; k++) {
      const s = ps.streams[k];
      // it starts at most maxGap after where the stream's last window ended, or reads a blob that
      // window cut in two (read before the pack's index was known)
      const follows = start >= s.next ? start - s.next <= this.maxGap : end > s.next;
      if (follows && (i < 0 || s.next > ps.streams[i].next)) i = k;
    }
    if (i >= 0) {
      const s = ps.streams[i];
      ps.streams.splice(i, 1);
      ps.streams.push(s);
      s.size = Math.min(this.readAheadMax, s.size * 2);
      return s;
    }
    const s = { next: start, size: this.readAheadMin };
    ps.streams.push(s);
    if (ps.streams.length > STREAMS_PER_PACK) ps.streams.shift();
    return s;
  }

  /** The pack's read-ahead state (most recently used). */
  private packState(pack: string): PackState {
    let ps = this.packs.get(pack);
    if (ps) {
      this.packs.delete(pack);
    } else {
      ps = { retryAt: 0, streams: [], windows: [] };
    }
    this.packs.set(pack, ps);
    this.trimPacks();
    return ps;
  }

  /** The pack's index: known, null (unusable for now: no read-ahead), or undefined (not read yet, being read, or to retry). */
  private usableIndex(ps: PackState): PackIndexInfo | null | undefined {
    if (ps.index === null && Date.now() >= ps.retryAt) ps.index = undefined;
    return ps.index;
  }

  /**
   * Reads a pack's index once (concurrent callers share the read), alongside the pack's
   * windows in flight: from the bytes of one that reaches the end of the pack (they then end
   * with its tail), else from a read of the pack's tail. Costs one size query (a HEAD on S3).
   * @returns null when it cannot be read or parsed (`'pack-index-error'`; tried again later). Never rejects.
   */
  private loadIndex(pack: string, ps: PackState): Promise<PackIndexInfo | null> {
    if (ps.index !== undefined) return Promise.resolve(ps.index);
    if (ps.loading) return ps.loading;
    const p = (async (): Promise<PackIndexInfo | null> => {
      try {
        let entries: PackIndexEntry[] | undefined;
        const size = await this.store.size(pack);
        // a window in flight that reaches the end of the pack holds its tail: no read of its own
        const atEnd = ps.windows.find((x) => x.end >= size);
        const span = atEnd ? await atEnd.arrived : undefined;
        if (atEnd && span && atEnd.start + span.length === size && span.length >= PACK_FOOTER_SIZE) {
          // The window reaches the end of the pack: its tail is the index (when it is all there).
          try {
            const footer = parsePackFooter(span);
            if (footer.indexLength + PACK_FOOTER_SIZE <= span.length) entries = parsePackIndex(span, { packSize: size });
          } catch {
            // not a tail after all: read it
          }
        }
        if (!entries) {
          const guess = tailGuess(size);
          let tail = await this.readRange(pack, size - guess, guess, false, 'pack-index');
          const need = parsePackFooter(tail).indexLength + PACK_FOOTER_SIZE;
          if (need > tail.length && need <= size) tail = await this.readRange(pack, size - need, need, false, 'pack-index');
          entries = parsePackIndex(tail, { packSize: size });
        }
        return compactIndex(entries);
      } catch (err) {
        this.emit('pack-index-error', { pack, error: err });
        return null;
      }
    })().then((info) => {
      ps.loading = undefined;
      ps.index = info;
      if (info) {
        this.packIndexUsed += info.bytes;
        this.trimPacks();
      } else {
        ps.retryAt = Date.now() + PACK_INDEX_RETRY_MS;
      }
      return info;
    });
    ps.loading = p;
    this.track(p);
    return p;
  }

  /** Drops the least recently used pack states beyond the limits (never one with windows in flight). */
  private trimPacks(): void {
    if (this.packIndexUsed <= this.packIndexBytes && this.packs.size <= MAX_PACK_STATES) return;
    for (const [pack, ps] of this.packs) {
      if (this.packIndexUsed <= this.packIndexBytes && this.packs.size <= MAX_PACK_STATES) break;
      if (ps.windows.length > 0 || ps.loading) continue;
      this.packs.delete(pack);
      if (ps.index) this.packIndexUsed -= ps.index.bytes;
    }
  }

  private track(p: Promise<unknown>): void {
    this.background.add(p);
    void p.finally(() => this.background.delete(p));
  }

  // ---------------------------------------------------------------------------------------

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
      await this.acquire();
      try {
        const b = await this.store.get(pack, { offset, length });
        this.stats.backendReads++;
        this.stats.backendBytes += b.length;
        if (kind === 'pack-index') this.stats.packIndexReads++;
        this.emit('backend-read', { pack, offset, bytes: b.length, refetch, kind } satisfies BackendReadEvent);
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
    if (next)
      next(); // the slot passes to the next waiter
    else this.reading--;
  }
}

/** A pack index in compact form (typed arrays; digests as bytes). */
function compactIndex(entries: readonly PackIndexEntry[]): PackIndexInfo {
  const n = entries.length;
  const info: PackIndexInfo = {
    count: n,
    offsets: new Float64Array(n),
    stored: new Uint32Array(n),
    raw: new Uint32Array(n),
    kinds: new Uint8Array(n),
    codecs: new Uint8Array(n),
    digests: Buffer.allocUnsafeSlow(32 * n),
    bytes: 256 + 50 * n,
  };
  for (let i = 0; i < n; i++) {
    const e = entries[i];
    info.offsets[i] = e.offset;
    info.stored[i] = e.storedLength;
    info.raw[i] = e.rawLength;
    info.kinds[i] = e.kind === 'chunk' ? KIND_CHUNK : 0;
    info.codecs[i] = e.codec === 'lz4' ? 1 : 0;
    info.digests.write(e.digest.slice(7), 32 * i, 32, 'hex');
  }
  return info;
}

/** Index of the first entry at or after byte `offset` (entries sorted by offset); `count` when none. */
function firstAtOrAfter(index: PackIndexInfo, offset: number): number {
  let lo = 0;
  let hi = index.count;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (index.offsets[mid] < offset) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function digestAt(index: PackIndexInfo, i: number): Digest {
  return `sha256:${index.digests.toString('hex', 32 * i, 32 * i + 32)}`;
}

/** True for the errors worth one refetch: bytes that failed verification, or a short read. */
function isBadBytes(err: unknown): boolean {
  return err instanceof AwcError && (err.code === 'E_INTEGRITY' || err.code === 'E_FORMAT');
}

function sizeError(b: Buffer, ref: ChunkRef): AwcError {
  return new AwcError('E_INTEGRITY', `chunk ${ref.digest} has ${b.length} bytes, the file lists ${ref.size}`, {
    details: { digest: ref.digest },
  });
}

function checkSize(b: Buffer, ref: ChunkRef): Buffer {
  if (b.length !== ref.size) throw sizeError(b, ref);
  return b;
}
