import { createHash } from 'node:crypto';
import type { BigIntStats } from 'node:fs';
import { STX, statxMode, type StatxAt } from '../sys/statx.js';

/**
 * The directory check of incremental imports (docs/explanation/incremental-prepare.md): one
 * string per directory that stands for its whole listing, so that an import can tell that
 * nothing in a directory changed by comparing one string, without looking up or rebuilding
 * any entry. It is the sha256 (base64) of, for each entry in name order, a key of 16 32-bit
 * words, then of the names (raw bytes, each followed by a NUL byte):
 *
 * - a regular file with one link: its lstat as the stat cache trusts it: nlink (1), uid,
 *   gid, mode (type and permission bits), inode, size, mtime and ctime (seconds and
 *   nanoseconds), and the device (major, minor);
 * - a directory: only its type (its own lstat is checked by its own record, its content by
 *   its own check);
 * - anything else (a symlink, a file with several links, a device, …): no check can be made.
 *
 * Recorded from the BigIntStats an import stored each file with ({@link DirCheckBuilder}),
 * compared with one made from a statx of each entry through the directory's descriptor
 * ({@link probeDir}); both make the same words for the same lstat (the test compares them).
 * The words are in the platform's byte order: the check is host-local, as the stat cache is.
 */

/** Words per entry. */
const KEY_WORDS = 16;
const S_IFMT = 0o170000;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;
const NS = 1_000_000_000n;
const U32 = (x: bigint): number => Number(BigInt.asUintN(32, x));

/**
 * The fields of a regular file's lstat the stat cache and the walk read (a BigIntStats is one;
 * {@link statxFileStat} makes one from a statx result without a Node lstat).
 */
export type FileStat = Pick<BigIntStats, 'dev' | 'ino' | 'size' | 'mtimeNs' | 'ctimeNs' | 'mode' | 'nlink' | 'uid' | 'gid'>;

const u64 = (lo: number, hi: number): bigint => (BigInt(hi) << 32n) | BigInt(lo);

/**
 * The {@link FileStat} Node's bigint lstat gives for the entry the statx result `w` describes
 * (libuv fills struct stat from statx: st_dev is glibc's makedev of the major and minor, the
 * times are seconds (signed) × 10^9 + nanoseconds).
 */
export function statxFileStat(w: Uint32Array): FileStat {
  const major = BigInt(w[STX.devMajor]!);
  const minor = BigInt(w[STX.devMinor]!);
  const dev = ((major & 0xfffn) << 8n) | ((major & 0xfffff000n) << 32n) | (minor & 0xffn) | ((minor & 0xffffff00n) << 12n);
  const mtimeNs = BigInt.asIntN(64, u64(w[STX.mtimeSecLo]!, w[STX.mtimeSecHi]!)) * NS + BigInt(w[STX.mtimeNsec]!);
  const ctimeNs = BigInt.asIntN(64, u64(w[STX.ctimeSecLo]!, w[STX.ctimeSecHi]!)) * NS + BigInt(w[STX.ctimeNsec]!);
  return {
    dev,
    ino: u64(w[STX.inoLo]!, w[STX.inoHi]!),
    size: u64(w[STX.sizeLo]!, w[STX.sizeHi]!),
    mtimeNs,
    ctimeNs,
    mode: BigInt(statxMode(w)),
    nlink: BigInt(w[STX.nlink]!),
    uid: BigInt(w[STX.uid]!),
    gid: BigInt(w[STX.gid]!),
  };
}

/** Whether the statx result `w` is a regular file with one link. */
export function isSingleFile(w: Uint32Array): boolean {
  return (statxMode(w) & S_IFMT) === S_IFREG && w[STX.nlink] === 1;
}

/** The check's words and names, built one entry at a time (buffers reused from one directory to the next). */
export class DirCheckBuilder {
  private keys = new Uint32Array(KEY_WORDS * 256);
  private names = Buffer.alloc(16 * 1024);
  private count = 0;
  private namesLen = 0;

  /** Starts a new directory. */
  reset(): void {
    this.count = 0;
    this.namesLen = 0;
  }

  /** The words of the next entry (zeroed), after making room; `name` appended. */
  private next(name: Uint8Array): number {
    if ((this.count + 1) * KEY_WORDS > this.keys.length) {
      const k = new Uint32Array(this.keys.length * 2);
      k.set(this.keys);
      this.keys = k;
    }
    if (this.namesLen + name.length + 1 > this.names.length) {
      const n = Buffer.alloc(Math.max(this.names.length * 2, this.namesLen + name.length + 1));
      this.names.copy(n, 0, 0, this.namesLen);
      this.names = n;
    }
    this.names.set(name, this.namesLen);
    this.names[this.namesLen + name.length] = 0;
    this.namesLen += name.length + 1;
    const at = this.count++ * KEY_WORDS;
    this.keys.fill(0, at, at + KEY_WORDS);
    return at;
  }

