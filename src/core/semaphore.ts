/**
 * A counting semaphore: at most `max` holders at once, the others wait first come first
 * served. Costs nothing when a slot is free (no Promise: `acquire` returns undefined).
 *
 * @example
 *   const sem = new Semaphore(16);
 *   const wait = sem.acquire();
 *   if (wait) await wait;
 *   try { await work(); } finally { sem.release(); }
 */
export class Semaphore {
  private held = 0;
  private readonly waiters: (() => void)[] = [];

  /** @param max most holders at once (≥ 1). */
  constructor(private readonly max: number) {}

  /** Takes a slot: undefined when one was free (taken now), else a Promise that resolves once one is passed on. */
  acquire(): Promise<void> | undefined {
    if (this.held < this.max) {
      this.held++;
      return undefined;
    }
    return new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  /** Gives a slot back: it passes to the first waiter, if any. */
  release(): void {
    const next = this.waiters.shift();
    if (next)
      next(); // the slot passes to the next waiter
    else this.held--;
  }
}
