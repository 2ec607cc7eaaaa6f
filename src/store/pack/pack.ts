import type * as Lz4 from 'lz4-napi';
import { createHash } from 'node:crypto';
import { AwcError } from '../../core/errors.js';
import { digestBytes, digestFromBytes, verifyDigest, type Digest } from '../../core/digest.js';
import type { BlobKind, Codec, PackIndexEntry } from './pack-types.js';
import { lazyRequire } from '../../core/lazy-require.js';
import { fanoutKey, fanoutKeyHex } from '../object/fanout-key.js';

/** The lz4 codec (a native addon), loaded when a pack is first written or read. */
const lz4 = lazyRequire<typeof Lz4>('lz4-napi');

/**
 * Pack format v1: many blobs (chunks, trees, roots) in one immutable object, with its own
 * index at the end (restic-style), so a pack streams out in one pass and can be
 * re-indexed from the pack alone. Byte layout (all integers little-endian):
 *
 *     offset 0            blob 0 stored bytes, blob 1 stored bytes, … (no header, no padding)
 *     D = data length     index: N entries of 52 bytes each, in blob order
 *       +0  32  digest    sha256 of the blob's raw (uncompressed) bytes
 *       +32  1  kind      1 chunk, 2 tree, 3 root
 *       +33  1  codec     0 none, 1 lz4
 *       +34  2  reserved  0
 *       +36  8  offset    u64, byte offset of the stored bytes from the start of the pack
 *       +44  4  stored    u32, stored length in bytes
 *       +48  4  raw       u32, raw (uncompressed) length in bytes
 *     D + 52·N            footer, 48 bytes:
 *       +0  32  sha256 of the index bytes
 *       +32  4  index length in bytes (u32, = 52·N)
 *       +36  2  version (u16, = 1)
 *       +38  2  reserved 0
 *       +40  8  magic, ASCII "AWCPACK\n"
 *
 * Codec `lz4` is the LZ4 block format with the raw length prepended as a u32 LE (what
 * lz4-napi `compressSync` produces, lz4_flex `compress_prepend_size`). A blob is stored
 * with lz4 only when that saves at least 1/8 of its raw length, else with `none` (blobs over
 * 16 KiB are tried only when a 4 KiB sample from their middle compresses by 1/16: the
 * codec choice is the writer's, readers just follow each entry's codec).
 *
 * The object key of a pack is `packs/<first 2 hex>/<64 hex>` where the hex is sha256 of
 * the whole pack bytes. See docs/reference/formats.md.
 */

/** Pack format version written and read by this module. */
export const PACK_VERSION = 1;
/** Footer magic: ASCII "AWCPACK\n" (8 bytes). */
export const PACK_MAGIC = Buffer.from('AWCPACK\n', 'ascii');
/** Footer size in bytes. */
export const PACK_FOOTER_SIZE = 48;
/** Size of one index entry in bytes. */
export const PACK_ENTRY_SIZE = 52;
/** Largest raw blob length accepted by the writer and the reader (bytes); also bounds lz4 allocations. */
export const MAX_BLOB_SIZE = 0x7fffffff;

const KIND_CODE: Record<BlobKind, number> = { chunk: 1, tree: 2, root: 3 };
const KIND_NAME: readonly (BlobKind | undefined)[] = [undefined, 'chunk', 'tree', 'root'];
const CODEC_CODE: Record<Codec, number> = { none: 0, lz4: 1 };
const CODEC_NAME: readonly (Codec | undefined)[] = ['none', 'lz4'];

/** The object key of a pack whose bytes have sha256 hex `hex`: `packs/<hex[0..2]>/<hex>`. */
export function packKey(hex: string): string {
  return fanoutKey('packs', hex);
}

/** The SHA-256 hex a pack key names (`packs/<aa>/<64 hex>`), or undefined for another key. */
export function packKeyHex(key: string): string | undefined {
  return fanoutKeyHex('packs', key);
}

/** A finished pack: its object key, its bytes, and its index entries (offsets/lengths in bytes). */
export interface FinishedPack {
  key: string;
  bytes: Buffer;
  entries: PackIndexEntry[];
}

/**
 * Builds one pack in memory. `add` appends a blob (compressing it when that pays), `size`
 * tells how big the pack would be if finished now, `finish` appends index and footer.
 * The writer does not verify that `digest` matches `raw` (its caller computed it), and a
 * digest added twice is stored once.
 */
export class PackWriter {
  private buf: Buffer;
  private len = 0;
  private readonly entries: PackIndexEntry[] = [];
  private readonly seen = new Map<Digest, PackIndexEntry>();
  private finished = false;

