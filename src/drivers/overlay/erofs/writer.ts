/**
 * Writes the EROFS image of a layer straight from its entries: no layer directory, no
 * mkfs.erofs. Metadata only, as composefs writes it: directories, placeholder files that have a
 * size but no data (chunk-based inodes whose chunks are all holes: overlayfs reads a metacopy
 * file's data from the content lower, never from this one), symlinks, device nodes, fifos,
 * sockets, hardlinks, owners, modes, nanosecond mtimes and xattrs; and the few data files a
 * layer holds (a git-proof snapshot's rewritten `.git/index`: flat inodes whose bytes, made once
 * the layout is known, are in the data area). O(entries) time and memory,
 * one buffer written once; the same entries always give the same bytes (inodes in breadth-first
 * order of byte-sorted names, xattrs sorted, fixed build time and UUID).
 * Layout and format: docs/explanation/layer-images.md#our-own-writer, ./format.ts.
 */
import { open, rename, rm } from 'node:fs/promises';
import { AwcError } from '../../../core/errors.js';
import {
  BLOCK,
  CHUNK_BASED,
  CHUNK_BLKBITS_MAX,
  COMPACT_INODE_BYTES,
  DIRENT_BYTES,
  EXTENDED_INODE_BYTES,
  FLAT_INLINE,
  FLAT_PLAIN,
  FT,
  NULL_ADDR,
  S_IF,
  SLOT,
  SUPER_BYTES,
  SUPER_OFFSET,
  XATTR_HEADER_BYTES,
  encodeDev,
  writeInode,
  writeSuperBlock,
  writeXattrEntry,
  xattrEntryBytes,
  xattrFilterBit,
  type XattrRecord,
} from './format.js';
import { buildTreeWithPaths, pathStat, type ErofsEntry, type Node } from './tree.js';

export type { ErofsEntry, ErofsEntryType, ErofsFileData, ErofsInodeStat } from './tree.js';

/** Where an inode's pieces go, decided by {@link layout}. */
interface Placed {
  node: Node;
  /** Byte offset of the inode in the image (a multiple of 32); nid = pos / 32. */
  pos: number;
  extended: boolean;
  /** Shared xattr ids (into the shared area) and inline xattrs, in the order written. */
  shared: number[];
  inline: XattrRecord[];
  filter: number;
  xattrBytes: number;
  /** Bytes kept after the inode and its xattrs: a directory's last dirents, a symlink's target, a placeholder's chunk addresses. */
  tail: number;
  /** Full data blocks (a directory's dirent blocks, or a long symlink's target), and the first of them. */
  blocks: number;
  blkaddr: number;
  /** A directory's dirents, cut into blocks (the last one is the tail when `tail` > 0). */
  dirBlocks?: Dirent[][];
  /** A placeholder's chunk count and chunk format (block bits above 4 KiB). */
  chunks: number;
  chunkFormat: number;
}

interface Dirent {
  name: Buffer;
  node: Node;
}

/** The image's layout: every inode placed, the shared xattrs, and where each area starts. */
interface Layout {
  placed: Placed[];
  sharedXattrs: XattrRecord[];
  /** Byte offset of the shared xattr area (right after the last inode). */
  sharedStart: number;
  /** First block of the data area (directory blocks, long symlinks). */
  dataBlock: number;
  blocks: number;
  buildTimeSec: bigint;
  buildTimeNsec: number;
}

/** What {@link writeErofsImage} wrote. */
export interface ErofsImageStats {
  /** Image size in bytes. */
  bytes: number;
  inodes: number;
  /** Distinct xattrs (name and value) stored once and referenced by id. */
  sharedXattrs: number;
}

/**
 * Returns the bytes of the EROFS image of `entries` (see {@link ErofsEntry}: every path's
 * parent directory listed, the root as path ''). Inodes are compact (32 bytes) when owner,
 * link count and size fit 16/16/16/32 bits and the mtime equals the root's (the build time),
 * else extended (64 bytes, nanosecond mtime). An xattr (name and value) that more than one
 * inode carries is stored once, in the shared area. Cost: O(entries + xattr bytes).
 * @throws E_FORMAT for entries that do not form a tree (a missing parent, a path twice, a
 *   hardlink to no regular file), E_UNSUPPORTED for a name over 255 bytes, an xattr outside the
 *   user/trusted/security/ACL namespaces or over the format's limits, or an image over 16 TiB
 */
