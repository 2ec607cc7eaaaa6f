import { createHash } from 'node:crypto';
import { AwcError } from './errors.js';
import type { Digest } from './digest.js';

/**
 * Sparse files (tree format v3, docs/reference/formats.md#tree-object-version-3-sparse-files):
 * a file whose holes are recorded as its data ranges, its `extents`. Its content (its chunks)
 * is the concatenation of the data extents; the holes read as zeros and are never stored,
 * hashed or transferred, so a 200 GiB file with 4 KiB of data costs 4 KiB everywhere.
 */

/** One data range of a sparse file: [offset, length] in bytes of the logical file. */
export type Extent = [offset: number, length: number];

/**
 * Smallest hole recorded (1 MiB): a shorter run of zeros is stored as data, so ordinary files
 * (whose holes, if any, are small) keep their dense form and digest.
 */
export const MIN_HOLE = 1024 * 1024;

/** Prefix of the description a sparse file's digest is taken over. */
const SPARSE_TAG = 'awc sparse file v1\n';

/**
 * The content digest of a sparse file: SHA-512/256 (FIPS 180-4; a different function from
 * SHA-256, with other initial values) of `"awc sparse file v1\n"` followed by the JSON
 * `{"size","extents","chunks"}` (chunks as `[{"digest","size"}…]`), written in the digest's
 * `sha256:<64 hex>` form. A dense file's digest is SHA-256 of its bytes, so a dense file
 * shares a sparse file's name only if someone finds a SHA-256 preimage of a SHA-512/256
 * output: two different contents never collide by construction (not even a dense file
 * holding the very bytes of the description).
 */
export function sparseDigest(size: number, extents: readonly Extent[], chunks: readonly { digest: Digest; size: number }[]): Digest {
  const desc = JSON.stringify({
    size,
    extents: extents.map(([o, l]) => [o, l]),
    chunks: chunks.map((c) => ({ digest: c.digest, size: c.size })),
  });
  return `sha256:${createHash('sha512-256')
    .update(SPARSE_TAG + desc)
    .digest('hex')}`;
}

/** `{ extents }` for a sparse file's extents, `{}` for a dense file (so an entry carries the key only when sparse). */
export function sparseOf(extents: Extent[] | undefined): { extents?: Extent[] } {
  return extents ? { extents } : {};
}

/** Bytes of data (the sum of the extents' lengths). */
export function dataBytes(extents: readonly Extent[]): number {
  let n = 0;
  for (const [, l] of extents) n += l;
  return n;
}

/**
 * Data ranges of a file of `size` bytes (as SEEK_DATA/SEEK_HOLE report them, sorted) in the
 * recorded form: holes shorter than MIN_HOLE (between ranges, at the start or at the end)
 * are taken into the data, adjacent ranges merged.
 * @returns the extents, or undefined when no hole of at least MIN_HOLE is left (a dense file).
 */
export function recordedExtents(size: number, ranges: readonly Extent[]): Extent[] | undefined {
  const out: Extent[] = [];
  for (const [o, l] of ranges) {
    if (l <= 0) continue;
    const start = out.length === 0 && o < MIN_HOLE ? 0 : o;
    const last = out[out.length - 1];
    if (last && start - (last[0] + last[1]) < MIN_HOLE) last[1] = Math.max(last[1], o + l - last[0]);
    else out.push([start, o + l - start]);
  }
  const last = out[out.length - 1];
  if (last && size - (last[0] + last[1]) < MIN_HOLE) last[1] = size - last[0];
  if (out.length === 1 && out[0][0] === 0 && out[0][1] === size) return undefined;
  if (out.length === 0 && size < MIN_HOLE) return undefined;
  return out;
}

/**
 * Checks a file entry's extents against its size and chunks: sorted, each of positive length
 * inside the file, every hole (before the first, between two, after the last) at least
 * MIN_HOLE bytes and at least one hole, and the chunks' sizes summing to the data bytes.
 * @throws AwcError E_FORMAT naming `what` when they are not in that form
 */
export function checkExtents(what: string, size: number, extents: unknown, chunks: readonly { size: number }[]): void {
  const bad = (why: string): never => {
    throw new AwcError('E_FORMAT', `${what}: bad extents (${why})`);
  };
  if (!Array.isArray(extents)) bad('not a list');
  const list = extents as unknown[];
  let end = 0;
  for (let i = 0; i < list.length; i++) {
    const x = list[i];
    if (!Array.isArray(x) || x.length !== 2 || !Number.isSafeInteger(x[0]) || !Number.isSafeInteger(x[1]))
      bad('not [offset, length] integers');
    const [o, l] = x as Extent;
    if (l <= 0 || o < end || o + l > size) bad('out of order or outside the file');
    if ((i > 0 || o > 0) && o - end < MIN_HOLE) bad('a hole shorter than 1 MiB');
    end = o + l;
  }
  if (end < size && size - end < MIN_HOLE) bad('a trailing hole shorter than 1 MiB');
  if (list.length === 0 && size === 0) bad('an empty file is not sparse');
  let data = 0;
  for (const c of chunks) data += c.size;
  if (data !== dataBytes(list as Extent[])) bad(`the chunks hold ${data} bytes, the extents ${dataBytes(list as Extent[])}`);
}

/** One piece of a logical range: `length` bytes at logical `offset`, either data at `dataOffset` (bytes into the concatenated data) or a hole (`dataOffset` -1). */
export interface RangePiece {
  offset: number;
  length: number;
  dataOffset: number;
}

/**
 * Splits the logical range [offset, end) of a sparse file into data and hole pieces, in order
 * (`end` clamped by the caller to the size). Binary search for the first extent, then linear.
 */
export function mapRange(extents: readonly Extent[], offset: number, end: number): RangePiece[] {
  const out: RangePiece[] = [];
  let lo = 0;
  let hi = extents.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (extents[mid][0] + extents[mid][1] <= offset) lo = mid + 1;
    else hi = mid;
  }
  let dataBase = 0;
  for (let i = 0; i < lo; i++) dataBase += extents[i][1];
  let pos = offset;
  for (let i = lo; i < extents.length && pos < end; i++) {
    const [o, l] = extents[i];
    if (o >= end) break;
    if (pos < o) {
      out.push({ offset: pos, length: o - pos, dataOffset: -1 });
      pos = o;
    }
    const stop = Math.min(end, o + l);
    out.push({ offset: pos, length: stop - pos, dataOffset: dataBase + (pos - o) });
    pos = stop;
    dataBase += l;
  }
  if (pos < end) out.push({ offset: pos, length: end - pos, dataOffset: -1 });
  return out;
}

/**
 * SEEK_DATA / SEEK_HOLE over recorded extents: the first data byte at or after `offset`
 * (`data` true), or the first hole byte at or after it (the file's end counts as a hole).
 * @returns the offset, or -1 for SEEK_DATA when no data follows (the caller answers ENXIO)
 */
export function seekExtents(extents: readonly Extent[], size: number, offset: number, data: boolean): number {
  for (const [o, l] of extents) {
    if (offset >= o + l) continue;
    if (data) return Math.max(o, offset);
    return offset < o ? offset : o + l;
  }
  return data ? -1 : Math.min(offset, size);
}
