import { EventEmitter } from 'node:events';
import type { Digest } from '../../core/digest.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { ChunkCache } from '../../host/read-path/chunk-cache.js';
import type { CachedObject } from '../../host/read-path/object-cache.js';
import type { DroppedLayer, LayerSweepResult } from '../../drivers/overlay/layer-sweep.js';
import type { ClassCountCache } from '../capture/class-cache.js';

/** Digests per round of blob-row lookups in the chunk part of a sweep. */
export const SWEEP_LOOKUP_BATCH = 1000;

/** What one host sweep dropped (or, in a dry run, would drop). Bytes: chunk file sizes; layers' allocated blocks. */
export interface HostSweepReport {
  dryRun: boolean;
  layers: {
    dropped: DroppedLayer[];
    kept: number;
    bytes: number;
    /** Leftovers of crashed layer builds or sweeps removed. */
    leftovers: { count: number; bytes: number };
  };
  chunks: { dropped: number; kept: number; bytes: number };
  /** Whole objects of the host object cache (bytes: allocated; those a live mount may still hold bound free later). */
  objects: { dropped: number; kept: number; bytes: number };
  /** Files of class counts of roots that are no snapshot any more (src/service/capture/class-cache.ts). */
  classCounts: { dropped: number };
  /** layers.bytes + chunks.bytes + objects.bytes + layers.leftovers.bytes */
  freedBytes: number;
  durationMs: number;
}

/** The layers of this host, as the sweep needs them (OverlayHost implements it; absent: no layers here). */
export interface SweepableLayers {
  /** Drops the layers nothing needs; `liveRoots` is read after the sweep window opened (see sweepLayers). */
  sweepLayers(liveRoots: () => Promise<ReadonlySet<Digest>>, dryRun: boolean): Promise<LayerSweepResult>;
}

/** The host object cache, as the sweep needs it (ObjectCache implements it). */
export interface SweepableObjects {
  /** The objects in CACHE, each with its first chunk. */
  sweepEntries(): Promise<CachedObject[]>;
  /** Removes one (false: no longer there). */
  dropUnreachable(short: string): boolean;
}

/** Options of a {@link HostSweep}. */
export interface HostSweepOptions {
  catalog: Catalog;
  /** The host chunk cache (absent: a daemon that serves no content). */
  cache?: ChunkCache;
  /** The host's layers (absent: no overlays here). */
  layers?: SweepableLayers;
  /** The host object cache (absent: none here). */
  objects?: SweepableObjects;
  /** The host's class counts (absent: none kept here). */
  classCounts?: ClassCountCache;
  /** Test-only injection point: awaited after the blob rows of a batch of cached chunks were looked up, before any is dropped. */
  hooks?: { afterLookup?(digests: readonly Digest[]): void | Promise<void> };
}

/** Events of a {@link HostSweep} (typed EventEmitter map). */
export type HostSweepEvents = {
  /** A layer was dropped (not in dry runs). */
  'layer-drop': [DroppedLayer];
  /** Cache entries were dropped, one event per lookup batch (not in dry runs). */
  'chunks-drop': [{ count: number; bytes: number }];
  /** Objects of the host object cache were dropped, one event per lookup batch (not in dry runs). */
  'objects-drop': [{ count: number; bytes: number }];
  /** A run finished. */
  done: [HostSweepReport];
};

/**
 * The host-local sweep (docs/explanation/gc.md#host-local-state): after gc removed snapshot
 * rows and deleted packs fleet-wide, each host drops what only those needed from its own disk.
 *
 * - **Layers** go by sweepLayers' rule: a layer whose root is the root of no snapshot row in
 *   the catalog (any namespace) and that nothing on this host uses.
 * - **Class counts** of roots that are the root of no snapshot row go (a cache).
 * - **Cache entries** go when their digest has no blob row in any namespace that has a
 *   snapshot: gc removes a blob's rows only when it deletes the pack that held it, after the
 *   re-mark found no live snapshot reaching it, so no live snapshot (and no mount, whose layer
 *   snapshot is a live root) can need the chunk. A chunk being written (just fetched) is kept.
 * - **Objects of the host object cache** go by the same rule, asked of their first chunk: a
 *   live snapshot that holds the object keeps every chunk of it.
 *
 * Runs are serialised (a run asked for during another starts after it). Emits typed events;
 * never prints.
 */
export class HostSweep extends EventEmitter<HostSweepEvents> {
  private last: Promise<unknown> = Promise.resolve();

  constructor(private readonly opts: HostSweepOptions) {
    super();
  }

  /**
   * One sweep of this host's layers and chunk cache.
   * @throws E_FORMAT (a workspace state cannot be read: no layer is dropped), the catalog's
   *   errors (E_CATALOG_UNAVAILABLE …), E_PERMISSION / E_INTERNAL from the file system
   */
  run(opts: { dryRun?: boolean } = {}): Promise<HostSweepReport> {
    const p = this.last.then(
      () => this.sweep(opts.dryRun ?? false),
      () => this.sweep(opts.dryRun ?? false),
    );
    this.last = p.catch(() => undefined);
    return p;
  }

