/**
 * The hot content arena of the content FUSE server: whole content objects the host has in
 * memory (chunks just read ahead from a pack), copied into a SharedArrayBuffer ring so that a
 * reader worker answers a READ of them itself, without a hop to the main thread (with the
 * worker-side LOOKUP, a cold file then costs two short thread wake-ups instead of four;
 * docs/explanation/design.md#content-fuse-server).
 *
 * Layout. The arena is `units` × {@link UNIT} bytes used as a ring. A per-node array (Int32,
 * {@link NODE_WORDS} per node index = node id - FIRST_FILE_ID) says where a node's bytes are:
 * word 0 the start (an absolute position in units, modulo 2^32), word 1 the length in bytes,
 * word 2 the state (1 = valid; stored last, loaded first). An object never wraps around the
 * end of the ring (the writer skips to the start instead).
 *
 * Concurrency (one writer, the main thread; many readers). Before the writer overwrites a
 * region it (1) marks invalid every object whose bytes lie there, then (2) publishes the new
 * reserve position — the end of the region it is about to write — in the shared control
 * array, then (3) copies the bytes. A reader (1) loads the state, (2) copies the bytes out,
 * then (3) checks that the state is still valid, the start unchanged, and the reserve no more
 * than one ring ahead of the start. If any check fails it answers nothing and passes the
 * request to the main thread, which serves it from the cache. This is a seqlock (Lameter,
 * "Effective synchronization on Linux/NUMA systems", 2005; Linux `seqlock_t`) with the reserve
 * position as the sequence: a reader never returns bytes that were overwritten while it
 * copied them.
 *
 * Memory ordering: JavaScript has no fence, and the byte copies are plain accesses. Both
 * sides therefore use read-modify-write operations on the reserve (the writer publishes it
 * with Atomics.exchange before copying, the reader reads it with Atomics.add(…, 0) after
 * copying), which order plain accesses around them on weakly ordered CPUs too; on x86 any
 * atomic would do. The daemon turns the arena on only on x64, where this was tested.
 */

/** Bytes per arena unit (allocation granularity). */
export const UNIT = 64;
/** Int32 words per node in the node array. */
export const NODE_WORDS = 4;
const N_START = 0;
const N_LENGTH = 1;
const N_STATE = 2;

/** What a reader needs: the arena bytes, its size in units, and the node array. */
export interface ArenaView {
  bytes: Uint8Array;
  units: number;
  nodes: Int32Array;
}

/**
 * Copies bytes [offset, offset + length) of node index `k` from the arena into `out` at
 * `outOffset` (clamped at the object's end).
 * @param reserve reads the writer's current reserve position with a read-modify-write
 *   (`Atomics.add(ctrl, slot, 0)`: see the module doc on memory ordering)
 * @returns the number of bytes copied (0 at or past the end), or -1 when the node is not in
 *   the arena or was overwritten during the copy (ask the main thread).
 */
export function readFromArena(
  view: ArenaView,
  k: number,
  offset: number,
  length: number,
  out: Uint8Array,
  outOffset: number,
  reserve: () => number,
): number {
  const o = k * NODE_WORDS;
  if (o + NODE_WORDS > view.nodes.length) return -1;
  if (Atomics.load(view.nodes, o + N_STATE) !== 1) return -1;
  const start = view.nodes[o + N_START]!;
  const size = view.nodes[o + N_LENGTH]!;
  const n = Math.max(0, Math.min(length, size - offset, out.length - outOffset));
  if (n > 0) {
    const at = (start & (view.units - 1)) * UNIT + offset;
    out.set(view.bytes.subarray(at, at + n), outOffset);
  }
  // the reserve first (a read-modify-write: the copy above is done before it), then the node
  if (((reserve() - start) | 0) > view.units) return -1;
  if (Atomics.load(view.nodes, o + N_STATE) !== 1 || view.nodes[o + N_START] !== start) return -1;
  return n;
}

/**
 * The writer side (main thread only): puts whole content objects in the ring, invalidating
 * the oldest ones it overwrites.
 */
