import { EventEmitter } from 'node:events';

/** Events of a {@link Singleflight}: `join` (the key) when a caller joins a call in flight. */
export interface SingleflightEvents<K> {
  join: [key: K];
}

/**
 * Request coalescing: concurrent callers of {@link Singleflight.do} with the same key share
 * one call of `fn` and receive the same settled value (or the same rejection). The key is
 * released as soon as the call settles (before any caller's continuation runs), so the next
 * call with that key starts afresh — a singleflight is not a cache.
 *
 * Events: `'join'` (key) whenever a caller joins a call in flight instead of starting one.
 * Never prints.
 *
 * @example
 *   const sf = new Singleflight<string, Buffer>();
 *   const [a, b] = await Promise.all([sf.do('k', load), sf.do('k', load)]); // load runs once; sf.joins === 1
 */
export class Singleflight<K, V> extends EventEmitter<SingleflightEvents<K>> {
  private readonly calls = new Map<K, Promise<V>>();
  /** Callers that joined a call already in flight (monotonic counter). */
  joins = 0;

  /**
   * Runs `fn` for `key` unless a call for `key` is in flight, in which case the caller joins it.
   * A synchronous throw of `fn` becomes a rejection shared like any other.
   * @returns the shared result; it rejects with whatever `fn` rejected with (errors pass through unchanged).
   */
  do(key: K, fn: () => Promise<V>): Promise<V> {
    const running = this.calls.get(key);
    if (running) {
      this.joins++;
      this.emit('join', key);
      return running;
    }
    let p: Promise<V>;
    try {
      p = Promise.resolve(fn());
    } catch (err) {
      p = Promise.reject(err);
    }
    this.calls.set(key, p);
    const release = (): void => {
      if (this.calls.get(key) === p) this.calls.delete(key);
    };
    p.then(release, release);
    return p;
  }

  /** The call in flight for `key`, if any (does not count as a join). */
  peek(key: K): Promise<V> | undefined {
    return this.calls.get(key);
  }

  /** Resolves once every call in flight now (and any started meanwhile) has settled; never rejects. */
  async settled(): Promise<void> {
    while (this.calls.size > 0) await Promise.allSettled([...this.calls.values()]);
  }

  /** Number of keys with a call in flight. */
  get inFlight(): number {
    return this.calls.size;
  }
}
