import type { Digest } from '../../core/digest.js';

/** Options of a `ChunkCache`. */
export interface ChunkCacheOptions {
  /** Directory owned by this cache (created by `open()`); one process at a time. */
  dir: string;
  /** Most bytes of chunk files the cache keeps on disk (sum of file sizes, temporary files included). */
  budgetBytes: number;
  /**
   * A hit refreshes the file's mtime (so LRU order survives a restart) at most once per this
   * many ms per chunk; default 60 000. 0 refreshes on every hit.
   */
  touchIntervalMs?: number;
  /**
   * Most bytes of chunks waiting to be written (held in memory meanwhile); a put beyond it is
   * skipped (`'skip'`, reason `'backlog'`) rather than let memory grow without bound when the
   * disk is slower than the backend. Readers should wait on `ChunkCache.writable` before
   * fetching more (ChunkFetcher does), so this limit is a safety net. Default 256 MiB.
   */
  maxPendingBytes?: number;
  /**
   * Write-behind (see class doc): a chunk put in the cache is written to disk only once no
   * chunk has been put for this many ms (the burst of misses that brought it is over), or
   * once writeBehindBytes wait. Default 50; 0 writes at once.
   */
  writeBehindMs?: number;
  /** Most bytes of chunks waiting for a quiet moment before writes start anyway (write-behind); default maxPendingBytes / 4. */
  writeBehindBytes?: number;
  /** Most chunk files being written at once (each is open, write, close and rename in the thread pool); default 2. */
  maxConcurrentWrites?: number;
  /**
   * Most bytes of chunks kept in the memory tier (see class doc): chunks read ahead of any
   * request (`ChunkCache.remember`), least recently added first out. Default 64 MiB;
   * 0 disables the tier.
   */
  memoryBytes?: number;
}

/** Payload of the `'hit'`, `'store'` and `'evict'` events: the chunk and its size in bytes. */
export interface ChunkCacheEvent {
  digest: Digest;
  bytes: number;
  /** On `'hit'`: served from memory (the memory tier or a write in progress), not read from disk. */
  memory?: boolean;
}

/** Counters of a `ChunkCache` (monotonic). */
export interface ChunkCacheStats {
  /** Hits served from memory (the memory tier or a write in progress). */
  memoryHits: number;
  /** Hits read from disk (and verified). */
  diskHits: number;
  /** Chunks of the memory tier (read ahead) that were asked for, and then queued for disk. */
  readAheadHits: number;
  /** Chunks of the memory tier dropped before anyone asked for them (`'memory-evict'`: read ahead in vain). */
  readAheadWasted: number;
}

/** Payload of the `'corrupt'` event: a cached file that failed verification (or vanished) and was dropped. */
export interface ChunkCacheCorruptEvent {
  digest: Digest;
  /** `'digest'`: bytes do not match; `'size'`: file shorter than recorded; `'missing'`: file gone; `'io'`: read failed. */
  reason: 'digest' | 'size' | 'missing' | 'io';
  error?: unknown;
}

/** Payload of the `'skip'` event: a verified chunk that `put` did not cache, and why. */
export interface ChunkCacheSkipEvent {
  digest: Digest;
  bytes: number;
  /**
   * `'too-big'`: larger than the whole budget; `'no-room'`: the budget is taken by writes in
   * progress; `'backlog'`: maxPendingBytes of writes are already waiting.
   */
  reason: 'too-big' | 'no-room' | 'backlog';
}

/** Payload of the `'miss'` event. */
export interface ChunkCacheMissEvent {
  digest: Digest;
}

/** Payload of the `'touch-error'` and `'write-error'` events: a chunk and the file system's error. */
export interface ChunkCacheErrorEvent {
  digest: Digest;
  error: unknown;
}

/** The events of a `ChunkCache` (typed `EventEmitter` map; payloads above). */
export type ChunkCacheEvents = {
  hit: [ChunkCacheEvent];
  miss: [ChunkCacheMissEvent];
  store: [ChunkCacheEvent];
  evict: [ChunkCacheEvent];
  corrupt: [ChunkCacheCorruptEvent];
  skip: [ChunkCacheSkipEvent];
  'memory-evict': [ChunkCacheEvent];
  'touch-error': [ChunkCacheErrorEvent];
  'write-error': [ChunkCacheErrorEvent];
};