export class ContentArena {
  /** Arena bytes (shared). */
  readonly buffer: SharedArrayBuffer;
  /** Size of the ring in units (a power of two). */
  readonly units: number;
  private readonly bytes: Uint8Array;
  private nodesSab: SharedArrayBuffer;
  private nodes: Int32Array;
  /** Next free position, in units (absolute; can exceed 2^32: stored modulo 2^32). */
  private head = 0;
  /** Objects in the ring, oldest first: node index and absolute start in units. */
  private fifo: { k: number; start: number }[] = [];
  private fifoAt = 0;

  /**
   * @param bytes arena size in bytes, rounded down to a power of two units (at least 1 unit)
   * @param setReserve publishes the reserve position with a read-modify-write
   *   (`Atomics.exchange(ctrl, slot, units)`: see the module doc on memory ordering)
   */
  constructor(
    bytes: number,
    private readonly setReserve: (units: number) => void,
  ) {
    let units = 1;
    while (units * 2 * UNIT <= bytes) units *= 2;
    this.units = units;
    this.buffer = new SharedArrayBuffer(units * UNIT);
    this.bytes = new Uint8Array(this.buffer);
    this.nodesSab = new SharedArrayBuffer(1024 * NODE_WORDS * 4);
    this.nodes = new Int32Array(this.nodesSab);
  }

  /** The current node array (replaced when it grows: readers must be given the new one). */
  get nodeBuffer(): SharedArrayBuffer {
    return this.nodesSab;
  }

  /** Largest object the arena takes, in bytes (a quarter of it). */
  get maxObjectBytes(): number {
    return (this.units * UNIT) >> 2;
  }

  /** True when node index `k` is in the arena now. */
  has(k: number): boolean {
    const o = k * NODE_WORDS;
    return o + NODE_WORDS <= this.nodes.length && this.nodes[o + N_STATE] === 1;
  }

  /**
   * Makes room in the node array for node index `k`.
   * @returns true when the array moved to a new, larger buffer (readers must be told).
   */
  ensureNode(k: number): boolean {
    if ((k + 1) * NODE_WORDS <= this.nodes.length) return false;
    let n = this.nodes.length / NODE_WORDS;
    while (n <= k) n *= 2;
    const sab = new SharedArrayBuffer(n * NODE_WORDS * 4);
    const nodes = new Int32Array(sab);
    nodes.set(this.nodes);
    this.nodesSab = sab;
    this.nodes = nodes;
    return true;
  }

  /**
   * Copies a whole content object (node index `k`, ensureNode(k) done) into the ring.
   * @returns false when it is empty, larger than maxObjectBytes, or already there.
   */
  put(k: number, data: Uint8Array): boolean {
    if (data.length === 0 || data.length > this.maxObjectBytes || this.has(k)) return false;
    const need = Math.ceil(data.length / UNIT);
    let start = this.head;
    const at = start % this.units;
    if (at + need > this.units) start += this.units - at; // never wrap inside an object
    const end = start + need;
    // 1. invalidate what the new bytes overwrite (objects starting less than one ring before `end`)
    while (this.fifoAt < this.fifo.length && this.fifo[this.fifoAt]!.start + this.units < end) {
      const old = this.fifo[this.fifoAt++]!;
      const o = old.k * NODE_WORDS;
      if (this.nodes[o + N_START] === (old.start | 0)) Atomics.store(this.nodes, o + N_STATE, 0);
    }
    if (this.fifoAt > 1024 && this.fifoAt * 2 > this.fifo.length) {
      this.fifo = this.fifo.slice(this.fifoAt);
      this.fifoAt = 0;
    }
    // 2. publish the reserve, 3. copy, then describe the object
    this.setReserve(end | 0);
    this.bytes.set(data, (start % this.units) * UNIT);
    const o = k * NODE_WORDS;
    this.nodes[o + N_START] = start | 0;
    this.nodes[o + N_LENGTH] = data.length;
    Atomics.store(this.nodes, o + N_STATE, 1);
    this.fifo.push({ k, start });
    this.head = end;
    return true;
  }
}
