/**
 * The content index of a shared layer image (docs/reference/formats.md#content-index): what the
 * content FUSE server must know about each content object a layer's placeholders redirect to
 * (its size, chunks and a sparse file's extents), in a binary form sorted by digest, so that a
 * host reads one object by a binary search at its first LOOKUP instead of parsing and
 * registering every object before the first mount (the lazy lookup of composefs's and nydus's
 * metadata blobs; docs/explanation/performance.md#first-mount-of-a-snapshot-on-a-host).
 *
 * Layout (little-endian; one buffer, no compression of its own: the object store keeps it lz4):
 *
 * | bytes | field |
 * |---|---|
 * | 8 | magic `AWCCIX1\n` |
 * | 32 | the snapshot root's digest (raw) |
 * | 4 × 6 | files, dirs, N entries, M chunks, E extents, L bytes of hardlink JSON |
 * | 56 × N | entry: digest (32 raw), size (u64), first chunk (u32), chunks (u32), first extent (u32), extents (u32; 0xffffffff: not sparse) |
 * | 36 × M | chunk: digest (32 raw), size (u32) |
 * | 16 × E | extent: offset (u64), length (u64) |
 * | L | hardlink groups, JSON: path of the file entry → further names |
 *
 * Entries are sorted by digest bytes, strictly ascending. A short content name
 * (src/core/content-name.ts) is a 138-bit prefix of the digest bytes, so its objects are one
 * run of entries: found by the same binary search.
 */
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { isShortContentName, shortContentName } from '../../core/content-name.js';
import type { Extent } from '../../core/sparse.js';

/** One content object as a layer knows it, positional: size (bytes), chunks (digest, bytes), a sparse file's extents. */
export type LayerContent = [size: number, chunks: [digest: Digest, size: number][], extents?: Extent[]];

/** A layer's content objects by 64-hex digest (a built layer's `meta.json`). */
export type LayerContents = Record<string, LayerContent>;

/** Looks content objects up by digest or short name: a {@link ContentIndex}, or a built layer's contents ({@link contentsLookup}). */
export interface ContentLookup {
  /** The object of 64-hex digest `hex`, or undefined. */
  get(hex: string): LayerContent | undefined;
  /** The 64-hex digests of the objects whose short name (src/core/content-name.ts) is `short`: none or one, unless two share it. */
  withShortName(short: string): string[];
}

const MAGIC = Buffer.from('AWCCIX1\n', 'latin1');
const HEADER = 8 + 32 + 4 * 6;
const ENTRY = 56;
const CHUNK = 36;
const EXTENT = 16;
const DENSE = 0xffffffff;
/** Bits of the digest a short name holds (23 base64url characters). */
const SHORT_BITS = 138;

/** What {@link ContentIndex.encode} packs: the parts of a built layer's meta a new host needs. */
export interface ContentIndexSource {
  root: Digest;
  files: number;
  dirs: number;
  contents: LayerContents;
  hardlinks: Record<string, string[]>;
}

/**
 * A parsed content index: O(1) to open (the header is checked, the tables are not copied),
 * O(log N) per lookup. Immutable.
 */
export class ContentIndex implements ContentLookup {
  private readonly entries: number;
  private readonly chunksAt: number;
  private readonly extentsAt: number;

  private constructor(
    private readonly buf: Buffer,
    readonly root: Digest,
    readonly files: number,
    readonly dirs: number,
    /** Number of content objects (N). */
    readonly count: number,
    private readonly chunkCount: number,
    private readonly extentCount: number,
    /** Hardlink groups: path of the file entry → further names (paths from the root). */
    readonly hardlinks: Record<string, string[]>,
  ) {
    this.entries = HEADER;
    this.chunksAt = HEADER + count * ENTRY;
    this.extentsAt = this.chunksAt + chunkCount * CHUNK;
  }

