import { createHash } from 'node:crypto';
import { CHUNKER_ID } from './tree.js';

/**
 * FastCDC content-defined chunking, the 2020 variant, as fixed by AWC (chunker id
 * `fastcdc2020-awc1-16384-65536-262144`, see `CHUNKER_ID` in ./tree.ts and
 * docs/reference/formats.md).
 *
 * Source: W. Xia, X. Zou, H. Jiang, Y. Zhou, C. Liu, D. Feng, Y. Hua, Y. Hu, Y. Zhang,
 * "The Design of Fast Content-Defined Chunking for Data Deduplication Based Storage
 * Systems", IEEE TPDS 31(9), 2020 (and the 2016 USENIX ATC paper "FastCDC: a Fast and
 * Efficient Content-Defined Chunking Approach for Data Deduplication"). We use its three
 * ideas: the gear rolling hash, cut-point skipping (nothing is hashed before the minimum
 * size) and normalized chunking at level 2 (a mask 2 bits harder than log2(avg) before the
 * average size, 2 bits easier after it).
 *
 * The exact definition, fixed forever once data exists (changing anything here silently
 * kills dedup against existing snapshots):
 *
 * - Sizes: MIN = 16384, AVG = 65536, MAX = 262144 bytes.
 * - Gear table: 256 unsigned 32-bit values. For j = 0..31, block_j = SHA-256 of the ASCII
 *   string `awc fastcdc gear v1 <j>` (decimal j, one space before it); the table is
 *   block_0 ‖ block_1 ‖ … ‖ block_31 (1024 bytes) read as 256 big-endian uint32.
 * - Hash: 32-bit gear hash, `h = (h << 1) + GEAR[byte]  (mod 2^32)`, reset to 0 at the
 *   start of every chunk. Bit k of h depends on the last k+1 bytes only, so the masks use
 *   the high bits (the whole 32-byte window).
 * - Masks: MASK_S = 0xFFFFC000 (the 18 high bits: 16 + 2) and MASK_L = 0xFFFC0000 (the 14
 *   high bits: 16 − 2).
 * - Cut rule, for a chunk starting at offset s of the stream: the bytes s .. s+MIN−1 are
 *   skipped (not hashed). Then for each chunk length L = MIN+1, MIN+2, …, the byte at
 *   offset s+L−1 is fed into h and the chunk ends after it (length L) as soon as
 *   `(h & MASK_S) == 0` while L ≤ AVG, or `(h & MASK_L) == 0` while L > AVG. When L reaches
 *   MAX without a match the chunk ends at length MAX. The end of the input ends the last
 *   chunk wherever it is (so an input of at most MIN bytes is one chunk, and only the last
 *   chunk may be shorter than MIN+1 bytes).
 *
 * All chunks therefore have lengths in [MIN+1, MAX], except the last (1 .. MAX bytes); an
 * empty input has no chunk. The gear hash is a plain 32-bit JS integer loop (no BigInt).
 */

/** Minimum chunk size in bytes (no cut before it). */
export const MIN_SIZE = 16384;
/** Target average chunk size in bytes (normalization point). */
export const AVG_SIZE = 65536;
/** Maximum chunk size in bytes (forced cut). */
export const MAX_SIZE = 262144;
/** Mask used while the chunk length is ≤ AVG_SIZE: the 18 high bits of the 32-bit gear hash. */
export const MASK_S = 0xffffc000;
/** Mask used once the chunk length is > AVG_SIZE: the 14 high bits of the 32-bit gear hash. */
export const MASK_L = 0xfffc0000;
/** The seed prefix of the gear table derivation (see module doc). */
export const GEAR_SEED = 'awc fastcdc gear v1';

if (CHUNKER_ID !== `fastcdc2020-awc1-${MIN_SIZE}-${AVG_SIZE}-${MAX_SIZE}`) {
  throw new Error(`CHUNKER_ID ${CHUNKER_ID} does not match the chunker parameters`);
}

/** Derives the gear table (256 uint32) from GEAR_SEED, as documented in the module doc. */
function makeGear(): Uint32Array {
  const bytes = Buffer.alloc(1024);
  for (let j = 0; j < 32; j++)
    createHash('sha256')
      .update(`${GEAR_SEED} ${j}`, 'ascii')
      .digest()
      .copy(bytes, j * 32);
  const gear = new Uint32Array(256);
  for (let i = 0; i < 256; i++) gear[i] = bytes.readUInt32BE(i * 4);
  return gear;
}

/** The gear table: 256 unsigned 32-bit values (read-only by convention; do not modify). */
export const GEAR: Uint32Array = makeGear();

// The hot loop works on signed 32-bit integers: same bits, no heap numbers.
const G = new Int32Array(GEAR.buffer, GEAR.byteOffset, 256);
const MS = MASK_S | 0;
const ML = MASK_L | 0;

/**
 * Streaming FastCDC chunker. Feed bytes with `push`, collect completed chunks, and call
 * `finish` at the end of the input for the last chunk. Cut points do not depend on how the
 * input is split into pushes.
 *
 * Copies: a chunk that lies wholly inside one pushed buffer is returned as a subarray of it
 * (no copy), so consume it before modifying that buffer; a chunk that spans pushes is
 * assembled into a fresh Buffer (the chunker keeps at most MAX_SIZE bytes of its own).
 *
 * @example
 *   const c = new Chunker();
 *   for await (const buf of stream) for (const chunk of c.push(buf)) use(chunk);
 *   const last = c.finish(); if (last) use(last);
 */
export class Chunker {
  /** Bytes of the current chunk carried over from earlier pushes (capacity MAX_SIZE, allocated on first need). */
  private pending: Buffer | undefined;
  private pendingLen = 0;
  /** Scan state of the current chunk: length seen so far (bytes, including pending) and gear hash. */
  private readonly st: ScanState = { pos: 0, h: 0 };

