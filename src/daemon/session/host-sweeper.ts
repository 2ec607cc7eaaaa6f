import { EventEmitter } from 'node:events';
import { Counter } from 'prom-client';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { ChunkCache } from '../../host/read-path/chunk-cache.js';
import { HostSweep, type HostSweepReport, type SweepableLayers, type SweepableObjects } from '../../service/gc/host-sweep.js';
import type { DaemonMetrics } from '../metrics/metrics.js';
import type { ClassCountCache } from '../../service/capture/class-cache.js';
import type { LogEvents, Logger } from '../../core/log.js';

/** Events of a {@link HostSweeper}: log lines for the daemon's log. */
export type HostSweeperEvents = LogEvents;

/**
 * The host daemon's side of the host-local sweep (HostSweep, docs/explanation/gc.md#host-local-state):
 * runs it every `intervalMs` (config `sweepIntervalMs`; 0: only on demand) and on demand
 * (`POST /v1/sweep`, `awc gc --local`, and after `awc gc` on this host), counts what it dropped
 * in the daemon's metrics and logs each run.
 *
 * Metrics (on the daemon's registry):
 *
 * | metric | type | labels | meaning |
 * |---|---|---|---|
 * | `awc_host_sweeps_total` | counter | `result` (`ok`, `error`) | host sweeps run (dry runs not counted) |
 * | `awc_host_sweep_dropped_total` | counter | `kind` (`layer`, `chunk`, `object`) | layers, chunk cache entries and host object cache objects dropped |
 * | `awc_host_sweep_freed_bytes_total` | counter | `kind` (`layer`, `chunk`, `object`) | bytes they held (layers: allocated blocks, with leftovers of crashed builds) |
 */
export class HostSweeper extends EventEmitter<HostSweeperEvents> {
  private readonly sweep: HostSweep;
  private timer?: NodeJS.Timeout;
  private readonly runs: Counter<'result'>;
  private readonly dropped: Counter<'kind'>;
  private readonly freed: Counter<'kind'>;
  private readonly log: Logger;

  constructor(
    opts: { catalog: Catalog; cache?: ChunkCache; layers?: SweepableLayers; objects?: SweepableObjects; classCounts?: ClassCountCache },
    metrics: DaemonMetrics,
    private readonly intervalMs: number,
    logger?: Logger,
  ) {
    super();
    this.log = logger ?? ((l) => void this.emit('log', l));
    this.sweep = new HostSweep(opts);
    const registers = [metrics.registry];
    this.runs = new Counter({ name: 'awc_host_sweeps_total', help: 'Host sweeps run, by result.', labelNames: ['result'], registers });
    this.dropped = new Counter({
      name: 'awc_host_sweep_dropped_total',
      help: 'Layers, chunk cache entries and host object cache objects the host sweep dropped, by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.freed = new Counter({
      name: 'awc_host_sweep_freed_bytes_total',
      help: 'Bytes freed by the host sweep, by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.sweep.on('layer-drop', (l) => {
      this.dropped.inc({ kind: 'layer' });
      this.freed.inc({ kind: 'layer' }, l.bytes);
    });
    this.sweep.on('chunks-drop', (c) => {
      this.dropped.inc({ kind: 'chunk' }, c.count);
      this.freed.inc({ kind: 'chunk' }, c.bytes);
    });
    this.sweep.on('objects-drop', (c) => {
      this.dropped.inc({ kind: 'object' }, c.count);
      this.freed.inc({ kind: 'object' }, c.bytes);
    });
  }

  /** Starts the periodic runs (the first one interval from now). */
  start(): void {
    if (this.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.run({}).catch(() => undefined), this.intervalMs);
    this.timer.unref();
  }

  /** Stops the periodic runs; resolves once a run in progress finished (never rejects). */
  stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    return this.sweep.idle();
  }

  /** One run now (see HostSweep.run); logged and counted. @throws what HostSweep.run throws */
  async run(opts: { dryRun?: boolean }): Promise<HostSweepReport> {
    try {
      const r = await this.sweep.run(opts);
      if (!r.dryRun) {
        this.runs.inc({ result: 'ok' });
        this.freed.inc({ kind: 'layer' }, r.layers.leftovers.bytes);
      }
      this.log({
        level: 'info',
        msg: r.dryRun ? 'host sweep (dry run)' : 'host sweep',
        layers: r.layers.dropped.length,
        chunks: r.chunks.dropped,
        objects: r.objects.dropped,
        freedBytes: r.freedBytes,
        durationMs: r.durationMs,
      });
      return r;
    } catch (err) {
      if (!opts.dryRun) this.runs.inc({ result: 'error' });
      this.log({ level: 'error', msg: 'host sweep failed', err: String(err) });
      throw err;
    }
  }
}