  /**
   * Packs a built layer's contents: entries sorted by digest. Cost: O(N log N) for the sort.
   * @throws E_USAGE when a digest is not 64 hex or a count does not fit its field
   */
  static encode(src: ContentIndexSource): Buffer {
    const hexes = Object.keys(src.contents).sort();
    let m = 0;
    let e = 0;
    for (const h of hexes) {
      const c = src.contents[h]!;
      m += c[1].length;
      e += c[2]?.length ?? 0;
    }
    const links = Buffer.from(JSON.stringify(src.hardlinks));
    const counts = [src.files, src.dirs, hexes.length, m, e, links.length];
    if (counts.some((n) => !Number.isInteger(n) || n < 0 || n >= DENSE))
      throw new AwcError('E_USAGE', 'a content index count does not fit 32 bits');
    const out = Buffer.alloc(HEADER + hexes.length * ENTRY + m * CHUNK + e * EXTENT + links.length);
    MAGIC.copy(out, 0);
    rawDigest(src.root.slice(7)).copy(out, 8);
    counts.forEach((n, i) => out.writeUInt32LE(n, 40 + 4 * i));
    let ci = 0;
    let ei = 0;
    const chunksAt = HEADER + hexes.length * ENTRY;
    const extentsAt = chunksAt + m * CHUNK;
    hexes.forEach((h, i) => {
      const [size, chunks, extents] = src.contents[h]!;
      const at = HEADER + i * ENTRY;
      rawDigest(h).copy(out, at);
      out.writeBigUInt64LE(BigInt(size), at + 32);
      out.writeUInt32LE(ci, at + 40);
      out.writeUInt32LE(chunks.length, at + 44);
      out.writeUInt32LE(ei, at + 48);
      out.writeUInt32LE(extents ? extents.length : DENSE, at + 52);
      for (const [d, s] of chunks) {
        rawDigest(d.slice(7)).copy(out, chunksAt + ci * CHUNK);
        out.writeUInt32LE(s, chunksAt + ci++ * CHUNK + 32);
      }
      for (const [off, len] of extents ?? []) {
        out.writeBigUInt64LE(BigInt(off), extentsAt + ei * EXTENT);
        out.writeBigUInt64LE(BigInt(len), extentsAt + ei++ * EXTENT + 8);
      }
    });
    links.copy(out, extentsAt + e * EXTENT);
    return out;
  }