export function erofsImage(entries: Iterable<ErofsEntry>): Buffer {
  return imageOf(entries).img;
}

function imageOf(entries: Iterable<ErofsEntry>): { img: Buffer; stats: ErofsImageStats } {
  const { root, byPath } = buildTreeWithPaths(entries);
  const lay = layout(root);
  const img = Buffer.alloc(lay.blocks * BLOCK);
  writeSuperBlock(img, {
    rootNid: root.nid,
    inodes: lay.placed.length,
    buildTimeSec: lay.buildTimeSec,
    buildTimeNsec: lay.buildTimeNsec,
    blocks: lay.blocks,
    xattrBlkaddr: Math.floor(lay.sharedStart / BLOCK),
  });
  for (const p of lay.placed) writePlaced(img, p);
  let o = lay.sharedStart;
  for (const x of lay.sharedXattrs) o = writeXattrEntry(img, o, x);
  const statOf = (path: string | Buffer) => pathStat(byPath, path);
  for (const p of lay.placed) writeDataBlocks(img, p, statOf);
  return { img, stats: { bytes: img.length, inodes: lay.placed.length, sharedXattrs: lay.sharedXattrs.length } };
}

/**
 * Writes the EROFS image of `entries` ({@link erofsImage}) to `outFile`: to a temporary file
 * (0600) beside it, fsynced, then renamed into place; on failure nothing is left.
 * @throws as {@link erofsImage}; E_NO_SPACE and other file system errors as they come
 */
export async function writeErofsImage(entries: Iterable<ErofsEntry>, outFile: string): Promise<ErofsImageStats> {
  const { img, stats } = imageOf(entries);
  await writeImageFile(img, outFile);
  return stats;
}

/**
 * Writes `img` to `outFile`: to a temporary file (0600) beside it, fsynced, then renamed into
 * place; on failure nothing is left. @throws the file system's errors (E_NO_SPACE and others, raw)
 */