  private readonly capacityHint: number;

  /**
   * @param capacityHint expected final pack size in bytes: the buffer starts at up to 1 MiB
   *   and doubles up to this size (then grows as needed), so small packs stay small.
   * @param startFull start at `capacityHint` bytes at once (a writer that expects to fill the
   *   pack: no copy while it grows)
   * @param reuse with `startFull`, a buffer of at least `capacityHint` bytes to build the pack
   *   in instead of a new one (e.g. a finished pack's, once uploaded: its pages are already
   *   mapped); the writer overwrites it, and the finished pack's bytes are a view of it
   */
  constructor(capacityHint = 1 << 20, startFull = false, reuse?: Buffer) {
    this.capacityHint = Math.max(4096, capacityHint);
    if (startFull && reuse && reuse.length >= this.capacityHint) this.buf = reuse;
    else this.buf = Buffer.allocUnsafe(startFull ? this.capacityHint : Math.min(this.capacityHint, 1 << 20));
  }

  /** The whole buffer the pack is built in (its bytes are a prefix of it). */
  get buffer(): Buffer {
    return this.buf;
  }

  /** Number of blobs added. */
  get count(): number {
    return this.entries.length;
  }

  /** Size in bytes the pack would have if finished now (data + index + footer). */
  get size(): number {
    return this.len + this.entries.length * PACK_ENTRY_SIZE + PACK_FOOTER_SIZE;
  }

  /**
   * Appends a blob: `raw` is its uncompressed content (bytes, copied), `digest` its sha256.
   * @returns its index entry (offset and lengths in bytes). @throws E_INTERNAL after finish or for a blob over MAX_BLOB_SIZE.
   */
  add(kind: BlobKind, digest: Digest, raw: Uint8Array): PackIndexEntry {
    if (this.finished) throw new AwcError('E_INTERNAL', 'PackWriter.add after finish');
    if (raw.length > MAX_BLOB_SIZE) throw new AwcError('E_INTERNAL', `blob of ${raw.length} bytes is too large for a pack`);
    const had = this.seen.get(digest);
    if (had) return had;
    const { codec, stored } = encodeBlob(raw);
    return this.place(kind, digest, codec, stored, raw.length);
  }

  /**
   * Appends a blob already encoded by {@link encodeBlob} (e.g. in a worker thread):
   * `stored` is its stored bytes (copied), `rawLength` its uncompressed length in bytes,
   * `digest` the sha256 of the raw bytes. A digest added twice is stored once.
   * @returns its index entry. @throws E_INTERNAL after finish or for a blob over MAX_BLOB_SIZE.
   */
  addStored(kind: BlobKind, digest: Digest, codec: Codec, stored: Uint8Array, rawLength: number): PackIndexEntry {
    if (this.finished) throw new AwcError('E_INTERNAL', 'PackWriter.add after finish');
    if (rawLength > MAX_BLOB_SIZE) throw new AwcError('E_INTERNAL', `blob of ${rawLength} bytes is too large for a pack`);
    return this.seen.get(digest) ?? this.place(kind, digest, codec, stored, rawLength);
  }

  private place(kind: BlobKind, digest: Digest, codec: Codec, stored: Uint8Array, rawLength: number): PackIndexEntry {
    this.ensure(stored.length);
    this.buf.set(stored, this.len);
    const entry: PackIndexEntry = { digest, kind, codec, offset: this.len, storedLength: stored.length, rawLength };
    this.len += stored.length;
    this.entries.push(entry);
    this.seen.set(digest, entry);
    return entry;
  }

  /**
   * Appends the index and footer and returns the pack (key = packs/<aa>/<sha256 hex of bytes>).
   * The writer cannot be used afterwards. The bytes are a view of the writer's buffer
   * (`buffer`), which a later writer may be given to reuse once they are no longer needed.
   */
  finish(): FinishedPack {
    if (this.finished) throw new AwcError('E_INTERNAL', 'PackWriter.finish called twice');
    this.finished = true;
    const indexLength = this.entries.length * PACK_ENTRY_SIZE;
    this.ensure(indexLength + PACK_FOOTER_SIZE);
    const indexStart = this.len;
    for (const e of this.entries) {
      writeEntry(this.buf, this.len, e);
      this.len += PACK_ENTRY_SIZE;
    }
    const f = this.len;
    createHash('sha256').update(this.buf.subarray(indexStart, f)).digest().copy(this.buf, f);
    this.buf.writeUInt32LE(indexLength, f + 32);
    this.buf.writeUInt16LE(PACK_VERSION, f + 36);
    this.buf.writeUInt16LE(0, f + 38);
    PACK_MAGIC.copy(this.buf, f + 40);
    this.len += PACK_FOOTER_SIZE;
    const bytes = this.len === this.buf.length ? this.buf : this.buf.subarray(0, this.len);
    const key = packKey(createHash('sha256').update(bytes).digest('hex'));
    return { key, bytes, entries: this.entries.slice() };
  }