  /**
   * Opens an index and checks that it describes `root`: its magic, its counts against its
   * length, its hardlink JSON. Entries are checked when they are read (see {@link get}).
   * @throws E_FORMAT
   */
  static parse(buf: Buffer, root: Digest): ContentIndex {
    const bad = (why: string): AwcError => new AwcError('E_FORMAT', `a layer content index ${why}`);
    if (buf.length < HEADER || !buf.subarray(0, 8).equals(MAGIC)) throw bad('has no AWCCIX1 header');
    if (`sha256:${buf.toString('hex', 8, 40)}` !== root) throw bad(`does not describe root ${root}`);
    const [files, dirs, n, m, e, l] = [0, 1, 2, 3, 4, 5].map((i) => buf.readUInt32LE(40 + 4 * i)) as [
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    if (HEADER + n * ENTRY + m * CHUNK + e * EXTENT + l !== buf.length) throw bad('is not as long as its counts say');
    let hardlinks: unknown;
    try {
      hardlinks = JSON.parse(buf.toString('utf8', buf.length - l));
    } catch {
      throw bad('has hardlink groups that are not JSON');
    }
    if (typeof hardlinks !== 'object' || hardlinks === null || Array.isArray(hardlinks))
      throw bad('has hardlink groups that are not an object');
    return new ContentIndex(buf, root, files, dirs, n, m, e, hardlinks as Record<string, string[]>);
  }

  /**
   * The object of 64-hex digest `hex`, or undefined. O(log N).
   * @throws E_FORMAT when its entry points outside the index or its size is not a safe integer
   */
  get(hex: string): LayerContent | undefined {
    if (!/^[0-9a-f]{64}$/.test(hex)) return undefined;
    const key = Buffer.from(hex, 'hex');
    const i = this.lowerBound(key, 256);
    if (i >= this.count || this.buf.compare(key, 0, 32, this.entries + i * ENTRY, this.entries + i * ENTRY + 32) !== 0) return undefined;
    return this.entryAt(i);
  }

  /** See {@link ContentLookup.withShortName}. O(log N). */
  withShortName(short: string): string[] {
    if (!isShortContentName(short)) return [];
    const key = Buffer.alloc(32);
    Buffer.from(`${short}A`, 'base64url').copy(key); // 24 characters: 18 bytes, the last 6 bits zero
    const out: string[] = [];
    for (let i = this.lowerBound(key, SHORT_BITS); i < this.count && this.comparePrefix(i, key, SHORT_BITS) === 0; i++)
      out.push(this.hexAt(i));
    return out;
  }

  /** Every object's 64-hex digest, size and whether it is sparse, in digest order. */
  *sizes(): IterableIterator<[hex: string, size: number, sparse: boolean]> {
    for (let i = 0; i < this.count; i++) {
      const at = this.entries + i * ENTRY;
      yield [this.hexAt(i), safeSize(this.buf.readBigUInt64LE(at + 32)), this.buf.readUInt32LE(at + 52) !== DENSE];
    }
  }

  private hexAt(i: number): string {
    const at = this.entries + i * ENTRY;
    return this.buf.toString('hex', at, at + 32);
  }

  /** The first entry whose first `bits` bits are ≥ those of `key`. */
  private lowerBound(key: Buffer, bits: number): number {
    let lo = 0;
    let hi = this.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.comparePrefix(mid, key, bits) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Compares entry `i`'s digest with `key` on their first `bits` bits (a multiple of 2 over 128). */
  private comparePrefix(i: number, key: Buffer, bits: number): number {
    const at = this.entries + i * ENTRY;
    const whole = bits >> 3;
    const c = this.buf.compare(key, 0, whole, at, at + whole);
    if (c !== 0 || whole === 32) return c;
    const mask = (0xff << (8 - (bits & 7))) & 0xff;
    return (this.buf[at + whole]! & mask) - (key[whole]! & mask);
  }

  private entryAt(i: number): LayerContent {
    const at = this.entries + i * ENTRY;
    const b = this.buf;
    const size = safeSize(b.readBigUInt64LE(at + 32));
    const [c0, cn, e0, en] = [40, 44, 48, 52].map((o) => b.readUInt32LE(at + o)) as [number, number, number, number];
    if (c0 + cn > this.chunkCount || (en !== DENSE && e0 + en > this.extentCount))
      throw new AwcError('E_FORMAT', `a layer content index entry points outside the index (${this.hexAt(i)})`);
    const chunks: [Digest, number][] = new Array(cn);
    for (let k = 0; k < cn; k++) {
      const c = this.chunksAt + (c0 + k) * CHUNK;
      chunks[k] = [`sha256:${b.toString('hex', c, c + 32)}`, b.readUInt32LE(c + 32)];
    }
    if (en === DENSE) return [size, chunks];
    const extents: Extent[] = new Array(en);
    for (let k = 0; k < en; k++) {
      const x = this.extentsAt + (e0 + k) * EXTENT;
      extents[k] = [safeSize(b.readBigUInt64LE(x)), safeSize(b.readBigUInt64LE(x + 8))];
    }
    return [size, chunks, extents];
  }
}

/** A built layer's contents as a {@link ContentLookup}; the short names are mapped on first use (O(N) once). */
export function contentsLookup(contents: LayerContents): ContentLookup {
  let shorts: Map<string, string[]> | undefined;
  return {
    get: (hex) => (Object.hasOwn(contents, hex) ? contents[hex] : undefined),
    withShortName: (short) => {
      if (!shorts) {
        shorts = new Map();
        for (const h in contents) {
          const s = shortContentName(h);
          const list = shorts.get(s);
          if (list) list.push(h);
          else shorts.set(s, [h]);
        }
      }
      return shorts.get(short) ?? [];
    },
  };
}

/** 32 raw bytes of a 64-hex digest. @throws E_USAGE */
function rawDigest(hex: string): Buffer {
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new AwcError('E_USAGE', `not a 64-hex digest: ${hex.slice(0, 80)}`);
  return Buffer.from(hex, 'hex');
}

/** A u64 field as a number. @throws E_FORMAT above 2^53 */
function safeSize(v: bigint): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new AwcError('E_FORMAT', `a layer content index size is out of range (${v})`);
  return Number(v);
}
