import { PackIndex } from './pack-index.js';

/** Default memory for pack indexes (16 MiB). */
export const DEFAULT_PACK_INDEX_BYTES = 16 * 1024 * 1024;
/** A pack index that could not be read is tried again after this many ms. */
const PACK_INDEX_RETRY_MS = 60_000;
/** Pack slots kept (most of them hold no index). */
const MAX_PACK_SLOTS = 4096;

/** What is known about one pack: its index, and the state `S` its user keeps beside it. */
export interface PackSlot<S> {
  /** undefined: not read yet; null: unusable until retryAt. */
  index?: PackIndex | null;
  /** Date.now() after which an unusable index is tried again. */
  retryAt: number;
  /** The read of the index in flight. */
  loading?: Promise<PackIndex | null>;
  /** The user's state of this pack (read-ahead streams and windows). */
  readonly state: S;
}

/** Options of a {@link PackIndexCache}. */
export interface PackIndexCacheOptions<S> {
  /** Size of a pack in bytes (one HEAD on S3). */
  size(pack: string): Promise<number>;
  /** One ranged read of a pack's tail. */
  read(pack: string, offset: number, length: number): Promise<Buffer>;
  /** Most bytes of indexes kept; default DEFAULT_PACK_INDEX_BYTES. */
  maxBytes?: number;
  /** A new pack's state. */
  create(): S;
  /** True while a pack's state must stay (its slot is never dropped then). */
  busy(state: S): boolean;
  /** An index that could not be read or parsed (that pack goes without one for a minute). */
  onError(pack: string, error: unknown): void;
}

/**
 * The pack indexes a reader has read from pack tails, in a least-recently-used map of pack
 * slots (at most maxBytes of indexes and 4096 slots; a busy slot, or one whose index is
 * loading, is never dropped). Each index is read once per pack (concurrent callers share the
 * read): from the bytes of a read that reaches the end of the pack when there is one in
 * flight, else with one ranged read of the tail (rarely two). An index that cannot be read is
 * reported (`onError`) and tried again after a minute.
 *
 * The index is only used to find blob boundaries and digests: a wrong one costs wasted bytes,
 * never wrong bytes (whatever is read by it is verified against its digest).
 */
export class PackIndexCache<S> {
  /** Slots by pack, least recently used first. */
  private readonly slots = new Map<string, PackSlot<S>>();
  private readonly maxBytes: number;
  private used = 0;

  /** @param opts see PackIndexCacheOptions. */
  constructor(private readonly opts: PackIndexCacheOptions<S>) {
    this.maxBytes = opts.maxBytes ?? DEFAULT_PACK_INDEX_BYTES;
  }

  /** Bytes of indexes held. */
  get bytes(): number {
    return this.used;
  }

  /** The pack's slot, created when new, made most recently used. */
  slot(pack: string): PackSlot<S> {
    let s = this.slots.get(pack);
    if (s) {
      this.slots.delete(pack);
    } else {
      s = { retryAt: 0, state: this.opts.create() };
    }
    this.slots.set(pack, s);
    this.trim();
    return s;
  }

  /** The pack's slot when there is one (its place in the LRU order is kept). */
  peek(pack: string): PackSlot<S> | undefined {
    return this.slots.get(pack);
  }

  /** The slot's index: known, null (unusable for now), or undefined (not read yet, being read, or to retry). */
  usable(s: PackSlot<S>): PackIndex | null | undefined {
    if (s.index === null && Date.now() >= s.retryAt) s.index = undefined;
    return s.index;
  }

  /**
   * Reads a pack's index once (concurrent callers share the read). `atEnd`, given the pack's
   * size, may name a read in flight that reaches the end of the pack: its bytes are used when
   * they hold the index (no read of its own).
   * @returns null when it cannot be read or parsed (`onError`; tried again later). Never rejects.
   */
  load(
    pack: string,
    s: PackSlot<S>,
    atEnd?: (packSize: number) => { start: number; arrived: Promise<Buffer | undefined> } | undefined,
  ): Promise<PackIndex | null> {
    if (s.index !== undefined) return Promise.resolve(s.index);
    if (s.loading) return s.loading;
    const p = (async (): Promise<PackIndex | null> => {
      try {
        const size = await this.opts.size(pack);
        const end = atEnd?.(size);
        const span = end ? await end.arrived : undefined;
        const found = end && span ? PackIndex.fromEndOfPack(span, end.start, size) : undefined;
        if (found) return found;
        const guess = PackIndex.tailGuess(size);
        let tail = await this.opts.read(pack, size - guess, guess);
        const need = PackIndex.tailLength(tail);
        if (need > tail.length && need <= size) tail = await this.opts.read(pack, size - need, need);
        return PackIndex.fromTail(tail, size);
      } catch (err) {
        this.opts.onError(pack, err);
        return null;
      }
    })().then((info) => {
      s.loading = undefined;
      s.index = info;
      if (info) {
        this.used += info.bytes;
        this.trim();
      } else {
        s.retryAt = Date.now() + PACK_INDEX_RETRY_MS;
      }
      return info;
    });
    s.loading = p;
    return p;
  }

  /** Stops using `index` for the slot (it disagrees with the catalog): no index there until the retry time. */
  distrust(s: PackSlot<S>, index: PackIndex): void {
    if (s.index !== index) return;
    this.used -= index.bytes;
    s.index = null;
    s.retryAt = Date.now() + PACK_INDEX_RETRY_MS;
  }

  /** Drops the least recently used slots beyond the limits (never a busy one, nor one loading). */
  private trim(): void {
    if (this.used <= this.maxBytes && this.slots.size <= MAX_PACK_SLOTS) return;
    for (const [pack, s] of this.slots) {
      if (this.used <= this.maxBytes && this.slots.size <= MAX_PACK_SLOTS) break;
      if (s.loading || this.opts.busy(s.state)) continue;
      this.slots.delete(pack);
      if (s.index) this.used -= s.index.bytes;
    }
  }
}