  private ensure(extra: number): void {
    const need = this.len + extra;
    if (need <= this.buf.length) return;
    const target =
      this.buf.length < this.capacityHint ? Math.min(this.buf.length * 2, this.capacityHint) : Math.floor(this.buf.length * 1.25);
    const grown = Buffer.allocUnsafe(Math.max(need, target));
    this.buf.copy(grown, 0, 0, this.len);
    this.buf = grown;
  }
}

/**
 * The codec and stored bytes of a blob whose raw bytes are `raw`: lz4 when that saves at
 * least 1/8 of its length (blobs over 16 KiB tried only when a sample says it can pay, see
 * worthCompressing), else `none` with `raw` itself (not copied).
 */
export function encodeBlob(raw: Uint8Array): { codec: Codec; stored: Uint8Array } {
  if (raw.length >= 64 && worthCompressing(raw)) {
    const c = lz4().compressSync(Buffer.from(raw.buffer, raw.byteOffset, raw.length));
    if (c.length <= raw.length - (raw.length >>> 3)) return { codec: 'lz4', stored: c };
  }
  return { codec: 'none', stored: raw };
}

/** Bytes sampled from the middle of a large blob to decide whether compressing it can pay. */
const SAMPLE_BYTES = 4096;

/**
 * Cheap pre-check for blobs over 4 × SAMPLE_BYTES: lz4 of incompressible data runs at
 * ~240 MB/s here (slower than chunking and hashing together), so a blob is compressed only
 * when a 4 KiB sample from its middle saves at least 1/16. Misjudging only costs ratio.
 */
function worthCompressing(raw: Uint8Array): boolean {
  if (raw.length <= 4 * SAMPLE_BYTES) return true;
  const mid = (raw.length - SAMPLE_BYTES) >>> 1;
  const sample = Buffer.from(raw.buffer, raw.byteOffset + mid, SAMPLE_BYTES);
  return lz4().compressSync(sample).length <= SAMPLE_BYTES - (SAMPLE_BYTES >>> 4);
}

function writeEntry(buf: Buffer, at: number, e: PackIndexEntry): void {
  digestBytes(e.digest).copy(buf, at);
  buf[at + 32] = KIND_CODE[e.kind];
  buf[at + 33] = CODEC_CODE[e.codec];
  buf.writeUInt16LE(0, at + 34);
  buf.writeUInt32LE(e.offset % 0x100000000, at + 36);
  buf.writeUInt32LE(Math.floor(e.offset / 0x100000000), at + 40);
  buf.writeUInt32LE(e.storedLength, at + 44);
  buf.writeUInt32LE(e.rawLength, at + 48);
}

/** A parsed pack footer: index length in bytes, format version, and sha256 of the index bytes. */
export interface PackFooter {
  indexLength: number;
  version: number;
  indexSha256: Buffer;
}

/**
 * Parses the last PACK_FOOTER_SIZE bytes of a pack (pass the footer or anything ending with it).
 * @throws E_FORMAT when too short, the magic is wrong, the version is not 1, or the index length is malformed.
 */
export function parsePackFooter(tail: Uint8Array): PackFooter {
  if (tail.length < PACK_FOOTER_SIZE) throw new AwcError('E_FORMAT', `pack is too short for a footer (${tail.length} bytes)`);
  const b = Buffer.from(tail.buffer, tail.byteOffset + tail.length - PACK_FOOTER_SIZE, PACK_FOOTER_SIZE);
  if (!b.subarray(40, 48).equals(PACK_MAGIC)) throw new AwcError('E_FORMAT', 'not an AWC pack (bad footer magic)');
  const version = b.readUInt16LE(36);
  if (version !== PACK_VERSION) throw new AwcError('E_FORMAT', `unsupported pack version ${version}`);
  const indexLength = b.readUInt32LE(32);
  if (indexLength % PACK_ENTRY_SIZE !== 0 || b.readUInt16LE(38) !== 0) throw new AwcError('E_FORMAT', 'malformed pack footer');
  return { indexLength, version, indexSha256: Buffer.from(b.subarray(0, 32)) };
}

