/**
 * The FUSE kernel protocol, as much of it as the content FUSE server speaks.
 *
 * Struct layouts follow the kernel's `include/uapi/linux/fuse.h` (protocol 7.x, x86-64 and
 * every other little-endian Linux; all structs are padded to 64-bit boundaries, so the
 * layout is the same for 32- and 64-bit servers). Every multi-byte field is little-endian
 * on the machines we run on; we read and write them with explicit LE accessors.
 *
 * The helpers here encode replies into caller-provided buffers so the hot path (LOOKUP,
 * READ) allocates nothing per request.
 */

/** Protocol major version we speak. */
export const FUSE_KERNEL_VERSION = 7;
/** Oldest minor version we accept: 7.28 added FUSE_MAX_PAGES and `max_pages`. */
export const FUSE_MIN_MINOR_VERSION = 28;
/** Node id of the root directory (fixed by the protocol). */
export const FUSE_ROOT_ID = 1;
/** The device read buffer must be at least this large (and ≥ in_header + write_in + max_write). */
export const FUSE_MIN_READ_BUFFER = 8192;

/** Opcodes of `enum fuse_opcode`. */
export const Op = {
  LOOKUP: 1,
  FORGET: 2,
  GETATTR: 3,
  SETATTR: 4,
  READLINK: 5,
  SYMLINK: 6,
  MKNOD: 8,
  MKDIR: 9,
  UNLINK: 10,
  RMDIR: 11,
  RENAME: 12,
  LINK: 13,
  OPEN: 14,
  READ: 15,
  WRITE: 16,
  STATFS: 17,
  RELEASE: 18,
  FSYNC: 20,
  SETXATTR: 21,
  GETXATTR: 22,
  LISTXATTR: 23,
  REMOVEXATTR: 24,
  FLUSH: 25,
  INIT: 26,
  OPENDIR: 27,
  READDIR: 28,
  RELEASEDIR: 29,
  FSYNCDIR: 30,
  GETLK: 31,
  SETLK: 32,
  SETLKW: 33,
  ACCESS: 34,
  CREATE: 35,
  INTERRUPT: 36,
  BMAP: 37,
  DESTROY: 38,
  IOCTL: 39,
  POLL: 40,
  NOTIFY_REPLY: 41,
  BATCH_FORGET: 42,
  FALLOCATE: 43,
  READDIRPLUS: 44,
  RENAME2: 45,
  LSEEK: 46,
  COPY_FILE_RANGE: 47,
  SETUPMAPPING: 48,
  REMOVEMAPPING: 49,
  SYNCFS: 50,
  TMPFILE: 51,
  STATX: 52,
} as const;

/** Lower-case name of every known opcode, indexed by opcode (used for stats and 'op' events). */
export const OP_NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const [name, code] of Object.entries(Op)) names[code] = name.toLowerCase();
  for (let i = 0; i < names.length; i++) if (names[i] === undefined) names[i] = `op${i}`;
  return names;
})();

/** Name of an opcode for stats: the table entry, or `op<N>` for unknown ones. */
export function opName(opcode: number): string {
  return OP_NAMES[opcode] ?? `op${opcode}`;
}

