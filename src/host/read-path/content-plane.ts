import { EventEmitter } from 'node:events';
import { ContentReader } from '../../store/content/content-reader.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { BlobIndex } from '../../store/pack/pack-types.js';
import { CachedContentSource } from './cached-content-source.js';
import type { ContentLookup, LayerContents } from '../../store/content/content-index.js';
import { ChunkCache } from './chunk-cache.js';
import { ChunkFetcher } from './chunk-fetcher.js';
import type { LogRecord, Logger } from '../../core/log.js';
import type { ObjectCache } from './object-cache.js';

/** Default pack read-ahead window of the host (8 MiB). */
export const DEFAULT_HOST_READ_AHEAD_BYTES = 8 * 1024 * 1024;

/** Options of a {@link ContentPlane}. */
export interface ContentPlaneOptions {
  /** Where packs are read from. */
  store: ObjectStore;
  /** The blob index of a namespace (the catalog's); asked once per namespace for the plane's life. */
  blobIndex(namespace: string): BlobIndex;
  /** The chunk cache's directory (owned by this plane). */
  cacheDir: string;
  /** The chunk cache's disk budget in bytes. */
  cacheBytes: number;
  /** Largest read-ahead window in bytes; default DEFAULT_HOST_READ_AHEAD_BYTES (0: off). */
  readAheadBytes?: number;
  /** Where it logs its ContentPlaneLog records (default: its `'log'` event). */
  logger?: Logger;
}

/** A record it logs (to its `logger`, else as its `'log'` event): something worth a line in the daemon's log (never printed here). */
export interface ContentPlaneLog extends LogRecord {
  level: 'warn' | 'error';
  msg: string;
  digest?: string;
  pack?: string;
  reason?: string;
  err?: string;
}

/** The events of a {@link ContentPlane} (typed `EventEmitter` map). */
export type ContentPlaneEvents = {
  log: [ContentPlaneLog];
};

/**
 * Where the read-ahead chunks go besides the cache, and where a read served there is reported:
 * the content FUSE server's hot arena (ContentFuse: `offer`, `'served'`).
 */
export interface ArenaSink {
  /** Offers a whole content object (64-hex name) to the arena; it may decline. */
  offer(hex: string, data: Uint8Array): unknown;
  /** `'served'` (content hex): a READ answered from the arena, without the main thread. */
  on(event: 'served', listener: (hex: string) => void): unknown;
}

/**
 * The host read path, assembled in one place (one per daemon): the chunk cache (ChunkCache:
 * disk files, write-behind, memory tier), the fetcher (ChunkFetcher: miss batching, range
 * planning, singleflight, verify-and-refetch, pack read-ahead with its pack-index cache), the
 * content source the FUSE server reads (CachedContentSource), and a ContentReader and blob
 * index per namespace.
 *
 * A cold read(2): FUSE → source.read → fetcher.getSync (cache hit: a Buffer at once) or
 * fetcher.fetch → misses of one event-loop turn planned together → ranged reads of packs →
 * decoded, verified, delivered, put in the cache; read-ahead keeps the rest of the window in
 * the cache's memory tier.
 *
 * The read-ahead feedback loop (wired by {@link attachArena}):
 *  1. a window's chunks are kept in the memory tier: the fetcher's `'fetch'` event with
 *     `readAhead` → each is offered to the arena, where FUSE workers answer READs themselves;
 *  2. the arena reports each READ it answered (`'served'`) → source.touch → fetcher.noteUse:
 *     the cache's LRU and memory → disk moves, and the read-ahead trigger that starts the next
 *     window in the background once a reader is half way through the current one;
 *  3. hits served by the main thread reach the same trigger through fetcher.getSync.
 *
 * Logs (ContentPlaneLog, to the `logger` option, else as `'log'` events): integrity errors,
 * refetches, cache corruption and write failures, dropped read-ahead chunks, unusable pack
 * indexes. Counters and per-chunk events are on the parts' own typed emitters (`cache`,
 * `fetcher`): subscribe there (no extra hop).
 * Never prints.
 *
 * @example
 *   const plane = new ContentPlane({ store, blobIndex: (ns) => catalog.blobIndex(ns), cacheDir, cacheBytes });
 *   await plane.open();
 *   const fuse = new ContentFuse({ mountpoint, source: plane.source });
 *   plane.attachArena(fuse);
 */
export class ContentPlane extends EventEmitter<ContentPlaneEvents> {
  /** The host chunk cache. */
  readonly cache: ChunkCache;
  /** The chunk fetcher (with read-ahead). */
  readonly fetcher: ChunkFetcher;
  /** What the content FUSE server reads. */
  readonly source: CachedContentSource;
  private readonly store: ObjectStore;
  private readonly indexOf: (namespace: string) => BlobIndex;
  private readonly indexes = new Map<string, BlobIndex>();
  private readonly readers = new Map<string, ContentReader>();
  /** The host object cache, once attached (attachObjects). */
  private objects: ObjectCache | undefined;