export async function writeImageFile(img: Buffer, outFile: string): Promise<void> {
  const tmp = `${outFile}.tmp-${process.pid}-${Date.now()}`;
  const fh = await open(tmp, 'wx', 0o600);
  try {
    await fh.writeFile(img);
    await fh.sync();
    await fh.close();
    await rename(tmp, outFile);
  } catch (err) {
    await fh.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
}

/** Places every inode (breadth-first from the root), then the shared xattrs, then the data blocks. */
function layout(root: Node): Layout {
  const order = breadthFirst(root);
  const { shared, ids } = sharedXattrs(order);
  const buildTimeSec = root.mtimeSec >= 0n ? root.mtimeSec : 0n;
  const buildTimeNsec = root.mtimeSec >= 0n ? root.mtimeNsec : 0;
  const placed: Placed[] = [];
  let pos = SUPER_OFFSET + SUPER_BYTES;
  let ino = 0;
  for (const node of order) {
    const p = shape(node, ids, buildTimeSec, buildTimeNsec);
    pos = place(p, pos);
    node.nid = p.pos / SLOT;
    node.ino = ++ino;
    placed.push(p);
  }
  let sharedStart = roundUp(pos, 4);
  // shared ids are 4-byte offsets from the start of the block the area begins in
  const base = Math.floor(sharedStart / BLOCK) * BLOCK;
  let sharedEnd = sharedStart;
  for (const x of shared) sharedEnd += xattrEntryBytes(x);
  for (const p of placed) p.shared = p.shared.map((off) => (sharedStart - base + off) / 4);
  if (shared.length === 0) sharedStart = sharedEnd = roundUp(pos, 4);
  const dataBlock = Math.ceil(sharedEnd / BLOCK);
  let blk = dataBlock;
  for (const p of placed) {
    if (p.blocks > 0) p.blkaddr = blk;
    blk += p.blocks;
  }
  if (blk >= 2 ** 32) throw new AwcError('E_UNSUPPORTED', `a layer image of ${blk} blocks is over EROFS's 2^32`);
  return { placed, sharedXattrs: shared, sharedStart, dataBlock, blocks: blk, buildTimeSec, buildTimeNsec };
}

/** The inodes in the order they are laid out: the root, then each directory's children by name, level by level; a hardlinked inode once. */
function breadthFirst(root: Node): Node[] {
  const order: Node[] = [root];
  const seen = new Set<Node>([root]);
  for (let i = 0; i < order.length; i++) {
    for (const c of order[i]!.children ?? []) {
      if (seen.has(c.node)) continue;
      seen.add(c.node);
      order.push(c.node);
    }
  }
  return order;
}

/**
 * The xattrs (name and value) that more than one inode carries, sorted by name then value, with
 * each one's byte offset in the shared area; `ids` maps an xattr's key to that offset.
 */
function sharedXattrs(order: Node[]): { shared: XattrRecord[]; ids: Map<string, number> } {
  const counts = new Map<string, { x: XattrRecord; n: number }>();
  for (const node of order)
    for (const x of node.xattrs) {
      const k = x.key;
      const c = counts.get(k);
      if (c) c.n++;
      else counts.set(k, { x, n: 1 });
    }
  const shared = [...counts.entries()].filter(([, c]) => c.n > 1).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const ids = new Map<string, number>();
  let off = 0;
  for (const [k, c] of shared) {
    ids.set(k, off);
    off += xattrEntryBytes(c.x);
  }
  return { shared: shared.map(([, c]) => c.x), ids };
}

/** An inode's sizes and kind before it is placed. */
function shape(node: Node, ids: Map<string, number>, btSec: bigint, btNsec: number): Placed {
  const shared: number[] = [];
  const inline: XattrRecord[] = [];
  let filter = 0;
  for (const x of node.xattrs) {
    filter |= 1 << xattrFilterBit(x);
    const id = ids.get(x.key);
    if (id !== undefined && shared.length < 0x7f) shared.push(id);
    else inline.push(x);
  }
  let xattrBytes = 0;
  if (node.xattrs.length > 0) xattrBytes = XATTR_HEADER_BYTES + 4 * shared.length + inline.reduce((s, x) => s + xattrEntryBytes(x), 0);
  const p: Placed = {
    node,
    pos: 0,
    extended: true,
    shared,
    inline,
    filter: ~filter >>> 0,
    xattrBytes,
    tail: 0,
    blocks: 0,
    blkaddr: 0,
    chunks: 0,
    chunkFormat: 0,
  };
  if (node.type === 'dir') shapeDir(p);
  else if (node.type === 'symlink') p.tail = node.target!.length;
  else if (node.type === 'file' && node.data) p.blocks = Math.ceil(node.size / BLOCK);
  else if (node.type === 'file' && node.size > 0) shapeChunks(p);
  const size = node.type === 'dir' ? p.blocks * BLOCK + p.tail : node.size;
  p.extended = !(
    node.mtimeSec === btSec &&
    node.mtimeNsec === btNsec &&
    node.uid <= 0xffff &&
    node.gid <= 0xffff &&
    node.nlink <= 0xffff &&
    size <= 0xffffffff
  );
  return p;
}

/** Cuts a directory's dirents into blocks; the last one stays inline after the inode when it fills at most half a block. */
function shapeDir(p: Placed): void {
  const blocks: Dirent[][] = [[]];
  let used = 0;
  for (const d of p.node.children!) {
    const len = DIRENT_BYTES + d.name.length;
    if (used + len > BLOCK) {
      blocks.push([]);
      used = 0;
    }
    blocks[blocks.length - 1]!.push(d);
    used += len;
  }
  p.dirBlocks = blocks;
  p.blocks = blocks.length - 1;
  p.tail = used;
  if (used > BLOCK / 2) {
    p.blocks++;
    p.tail = 0;
  }
}

/** A placeholder's chunks: as few as the format allows (chunks of up to 8 TiB), each a hole. */
function shapeChunks(p: Placed): void {
  const size = p.node.size;
  let bits = 12;
  while (bits < 12 + CHUNK_BLKBITS_MAX && 2 ** bits < size) bits++;
  p.chunkFormat = bits - 12;
  p.chunks = Math.ceil(size / 2 ** bits);
  p.tail = 4 * p.chunks;
}

/**
 * Places inode `p` at the first slot from `pos`, moved to the next block when the inode, its
 * xattrs and its inline tail would cross a block boundary (the kernel reads an inline tail
 * within one block); a tail that cannot fit one block with its inode moves to a data block.
 * Returns the byte after the inode.
 */
function place(p: Placed, pos: number): number {
  const head = (p.extended ? EXTENDED_INODE_BYTES : COMPACT_INODE_BYTES) + p.xattrBytes;
  if (p.tail > 0 && head + p.tail > BLOCK && p.node.type !== 'file') {
    p.blocks++;
    p.tail = 0;
  }
  let at = roundUp(pos, SLOT);
  const total = head + p.tail;
  if (total <= BLOCK && (at % BLOCK) + total > BLOCK) at = roundUp(at, BLOCK);
  p.pos = at;
  return at + total;
}

function roundUp(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}

/** Writes inode `p`, its xattr body and its inline tail. */
function writePlaced(img: Buffer, p: Placed): void {
  const n = p.node;
  const isize = p.extended ? EXTENDED_INODE_BYTES : COMPACT_INODE_BYTES;
  let layout = p.tail > 0 ? FLAT_INLINE : FLAT_PLAIN;
  let iu = p.blocks > 0 ? p.blkaddr : 0;
  if (p.chunks > 0) {
    layout = CHUNK_BASED;
    iu = p.chunkFormat;
  } else if (n.type === 'chardev' || n.type === 'blockdev') iu = encodeDev(n.major, n.minor);
  const size = n.type === 'dir' ? p.blocks * BLOCK + p.tail : n.type === 'symlink' ? n.target!.length : n.size;
  const xattrIcount = p.xattrBytes === 0 ? 0 : (p.xattrBytes - XATTR_HEADER_BYTES) / 4 + 1;
  writeInode(img, p.pos, {
    extended: p.extended,
    layout,
    xattrIcount,
    mode: S_IF[n.type] | n.mode,
    nlink: n.nlink,
    size,
    iu,
    ino: n.ino,
    uid: n.uid,
    gid: n.gid,
    mtimeSec: n.mtimeSec,
    mtimeNsec: n.mtimeNsec,
  });
  let o = p.pos + isize;
  if (p.xattrBytes > 0) {
    img.writeUInt32LE(p.filter, o);
    img.writeUInt8(p.shared.length, o + 4);
    o += XATTR_HEADER_BYTES;
    for (const id of p.shared) {
      img.writeUInt32LE(id, o);
      o += 4;
    }
    for (const x of p.inline) o = writeXattrEntry(img, o, x);
  }
  if (p.tail === 0) return;
  if (n.type === 'dir') writeDirents(img, o, p.dirBlocks![p.dirBlocks!.length - 1]!);
  else if (n.type === 'symlink') n.target!.copy(img, o);
  else for (let i = 0; i < p.chunks; i++) img.writeUInt32LE(NULL_ADDR, o + 4 * i);
}

/**
 * Writes a directory's full blocks, a long symlink's target, or a data file's bytes in its data blocks.
 * @throws E_FORMAT when a data file's bytes are not its size
 */
function writeDataBlocks(img: Buffer, p: Placed, statOf: Parameters<NonNullable<Node['data']>>[0]): void {
  if (p.blocks === 0) return;
  if (p.node.type === 'symlink') {
    p.node.target!.copy(img, p.blkaddr * BLOCK);
    return;
  }
  if (p.node.type === 'file') {
    const data = p.node.data!(statOf);
    if (data.length !== p.node.size)
      throw new AwcError('E_FORMAT', `cannot write a layer image: a file of ${p.node.size} bytes was given ${data.length}`);
    data.copy(img, p.blkaddr * BLOCK);
    return;
  }
  for (let i = 0; i < p.blocks; i++) writeDirents(img, (p.blkaddr + i) * BLOCK, p.dirBlocks![i]!);
}

/** Writes one block's (or the tail's) dirents at `o`: the 12-byte entries, then the names, offsets relative to `o`. */
function writeDirents(img: Buffer, o: number, ds: Dirent[]): void {
  let nameoff = ds.length * DIRENT_BYTES;
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i]!;
    const e = o + i * DIRENT_BYTES;
    img.writeBigUInt64LE(BigInt(d.node.nid), e);
    img.writeUInt16LE(nameoff, e + 8);
    img.writeUInt8(FT[d.node.type], e + 10);
    d.name.copy(img, o + nameoff);
    nameoff += d.name.length;
  }
}
