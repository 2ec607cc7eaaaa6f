import type { Digest } from '../../core/digest.js';

/** What a blob in a pack holds. */
export type BlobKind = 'chunk' | 'tree' | 'root';

/** How a blob's bytes are stored in a pack: `lz4` (block format via lz4-napi) or `none`. */
export type Codec = 'none' | 'lz4';

/** One entry of a pack's index (format `pack` v1): where a blob sits in the pack. Offsets and lengths in bytes. */
export interface PackIndexEntry {
  digest: Digest;
  kind: BlobKind;
  codec: Codec;
  offset: number;
  storedLength: number;
  rawLength: number;
}

/** A blob's location in the object store: its pack's object key plus its index entry. */
export interface BlobLocation extends PackIndexEntry {
  pack: string;
}

/**
 * The blob index port: which blobs already exist (in one namespace) and where. The catalog
 * implements it; dedup and reads go through it. A digest recorded twice keeps its first
 * location. Every adapter runs the contract suite test/contracts/blob-index.contract.ts.
 */
export interface BlobIndex {
  /** Locations of the digests that are known (duplicates in `digests` are fine); unknown digests are absent from the map. */
  lookup(digests: readonly Digest[]): Promise<Map<Digest, BlobLocation>>;
}

/** A pack that a writer uploaded: object key, size in bytes, and its blobs. */
export interface WrittenPack {
  key: string;
  size: number;
  blobs: BlobLocation[];
}
