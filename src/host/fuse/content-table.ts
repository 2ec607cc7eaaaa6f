/**
 * The shared content table of the content FUSE server: content digest → (node id, size), in a
 * SharedArrayBuffer the main thread writes and the reader workers read without locks, so that
 * a worker answers a LOOKUP itself (no hop to the main thread: on a 2-vCPU VM that hop cost
 * ~100 µs per file of a cold read, docs/explanation/design.md#content-fuse-server).
 *
 * Layout: open addressing with linear probing over `capacity` slots (a power of two) of
 * {@link SLOT_WORDS} Int32 words: words 0‥7 the 32 digest bytes (little-endian words),
 * word 8 the node id, word 9 the state (0 empty, 1 ready; stored last with Atomics.store and
 * read first with Atomics.load, so a reader never sees a half-written slot), words 10‥11 the
 * size in bytes (low and high 32 bits). The home slot is the first digest word (a digest is
 * uniformly random) masked by capacity - 1. Slots are never removed (node ids live as long as
 * the mount). When the table is over 70% full it is rebuilt twice as large in a new buffer;
 * readers holding the old buffer still get correct answers for what it held, and treat
 * anything they cannot find as "ask the main thread".
 *
 * Names (long and short, and their parsing) are src/core/content-name.ts; this table holds full
 * digests and answers a short key by matching its 138 bits.
 */

import type { ContentKey } from '../../core/content-name.js';

/** Int32 words per slot. */
export const SLOT_WORDS = 12;
const W_NODE = 8;
const W_STATE = 9;
const W_SIZE_LO = 10;
const W_SIZE_HI = 11;
const MAX_LOAD = 0.7;

/** Result of {@link lookupSlot} when two digests share the short name asked for (never served). */
export const AMBIGUOUS = -2;

/**
 * Finds the slot of a content key in a table's words (the main thread's or a worker's copy).
 * @returns the slot index, -1 when absent, or {@link AMBIGUOUS} when a short key matches two
 *   digests.
 */
export function lookupSlot(words: Int32Array, key: ContentKey): number {
  const cap = words.length / SLOT_WORDS;
  const b = key.bytes;
  const k0 = b.readInt32LE(0);
  const k1 = b.readInt32LE(4);
  const k2 = b.readInt32LE(8);
  const k3 = b.readInt32LE(12);
  let found = -1;
  for (let i = k0 & (cap - 1), probes = 0; probes < cap; i = (i + 1) & (cap - 1), probes++) {
    const o = i * SLOT_WORDS;
    if (Atomics.load(words, o + W_STATE) === 0) return found;
    if (words[o] !== k0 || words[o + 1] !== k1 || words[o + 2] !== k2 || words[o + 3] !== k3) continue;
    if (key.short) {
      const w4 = words[o + 4]!;
      if ((w4 & 0xff) !== b[16] || ((w4 >>> 8) & 0xff) >>> 6 !== key.tail) continue;
      if (found >= 0) return AMBIGUOUS;
      found = i;
      continue; // keep probing: a second match makes the short name ambiguous
    }
    let same = true;
    for (let w = 4; w < 8; w++) {
      if (words[o + w] !== b.readInt32LE(w * 4)) {
        same = false;
        break;
      }
    }
    if (same) return i;
  }
  return found;
}

/** Node id stored in a slot. */
export function slotNode(words: Int32Array, slot: number): number {
  return words[slot * SLOT_WORDS + W_NODE]! >>> 0;
}

/** Bit of the size's high word marking a sparse file (sizes stay below 2^53, so the bit is free). */
const SPARSE_BIT = 0x4000_0000;

/** Size in bytes stored in a slot. */
export function slotSize(words: Int32Array, slot: number): number {
  const o = slot * SLOT_WORDS;
  return (words[o + W_SIZE_LO]! >>> 0) + ((words[o + W_SIZE_HI]! & ~SPARSE_BIT) >>> 0) * 0x1_0000_0000;
}

/** Marks a slot's content sparse (a node the server before this one handed out without the mark). Main thread. */
export function markSlotSparse(words: Int32Array, slot: number): void {
  Atomics.or(words, slot * SLOT_WORDS + W_SIZE_HI, SPARSE_BIT);
}

