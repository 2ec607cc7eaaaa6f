import type { Digest } from '../../core/digest.js';
import type { BlobIndex, BlobLocation } from './pack-types.js';

/** Largest merged ranged read of a pack in bytes (8 MiB). A single larger blob is still read whole. */
export const MERGE_MAX_BYTES = 8 * 1024 * 1024;
/** Largest gap in bytes between two blobs of one merged read (read and discarded): 128 KiB. */
export const MERGE_GAP_BYTES = 128 * 1024;
/** Digests per blob index lookup. */
export const LOOKUP_BATCH = 1024;

/** How far neighbouring blobs of one pack may be merged into one ranged read (bytes). */
export interface RangeLimits {
  /** Largest span of one read; default MERGE_MAX_BYTES. */
  maxMergeBytes: number;
  /** Largest gap between two blobs of one read; default MERGE_GAP_BYTES. */
  maxGapBytes: number;
}

/** The default limits (MERGE_MAX_BYTES, MERGE_GAP_BYTES). */
export const DEFAULT_RANGE_LIMITS: Readonly<RangeLimits> = { maxMergeBytes: MERGE_MAX_BYTES, maxGapBytes: MERGE_GAP_BYTES };

/** One planned ranged read: [start, end) of a pack (bytes) and the blobs read from it, in the order they were added. */
export interface BlobRange<T extends { loc: BlobLocation }> {
  pack: string;
  start: number;
  end: number;
  items: T[];
}

/**
 * Range planning for pack reads, shared by `ContentReader` and the host's `ChunkFetcher`: the
 * one rule that decides whether a blob joins the read planned before it ({@link fits}), and
 * the batched index lookups that find the blobs first ({@link RangePlanner.locate}).
 *
 * @example
 *   const planner = new RangePlanner();
 *   for (const g of planner.plan(items.sort((a, b) => a.loc.offset - b.loc.offset))) read(g.pack, g.start, g.end - g.start);
 */
export class RangePlanner {
  /** @param limits merge limits (bytes); default DEFAULT_RANGE_LIMITS. */
  constructor(readonly limits: Readonly<RangeLimits> = DEFAULT_RANGE_LIMITS) {}

  /**
   * True when a blob at `loc` may join the read `g`: same pack, at or after the read's start,
   * at most maxGapBytes after its end, and the read then spans at most maxMergeBytes.
   */
  fits(g: BlobRange<{ loc: BlobLocation }>, loc: BlobLocation): boolean {
    return (
      g.pack === loc.pack &&
      loc.offset >= g.start &&
      loc.offset - g.end <= this.limits.maxGapBytes &&
      Math.max(g.end, loc.offset + loc.storedLength) - g.start <= this.limits.maxMergeBytes
    );
  }

  /**
   * Plans the ranged reads of `items` (taken in the given order; sort them by offset first to
   * merge every neighbour): each item joins the read before it when {@link fits} says so, else
   * starts a new one.
   */
  plan<T extends { loc: BlobLocation }>(items: readonly T[]): BlobRange<T>[] {
    const out: BlobRange<T>[] = [];
    let g: BlobRange<T> | undefined;
    for (const it of items) {
      if (g && this.fits(g, it.loc)) RangePlanner.extend(g, it);
      else out.push((g = RangePlanner.start(it)));
    }
    return out;
  }

  /** Adds `item` to the read `g` (its end moves past the blob). */
  static extend<T extends { loc: BlobLocation }>(g: BlobRange<T>, item: T): void {
    g.end = Math.max(g.end, item.loc.offset + item.loc.storedLength);
    g.items.push(item);
  }

  /** A new read holding only `item`. */
  static start<T extends { loc: BlobLocation }>(item: T): BlobRange<T> {
    return { pack: item.loc.pack, start: item.loc.offset, end: item.loc.offset + item.loc.storedLength, items: [item] };
  }

  /**
   * Adds the locations of `digests` in `index` to `out`, in batched lookups of LOOKUP_BATCH
   * digests (unknown digests are absent).
   * @throws (rejects) whatever the index's lookup rejects with.
   */
  static async locate(index: BlobIndex, digests: readonly Digest[], out: Map<Digest, BlobLocation>): Promise<void> {
    for (let i = 0; i < digests.length; i += LOOKUP_BATCH) {
      const found = await index.lookup(digests.length <= LOOKUP_BATCH ? digests : digests.slice(i, i + LOOKUP_BATCH));
      for (const [d, loc] of found) out.set(d, loc);
    }
  }
}
