/** Options of a {@link WriteBehind}. */
export interface WriteBehindOptions {
  /** Most writes running at once (≥ 1). */
  maxWrites: number;
  /** Writes wait until nothing was queued for this many ms (≥ 0; 0 writes at once). */
  quietMs: number;
  /** …or until more than this many bytes wait (≥ 0). */
  maxWaitingBytes: number;
  /** …or while this says so (a small cache writes through). */
  writeThrough(): boolean;
}

/**
 * The write-behind schedule of the host chunk cache: writing thousands of small files while
 * the misses that brought their chunks keep coming competes with answering them (measured on
 * a 2-vCPU VM: a cold read of 3 000 files took twice as long with the writes as without). So
 * a write waits ({@link turn}) until nothing was queued for quietMs, or more than
 * maxWaitingBytes wait, or `writeThrough()` says so, or a flush is in progress
 * ({@link flushing}); then at most maxWrites run at once, in the order they were queued.
 */
export class WriteBehind {
  private running = 0;
  /** Writes waiting to start, first come first served: `waiters[head…]` (a queue with O(1) removal at the front). */
  private waiters: { bytes: number; start: () => void }[] = [];
  private head = 0;
  /** Bytes of the writes in `waiters`. */
  private waitingBytes = 0;
  /** performance.now() of the last write queued. */
  private lastQueued = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Flushes in progress: writes start without waiting for a quiet moment. */
  private flushes = 0;

  /** @param opts see WriteBehindOptions (validated by the cache). */
  constructor(private readonly opts: WriteBehindOptions) {}

  /**
   * Queues a write of `bytes` bytes: resolves when it may start. The caller must call
   * {@link done} once it has finished (whether it failed or not).
   */
  turn(bytes: number): Promise<void> {
    this.lastQueued = performance.now();
    return new Promise<void>((start) => {
      this.waiters.push({ bytes, start });
      this.waitingBytes += bytes;
      this.pump();
    });
  }

  /** A write that started has finished: the next may start. */
  done(): void {
    this.running--;
    this.pump();
  }

  /** Runs `fn` with writes starting at once (no waiting for a quiet moment) until it settles. */
  async flushing<T>(fn: () => Promise<T>): Promise<T> {
    this.flushes++;
    try {
      this.pump();
      return await fn();
    } finally {
      this.flushes--;
    }
  }

  /**
   * Starts the waiting writes that may start (see class doc); otherwise looks again when the
   * quiet time would be over.
   */
  private pump(): void {
    while (this.head < this.waiters.length && this.running < this.opts.maxWrites) {
      const quietFor = performance.now() - this.lastQueued;
      if (!(
        this.flushes > 0 ||
        quietFor >= this.opts.quietMs ||
        this.waitingBytes > this.opts.maxWaitingBytes ||
        this.opts.writeThrough()
      )) {
        if (!this.timer) {
          this.timer = setTimeout(
            () => {
              this.timer = undefined;
              this.pump();
            },
            Math.ceil(this.opts.quietMs - quietFor) + 1,
          );
        }
        return;
      }
      const w = this.waiters[this.head++];
      if (this.head >= 1024 && this.head * 2 >= this.waiters.length) {
        this.waiters = this.waiters.slice(this.head);
        this.head = 0;
      }
      this.waitingBytes -= w.bytes;
      this.running++;
      w.start();
    }
    if (this.head >= this.waiters.length && this.timer) {
      // nothing left to wait for: a timer would only keep the process alive
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }
}
