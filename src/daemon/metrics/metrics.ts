import { request } from 'node:http';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { AwcError } from '../../core/errors.js';
import type { ContentPlane } from '../../host/read-path/content-plane.js';
import type { ObjectCache } from '../../host/read-path/object-cache.js';

/**
 * Prometheus metrics of the host daemon (docs/explanation/design.md#interfaces), on a private prom-client `Registry`
 * (never the global one, so several daemons or tests in one process never collide).
 *
 * Names are fixed (dashboards and other modules rely on them). Units: bytes, seconds.
 *
 * | metric | type | labels | meaning |
 * |---|---|---|---|
 * | `awc_backend_reads_total` | counter | | object-store reads (ranged GETs) made for content |
 * | `awc_backend_read_bytes_total` | counter | | bytes those reads returned |
 * | `awc_cache_hits_total` | counter | | chunk cache hits |
 * | `awc_cache_misses_total` | counter | | chunk cache misses |
 * | `awc_cache_evictions_total` | counter | | chunks evicted from the cache (LRU, budget) |
 * | `awc_cache_evicted_bytes_total` | counter | | bytes evicted |
 * | `awc_cache_inserted_bytes_total` | counter | | bytes inserted into the cache |
 * | `awc_cache_corrupt_total` | counter | | cached chunks that failed digest verification |
 * | `awc_singleflight_joins_total` | counter | | requests that joined an in-flight backend read instead of making one |
 * | `awc_fuse_operations_total` | counter | `op` (`lookup`, `read`, `getattr`, …) | FUSE requests received by the content server |
 * | `awc_mount_operations_total` | counter | `op` (`mount`, `unmount`, `remount`), `driver` (`overlay`, `copy`) | successful mount operations |
 * | `awc_warm_cli_commands_total` | counter | `uid` | commands handed to a warm CLI worker (docs/explanation/cli-latency.md) |
 * | `awc_checkpoints_total` | counter | `driver` | checkpoints run (reported by the CLI, see `recordCheckpoint`) |
 * | `awc_checkpoint_bytes_total` | counter | | new bytes stored by checkpoints |
 * | `awc_checkpoint_duration_seconds` | histogram | | checkpoint wall time |
 * | `awc_lease_events_total` | counter | `event` | lease events (acquired, renewed, lost, taken-over…); registered, but nothing increments it: it stays 0 |
 * | `awc_cache_bytes` | gauge | | bytes held by the chunk cache |
 * | `awc_cache_budget_bytes` | gauge | | the cache's byte budget |
 * | `awc_mounted_workspaces` | gauge | | workspaces mounted by this daemon |
 * | `awc_content_objects` | gauge | | content objects the FUSE server knows |
 * | `awc_object_cache_bytes` | gauge | | bytes on disk of the host object cache (removed files still maybe bound included) |
 * | `awc_object_cache_objects` | gauge | | whole objects in the host object cache |
 * | `awc_object_cache_pending_fills` | gauge | | fills of the host object cache queued or running |
 * | `awc_object_cache_events` | gauge | `event` (`published`, `evicted`, `kernel_open`, `fill_error`, `skipped`) | the host object cache's counters since the daemon started (`kernel_open`: reads served by the kernel without FUSE) |
 * | `awc_process_*`, `awc_nodejs_*` | various | | prom-client default metrics (resident memory, CPU, heap, event-loop lag, …) |
 *
 * @example
 *   const m = new DaemonMetrics();
 *   m.backendReads.inc();
 *   m.backendReadBytes.inc(65536);
 *   m.mountOperations.inc({ op: 'mount', driver: 'overlay' });
 *   const text = await m.text(); // Prometheus text exposition, content type m.contentType
 */
export class DaemonMetrics {
  /** The private registry all metrics below live in. */
  readonly registry = new Registry();