/** Whether the slot's content is a sparse file (its attributes, with st_blocks of its data, come from the main thread). */
export function slotSparse(words: Int32Array, slot: number): boolean {
  return (words[slot * SLOT_WORDS + W_SIZE_HI]! & SPARSE_BIT) !== 0;
}

/** The 64-hex digest stored in a slot. */
export function slotHex(words: Int32Array, slot: number): string {
  const o = slot * SLOT_WORDS;
  return Buffer.from(words.buffer, words.byteOffset + o * 4, 32).toString('hex');
}

/**
 * The writer side (main thread only): inserts digests with their node ids and sizes, growing
 * the table when needed. Readers get the current buffer from {@link buffer} and must fetch it
 * again when {@link generation} moves.
 */
export class ContentTable {
  private sab: SharedArrayBuffer;
  private w: Int32Array;
  private n = 0;
  private gen = 0;

  /** @param initialSlots capacity to start with (rounded up to a power of two, at least 64). */
  constructor(initialSlots = 4096) {
    let cap = 64;
    while (cap < initialSlots) cap *= 2;
    this.sab = new SharedArrayBuffer(cap * SLOT_WORDS * 4);
    this.w = new Int32Array(this.sab);
  }

  /** The current shared buffer (replaced on growth; see {@link generation}). */
  get buffer(): SharedArrayBuffer {
    return this.sab;
  }

  /** The current words (for lookups on the main thread). */
  get words(): Int32Array {
    return this.w;
  }

  /** Bumped every time the table moves to a new buffer. */
  get generation(): number {
    return this.gen;
  }

  /** Number of digests held. */
  get size(): number {
    return this.n;
  }

  /**
   * Adds a digest (64 hex) with its node id and size in bytes (`sparse`: a sparse file, whose LOOKUPs the main thread answers). The caller inserts each digest
   * once (it keeps node ids unique).
   * @returns true when the table moved to a new, larger buffer (readers must be told).
   */
  insert(hex: string, nodeid: number, size: number, sparse = false): boolean {
    let grew = false;
    if ((this.n + 1) / (this.w.length / SLOT_WORDS) > MAX_LOAD) {
      this.grow();
      grew = true;
    }
    this.put(this.w, Buffer.from(hex, 'hex'), nodeid, size, sparse);
    this.n++;
    return grew;
  }

  /** Moves the generation without moving the table (another shared buffer the readers watch changed). */
  bump(): void {
    this.gen++;
  }

  private put(words: Int32Array, digest: Buffer, nodeid: number, size: number, sparse: boolean): void {
    const cap = words.length / SLOT_WORDS;
    for (let i = digest.readInt32LE(0) & (cap - 1); ; i = (i + 1) & (cap - 1)) {
      const o = i * SLOT_WORDS;
      if (words[o + W_STATE] !== 0) continue;
      for (let k = 0; k < 8; k++) words[o + k] = digest.readInt32LE(k * 4);
      words[o + W_NODE] = nodeid | 0;
      words[o + W_SIZE_LO] = (size % 0x1_0000_0000) | 0;
      words[o + W_SIZE_HI] = Math.floor(size / 0x1_0000_0000) | (sparse ? SPARSE_BIT : 0);
      Atomics.store(words, o + W_STATE, 1);
      return;
    }
  }

  /**
   * Makes the table big enough for `total` digests without growing again.
   * @returns true when it moved to a new buffer (readers must be told).
   */
  reserve(total: number): boolean {
    let cap = this.w.length / SLOT_WORDS;
    if (total / cap <= MAX_LOAD) return false;
    while (total / cap > MAX_LOAD) cap *= 2;
    this.grow(cap);
    return true;
  }

  private grow(cap = (this.w.length / SLOT_WORDS) * 2): void {
    const old = this.w;
    const sab = new SharedArrayBuffer(cap * SLOT_WORDS * 4);
    const w = new Int32Array(sab);
    for (let i = 0; i < old.length / SLOT_WORDS; i++) {
      const o = i * SLOT_WORDS;
      if (old[o + W_STATE] === 0) continue;
      const digest = Buffer.from(old.buffer, old.byteOffset + o * 4, 32);
      this.put(w, digest, old[o + W_NODE]! >>> 0, slotSize(old, i), slotSparse(old, i));
    }
    this.sab = sab;
    this.w = w;
    this.gen++;
  }
}
