/**
 * The EROFS on-disk format, as far as the layer image writer (./writer.ts) uses it: the
 * superblock, the 32- and 64-byte inodes, the inline xattr body, xattr entries and
 * directory entries, all little-endian. Sizes and field offsets are those of the kernel's
 * fs/erofs/erofs_fs.h (the same header erofs-utils and composefs's libcomposefs carry);
 * docs/explanation/layer-images.md#our-own-writer says what the writer puts in them.
 */

/** Block size: 4096 bytes, the page size the kernel reads metadata in (blkszbits 12). */
export const BLOCK = 4096;
export const BLOCK_BITS = 12;
/** Inodes start on 32-byte slots; a node id (nid) is an inode's byte offset from the metadata start / 32. */
export const SLOT = 32;
/** The superblock's byte offset in the image, and its size. */
export const SUPER_OFFSET = 1024;
export const SUPER_BYTES = 128;
export const EROFS_MAGIC = 0xe0f5e1e2;

/** feature_compat: inode times are mtimes; inodes carry the xattr name filter. */
export const COMPAT_MTIME = 0x2;
export const COMPAT_XATTR_FILTER = 0x4;
/** feature_incompat: chunk-based regular files (read since Linux 5.15). */
export const INCOMPAT_CHUNKED_FILE = 0x4;

/** i_format data layouts. */
export const FLAT_PLAIN = 0;
export const FLAT_INLINE = 2;
export const CHUNK_BASED = 4;

export const COMPACT_INODE_BYTES = 32;
export const EXTENDED_INODE_BYTES = 64;
/** The inline xattr body's header (h_name_filter, h_shared_count, 7 reserved bytes). */
export const XATTR_HEADER_BYTES = 12;
export const DIRENT_BYTES = 12;
/** A chunk's block address meaning "a hole": placeholders' chunks are all holes. */
export const NULL_ADDR = 0xffffffff;
/** chunk format's block-bits field: chunk size = block size << (format & 0x1f). */
export const CHUNK_BLKBITS_MAX = 31;

/** Directory entry file types (the kernel's FT_*). */
export const FT = { file: 1, dir: 2, chardev: 3, blockdev: 4, fifo: 5, socket: 6, symlink: 7 } as const;

/** S_IF* type bits of i_mode. */
export const S_IF = {
  file: 0o100000,
  dir: 0o040000,
  chardev: 0o020000,
  blockdev: 0o060000,
  fifo: 0o010000,
  socket: 0o140000,
  symlink: 0o120000,
} as const;

/** xattr name prefixes and their e_name_index; a name takes the longest that matches. */
export const XATTR_PREFIXES: readonly [string, number][] = [
  ['user.', 1],
  ['system.posix_acl_access', 2],
  ['system.posix_acl_default', 3],
  ['trusted.', 4],
  ['security.', 6],
];

/** Seed of the xattr name filter's hash (xxh32(name suffix, seed + index) & 31 gives the bit). */
export const XATTR_FILTER_SEED = 0x25bbe08f;

/** What the superblock holds (the rest is zero: no UUID, no volume name, no extra devices). */
export interface SuperBlock {
  rootNid: number;
  inodes: number;
  buildTimeSec: bigint;
  buildTimeNsec: number;
  blocks: number;
  xattrBlkaddr: number;
}

/** Writes the superblock at {@link SUPER_OFFSET} of `img` (metadata starts at block 0). */
export function writeSuperBlock(img: Buffer, sb: SuperBlock): void {
  const o = SUPER_OFFSET;
  img.writeUInt32LE(EROFS_MAGIC, o);
  img.writeUInt32LE(0, o + 4); // checksum: not checked without COMPAT_SB_CHKSUM
  img.writeUInt32LE(COMPAT_MTIME | COMPAT_XATTR_FILTER, o + 8);
  img.writeUInt8(BLOCK_BITS, o + 12);
  img.writeUInt8(0, o + 13); // sb_extslots
  img.writeUInt16LE(sb.rootNid, o + 14);
  img.writeBigUInt64LE(BigInt(sb.inodes), o + 16);
  img.writeBigInt64LE(sb.buildTimeSec, o + 24);
  img.writeUInt32LE(sb.buildTimeNsec, o + 32);
  img.writeUInt32LE(sb.blocks, o + 36);
  img.writeUInt32LE(0, o + 40); // meta_blkaddr
  img.writeUInt32LE(sb.xattrBlkaddr, o + 44);
  // uuid (48..63) and volume_name (64..79) stay zero
  img.writeUInt32LE(INCOMPAT_CHUNKED_FILE, o + 80);
}

/** The fields of one on-disk inode. */
export interface InodeFields {
  extended: boolean;
  layout: number;
  xattrIcount: number;
  /** st_mode with its type bits. */
  mode: number;
  nlink: number;
  size: number;
  /** raw_blkaddr, rdev (new_encode_dev) or the chunk format, by the inode's kind. */
  iu: number;
  ino: number;
  uid: number;
  gid: number;
  mtimeSec: bigint;
  mtimeNsec: number;
}

