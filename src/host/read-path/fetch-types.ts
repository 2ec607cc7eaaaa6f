import type { Digest } from '../../core/digest.js';
import type { BlobRange } from '../../store/pack/range-plan.js';
import type { BlobIndex, BlobLocation } from '../../store/pack/pack-types.js';

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

/** Counters of a `ChunkFetcher` (monotonic). */
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
  /** Chunks looked up again because the store no longer had the pack they were located in. */
  relocations: number;
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

/** A missing chunk waiting for the next plan (`loc` when already located). */
export interface Want {
  digest: Digest;
  index: BlobIndex;
  loc?: BlobLocation;
  /** True once it was looked up again after its pack was gone (a want is relocated at most once). */
  relocated?: boolean;
  resolve(b: Buffer): void;
  reject(e: unknown): void;
}

/** A located missing chunk. */
export interface WantAt {
  loc: BlobLocation;
  want: Want;
}

/** One planned ranged read: [start, end) of a pack and the blobs asked for in it, by offset. */
export type Group = BlobRange<WantAt>;