  /**
   * Consumes `data` and returns the chunks it completes, in order (possibly none). Each
   * returned chunk is a Uint8Array view (subarray of `data` or a fresh Buffer); lengths in
   * bytes are in [MIN_SIZE+1, MAX_SIZE].
   */
  push(data: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    const n = data.length;
    let off = 0;
    while (off < n) {
      const cut = scan(this.st, data, off, n);
      if (cut < 0) {
        // No cut in the rest of data: carry it over (always fits: a cut is forced at MAX_SIZE).
        this.pending ??= Buffer.allocUnsafe(MAX_SIZE);
        this.pending.set(off === 0 ? data : data.subarray(off), this.pendingLen);
        this.pendingLen += n - off;
        break;
      }
      if (this.pendingLen === 0) {
        out.push(data.subarray(off, cut));
      } else {
        const chunk = Buffer.allocUnsafe(this.pendingLen + cut - off);
        this.pending!.copy(chunk, 0, 0, this.pendingLen);
        chunk.set(data.subarray(off, cut), this.pendingLen);
        out.push(chunk);
        this.pendingLen = 0;
      }
      this.st.pos = 0;
      this.st.h = 0;
      off = cut;
    }
    return out;
  }

  /**
   * Ends the input: returns the last chunk (1 .. MAX_SIZE bytes), or
   * undefined when no bytes are pending. The chunker is then ready for a new input.
   * The returned buffer is owned by the caller (the chunker does not reuse it).
   */
  finish(): Uint8Array | undefined {
    const len = this.pendingLen;
    this.pendingLen = 0;
    this.st.pos = 0;
    this.st.h = 0;
    if (len === 0) return undefined;
    const last = this.pending!.subarray(0, len);
    this.pending = undefined; // handed over to the caller: a later push allocates a new one
    return last;
  }
}

/** Scan state of one chunk in progress: its length so far (bytes) and its gear hash. */
interface ScanState {
  pos: number;
  h: number;
}

/** The gear hash after the last byte the last gearScan fed (its second result). */
let gearH = 0;

/**
 * The gear loop: feeds buf[i], buf[i+1], … (up to buf[stop−1]) into the gear hash `h`, and
 * stops after the first byte that leaves `(h & mask) == 0`.
 * @returns the index just after that byte, or -1 when none in the range did; `gearH` then
 *   holds the hash after the last byte fed. Unrolled by 8 (a third faster in V8 than one
 *   byte per iteration; the same bytes are fed and the same test is made after each).
 */
function gearScan(buf: Uint8Array, i: number, stop: number, h: number, mask: number): number {
  const stop8 = stop - 7;
  while (i < stop8) {
    h = ((h << 1) + G[buf[i]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 1);
    h = ((h << 1) + G[buf[i + 1]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 2);
    h = ((h << 1) + G[buf[i + 2]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 3);
    h = ((h << 1) + G[buf[i + 3]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 4);
    h = ((h << 1) + G[buf[i + 4]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 5);
    h = ((h << 1) + G[buf[i + 5]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 6);
    h = ((h << 1) + G[buf[i + 6]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 7);
    h = ((h << 1) + G[buf[i + 7]]) | 0;
    if ((h & mask) === 0) return cutAt(h, i + 8);
    i += 8;
  }
  while (i < stop) {
    h = ((h << 1) + G[buf[i]]) | 0;
    i++;
    if ((h & mask) === 0) return cutAt(h, i);
  }
  gearH = h;
  return -1;
}

/** Records `h` as gearScan's hash and returns `at`, the index just after a cut. */
function cutAt(h: number, at: number): number {
  gearH = h;
  return at;
}

/**
 * Continues the chunk in progress over buf[start, end). Returns the index in buf just after
 * the chunk's last byte when the chunk ends inside this range, else -1 (state updated).
 */
function scan(st: ScanState, buf: Uint8Array, start: number, end: number): number {
  let pos = st.pos;
  // base: index in buf of the current chunk's first byte (may be negative).
  const base = start - pos;
  if (pos < MIN_SIZE) {
    if (base + MIN_SIZE >= end) {
      st.pos = pos + (end - start);
      return -1;
    }
    pos = MIN_SIZE;
  }
  let h = st.h;
  let i = base + pos;
  // Normalized region 1: chunk length ≤ AVG_SIZE, harder mask.
  let stop = base + AVG_SIZE;
  if (stop > end) stop = end;
  if (i < stop) {
    const cut = gearScan(buf, i, stop, h, MS);
    h = gearH;
    if (cut >= 0) return cut;
    i = stop;
  }
  // Normalized region 2: AVG_SIZE < chunk length ≤ MAX_SIZE, easier mask.
  stop = base + MAX_SIZE;
  if (stop > end) stop = end;
  if (i < stop) {
    const cut = gearScan(buf, i, stop, h, ML);
    h = gearH;
    if (cut >= 0) return cut;
    i = stop;
  }
  if (i === base + MAX_SIZE) return i;
  st.pos = i - base;
  st.h = h;
  return -1;
}

/**
 * Chunks a whole buffer at once (same cut points as a streaming `Chunker`).
 * @returns the chunk lengths in bytes, in order; their sum is `data.length`; [] for empty input.
 */
export function chunkBuffer(data: Uint8Array): number[] {
  const lengths: number[] = [];
  const st: ScanState = { pos: 0, h: 0 };
  let off = 0;
  while (off < data.length) {
    const cut = scan(st, data, off, data.length);
    if (cut < 0) {
      lengths.push(data.length - off);
      break;
    }
    lengths.push(cut - off);
    st.pos = 0;
    st.h = 0;
    off = cut;
  }
  return lengths;
}