/** Writes an inode at byte `o` of `img` (32 bytes compact, 64 extended). */
export function writeInode(img: Buffer, o: number, f: InodeFields): void {
  img.writeUInt16LE((f.layout << 1) | (f.extended ? 1 : 0), o);
  img.writeUInt16LE(f.xattrIcount, o + 2);
  img.writeUInt16LE(f.mode, o + 4);
  if (f.extended) {
    img.writeBigUInt64LE(BigInt(f.size), o + 8);
    img.writeUInt32LE(f.iu, o + 16);
    img.writeUInt32LE(f.ino, o + 20);
    img.writeUInt32LE(f.uid, o + 24);
    img.writeUInt32LE(f.gid, o + 28);
    img.writeBigInt64LE(f.mtimeSec, o + 32);
    img.writeUInt32LE(f.mtimeNsec, o + 40);
    img.writeUInt32LE(f.nlink, o + 44);
  } else {
    img.writeUInt16LE(f.nlink, o + 6);
    img.writeUInt32LE(f.size, o + 8);
    img.writeUInt32LE(f.iu, o + 16);
    img.writeUInt32LE(f.ino, o + 20);
    img.writeUInt16LE(f.uid, o + 24);
    img.writeUInt16LE(f.gid, o + 26);
  }
}

/** Linux's new_encode_dev of (major, minor), the form EROFS stores a device number in. */
export function encodeDev(major: number, minor: number): number {
  return ((minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)) >>> 0;
}

/** An xattr as EROFS stores it: prefix index, the name after the prefix, the value. */
export interface XattrRecord {
  index: number;
  suffix: Buffer;
  value: Buffer;
  /** Index, suffix and value as one string (one char per byte): the identity of a shared xattr, and its sort key. */
  key: string;
}

/** Bytes of an xattr entry (4-byte header, name suffix, value), padded to 4. */
export function xattrEntryBytes(x: XattrRecord): number {
  return (4 + x.suffix.length + x.value.length + 3) & ~3;
}

/** Writes xattr entry `x` at byte `o` of `img` (the padding stays zero); returns the byte after it. */
export function writeXattrEntry(img: Buffer, o: number, x: XattrRecord): number {
  img.writeUInt8(x.suffix.length, o);
  img.writeUInt8(x.index, o + 1);
  img.writeUInt16LE(x.value.length, o + 2);
  x.suffix.copy(img, o + 4);
  x.value.copy(img, o + 4 + x.suffix.length);
  return o + xattrEntryBytes(x);
}

/** The bit of the xattr name filter that name `x` sets (the kernel looks a name up only when its bit is clear in h_name_filter). */
export function xattrFilterBit(x: { index: number; suffix: Buffer }): number {
  return xxh32(x.suffix, (XATTR_FILTER_SEED + x.index) >>> 0) & 31;
}

const P1 = 2654435761;
const P2 = 2246822519;
const P3 = 3266489917;
const P4 = 668265263;
const P5 = 374761393;
const rotl = (x: number, r: number): number => ((x << r) | (x >>> (32 - r))) >>> 0;
const mul = (a: number, b: number): number => Math.imul(a, b) >>> 0;
const round = (seed: number, input: number): number => mul(rotl((seed + mul(input, P2)) >>> 0, 13), P1);

/** xxHash32 of `b` with `seed`, as the kernel's lib/xxhash.c computes it. */
export function xxh32(b: Buffer, seed: number): number {
  let p = 0;
  const end = b.length;
  let h: number;
  if (end >= 16) {
    let v1 = (seed + P1 + P2) >>> 0;
    let v2 = (seed + P2) >>> 0;
    let v3 = seed >>> 0;
    let v4 = (seed - P1) >>> 0;
    for (; p <= end - 16; p += 16) {
      v1 = round(v1, b.readUInt32LE(p));
      v2 = round(v2, b.readUInt32LE(p + 4));
      v3 = round(v3, b.readUInt32LE(p + 8));
      v4 = round(v4, b.readUInt32LE(p + 12));
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) >>> 0;
  } else {
    h = (seed + P5) >>> 0;
  }
  h = (h + end) >>> 0;
  for (; p + 4 <= end; p += 4) h = mul(rotl((h + mul(b.readUInt32LE(p), P3)) >>> 0, 17), P4);
  for (; p < end; p++) h = mul(rotl((h + mul(b[p]!, P5)) >>> 0, 11), P1);
  h = mul((h ^ (h >>> 15)) >>> 0, P2);
  h = mul((h ^ (h >>> 13)) >>> 0, P3);
  return (h ^ (h >>> 16)) >>> 0;
}
