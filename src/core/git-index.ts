import { createHash } from 'node:crypto';
import { AwcError } from './errors.js';
import { nameFromBytes } from './raw-name.js';

/**
 * Git's index file (`.git/index`, the "dircache"), versions 2, 3 and 4, read and rewritten
 * in place. The format is git's Documentation/gitformat-index.txt (git 2.39): a 12-byte
 * header (`DIRC`, version, entry count, big-endian), the entries sorted by path, optional
 * extensions (4-byte signature, 4-byte length, data), then the hash (SHA-1, or SHA-256 in a
 * sha256 repository) of everything before it. Each entry starts with 40 bytes of stat data
 * (ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size: 32-bit each), the object id, a
 * 16-bit flags word (assume-valid, extended, 2-bit stage, 12-bit name length), in v3+ a
 * second flags word when `extended` is set, then the path: in v2/v3 NUL-terminated and
 * NUL-padded to a multiple of 8 bytes; in v4 prefix-compressed (a varint of how many bytes to
 * drop from the previous path's end, then the NUL-terminated rest, no padding).
 *
 * Only the stat data of entries is ever changed ({@link rewriteGitIndexStat}), so every
 * entry keeps its exact bytes otherwise and no path is re-encoded. No npm package both reads
 * and writes all three versions byte-exactly (docs/explanation/git.md#the-workspaces-index).
 */

/** One entry of a parsed index. */
export interface GitIndexEntry {
  /** Byte offset of the entry in the file (its stat data starts there). */
  offset: number;
  /** Slash-separated path from the work tree's top; names that are not UTF-8 hold escaped raw bytes (src/core/raw-name.ts), as tree names do. */
  path: string;
  /** Git's mode: 0o100644, 0o100755, 0o120000 (symlink), 0o160000 (gitlink), 0o040000 (sparse directory). */
  mode: number;
  /** Object id, lower-case hex. */
  oid: string;
  /** Merge stage (0 for a normal entry). */
  stage: number;
  /** Assume-valid (`git update-index --assume-unchanged`): git never stats it. */
  assumeValid: boolean;
  /** Skip-worktree or intent-to-add (v3+ extended flags): not a checked-out file. */
  notCheckedOut: boolean;
  /** Stat data as recorded: mtime seconds (32-bit, unsigned). */
  mtimeSec: number;
}

/** One extension block: its 4-character signature and its byte range (header included). */
export interface GitIndexExtension {
  sig: string;
  start: number;
  end: number;
}

/** A parsed index: version, entries, where the entries end, extensions, and the hash length (bytes). */
export interface GitIndex {
  version: 2 | 3 | 4;
  entries: GitIndexEntry[];
  entriesEnd: number;
  extensions: GitIndexExtension[];
  hashLen: 20 | 32;
}

/** Stat data as git records it: every field is truncated to 32 bits, unsigned (git's `struct stat_data`). */
export interface GitStatData {
  ctimeSec: number;
  ctimeNsec: number;
  mtimeSec: number;
  mtimeNsec: number;
  dev: number;
  ino: number;
  uid: number;
  gid: number;
  size: number;
}

function bad(msg: string): AwcError {
  return new AwcError('E_FORMAT', `git index: ${msg}`);
}

/** The hash git uses for object ids and the index's trailer: `sha1` (20 bytes) or `sha256` (32 bytes). */
export type GitHashAlgo = 'sha1' | 'sha256';

/** Bytes of a hash of `algo`. */
export function gitHashLen(algo: GitHashAlgo): 20 | 32 {
  return algo === 'sha1' ? 20 : 32;
}

/** Git's blob object id of `data` (hex): the hash of `blob <size>\0` followed by the bytes. */
export function gitBlobId(algo: GitHashAlgo, data: Uint8Array): string {
  return createHash(algo).update(`blob ${data.length}\0`).update(data).digest('hex');
}

/**
 * Parses an index file and verifies its trailing hash (an all-zero trailer, written with
 * `index.skipHash`, is accepted unverified).
 * @throws AwcError E_FORMAT on a bad signature, an unknown version, a truncated or corrupt
 *   file, or a hash that does not match
 */
