import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { Catalog, HostSession } from '../../catalog/port/catalog.js';
import type { Logger, LogRecord } from '../../core/log.js';

/** Events of a {@link HostHeartbeat}. */
export interface HostHeartbeatEvents {
  /** A log line (`{level, msg, ...}`). */
  log: [LogRecord];
  /** The session had expired when a heartbeat reached the catalog: every lease of it is lost. */
  lost: [{ session: number }];
}

/** Options of a {@link HostHeartbeat}. */
export interface HostHeartbeatOptions {
  /** This host's id in the catalog (`config.host`). */
  host: string;
  /** Lease TTL in ms (`config.leaseTtlMs`). */
  ttlMs: number;
  /** Heartbeat interval in ms (`config.heartbeatMs`). */
  intervalMs: number;
  daemonVersion?: string;
  /** Monotonic clock in ms (default `performance.now`): only for the host's own, conservative view of its deadline. */
  clock?: () => number;
  /** Where it logs (default: its `'log'` event). */
  logger?: Logger;
}

/** What a daemon reports of its host session (`GET /v1/status`). */
export interface HeartbeatStatus {
  host: string;
  session: number | null;
  /** False once the host could not renew before its deadline (its leases are lost until it registers again). */
  live: boolean;
  /** Ms left until the host's own deadline (last successful heartbeat's start + TTL); negative once past. */
  deadlineInMs: number | null;
  /** Sessions this daemon found expired (after a pause or an outage). */
  lostSessions: number[];
}

/**
 * The host daemon's heartbeat (docs/explanation/leases.md): registers the host's session at
 * start (reclaiming the leases no other host took while it was away), then renews it with
 * ONE catalog statement per interval, which renews every lease of the session whatever
 * their number and driver (JuiceFS renews its client sessions the same way). When a
 * heartbeat finds the session expired (the daemon was paused or cut off past the TTL), the
 * session's leases are lost for good: it says so (`lost`) and registers a new session
 * without reclaiming them. The host's own deadline (`live`) is judged conservatively from
 * the start of the last successful heartbeat on its monotonic clock; the catalog judges by
 * its own clock in every commit. Emits events; never prints.
 */
export class HostHeartbeat extends EventEmitter<HostHeartbeatEvents> {
  #session: HostSession | undefined;
  #deadline = -Infinity;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #beating: Promise<void> | undefined;
  readonly #lost: number[] = [];
  readonly #clock: () => number;
  private readonly log: Logger;

  constructor(
    private readonly catalog: Catalog,
    private readonly opts: HostHeartbeatOptions,
  ) {
    super();
    this.#clock = opts.clock ?? (() => performance.now());
    this.log = opts.logger ?? ((l) => void this.emit('log', l));
  }

  /** Registers the session (reclaiming untaken leases: a daemon's start) and starts the interval. @throws what registerHost throws */
  async start(): Promise<HostSession> {
    const s = await this.#register(true);
    this.#schedule();
    return s;
  }

  async #register(reclaim: boolean): Promise<HostSession> {
    const t0 = this.#clock();
    const s = await this.catalog.registerHost({
      id: this.opts.host,
      address: hostname(),
      pid: process.pid,
      daemonVersion: this.opts.daemonVersion ?? null,
      ttlMs: this.opts.ttlMs,
      reclaim,
    });
    this.#session = s;
    this.#deadline = t0 + this.opts.ttlMs;
    this.log({
      level: 'info',
      msg: 'host session',
      host: s.host,
      session: s.session,
      continued: s.continued,
      reclaimed: s.reclaimed,
    });
    return s;
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#beating = this.beat().finally(() => this.#schedule());
    }, this.opts.intervalMs);
  }

  /**
   * One heartbeat: one statement. A session found expired is lost (`lost`), and a new one is
   * registered without reclaiming. A failing catalog is logged; past the deadline the host
   * counts as not live. Never throws.
   */
  async beat(): Promise<void> {
    const s = this.#session;
    if (!s) return;
    const t0 = this.#clock();
    try {
      if (await this.catalog.heartbeat(s.host, s.session)) {
        this.#deadline = t0 + this.opts.ttlMs;
        return;
      }
      this.#lost.push(s.session);
      this.log({ level: 'warn', msg: 'host session expired before it was renewed: its leases are lost', session: s.session });
      this.emit('lost', { session: s.session });
      await this.#register(false);
    } catch (err) {
      this.log({ level: 'error', msg: 'heartbeat failed', err: String(err), live: this.live });
    }
  }

  /** True while the host's own deadline has not passed. */
  get live(): boolean {
    return this.#session !== undefined && this.#clock() < this.#deadline;
  }

  /** The session, its liveness and deadline, and the sessions lost. */
  status(): HeartbeatStatus {
    return {
      host: this.opts.host,
      session: this.#session?.session ?? null,
      live: this.live,
      deadlineInMs: this.#session ? Math.round(this.#deadline - this.#clock()) : null,
      lostSessions: [...this.#lost],
    };
  }

  /** Stops renewing (the leases then expire after the TTL unless a new daemon continues the session). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#beating;
  }
}
