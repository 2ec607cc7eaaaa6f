/**
 * Replies of the content FUSE server (content-fuse.ts) encoded outside its class: STATFS, and
 * LSEEK (FUSE opcode 46): SEEK_DATA and SEEK_HOLE answered from a
 * content object's recorded extents (src/core/sparse.ts), so that overlayfs's copy-up of a
 * sparse file (and `cp --sparse`, tar…) skips its holes instead of reading them as zeros.
 * A dense object is data from 0 to its size.
 */
import { seekExtents, type Extent } from '../../core/sparse.js';
import {
  encodeOutHeader,
  encodeStatfsOut,
  Errno,
  IN_HEADER_SIZE,
  OUT_HEADER_SIZE,
  readU64,
  STATFS_OUT_SIZE,
  writeU64,
} from './protocol.js';

const SEEK_SET = 0;
const SEEK_CUR = 1;
const SEEK_END = 2;
const SEEK_DATA = 3;
const SEEK_HOLE = 4;

/** Size in bytes of `struct fuse_lseek_out` (u64 offset). */
export const LSEEK_OUT_SIZE = 8;

/**
 * The answer to an LSEEK request `b` (its `fuse_lseek_in`: u64 fh, u64 offset, u32 whence)
 * for a content object of `size` bytes with `extents` (undefined: dense).
 * @returns `{ offset }`, the resulting offset, or `{ errno }`: ENXIO for SEEK_DATA/SEEK_HOLE at
 *   or past the end (or SEEK_DATA with no data after), EINVAL for a negative offset or another whence
 */
export function answerLseek(b: Buffer, size: number, extents: readonly Extent[] | undefined): { offset: number } | { errno: number } {
  const offset = readU64(b, IN_HEADER_SIZE + 8);
  const whence = b.readUInt32LE(IN_HEADER_SIZE + 16);
  if (whence === SEEK_SET || whence === SEEK_CUR || whence === SEEK_END) return { errno: Errno.EINVAL }; // the kernel handles these itself
  if (whence !== SEEK_DATA && whence !== SEEK_HOLE) return { errno: Errno.EINVAL };
  if (!(offset >= 0)) return { errno: Errno.EINVAL };
  if (offset >= size) return { errno: Errno.ENXIO };
  const ext = extents ?? [[0, size] as Extent];
  const at = seekExtents(ext, size, offset, whence === SEEK_DATA);
  return at < 0 ? { errno: Errno.ENXIO } : { offset: at };
}

/**
 * Writes the reply to the LSEEK request `b` (unique id `unique`) into `out`: an error header,
 * or the header and `fuse_lseek_out`, as {@link answerLseek} decides. @returns its length in bytes
 */
export function encodeLseekReply(out: Buffer, b: Buffer, unique: number, size: number, extents: readonly Extent[] | undefined): number {
  const r = answerLseek(b, size, extents);
  if ('errno' in r) {
    encodeOutHeader(out, OUT_HEADER_SIZE, -r.errno, unique);
    return OUT_HEADER_SIZE;
  }
  encodeOutHeader(out, OUT_HEADER_SIZE + LSEEK_OUT_SIZE, 0, unique);
  writeU64(out, OUT_HEADER_SIZE, r.offset);
  return OUT_HEADER_SIZE + LSEEK_OUT_SIZE;
}

/** Writes the STATFS reply (unique id `unique`) of a content namespace of `files` nodes into `out`. @returns its length in bytes */
export function encodeContentStatfs(out: Buffer, unique: number, files: number): number {
  const total = OUT_HEADER_SIZE + STATFS_OUT_SIZE;
  encodeOutHeader(out, total, 0, unique);
  encodeStatfsOut(out, OUT_HEADER_SIZE, { blocks: 0, bfree: 0, bavail: 0, files, ffree: 0, bsize: 4096, namelen: 255, frsize: 4096 });
  return total;
}