/** INIT flags (`fuse_init_in.flags` / `fuse_init_out.flags`, the low 32 bits). */
export const InitFlag = {
  ASYNC_READ: 1 << 0,
  POSIX_LOCKS: 1 << 1,
  FILE_OPS: 1 << 2,
  ATOMIC_O_TRUNC: 1 << 3,
  EXPORT_SUPPORT: 1 << 4,
  BIG_WRITES: 1 << 5,
  DONT_MASK: 1 << 6,
  SPLICE_WRITE: 1 << 7,
  SPLICE_MOVE: 1 << 8,
  SPLICE_READ: 1 << 9,
  FLOCK_LOCKS: 1 << 10,
  HAS_IOCTL_DIR: 1 << 11,
  AUTO_INVAL_DATA: 1 << 12,
  DO_READDIRPLUS: 1 << 13,
  READDIRPLUS_AUTO: 1 << 14,
  ASYNC_DIO: 1 << 15,
  WRITEBACK_CACHE: 1 << 16,
  NO_OPEN_SUPPORT: 1 << 17,
  PARALLEL_DIROPS: 1 << 18,
  HANDLE_KILLPRIV: 1 << 19,
  POSIX_ACL: 1 << 20,
  ABORT_ERROR: 1 << 21,
  MAX_PAGES: 1 << 22,
  CACHE_SYMLINKS: 1 << 23,
  NO_OPENDIR_SUPPORT: 1 << 24,
  EXPLICIT_INVAL_DATA: 1 << 25,
  MAP_ALIGNMENT: 1 << 26,
  SUBMOUNTS: 1 << 27,
  HANDLE_KILLPRIV_V2: 1 << 28,
  SETXATTR_EXT: 1 << 29,
  INIT_EXT: 1 << 30,
  INIT_RESERVED: 2 ** 31,
} as const;

/** Linux errno values we reply with (positive; replies carry them negated). */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EBADF: 9,
  EAGAIN: 11,
  EACCES: 13,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  EROFS: 30,
  ERANGE: 34,
  ENOSYS: 38,
  ENXIO: 6,
  ENODATA: 61,
  EOPNOTSUPP: 95,
} as const;

/** File type bits of `st_mode`. */
export const S_IFDIR = 0o040000;
/** File type bits of `st_mode`. */
export const S_IFREG = 0o100000;
/** `d_type` of a directory in `fuse_dirent.type` (DT_DIR). */
export const DT_DIR = 4;
/** `d_type` of a regular file in `fuse_dirent.type` (DT_REG). */
export const DT_REG = 8;

// ---- struct sizes -------------------------------------------------------------------------

/** sizeof(struct fuse_in_header). */
export const IN_HEADER_SIZE = 40;
/** sizeof(struct fuse_out_header). */
export const OUT_HEADER_SIZE = 16;
/** sizeof(struct fuse_attr). */
export const ATTR_SIZE = 88;
/** sizeof(struct fuse_entry_out) = 40 + fuse_attr. */
export const ENTRY_OUT_SIZE = 40 + ATTR_SIZE;
/** sizeof(struct fuse_attr_out) = 16 + fuse_attr. */
export const ATTR_OUT_SIZE = 16 + ATTR_SIZE;
/** sizeof(struct fuse_init_in) for protocol ≥ 7.36 (earlier kernels send 16 bytes). */
export const INIT_IN_SIZE = 64;
/** sizeof(struct fuse_init_out). */
export const INIT_OUT_SIZE = 64;
/** sizeof(struct fuse_kstatfs) = sizeof(struct fuse_statfs_out). */
export const STATFS_OUT_SIZE = 80;
/** sizeof(struct fuse_read_in). */
export const READ_IN_SIZE = 40;
/** sizeof(struct fuse_write_in). */
export const WRITE_IN_SIZE = 40;
/** offsetof(struct fuse_dirent, name). */
export const DIRENT_NAME_OFFSET = 24;

// ---- fuse_in_header -------------------------------------------------------------------------
//   u32 len; u32 opcode; u64 unique; u64 nodeid; u32 uid; u32 gid; u32 pid;
//   u16 total_extlen; u16 padding;

/** Decoded `struct fuse_in_header`. 64-bit ids are numbers: the kernel's counters stay far below 2^53. */
export interface InHeader {
  len: number;
  opcode: number;
  unique: number;
  nodeid: number;
  uid: number;
  gid: number;
  pid: number;
  totalExtlen: number;
}

/** Reads an unsigned 64-bit little-endian value as a number (exact below 2^53). */
export function readU64(buf: Buffer, off: number): number {
  return buf.readUInt32LE(off) + buf.readUInt32LE(off + 4) * 0x1_0000_0000;
}