export function parseGitIndex(buf: Buffer, algo: GitHashAlgo): GitIndex {
  const hashLen = gitHashLen(algo);
  if (buf.length < 12 + hashLen || buf.toString('latin1', 0, 4) !== 'DIRC') throw bad('not an index file');
  const version = buf.readUInt32BE(4);
  if (version !== 2 && version !== 3 && version !== 4) throw bad(`unsupported version ${version}`);
  const end = buf.length - hashLen;
  const trailer = buf.subarray(end);
  if (trailer.some((b) => b !== 0) && !createHash(algo).update(buf.subarray(0, end)).digest().equals(trailer)) {
    throw bad('checksum mismatch');
  }
  const count = buf.readUInt32BE(8);
  const entries: GitIndexEntry[] = [];
  let off = 12;
  let prev: Buffer = Buffer.alloc(0);
  for (let i = 0; i < count; i++) {
    const start = off;
    const fixed = 40 + hashLen + 2;
    if (off + fixed > end) throw bad('truncated entry');
    const flags = buf.readUInt16BE(off + 40 + hashLen);
    let extFlags = 0;
    off += fixed;
    if (flags & 0x4000) {
      if (version < 3) throw bad('extended flag in a version 2 index');
      extFlags = buf.readUInt16BE(off);
      off += 2;
    }
    let name: Buffer;
    if (version === 4) {
      const [strip, n] = readVarint(buf, off, end);
      off = n;
      const nul = buf.indexOf(0, off);
      if (nul < 0 || nul >= end || strip > prev.length) throw bad('corrupt v4 path');
      name = Buffer.concat([prev.subarray(0, prev.length - strip), buf.subarray(off, nul)]);
      off = nul + 1;
    } else {
      const nul = buf.indexOf(0, off);
      if (nul < 0 || nul >= end) throw bad('unterminated path');
      name = buf.subarray(off, nul);
      // padded with 1–8 NULs to a multiple of 8 bytes from the entry's start
      off = start + ((off - start + name.length + 8) & ~7);
      if (off > end) throw bad('truncated entry');
    }
    prev = name;
    entries.push({
      offset: start,
      path: nameFromBytes(name),
      mode: buf.readUInt32BE(start + 24),
      oid: buf.toString('hex', start + 40, start + 40 + hashLen),
      stage: (flags >> 12) & 3,
      assumeValid: (flags & 0x8000) !== 0,
      notCheckedOut: (extFlags & 0x6000) !== 0,
      mtimeSec: buf.readUInt32BE(start + 8),
    });
  }
  const entriesEnd = off;
  const extensions: GitIndexExtension[] = [];
  while (off < end) {
    if (off + 8 > end) throw bad('truncated extension');
    const len = buf.readUInt32BE(off + 4);
    if (off + 8 + len > end) throw bad('truncated extension');
    extensions.push({ sig: buf.toString('latin1', off, off + 4), start: off, end: off + 8 + len });
    off += 8 + len;
  }
  return { version, entries, entriesEnd, extensions, hashLen };
}

/** Git's varint (varint.c, the offset encoding of pack deltas): 7 bits a byte, high bit = more, each continuation adds one. */
function readVarint(buf: Buffer, off: number, end: number): [number, number] {
  if (off >= end) throw bad('truncated varint');
  let c = buf[off++];
  let val = c & 127;
  while (c & 128) {
    if (off >= end || val > 2 ** 40) throw bad('bad varint');
    c = buf[off++];
    val = (val + 1) * 128 + (c & 127);
  }
  return [val, off];
}

/**
 * Extensions that hold no stat data and stay valid when only stat data changes: the cache
 * tree (`TREE`), resolve-undo (`REUC`) and the sparse-index marker (`sdir`). Everything else
 * is dropped: `UNTR` (untracked cache: directory stat data), `FSMN` (fsmonitor token), `EOIE`
 * and `IEOT` (offsets and a hash over the extension headers), unknown optional ones.
 */
const KEPT_EXTENSIONS = new Set(['TREE', 'REUC', 'sdir']);

/** Why an index cannot be rewritten: a split index (`link`) or an unknown required extension (lower-case first letter). */
export function gitIndexUnrewritable(ix: GitIndex): string | undefined {
  for (const e of ix.extensions) {
    if (e.sig === 'link') return 'split index (link extension)';
    if (!KEPT_EXTENSIONS.has(e.sig) && !/^[A-Z]/.test(e.sig)) return `required extension ${JSON.stringify(e.sig)}`;
  }
  return undefined;
}

/**
 * A copy of the index file `buf` (parsed as `ix`) in which the entries numbered by `stats`
 * carry the given stat data; every other byte of every entry is kept, the extensions of
 * KEPT_EXTENSIONS are kept (in order), the others dropped, and the trailing hash recomputed.
 * @throws AwcError E_FORMAT when {@link gitIndexUnrewritable} names a reason
 */
export function rewriteGitIndexStat(buf: Buffer, ix: GitIndex, algo: GitHashAlgo, stats: ReadonlyMap<number, GitStatData>): Buffer {
  const why = gitIndexUnrewritable(ix);
  if (why) throw bad(`cannot rewrite: ${why}`);
  const kept = ix.extensions.filter((e) => KEPT_EXTENSIONS.has(e.sig));
  const parts = [Buffer.from(buf.subarray(0, ix.entriesEnd)), ...kept.map((e) => buf.subarray(e.start, e.end))];
  const body = Buffer.concat(parts);
  for (const [i, s] of stats) {
    const o = ix.entries[i].offset;
    const fields = [s.ctimeSec, s.ctimeNsec, s.mtimeSec, s.mtimeNsec, s.dev, s.ino];
    fields.forEach((v, k) => body.writeUInt32BE(v >>> 0, o + 4 * k));
    body.writeUInt32BE(s.uid >>> 0, o + 28);
    body.writeUInt32BE(s.gid >>> 0, o + 32);
    body.writeUInt32BE(s.size >>> 0, o + 36);
  }
  return Buffer.concat([body, createHash(algo).update(body).digest()]);
}
