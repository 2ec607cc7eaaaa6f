/**
 * Sparse files in tar archives: GNU tar's sparse format 1.0 in pax archives (what
 * `tar --format=posix --sparse` writes), for export --tar, tar import and an ordinary user's
 * export --dir (src/service/tar/extract-tar.ts).
 *
 * A member holds pax records `GNU.sparse.major=1`, `GNU.sparse.minor=0`, `GNU.sparse.name=<the
 * real path>` and `GNU.sparse.realsize=<logical size>`; its header name is
 * `<dir>/GNUSparseFile.0/<base>` (so a reader that does not know the format extracts it under
 * another name rather than as the real file with wrong bytes). Its body starts with the map
 * block: decimal numbers, each followed by a newline (the number of ranges, then offset and
 * length of each), padded with NULs to a multiple of 512 bytes; then the data of the ranges,
 * concatenated. A file that ends in a hole ends its map with the range `[realsize, 0]` (GNU tar
 * truncates the file to that offset).
 */
import { AwcError } from '../../core/errors.js';
import { MIN_HOLE, recordedExtents, type Extent } from '../../core/sparse.js';
import type { ContentWriter, FileContent } from '../../store/content/content-writer.js';

/** Most ranges a map may list (a sane bound against a hostile archive: 1 million ranges). */
const MAX_RANGES = 1_000_000;

/**
 * The map block of a sparse member for `extents` of a file of `size` bytes (GNU sparse 1.0).
 * @returns the block, padded to a multiple of 512 bytes
 */
export function sparseMapBlock(size: number, extents: readonly Extent[]): Buffer {
  const ranges: Extent[] = [...extents];
  const end = ranges.length ? ranges[ranges.length - 1][0] + ranges[ranges.length - 1][1] : 0;
  if (end < size || ranges.length === 0) ranges.push([size, 0]);
  const text = `${ranges.length}\n${ranges.map(([o, l]) => `${o}\n${l}\n`).join('')}`;
  const block = Buffer.alloc(Math.ceil(text.length / 512) * 512);
  block.write(text, 'latin1');
  return block;
}

/** The pax records of a sparse member (the real path goes in `GNU.sparse.name`, or raw in `rawName` records). */
export function sparsePax(name: string, size: number): Record<string, string> {
  return { 'GNU.sparse.major': '1', 'GNU.sparse.minor': '0', 'GNU.sparse.name': name, 'GNU.sparse.realsize': String(size) };
}

/** The header name of a sparse member at `path` (`./a/b` → `./a/GNUSparseFile.0/b`). */
export function sparseHeaderName(path: string): string {
  const i = path.lastIndexOf('/');
  return `${path.slice(0, i + 1)}GNUSparseFile.0/${path.slice(i + 1)}`;
}

/**
 * Whether a member's pax records make it a GNU sparse file, and of which form.
 * @returns undefined for an ordinary member; else the real name's bytes and the logical size
 * @throws AwcError E_UNSUPPORTED for GNU sparse formats other than 1.0 (0.0, 0.1); E_FORMAT for a bad realsize
 */
