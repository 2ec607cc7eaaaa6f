import type { Digest } from '../../core/digest.js';
import { PACK_FOOTER_SIZE, parsePackFooter, parsePackIndex } from './pack.js';
import type { PackIndexEntry } from './pack-types.js';

/** Kind code of a chunk (pack format v1). */
const KIND_CHUNK = 1;

/**
 * A pack's own index (pack format v1) in compact form: typed arrays by entry, in pack order
 * (by offset), digests as bytes; about 50 bytes per entry. Read from a pack's tail to find
 * the boundaries and digests of the blobs next to the ones asked for (read-ahead).
 */
export class PackIndex {
  /** Number of entries. */
  readonly count: number;
  /** Byte offset of each blob in the pack. */
  readonly offsets: Float64Array;
  /** Stored length of each blob in bytes. */
  readonly stored: Uint32Array;
  /** Raw (decoded) length of each blob in bytes. */
  readonly raw: Uint32Array;
  /** 1 for a chunk, 0 for a tree or root. */
  readonly kinds: Uint8Array;
  /** 0 none, 1 lz4. */
  readonly codecs: Uint8Array;
  /** 32 bytes per entry. */
  readonly digests: Buffer;
  /** Approximate memory held, in bytes. */
  readonly bytes: number;

  /** @param entries the index entries in pack order (as parsePackIndex returns them). */
  constructor(entries: readonly PackIndexEntry[]) {
    const n = entries.length;
    this.count = n;
    this.offsets = new Float64Array(n);
    this.stored = new Uint32Array(n);
    this.raw = new Uint32Array(n);
    this.kinds = new Uint8Array(n);
    this.codecs = new Uint8Array(n);
    this.digests = Buffer.allocUnsafeSlow(32 * n);
    this.bytes = 256 + 50 * n;
    for (let i = 0; i < n; i++) {
      const e = entries[i];
      this.offsets[i] = e.offset;
      this.stored[i] = e.storedLength;
      this.raw[i] = e.rawLength;
      this.kinds[i] = e.kind === 'chunk' ? KIND_CHUNK : 0;
      this.codecs[i] = e.codec === 'lz4' ? 1 : 0;
      this.digests.write(e.digest.slice(7), 32 * i, 32, 'hex');
    }
  }

  /**
   * The index held by the last bytes of a pack: `tail` (at least index + footer) ends the
   * pack of `packSize` bytes.
   * @throws E_FORMAT / E_INTEGRITY as parsePackIndex.
   */
  static fromTail(tail: Uint8Array, packSize: number): PackIndex {
    return new PackIndex(parsePackIndex(tail, { packSize }));
  }

  /**
   * The index held by `span` when it is the end of the pack (it reaches byte `packSize` and
   * holds the whole index and footer), else undefined. Never throws.
   */
  static fromEndOfPack(span: Buffer, spanStart: number, packSize: number): PackIndex | undefined {
    if (spanStart + span.length !== packSize || span.length < PACK_FOOTER_SIZE) return undefined;
    try {
      const footer = parsePackFooter(span);
      if (footer.indexLength + PACK_FOOTER_SIZE <= span.length) return PackIndex.fromTail(span, packSize);
    } catch {
      // not a tail after all
    }
    return undefined;
  }

  /**
   * First guess of a pack's tail length (index + footer) in bytes: 1/64 of the pack (an index
   * entry per 3.3 KiB of pack), at least 64 KiB (1 260 entries), at most 1 MiB; a longer index
   * takes a second read ({@link tailLength}).
   */
  static tailGuess(packSize: number): number {
    return Math.min(packSize, Math.max(64 * 1024, Math.min(1024 * 1024, Math.ceil(packSize / 64))));
  }

  /**
   * Bytes of index + footer a pack's tail says it has (read from its footer).
   * @throws E_FORMAT when `tail` does not end with a pack footer.
   */
  static tailLength(tail: Uint8Array): number {
    return parsePackFooter(tail).indexLength + PACK_FOOTER_SIZE;
  }

  /** Index of the first entry at or after byte `offset`; `count` when none. */
  firstAtOrAfter(offset: number): number {
    let lo = 0;
    let hi = this.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.offsets[mid] < offset) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Digest of entry `i`. */
  digestAt(i: number): Digest {
    return `sha256:${this.digests.toString('hex', 32 * i, 32 * i + 32)}`;
  }

  /** True when entry `i` is a chunk. */
  isChunk(i: number): boolean {
    return this.kinds[i] === KIND_CHUNK;
  }
}