/** Writes a non-negative integer (< 2^53) as an unsigned 64-bit little-endian value. */
export function writeU64(buf: Buffer, off: number, v: number): void {
  buf.writeUInt32LE(v >>> 0, off);
  buf.writeUInt32LE(Math.floor(v / 0x1_0000_0000) >>> 0, off + 4);
}

/** Decodes the `fuse_in_header` at the start of a request. */
export function decodeInHeader(buf: Buffer): InHeader {
  return {
    len: buf.readUInt32LE(0),
    opcode: buf.readUInt32LE(4),
    unique: readU64(buf, 8),
    nodeid: readU64(buf, 16),
    uid: buf.readUInt32LE(24),
    gid: buf.readUInt32LE(28),
    pid: buf.readUInt32LE(32),
    totalExtlen: buf.readUInt16LE(36),
  };
}

/** Encodes a `fuse_in_header` (used by tests that feed synthetic requests). */
export function encodeInHeader(buf: Buffer, h: InHeader): void {
  buf.writeUInt32LE(h.len, 0);
  buf.writeUInt32LE(h.opcode, 4);
  writeU64(buf, 8, h.unique);
  writeU64(buf, 16, h.nodeid);
  buf.writeUInt32LE(h.uid, 24);
  buf.writeUInt32LE(h.gid, 28);
  buf.writeUInt32LE(h.pid, 32);
  buf.writeUInt16LE(h.totalExtlen, 36);
  buf.writeUInt16LE(0, 38);
}

// ---- fuse_out_header --------------------------------------------------------------------------
//   u32 len; i32 error; u64 unique;

/** Writes a `fuse_out_header` at offset 0: total reply length, negated errno (0 = ok), request id. */
export function encodeOutHeader(buf: Buffer, len: number, error: number, unique: number): void {
  buf.writeUInt32LE(len, 0);
  buf.writeInt32LE(error, 4);
  writeU64(buf, 8, unique);
}

// ---- notifications (server → kernel, unique 0) ---------------------------------------------------
//   fuse_out_header { len, error = notify code, unique = 0 }
//   FUSE_NOTIFY_INVAL_ENTRY (3): struct fuse_notify_inval_entry_out { u64 parent; u32 namelen; u32 flags; } name NUL

/** Notification code FUSE_NOTIFY_INVAL_ENTRY (include/uapi/linux/fuse.h). */
export const NOTIFY_INVAL_ENTRY = 3;

/**
 * Encodes a FUSE_NOTIFY_INVAL_ENTRY message (the kernel drops its cached dentry `name` under
 * node `parent`, so the next lookup of it reaches the server) into `buf`.
 * @returns the message length in bytes.
 */
export function encodeNotifyInvalEntry(buf: Buffer, parent: number, name: string): number {
  const nameLen = Buffer.byteLength(name);
  const len = OUT_HEADER_SIZE + 16 + nameLen + 1;
  encodeOutHeader(buf, len, NOTIFY_INVAL_ENTRY, 0);
  writeU64(buf, OUT_HEADER_SIZE, parent);
  buf.writeUInt32LE(nameLen, OUT_HEADER_SIZE + 8);
  buf.writeUInt32LE(0, OUT_HEADER_SIZE + 12);
  buf.write(name, OUT_HEADER_SIZE + 16);
  buf[len - 1] = 0;
  return len;
}

// ---- fuse_attr ------------------------------------------------------------------------------------
//   u64 ino, size, blocks, atime, mtime, ctime; u32 atimensec, mtimensec, ctimensec,
//   mode, nlink, uid, gid, rdev, blksize, flags;

/** The attributes we report for a node. Times are fixed (0) because they never matter here. */
export interface Attr {
  ino: number;
  size: number;
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  blksize: number;
  /** Seconds since the epoch for atime, mtime and ctime alike. */
  time: number;
  /** 512-byte blocks allocated (st_blocks); absent: the size's. */
  blocks?: number;
}

