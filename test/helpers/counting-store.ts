import type { ObjectStore } from '../../src/store/object/object-store.js';

/** One ranged read seen by a store wrapper. */
export interface ReadRecord {
  key: string;
  offset: number;
  length: number;
  bytes: number;
}

/**
 * Wraps a real ObjectStore, counting `get` calls and bytes; everything is delegated. With
 * `corruptFirstReads = n` the first n gets return a copy with one byte flipped in the middle
 * (the store itself stays intact, so a second read is good). With `delay` set, each get waits
 * that many ms (per read) before it answers: a test controls which of two reads comes back first.
 * With `fail` set, a get it picks is counted and then rejects (after its delay).
 */
export class CountingStore implements ObjectStore {
  gets = 0;
  bytes = 0;
  /** Gets running now, and the most that ever ran at once. */
  inFlight = 0;
  maxInFlight = 0;
  reads: ReadRecord[] = [];
  corruptFirstReads = 0;
  delay?: (key: string, offset: number, length: number) => number;
  fail?: (key: string, offset: number, length: number) => boolean;
  constructor(private readonly inner: ObjectStore) {}
  put(key: string, body: Uint8Array) {
    return this.inner.put(key, body);
  }
  async get(key: string, range?: { offset: number; length: number }) {
    this.maxInFlight = Math.max(this.maxInFlight, ++this.inFlight);
    try {
      return await this.countedGet(key, range);
    } finally {
      this.inFlight--;
    }
  }
  private async countedGet(key: string, range?: { offset: number; length: number }) {
    this.gets++;
    const ms = this.delay?.(key, range?.offset ?? 0, range?.length ?? Infinity) ?? 0;
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
    if (this.fail?.(key, range?.offset ?? 0, range?.length ?? Infinity)) throw new Error(`injected fault: get ${key}`);
    let b = await this.inner.get(key, range);
    this.bytes += b.length;
    this.reads.push({ key, offset: range?.offset ?? 0, length: range?.length ?? b.length, bytes: b.length });
    if (this.corruptFirstReads > 0 && b.length > 0) {
      this.corruptFirstReads--;
      b = Buffer.from(b);
      b[b.length >> 1] ^= 0x20;
    }
    return b;
  }
  has(key: string) {
    return this.inner.has(key);
  }
  size(key: string) {
    return this.inner.size(key);
  }
  delete(key: string) {
    return this.inner.delete(key);
  }
  list(prefix: string) {
    return this.inner.list(prefix);
  }
  sweepIncomplete(olderThanMs: number) {
    return this.inner.sweepIncomplete(olderThanMs);
  }
}