  /** A subdirectory `name` (raw bytes). */
  addDir(name: Uint8Array): void {
    this.keys[this.next(name) + 3] = S_IFDIR;
  }

  /** A regular file `name` with one link, as its lstat (or the fstat it was stored with) `st` says. */
  addFileStats(name: Uint8Array, st: FileStat): void {
    const k = this.keys;
    const at = this.next(name);
    let sec = st.mtimeNs / NS;
    if (sec * NS > st.mtimeNs) sec -= 1n; // floor, for times before 1970
    let csec = st.ctimeNs / NS;
    if (csec * NS > st.ctimeNs) csec -= 1n;
    const dev = BigInt.asUintN(64, st.dev);
    k[at] = U32(st.nlink);
    k[at + 1] = U32(st.uid);
    k[at + 2] = U32(st.gid);
    k[at + 3] = U32(st.mode) & 0xffff;
    k[at + 4] = U32(st.ino);
    k[at + 5] = U32(st.ino >> 32n);
    k[at + 6] = U32(st.size);
    k[at + 7] = U32(st.size >> 32n);
    k[at + 8] = U32(sec);
    k[at + 9] = U32(sec >> 32n);
    k[at + 10] = Number(st.mtimeNs - sec * NS);
    k[at + 11] = U32(csec);
    k[at + 12] = U32(csec >> 32n);
    k[at + 13] = Number(st.ctimeNs - csec * NS);
    // glibc's gnu_dev_major / gnu_dev_minor (libuv makes st_dev from statx's with makedev)
    k[at + 14] = U32(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn));
    k[at + 15] = U32((dev & 0xffn) | ((dev >> 12n) & ~0xffn));
  }

  /** The entry the statx result `w` describes, when it is a regular file with one link or a directory; false otherwise (nothing added). */
  addStatx(name: Uint8Array, w: Uint32Array): 'file' | 'dir' | false {
    const mode = statxMode(w);
    const type = mode & S_IFMT;
    if (type === S_IFDIR) {
      this.addDir(name);
      return 'dir';
    }
    if (type !== S_IFREG || w[STX.nlink] !== 1) return false;
    const k = this.keys;
    const at = this.next(name);
    k[at] = 1;
    k[at + 1] = w[STX.uid]!;
    k[at + 2] = w[STX.gid]!;
    k[at + 3] = mode;
    k[at + 4] = w[STX.inoLo]!;
    k[at + 5] = w[STX.inoHi]!;
    k[at + 6] = w[STX.sizeLo]!;
    k[at + 7] = w[STX.sizeHi]!;
    k[at + 8] = w[STX.mtimeSecLo]!;
    k[at + 9] = w[STX.mtimeSecHi]!;
    k[at + 10] = w[STX.mtimeNsec]!;
    k[at + 11] = w[STX.ctimeSecLo]!;
    k[at + 12] = w[STX.ctimeSecHi]!;
    k[at + 13] = w[STX.ctimeNsec]!;
    k[at + 14] = w[STX.devMajor]!;
    k[at + 15] = w[STX.devMinor]!;
    return 'file';
  }

  /** The check of the entries added since {@link reset}. */
  digest(): string {
    const keys = new Uint8Array(this.keys.buffer, 0, this.count * KEY_WORDS * 4);
    return createHash('sha256').update(keys).update(this.names.subarray(0, this.namesLen)).digest('base64');
  }
}

/** What {@link probeDir} found in a directory whose every entry is a regular file with one link or a directory. */
export interface DirProbe {
  /** The directory's check. */
  check: string;
  /** Per name (in the order given): 1 a regular file, 2 a directory. */
  kinds: Uint8Array;
  /** Its regular files and the sum of their sizes (bytes). */
  files: number;
  bytes: number;
}

/** Kind codes of {@link DirProbe.kinds}. */
export const PROBE_FILE = 1;
export const PROBE_DIR = 2;

/**
 * The check of the directory open at `fd` whose names (raw bytes, in name order) are
 * `names`: each entry statx'ed through the descriptor. Undefined when an entry is neither a
 * regular file with one link nor a directory, or cannot be statx'ed (gone meanwhile).
 */
export function probeDir(sx: StatxAt, b: DirCheckBuilder, fd: number, names: readonly Uint8Array[]): DirProbe | undefined {
  b.reset();
  const kinds = new Uint8Array(names.length);
  let files = 0;
  let bytes = 0;
  const w = sx.words;
  for (let i = 0; i < names.length; i++) {
    if (!sx.at(fd, names[i]!)) return undefined;
    const kind = b.addStatx(names[i]!, w);
    if (kind === false) return undefined;
    if (kind === 'dir') {
      kinds[i] = PROBE_DIR;
      continue;
    }
    kinds[i] = PROBE_FILE;
    files++;
    bytes += w[STX.sizeHi]! * 2 ** 32 + w[STX.sizeLo]!;
  }
  return { check: b.digest(), kinds, files, bytes };
}