/** Writes a `struct fuse_attr` at `off`. `blocks`, when absent, is derived from size (512-byte units). */
export function encodeAttr(buf: Buffer, off: number, a: Attr): void {
  writeU64(buf, off, a.ino);
  writeU64(buf, off + 8, a.size);
  writeU64(buf, off + 16, a.blocks ?? Math.ceil(a.size / 512));
  writeU64(buf, off + 24, a.time);
  writeU64(buf, off + 32, a.time);
  writeU64(buf, off + 40, a.time);
  buf.writeUInt32LE(0, off + 48); // atimensec
  buf.writeUInt32LE(0, off + 52); // mtimensec
  buf.writeUInt32LE(0, off + 56); // ctimensec
  buf.writeUInt32LE(a.mode, off + 60);
  buf.writeUInt32LE(a.nlink, off + 64);
  buf.writeUInt32LE(a.uid, off + 68);
  buf.writeUInt32LE(a.gid, off + 72);
  buf.writeUInt32LE(0, off + 76); // rdev
  buf.writeUInt32LE(a.blksize, off + 80);
  buf.writeUInt32LE(0, off + 84); // flags
}

// ---- fuse_entry_out ---------------------------------------------------------------------------------
//   u64 nodeid, generation, entry_valid, attr_valid; u32 entry_valid_nsec, attr_valid_nsec;
//   struct fuse_attr attr;

/** Writes a `struct fuse_entry_out` at `off` (LOOKUP reply body). Timeouts are in seconds. */
export function encodeEntryOut(
  buf: Buffer,
  off: number,
  nodeid: number,
  generation: number,
  entryValid: number,
  attrValid: number,
  attr: Attr,
): void {
  writeU64(buf, off, nodeid);
  writeU64(buf, off + 8, generation);
  writeU64(buf, off + 16, entryValid);
  writeU64(buf, off + 24, attrValid);
  buf.writeUInt32LE(0, off + 32);
  buf.writeUInt32LE(0, off + 36);
  encodeAttr(buf, off + 40, attr);
}

// ---- fuse_attr_out --------------------------------------------------------------------------------
//   u64 attr_valid; u32 attr_valid_nsec; u32 dummy; struct fuse_attr attr;

/** Writes a `struct fuse_attr_out` at `off` (GETATTR reply body). */
export function encodeAttrOut(buf: Buffer, off: number, attrValid: number, attr: Attr): void {
  writeU64(buf, off, attrValid);
  buf.writeUInt32LE(0, off + 8);
  buf.writeUInt32LE(0, off + 12);
  encodeAttr(buf, off + 16, attr);
}

// ---- fuse_init_in / fuse_init_out -----------------------------------------------------------------

/** Decoded `struct fuse_init_in`. `flags2` is 0 when the kernel did not send it (protocol < 7.36). */
export interface InitIn {
  major: number;
  minor: number;
  maxReadahead: number;
  flags: number;
  flags2: number;
}

/** Decodes the INIT request body (`fuse_init_in`) that starts at `off`; `bodyLen` bytes are valid. */
export function decodeInitIn(buf: Buffer, off: number, bodyLen: number): InitIn {
  return {
    major: buf.readUInt32LE(off),
    minor: buf.readUInt32LE(off + 4),
    maxReadahead: buf.readUInt32LE(off + 8),
    flags: buf.readUInt32LE(off + 12),
    flags2: bodyLen >= 20 ? buf.readUInt32LE(off + 16) : 0,
  };
}

/** Fields of `struct fuse_init_out` that we set; everything else is written as zero. */
export interface InitOut {
  major: number;
  minor: number;
  maxReadahead: number;
  flags: number;
  maxBackground: number;
  congestionThreshold: number;
  maxWrite: number;
  timeGran: number;
  maxPages: number;
  flags2: number;
}

//   u32 major, minor, max_readahead, flags; u16 max_background, congestion_threshold;
//   u32 max_write, time_gran; u16 max_pages, map_alignment; u32 flags2;
//   u32 max_stack_depth (7.40); u16 request_timeout (7.43); u16 unused[11]  → 64 bytes.