  readonly backendReads: Counter;
  readonly backendReadBytes: Counter;
  readonly cacheHits: Counter;
  readonly cacheMisses: Counter;
  readonly cacheEvictions: Counter;
  readonly cacheEvictedBytes: Counter;
  readonly cacheInsertedBytes: Counter;
  readonly cacheCorrupt: Counter;
  readonly singleflightJoins: Counter;
  /** Label `op`: FUSE opcode name. Prefer {@link fuseOp} on hot paths (cached label children). */
  readonly fuseOperations: Counter<'op'>;
  /** Label `op`: the part of fuseOperations the reader workers answered (or dropped) without the main thread. */
  readonly fuseWorkerOperations: Counter<'op'>;
  /** Worker-side FUSE counters already added to fuseOperations, by opcode name. */
  private readonly workerOpsSeen = new Map<string, number>();
  /** Labels `op` (`mount` | `unmount` | `remount`) and `driver` (`overlay` | `copy`). */
  readonly mountOperations: Counter<'op' | 'driver'>;
  /** Commands handed to a warm CLI worker, by the caller's uid. */
  readonly warmCommands: Counter<'uid'>;
  /** Shared layer images (src/drivers/overlay/shared-image.ts), label `outcome` (`published` | `mounted` | `built` | `fallback` | `failed`) and `reason` (a fallback's error code, else ''). */
  readonly layerImages: Counter<'outcome' | 'reason'>;
  /** Label `driver`. */
  readonly checkpoints: Counter<'driver'>;
  /** New bytes stored by checkpoints. */
  readonly checkpointBytes: Counter;
  /** Seconds per checkpoint. */
  readonly checkpointDuration: Histogram;
  /** Label `event`. */
  readonly leaseEvents: Counter<'event'>;
  readonly cacheBytes: Gauge;
  readonly cacheBudgetBytes: Gauge;
  /** Bytes of fetched chunks waiting to be written to the disk cache (held in memory meanwhile). */
  readonly cachePendingBytes: Gauge;
  readonly mountedWorkspaces: Gauge;
  readonly contentObjects: Gauge;
  /** Bytes on disk of the host object cache. */
  readonly objectCacheBytes: Gauge;
  /** Objects in the host object cache. */
  readonly objectCacheObjects: Gauge;
  /** Fills of the host object cache queued or running. */
  readonly objectCachePendingFills: Gauge;
  /** Label `event`: the host object cache's counters (monotonic for the daemon's life). */
  readonly objectCacheEvents: Gauge<'event'>;

  private readonly collectors: (() => void)[] = [];
  private readonly fuseChildren = new Map<string, { inc(v?: number): void }>();

  /**
   * @param opts.defaultMetrics collect prom-client's default process metrics with prefix `awc_`
   *   (default true; tests that build many instances may turn it off).
   */
  constructor(opts: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    const counter = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
      new Counter<L>({ name, help, labelNames, registers });
    const gauge = (name: string, help: string) => new Gauge({ name, help, registers });
    this.backendReads = counter('awc_backend_reads_total', 'Object-store reads (ranged GETs) made for content.');
    this.backendReadBytes = counter('awc_backend_read_bytes_total', 'Bytes returned by object-store reads for content.');
    this.cacheHits = counter('awc_cache_hits_total', 'Chunk cache hits.');
    this.cacheMisses = counter('awc_cache_misses_total', 'Chunk cache misses.');
    this.cacheEvictions = counter('awc_cache_evictions_total', 'Chunks evicted from the chunk cache.');
    this.cacheEvictedBytes = counter('awc_cache_evicted_bytes_total', 'Bytes evicted from the chunk cache.');
    this.cacheInsertedBytes = counter('awc_cache_inserted_bytes_total', 'Bytes inserted into the chunk cache.');
    this.cacheCorrupt = counter('awc_cache_corrupt_total', 'Cached chunks that failed digest verification (dropped and refetched).');
    this.singleflightJoins = counter(
      'awc_singleflight_joins_total',
      'Requests that joined an in-flight backend read instead of making their own.',
    );
    this.fuseOperations = counter('awc_fuse_operations_total', 'FUSE requests received by the content server, by opcode.', ['op']);
    this.fuseWorkerOperations = counter(
      'awc_fuse_worker_operations_total',
      'FUSE requests the reader worker threads handled themselves (LOOKUPs from the content table, READs from the hot arena, FORGETs), by opcode; included in awc_fuse_operations_total.',
      ['op'],
    );
    this.mountOperations = counter('awc_mount_operations_total', 'Successful mount operations, by operation and driver.', ['op', 'driver']);
    this.layerImages = counter(
      'awc_layer_images_total',
      'Layer images: built and shared here (published; reason import: by an import), mounted from another host (mounted), built here for this host alone (built), not usable (fallback: the layer built here another way), or not shared (failed), by outcome and reason.',
      ['outcome', 'reason'],
    );
    this.warmCommands = counter('awc_warm_cli_commands_total', 'Commands handed to a warm CLI worker, by uid.', ['uid']);
    this.checkpoints = counter('awc_checkpoints_total', 'Checkpoints run, by mount driver.', ['driver']);
    this.checkpointBytes = counter('awc_checkpoint_bytes_total', 'New bytes stored by checkpoints.');
    this.checkpointDuration = new Histogram({
      name: 'awc_checkpoint_duration_seconds',
      help: 'Checkpoint wall time in seconds.',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    this.leaseEvents = counter('awc_lease_events_total', 'Lease events, by event.', ['event']);
    this.cacheBytes = gauge('awc_cache_bytes', 'Bytes held by the chunk cache.');
    this.cacheBudgetBytes = gauge('awc_cache_budget_bytes', 'Byte budget of the chunk cache.');
    this.cachePendingBytes = gauge(
      'awc_cache_pending_bytes',
      'Bytes of chunks waiting to be written to the disk cache (write-behind; served from memory meanwhile).',
    );
    this.mountedWorkspaces = gauge('awc_mounted_workspaces', 'Workspaces mounted by this daemon.');
    this.contentObjects = gauge('awc_content_objects', 'Content objects known to the content FUSE server.');
    this.objectCacheBytes = gauge(
      'awc_object_cache_bytes',
      'Bytes on disk of the host object cache (whole objects read by the kernel without FUSE).',
    );
    this.objectCacheObjects = gauge('awc_object_cache_objects', 'Whole content objects in the host object cache.');
    this.objectCachePendingFills = gauge('awc_object_cache_pending_fills', 'Fills of the host object cache queued or running.');
    this.objectCacheEvents = new Gauge({
      name: 'awc_object_cache_events',
      help: "The host object cache's counters since the daemon started, by event (published, evicted, kernel_open, fill_error, skipped).",
      labelNames: ['event'],
      registers,
    });
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry, prefix: 'awc_' });
  }