  /** Resolves once no run is in progress (never rejects). */
  idle(): Promise<void> {
    return this.last.then(() => undefined);
  }

  private async sweep(dryRun: boolean): Promise<HostSweepReport> {
    const t0 = performance.now();
    const { catalog, cache, layers } = this.opts;
    let snaps: Awaited<ReturnType<ReturnType<Catalog['gc']>['listSnapshots']>> | undefined;
    const snapshots = async () => (snaps ??= await catalog.gc().listSnapshots());
    const report: HostSweepReport = {
      dryRun,
      layers: { dropped: [], kept: 0, bytes: 0, leftovers: { count: 0, bytes: 0 } },
      chunks: { dropped: 0, kept: 0, bytes: 0 },
      objects: { dropped: 0, kept: 0, bytes: 0 },
      classCounts: { dropped: 0 },
      freedBytes: 0,
      durationMs: 0,
    };
    if (layers) {
      const r = await layers.sweepLayers(async () => new Set((await snapshots()).map((s) => s.root)), dryRun);
      report.layers = {
        dropped: r.dropped,
        kept: r.kept,
        bytes: r.dropped.reduce((n, l) => n + l.bytes, 0),
        leftovers: { count: r.leftovers, bytes: r.leftoverBytes },
      };
      if (!dryRun) for (const l of r.dropped) this.emit('layer-drop', l);
    }
    if (cache || this.opts.objects) {
      const namespaces = [...new Set((await snapshots()).map((s) => s.namespace))];
      const indexed = async (digests: Digest[]) => {
        const found = new Set<Digest>();
        for (const ns of namespaces) for (const d of (await catalog.blobIndex(ns).lookup(digests)).keys()) found.add(d);
        await this.opts.hooks?.afterLookup?.(digests);
        return found;
      };
      if (cache) report.chunks = await this.sweepChunks(cache, indexed, dryRun);
      if (this.opts.objects) report.objects = await this.sweepObjects(this.opts.objects, indexed, dryRun);
    }
    if (this.opts.classCounts)
      report.classCounts.dropped = await this.opts.classCounts.sweep(async () => new Set((await snapshots()).map((s) => s.root)), dryRun);
    report.freedBytes = report.layers.bytes + report.layers.leftovers.bytes + report.chunks.bytes + report.objects.bytes;
    report.durationMs = Math.round(performance.now() - t0);
    this.emit('done', report);
    return report;
  }

  /** The chunk part: cached chunks whose digest has no blob row go (in lookup batches). */
  private async sweepChunks(
    cache: ChunkCache,
    indexed: (digests: Digest[]) => Promise<Set<Digest>>,
    dryRun: boolean,
  ): Promise<HostSweepReport['chunks']> {
    const out = { dropped: 0, kept: 0, bytes: 0 };
    const entries = cache.diskEntries();
    for (let i = 0; i < entries.length; i += SWEEP_LOOKUP_BATCH) {
      const batch = entries.slice(i, i + SWEEP_LOOKUP_BATCH);
      const live = await indexed(batch.map(([d]) => d));
      let count = 0;
      let bytes = 0;
      for (const [d, size] of batch) {
        if (live.has(d)) {
          out.kept++;
          continue;
        }
        if (!dryRun && !cache.delete(d)) continue; // evicted meanwhile: not ours to count
        count++;
        bytes += size;
      }
      out.dropped += count;
      out.bytes += bytes;
      if (!dryRun && count > 0) this.emit('chunks-drop', { count, bytes });
    }
    if (!dryRun) await cache.idle();
    return out;
  }

  /** The object part: objects of the host object cache whose first chunk has no blob row go; one whose chunk is not recorded stays. */
  private async sweepObjects(
    objects: SweepableObjects,
    indexed: (digests: Digest[]) => Promise<Set<Digest>>,
    dryRun: boolean,
  ): Promise<HostSweepReport['objects']> {
    const out = { dropped: 0, kept: 0, bytes: 0 };
    const entries = await objects.sweepEntries();
    for (let i = 0; i < entries.length; i += SWEEP_LOOKUP_BATCH) {
      const batch = entries.slice(i, i + SWEEP_LOOKUP_BATCH);
      const live = await indexed(batch.flatMap((e) => (e.chunk ? [e.chunk] : [])));
      let count = 0;
      let bytes = 0;
      for (const e of batch) {
        if (!e.chunk || live.has(e.chunk)) {
          out.kept++;
          continue;
        }
        if (!dryRun && !objects.dropUnreachable(e.short)) continue;
        count++;
        bytes += e.bytes;
      }
      out.dropped += count;
      out.bytes += bytes;
      if (!dryRun && count > 0) this.emit('objects-drop', { count, bytes });
    }
    return out;
  }
}