  /** @throws E_USAGE for an invalid budget or read-ahead size (see ChunkCache, ChunkFetcher). */
  constructor(opts: ContentPlaneOptions) {
    super();
    this.store = opts.store;
    this.indexOf = opts.blobIndex;
    this.cache = new ChunkCache({ dir: opts.cacheDir, budgetBytes: opts.cacheBytes });
    // Pack read-ahead: a miss reads up to 8 MiB of the pack (its neighbours, snapshotted
    // together, are usually read together), verified and kept in the cache's memory tier.
    this.fetcher = new ChunkFetcher({
      store: opts.store,
      cache: this.cache,
      readAheadBytes: opts.readAheadBytes ?? DEFAULT_HOST_READ_AHEAD_BYTES,
    });
    // The FUSE server writes a synchronous answer out before it reads again: multi-chunk reads can share one scratch buffer.
    this.source = new CachedContentSource(this.fetcher, { reuseSyncBuffers: true });
    this.wireLog(opts.logger ?? ((l: ContentPlaneLog) => void this.emit('log', l)));
  }

  /**
   * Opens the chunk cache (indexes what is on disk, trims to the budget).
   * @throws E_PERMISSION / E_INTERNAL when the cache directory cannot be created or read.
   */
  open(): Promise<void> {
    return this.cache.open();
  }

  /** The blob index of a namespace, one per namespace for the plane's life. */
  blobIndex(namespace: string): BlobIndex {
    let i = this.indexes.get(namespace);
    if (!i) {
      i = this.indexOf(namespace);
      this.indexes.set(namespace, i);
    }
    return i;
  }

  /** The ContentReader of a namespace (trees, roots and files straight from packs, not through the cache), one per namespace. */
  reader(namespace: string): ContentReader {
    let r = this.readers.get(namespace);
    if (!r) {
      r = new ContentReader({ store: this.store, index: this.blobIndex(namespace) });
      this.readers.set(namespace, r);
    }
    return r;
  }

  /**
   * Registers a layer's content objects with the source, located through the namespace's blob
   * index (CachedContentSource.register). @returns how many were new.
   */
  register(namespace: string, contents: LayerContents): number {
    return this.source.register(contents, this.blobIndex(namespace));
  }

  /**
   * Adds a layer's content index, read lazily (CachedContentSource.addIndex): its objects are
   * registered, located through the namespace's blob index, at their first lookup. O(1).
   */
  addIndex(namespace: string, contents: ContentLookup): void {
    this.source.addIndex(contents, this.blobIndex(namespace));
  }

  /** Wires the read-ahead feedback loop through the FUSE server's hot arena (see class doc). */
  attachArena(arena: ArenaSink): void {
    this.fetcher.on('fetch', (e) => {
      if (!e.readAhead) return;
      const b = this.cache.peekMemory(e.digest);
      if (b) arena.offer(e.digest.slice(7), b);
    });
    arena.on('served', (hex) => {
      this.source.touch(hex);
      this.objects?.request(hex);
    });
  }

  /**
   * Wires the host object cache (docs/explanation/host-cache-lower.md): every read through the
   * source is counted, so an object read whole is filled into CACHE (an object the arena served
   * whole is queued at once, see attachArena); an object published to CACHE leaves the chunk
   * cache's disk tier (its chunks are deleted), so the host's disk holds one copy of it, and
   * a read through FUSE of an object in CACHE is served from its file there.
   */
  attachObjects(objects: ObjectCache): void {
    this.objects = objects;
    this.source.observeReads((hex, size, bytes) => objects.noteRead(hex, size, bytes));
    this.source.readWholeFrom((hex, offset, length) => objects.readRange(hex, offset, length));
    objects.on('publish', (e) => {
      for (const c of this.source.chunksOf(e.hex) ?? []) this.cache.delete(c.digest);
    });
  }

  /** Resolves once nothing is being fetched or read ahead and the cache has written what was fetched; never rejects. */
  idle(): Promise<void> {
    return this.fetcher.idle();
  }

  /** Maps the parts' rare events (failures) to log records. */
  private wireLog(log: (l: ContentPlaneLog) => void): void {
    this.cache.on('corrupt', (e) => log({ level: 'warn', msg: 'cache corrupt', digest: e.digest, reason: e.reason }));
    this.fetcher.on('integrity-error', (e) => log({ level: 'error', msg: 'integrity', digest: e.digest, pack: e.pack }));
    this.fetcher.on('refetch', (e) => log({ level: 'warn', msg: 'refetch', digest: e.digest, pack: e.pack }));
    this.fetcher.on('cache-error', (e) => log({ level: 'warn', msg: 'cache write failed', digest: e.digest, err: String(e.error) }));
    this.fetcher.on('read-ahead-drop', (e) =>
      log({ level: 'warn', msg: 'read-ahead chunk failed verification (dropped)', digest: e.digest, pack: e.pack }),
    );
    this.fetcher.on('relocate', (e) =>
      log({ level: 'warn', msg: 'pack gone (repacked): chunk looked up again', digest: e.digest, pack: e.pack }),
    );
    this.fetcher.on('pack-index-error', (e) =>
      log({ level: 'warn', msg: 'pack index unusable (no read-ahead there for now)', pack: e.pack, err: String(e.error) }),
    );
  }
}