/** Writes a `struct fuse_init_out` (64 bytes, zero-filled beyond the fields we set) at `off`. */
export function encodeInitOut(buf: Buffer, off: number, o: InitOut): void {
  buf.fill(0, off, off + INIT_OUT_SIZE);
  buf.writeUInt32LE(o.major, off);
  buf.writeUInt32LE(o.minor, off + 4);
  buf.writeUInt32LE(o.maxReadahead, off + 8);
  buf.writeUInt32LE(o.flags >>> 0, off + 12);
  buf.writeUInt16LE(o.maxBackground, off + 16);
  buf.writeUInt16LE(o.congestionThreshold, off + 18);
  buf.writeUInt32LE(o.maxWrite, off + 20);
  buf.writeUInt32LE(o.timeGran, off + 24);
  buf.writeUInt16LE(o.maxPages, off + 28);
  buf.writeUInt16LE(0, off + 30); // map_alignment
  buf.writeUInt32LE(o.flags2 >>> 0, off + 32);
}

// ---- fuse_read_in --------------------------------------------------------------------------------
//   u64 fh; u64 offset; u32 size; u32 read_flags; u64 lock_owner; u32 flags; u32 padding;

/** Offset of `fuse_read_in.offset` from the start of the body. */
export const READ_IN_OFFSET = 8;
/** Offset of `fuse_read_in.size` from the start of the body. */
export const READ_IN_SIZE_FIELD = 16;

// ---- fuse_kstatfs ------------------------------------------------------------------------------------
//   u64 blocks, bfree, bavail, files, ffree; u32 bsize, namelen, frsize, padding; u32 spare[6];

/** Statfs values we report. */
export interface Kstatfs {
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  bsize: number;
  namelen: number;
  frsize: number;
}

/** Writes a `struct fuse_statfs_out` (= fuse_kstatfs, 80 bytes) at `off`. */
export function encodeStatfsOut(buf: Buffer, off: number, s: Kstatfs): void {
  buf.fill(0, off, off + STATFS_OUT_SIZE);
  writeU64(buf, off, s.blocks);
  writeU64(buf, off + 8, s.bfree);
  writeU64(buf, off + 16, s.bavail);
  writeU64(buf, off + 24, s.files);
  writeU64(buf, off + 32, s.ffree);
  buf.writeUInt32LE(s.bsize, off + 40);
  buf.writeUInt32LE(s.namelen, off + 44);
  buf.writeUInt32LE(s.frsize, off + 48);
}

// ---- fuse_dirent -----------------------------------------------------------------------------------
//   u64 ino; u64 off; u32 namelen; u32 type; char name[]; padded to 8 bytes.

/** Size of one `fuse_dirent` record with a name of `nameLen` bytes, 8-byte aligned. */
export function direntSize(nameLen: number): number {
  return (DIRENT_NAME_OFFSET + nameLen + 7) & ~7;
}

/**
 * Writes one `fuse_dirent` at `off`; returns the offset after it (8-byte aligned, padding zeroed).
 * `nextOff` is the directory offset of the entry after this one (what the kernel passes back
 * in the next READDIR).
 */
export function encodeDirent(buf: Buffer, off: number, ino: number, nextOff: number, name: string, type: number): number {
  const nameLen = Buffer.byteLength(name, 'latin1');
  writeU64(buf, off, ino);
  writeU64(buf, off + 8, nextOff);
  buf.writeUInt32LE(nameLen, off + 16);
  buf.writeUInt32LE(type, off + 20);
  buf.write(name, off + DIRENT_NAME_OFFSET, 'latin1');
  const end = off + direntSize(nameLen);
  buf.fill(0, off + DIRENT_NAME_OFFSET + nameLen, end);
  return end;
}

/** Reads a NUL-terminated name (LOOKUP body) as latin1; stops at the end of the request. */
export function readCString(buf: Buffer, off: number, end: number): string {
  let z = buf.indexOf(0, off);
  if (z < 0 || z > end) z = end;
  return buf.toString('latin1', off, z);
}