export function sparseMember(pax: Map<string, Buffer>, member: string): { name: Buffer | undefined; size: number } | undefined {
  if (![...pax.keys()].some((k) => k.startsWith('GNU.sparse.'))) return undefined;
  const text = (k: string): string | undefined => pax.get(k)?.toString('utf8');
  if (text('GNU.sparse.major') !== '1' || text('GNU.sparse.minor') !== '0')
    throw new AwcError(
      'E_UNSUPPORTED',
      `tar entry ${JSON.stringify(member)} is a GNU sparse file of format 0.x; repack it with GNU tar --format=posix`,
    );
  const size = Number(text('GNU.sparse.realsize'));
  if (!Number.isSafeInteger(size) || size < 0)
    throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(member)}: bad GNU.sparse.realsize`);
  return { name: pax.get('GNU.sparse.name'), size };
}

/**
 * Reads the map at the start of a GNU sparse 1.0 member's body (`body`, `memberSize` bytes) of
 * a file of `size` bytes.
 * @returns the data ranges (sorted, empty ones dropped) and the rest of the body: their data, concatenated
 * @throws AwcError E_FORMAT for a malformed map (not numbers, out of order, past the size) or a
 *   body that does not hold the map's data
 */
export async function readSparseMap(
  body: AsyncIterable<Buffer>,
  memberSize: number,
  size: number,
  member: string,
): Promise<{ ranges: Extent[]; data: AsyncIterable<Buffer> }> {
  const bad = (why: string): never => {
    throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(member)}: bad GNU sparse map (${why})`);
  };
  const it = body[Symbol.asyncIterator]();
  let head: Buffer = Buffer.alloc(0);
  let lines: string[];
  let mapLen: number;
  // read until the map's numbers are all there, and the blocks they fill
  for (;;) {
    lines = head.toString('latin1').split('\n');
    lines.pop(); // the part after the last newline
    const n = lines.length > 0 ? Number(lines[0]) : 0;
    if (lines.length > 0 && (lines[0] === '' || !Number.isSafeInteger(n) || n < 0 || n > MAX_RANGES)) bad('range count');
    if (lines.length >= 1 + 2 * n) {
      lines = lines.slice(0, 1 + 2 * n);
      mapLen = Math.ceil(lines.reduce((a, l) => a + l.length + 1, 0) / 512) * 512;
      if (head.length >= mapLen) break;
    }
    if (head.length > 64 * 1024 * 1024) bad('too long');
    const r = await it.next();
    if (r.done) bad('the member ends inside it');
    else head = Buffer.concat([head, r.value]);
  }
  const n = Number(lines[0]);
  const ranges: Extent[] = [];
  let end = 0;
  for (let i = 0; i < n; i++) {
    const o = Number(lines[1 + 2 * i]);
    const l = Number(lines[2 + 2 * i]);
    if (!/^\d+$/.test(lines[1 + 2 * i]!) || !/^\d+$/.test(lines[2 + 2 * i]!)) bad('not decimal numbers');
    if (!Number.isSafeInteger(o) || !Number.isSafeInteger(l) || o < end || o + l > size) bad('ranges out of order or past the size');
    if (l > 0) ranges.push([o, l]);
    end = o + l;
  }
  const rest = head.subarray(mapLen);
  const want = ranges.reduce((a, [, l]) => a + l, 0);
  if (memberSize !== mapLen + want) bad(`the member holds ${memberSize} bytes, the map ${mapLen} + ${want}`);
  async function* data(): AsyncIterable<Buffer> {
    if (rest.length > 0) yield rest;
    for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
  }
  return { ranges, data: data() };
}

/**
 * Reads a GNU sparse 1.0 member's body (`body`, `memberSize` bytes): its map, then its data,
 * stored as a sparse file of `size` bytes (src/core/sparse.ts: ranges closer than 1 MiB are
 * merged, the short holes between them stored as zeros; a map with no such hole gives a dense file).
 * @throws AwcError E_FORMAT as {@link readSparseMap}
 */
export async function readSparseMember(
  writer: ContentWriter,
  body: AsyncIterable<Buffer>,
  memberSize: number,
  size: number,
  member: string,
): Promise<FileContent> {
  const { ranges, data } = await readSparseMap(body, memberSize, size, member);
  const extents = recordedExtents(size, ranges);
  const logical = fillShortHoles(ranges, extents ?? [[0, size]], size, data);
  return extents ? writer.writeSparseStream(logical, size, extents) : writer.writeStream(logical);
}

/**
 * The data of the recorded `extents` from the archive's `ranges` and their data: the data of
 * each range, with zeros for the gaps between ranges that the recorded form keeps as data
 * (holes under MIN_HOLE).
 */
async function* fillShortHoles(
  ranges: readonly Extent[],
  extents: readonly Extent[],
  size: number,
  data: AsyncIterable<Buffer>,
): AsyncIterable<Buffer> {
  const inData = (pos: number): boolean => extents.some(([o, l]) => pos >= o && pos < o + l);
  const zeros = function* (n: number): Iterable<Buffer> {
    for (let left = n; left > 0; left -= MIN_HOLE) yield Buffer.alloc(Math.min(left, MIN_HOLE));
  };
  let pos = 0;
  const it = data[Symbol.asyncIterator]();
  let cur: Buffer = Buffer.alloc(0);
  for (const [o, l] of ranges) {
    if (o > pos && inData(pos)) yield* zeros(o - pos);
    let left = l;
    while (left > 0) {
      if (cur.length === 0) {
        const r = await it.next();
        if (r.done) return; // short: the writer's size check reports it
        cur = r.value;
        continue;
      }
      const k = Math.min(left, cur.length);
      yield cur.subarray(0, k);
      cur = cur.subarray(k);
      left -= k;
    }
    pos = o + l;
  }
  if (size > pos && inData(pos)) yield* zeros(size - pos);
  if (cur.length > 0) yield cur; // more than the map says: the writer's size check reports it
  for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
}