  /**
   * Adds what the FUSE reader workers handled on their own since the last call (they emit no
   * per-request event): `totals` are their monotonic counters by opcode name
   * (ContentFuse.workerOps). Call it from a collector, so a scrape sees them.
   */
  syncWorkerFuseOps(totals: Record<string, number>): void {
    for (const op in totals) {
      const now = totals[op]!;
      const delta = now - (this.workerOpsSeen.get(op) ?? 0);
      if (delta <= 0) continue;
      this.workerOpsSeen.set(op, now);
      this.fuseOperations.labels(op).inc(delta);
      this.fuseWorkerOperations.labels(op).inc(delta);
    }
  }

  /** Counts one FUSE request of opcode name `op` (label children cached: cheap enough per request). */
  fuseOp(op: string): void {
    let c = this.fuseChildren.get(op);
    if (!c) {
      c = this.fuseOperations.labels(op);
      this.fuseChildren.set(op, c);
    }
    c.inc();
  }

  /**
   * Records one checkpoint: `awc_checkpoints_total{driver}` +1, `awc_checkpoint_bytes_total`
   * + newBytes, `awc_checkpoint_duration_seconds` observes durationMs / 1000.
   * @throws E_USAGE when a value is not a finite number ≥ 0 or driver is empty
   */
  recordCheckpoint(r: { driver: string; durationMs: number; newBytes: number }): void {
    if (typeof r.driver !== 'string' || !/^[a-z0-9_-]{1,32}$/.test(r.driver))
      throw new AwcError('E_USAGE', `invalid checkpoint driver ${JSON.stringify(r.driver)}`);
    for (const k of ['durationMs', 'newBytes'] as const) {
      if (typeof r[k] !== 'number' || !Number.isFinite(r[k]) || r[k] < 0)
        throw new AwcError('E_USAGE', `invalid checkpoint ${k} ${JSON.stringify(r[k])}`);
    }
    this.checkpoints.inc({ driver: r.driver });
    this.checkpointBytes.inc(r.newBytes);
    this.checkpointDuration.observe(r.durationMs / 1000);
  }

  /**
   * Counts the read path's work: subscribes to the typed events of the content plane's parts
   * (fetcher: backend reads and their bytes, singleflight joins; cache: hits, misses,
   * evictions, inserted bytes, corrupt files) and samples its gauges before every scrape
   * (content objects, cache bytes, budget and pending writes). One listener per event, each a
   * counter increment.
   */
  observe(plane: ContentPlane): void {
    const { fetcher, cache, source } = plane;
    fetcher.on('backend-read', (e) => {
      this.backendReads.inc();
      this.backendReadBytes.inc(e.bytes);
    });
    fetcher.on('join', () => this.singleflightJoins.inc());
    cache.on('hit', () => this.cacheHits.inc());
    cache.on('miss', () => this.cacheMisses.inc());
    cache.on('evict', (e) => {
      this.cacheEvictions.inc();
      this.cacheEvictedBytes.inc(e.bytes);
    });
    cache.on('store', (e) => this.cacheInsertedBytes.inc(e.bytes));
    cache.on('corrupt', () => this.cacheCorrupt.inc());
    this.addCollector(() => {
      this.contentObjects.set(source.size);
      this.cacheBytes.set(cache.bytes);
      this.cacheBudgetBytes.set(cache.budgetBytes);
      this.cachePendingBytes.set(cache.pendingBytes);
    });
  }

