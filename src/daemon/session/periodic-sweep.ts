import type { Catalog } from '../../catalog/port/catalog.js';
import type { AwcConfig } from '../../config/config.js';
import type { Logger } from '../../core/log.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';
import type { ObjectStore } from '../../store/object/object-store.js';

/** What a host daemon's periodic sweep needs of the daemon. */
export interface SweeperDeps {
  config: AwcConfig;
  catalog: Catalog;
  store: ObjectStore;
  /** Overlay mounts and unmounts in this daemon (as root). */
  port: HostDaemonPort;
  logger: Logger;
}

/**
 * A sweep the host daemon runs every `intervalMs` (0 or less: never; then only `run()` by
 * hand), one run at a time: a `run()` while one is in progress joins it. `R` is what one run
 * reports. The worktree sweeper and the idle sweeper are its two kinds.
 */
export abstract class PeriodicSweep<R> {
  private timer?: NodeJS.Timeout;
  private running?: Promise<R>;

  constructor(private readonly intervalMs: number) {}

  /** Starts the periodic runs (the first one interval from now). */
  start(): void {
    if (this.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.run().catch(() => undefined), this.intervalMs);
    this.timer.unref();
  }

  /** Stops the periodic runs; resolves once a run in progress finished (never rejects). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }

  /** One sweep now (joins a run in progress). @throws what the sweep throws */
  run(): Promise<R> {
    this.running ??= this.sweep().finally(() => (this.running = undefined));
    return this.running;
  }

  /** One run of the sweep. */
  protected abstract sweep(): Promise<R>;
}
