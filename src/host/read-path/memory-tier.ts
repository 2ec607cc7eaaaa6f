import type { Digest } from '../../core/digest.js';

/**
 * The memory tier of the host chunk cache: verified chunks read ahead of any request, at most
 * `maxBytes` of them, oldest added first out (`onEvict`: read ahead in vain). Not on disk,
 * not counted in the disk budget. Buffers are kept as given: treat them as read-only.
 */
export class MemoryTier {
  private readonly map = new Map<Digest, Buffer>();
  private used = 0;

  /**
   * @param maxBytes most bytes held (0: the tier keeps nothing).
   * @param onEvict called for each chunk dropped to make room, after it is gone.
   */
  constructor(
    readonly maxBytes: number,
    private readonly onEvict: (digest: Digest, data: Buffer) => void,
  ) {}

  /** Bytes held. */
  get bytes(): number {
    return this.used;
  }

  /** Chunks held. */
  get count(): number {
    return this.map.size;
  }

  /** The chunk's bytes, or undefined. No side effect. */
  get(digest: Digest): Buffer | undefined {
    return this.map.get(digest);
  }

  /** True when the chunk is held. */
  has(digest: Digest): boolean {
    return this.map.has(digest);
  }

  /** Adds a chunk (the caller checked it is not held and not larger than maxBytes), dropping the oldest to fit. */
  add(digest: Digest, data: Buffer): void {
    while (this.used + data.length > this.maxBytes && this.map.size > 0) {
      const [d, old] = this.map.entries().next().value as [Digest, Buffer];
      this.remove(d, old);
      this.onEvict(d, old);
    }
    this.map.set(digest, data);
    this.used += data.length;
  }

  /** Removes a chunk held (`data`: its bytes, as get returned them). */
  remove(digest: Digest, data: Buffer): void {
    this.map.delete(digest);
    this.used -= data.length;
  }
}