  /**
   * Counts the host object cache's work (objects published, evicted, opened by the kernel
   * without FUSE, failed fills) and samples its bytes and objects before every scrape.
   */
  observeObjects(objects: ObjectCache): void {
    this.addCollector(() => {
      const s = objects.stats;
      this.objectCacheBytes.set(objects.bytes + objects.removedBytes);
      this.objectCacheObjects.set(objects.count);
      this.objectCachePendingFills.set(objects.pendingFills);
      this.objectCacheEvents.set({ event: 'published' }, s.published);
      this.objectCacheEvents.set({ event: 'evicted' }, s.evicted);
      this.objectCacheEvents.set({ event: 'kernel_open' }, s.kernelOpens);
      this.objectCacheEvents.set({ event: 'fill_error' }, s.fillErrors);
      this.objectCacheEvents.set({ event: 'skipped' }, s.skipped);
    });
  }

  /** Registers a function run before every scrape (to set gauges from live state). Errors in it are ignored. */
  addCollector(fn: () => void): void {
    this.collectors.push(fn);
  }

  private collect(): void {
    for (const fn of this.collectors) {
      try {
        fn();
      } catch {
        // a failing sampler must not break the scrape
      }
    }
  }

  /** Content type of {@link text} (Prometheus text exposition 0.0.4). */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** All metrics in the Prometheus text exposition format. */
  async text(): Promise<string> {
    this.collect();
    return this.registry.metrics();
  }

  /** All metrics as prom-client's JSON (`registry.getMetricsAsJSON()`): `[{name, help, type, values: [{value, labels, metricName?}]}]`. */
  async json(): Promise<MetricObjectWithValues<MetricValue<string>>[]> {
    this.collect();
    return (await this.registry.getMetricsAsJSON()) as MetricObjectWithValues<MetricValue<string>>[];
  }
}

/** A sample value in {@link flattenMetrics}' output: a bare number for one unlabelled sample, else the samples. */
export type FlatMetric = number | { labels: Record<string, string | number>; value: number }[];

/**
 * Flattens prom-client's registry JSON into `{<sample name>: value | [{labels, value}]}`.
 * Keys are sample names as in the text format: a histogram `h` gives `h_bucket` (labels
 * `le`), `h_sum` and `h_count`. One sample without labels becomes a bare number; anything
 * else (labelled metrics, even with no samples yet) an array.
 */
export function flattenMetrics(
  json: readonly { name: string; values?: readonly { value: number; labels?: Record<string, string | number>; metricName?: string }[] }[],
): Record<string, FlatMetric> {
  const out: Record<string, FlatMetric> = {};
  for (const m of json) {
    const groups = new Map<string, { labels: Record<string, string | number>; value: number }[]>();
    for (const v of m.values ?? []) {
      const key = v.metricName ?? m.name;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = []));
      g.push({ labels: { ...(v.labels ?? {}) }, value: v.value });
    }
    if (groups.size === 0) out[m.name] = [];
    for (const [key, samples] of groups) {
      out[key] = samples.length === 1 && Object.keys(samples[0].labels).length === 0 ? samples[0].value : samples;
    }
  }
  return out;
}

/**
 * GETs a plain-text resource (e.g. `/metrics`) from the daemon socket. (`DaemonClient.call`
 * parses every answer as JSON, so it cannot fetch the text exposition.)
 * @throws E_DAEMON_UNAVAILABLE when the socket does not answer within `timeoutMs`; the
 *   daemon's AwcError on an HTTP error status
 */
export function fetchDaemonText(socket: string, path: string, timeoutMs = 10_000): Promise<{ contentType: string; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: socket, method: 'GET', path, timeout: timeoutMs }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d) => parts.push(d));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        if (res.statusCode && res.statusCode >= 400) {
          let err: AwcError;
          try {
            err = AwcError.fromJSON(JSON.parse(text).error ?? {});
          } catch {
            err = new AwcError('E_INTERNAL', `daemon answered ${res.statusCode}: ${text.slice(0, 200)}`);
          }
          reject(err);
        } else resolve({ contentType: String(res.headers['content-type'] ?? ''), text });
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED')
        reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon is not running (${socket})`));
      else reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon did not answer: ${err.message}`));
    });
    req.end();
  });
}