/**
 * Reads a pack's index from its footer and validates it: magic, version, index checksum,
 * known kinds and codecs, blobs in order, non-overlapping and inside the data area.
 *
 * `bytes` is the whole pack, or only its tail (at least index + footer) when
 * `opts.packSize` gives the whole pack's size in bytes (a reader can fetch the footer, then
 * the index, with ranged GETs).
 * @returns the index entries in blob order (offsets and lengths in bytes).
 * @throws E_FORMAT on any structural problem (truncated pack, bad magic, version, entry), E_INTEGRITY when the index checksum does not match.
 */
export function parsePackIndex(bytes: Uint8Array, opts: { packSize?: number } = {}): PackIndexEntry[] {
  const packSize = opts.packSize ?? bytes.length;
  const footer = parsePackFooter(bytes);
  const { indexLength } = footer;
  if (indexLength + PACK_FOOTER_SIZE > bytes.length || packSize < bytes.length) {
    throw new AwcError('E_FORMAT', `pack index (${indexLength} bytes) does not fit in the pack (${bytes.length} bytes given)`);
  }
  const indexStart = bytes.length - PACK_FOOTER_SIZE - indexLength;
  const index = Buffer.from(bytes.buffer, bytes.byteOffset + indexStart, indexLength);
  if (!createHash('sha256').update(index).digest().equals(footer.indexSha256)) {
    throw new AwcError('E_INTEGRITY', 'pack index checksum mismatch');
  }
  const dataEnd = packSize - PACK_FOOTER_SIZE - indexLength;
  const entries: PackIndexEntry[] = [];
  let prevEnd = 0;
  for (let at = 0; at < indexLength; at += PACK_ENTRY_SIZE) {
    const kind = KIND_NAME[index[at + 32]];
    const codec = CODEC_NAME[index[at + 33]];
    const offsetHi = index.readUInt32LE(at + 40);
    const offset = index.readUInt32LE(at + 36) + offsetHi * 0x100000000;
    const storedLength = index.readUInt32LE(at + 44);
    const rawLength = index.readUInt32LE(at + 48);
    const n = at / PACK_ENTRY_SIZE;
    if (!kind || !codec || index.readUInt16LE(at + 34) !== 0 || offsetHi >= 0x200000) {
      throw new AwcError('E_FORMAT', `pack index entry ${n} is malformed`);
    }
    if (offset < prevEnd || offset + storedLength > dataEnd)
      throw new AwcError('E_FORMAT', `pack index entry ${n} lies outside the data area`);
    if (rawLength > MAX_BLOB_SIZE || (codec === 'none' && storedLength !== rawLength) || (codec === 'lz4' && storedLength < 4)) {
      throw new AwcError('E_FORMAT', `pack index entry ${n} has inconsistent lengths`);
    }
    prevEnd = offset + storedLength;
    entries.push({ digest: digestFromBytes(index.subarray(at, at + 32)), kind, codec, offset, storedLength, rawLength });
  }
  return entries;
}

/**
 * Decodes one blob's stored bytes (exactly `entry.storedLength` bytes, as read from the
 * pack at `entry.offset`) into its raw bytes and verifies them against `entry.digest`.
 * @returns the raw bytes (`entry.rawLength` bytes); may share memory with `stored` for codec none.
 * @throws E_FORMAT when `stored` has the wrong length or the codec is unknown; E_INTEGRITY when the bytes do not decode or do not match the digest.
 */
export function decodeBlob(stored: Uint8Array, entry: Pick<PackIndexEntry, 'digest' | 'codec' | 'storedLength' | 'rawLength'>): Buffer {
  if (stored.length !== entry.storedLength) {
    throw new AwcError('E_FORMAT', `blob ${entry.digest}: got ${stored.length} stored bytes, expected ${entry.storedLength}`);
  }
  const view = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  let raw: Buffer;
  if (entry.codec === 'none') {
    raw = view;
  } else if (entry.codec === 'lz4') {
    if (view.length < 4 || view.readUInt32LE(0) !== entry.rawLength) {
      throw new AwcError('E_INTEGRITY', `blob ${entry.digest}: lz4 length prefix does not match the raw length ${entry.rawLength}`);
    }
    try {
      raw = lz4().uncompressSync(view);
    } catch (err) {
      throw new AwcError('E_INTEGRITY', `blob ${entry.digest}: lz4 data is corrupt`, { cause: err });
    }
  } else {
    throw new AwcError('E_FORMAT', `blob ${entry.digest}: unknown codec ${JSON.stringify(entry.codec)}`);
  }
  if (raw.length !== entry.rawLength) {
    throw new AwcError('E_INTEGRITY', `blob ${entry.digest}: decoded ${raw.length} bytes, expected ${entry.rawLength}`);
  }
  verifyDigest(raw, entry.digest);
  return raw;
}
