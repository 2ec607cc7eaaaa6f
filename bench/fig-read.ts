import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fmtRatio, restartDaemon, unmountAll, type Figure, type TreeCtx } from './common.js';
import { fetchMetricsRetry, parseProm, snapshotMetrics, sumOf } from './prom.js';
import { cleanRound, dropCaches, dropCount, fmtBytes, fmtMs, median, readAllSync, runTimed } from './util.js';

const MBps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);

/** A fresh workspace of the tree's snapshot, mounted under scratch. */
async function freshMount(ctx: TreeCtx, name: string): Promise<string> {
  const dir = join(ctx.scratch, name);
  const [ws] = await ctx.awc.fork(ctx.snapshotId);
  await ctx.awc.mount(ws.id, dir);
  return dir;
}

/**
 * Waits until the host object cache has taken what the reads so far filled it with: no fill
 * queued or running, twice 1 s apart (at most 30 min; a failed scrape is "not yet").
 * @returns the objects in it and its bytes
 */
export async function awaitObjectCache(ctx: TreeCtx): Promise<{ objects: number; bytes: number }> {
  const t0 = performance.now();
  let quiet = 0;
  for (;;) {
    const r = await fetchMetricsRetry(ctx.awc.paths.socket);
    const m = parseProm(r.text);
    const pending = r.error ? NaN : sumOf(m, 'awc_object_cache_pending_fills');
    quiet = pending === 0 ? quiet + 1 : 0;
    if (quiet >= 2 || performance.now() - t0 > 30 * 60_000) {
      return { objects: sumOf(m, 'awc_object_cache_objects'), bytes: sumOf(m, 'awc_object_cache_bytes') };
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * Read of every file, warm: every regular file of the tree read once, sequentially with
 * blocking reads into a 1 MiB buffer (like cat/tar/grep -r), after one warm-up pass; median of
 * plan.readIters passes through a mounted workspace and on the native tree.
 */
export async function figReadWarm(ctx: TreeCtx): Promise<Figure> {
  const paths = ctx.stats.paths;
  // a first workspace reads the tree, which fills the host object cache; the measured one is mounted after,
  // so its files bind to CACHE at their first open (a steady host: docs/explanation/host-cache-lower.md)
  readAllSync(await freshMount(ctx, 'read-warm-fill'), paths);
  await awaitObjectCache(ctx);
  const dir = await freshMount(ctx, 'read-warm');
  // diagnostic baseline: overlayfs itself, over the native tree (no AWC, no FUSE)
  const po = join(ctx.scratch, 'plain-overlay');
  for (const d of ['upper', 'work', 'mnt']) mkdirSync(join(po, d), { recursive: true });
  await runTimed('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${ctx.dir},upperdir=${po}/upper,workdir=${po}/work`, `${po}/mnt`]);
  try {
    const a: number[] = [];
    const n: number[] = [];
    const o: number[] = [];
    let discarded = 0;
    let tainted = 0;
    const warmUp = () => {
      readAllSync(dir, paths);
      readAllSync(ctx.dir, paths);
      readAllSync(`${po}/mnt`, paths);
    };
    for (let i = 0; i < ctx.plan.readIters; i++) {
      // a round during which anyone dropped the page cache was not warm: warm up again and repeat it
      const r = await cleanRound(() => [readAllSync(dir, paths).ms, readAllSync(ctx.dir, paths).ms, readAllSync(`${po}/mnt`, paths).ms], {
        prepare: warmUp,
      });
      a.push(r.value[0]);
      n.push(r.value[1]);
      o.push(r.value[2]);
      discarded += r.discarded;
      if (!r.clean) tainted++;
    }
    const bytes = ctx.stats.pathBytes;
    const awc = MBps(bytes, median(a));
    const native = MBps(bytes, median(n));
    const plain = MBps(bytes, median(o));
    return {
      id: 'read-warm',
      tree: ctx.label,
      name: 'read of every file, warm',
      awc,
      unit: 'MB/s',
      baseline: native,
      baselines: { native: native, 'plain overlayfs over the native tree': plain },
      ratio: awc / native,
      awcText: `${awc.toFixed(0)} MB/s (${fmtMs(median(a))} for ${paths.length} files, ${fmtBytes(bytes)})`,
      baselineText: `native ${native.toFixed(0)} MB/s (${fmtMs(median(n))}); plain overlayfs over the native tree ${plain.toFixed(0)} MB/s (${fmtMs(median(o))})`,
      ratioText: `${fmtRatio(awc / native)} native; ${fmtRatio(awc / plain)} plain overlayfs`,
      target: '≥ 0.97× plain overlayfs throughput',
      met: awc / plain >= 0.97,
      notes: [
        `Sequential blocking reads (1 MiB buffer), one warm-up pass each, then ${a.length} rounds alternating workspace, native tree and a plain overlayfs (lowerdir = the native tree, no AWC, no FUSE: what overlayfs itself costs); medians.`,
        `Rounds during which something on the machine dropped the page cache (drop_pagecache in /proc/vmstat moved) were discarded and repeated after a new warm-up: ${discarded} discarded${tainted > 0 ? `; ${tainted} round(s) could not be measured clean in 10 tries and were kept` : ''}.`,
      ],
    };
  } finally {
    await unmountAll(ctx.awc);
    await runTimed('umount', [`${po}/mnt`]).catch(() => runTimed('umount', ['-l', `${po}/mnt`]).catch(() => undefined));
  }
}

/**
 * Read of every file once, cold: a fresh daemon with an empty chunk cache, a fresh mount, then
 * `sync; echo 3 > /proc/sys/vm/drop_caches` right before reading (page cache, dentries and
 * inodes gone: layer metadata, catalog and packs of the directory object store all come from
 * disk). Native: the same read of the native tree after dropping the caches.
 */
export async function figReadCold(ctx: TreeCtx): Promise<Figure> {
  const paths = ctx.stats.paths;
  await restartDaemon(ctx.awc, { clearCacheTo: ctx.trash });
  const dir = await freshMount(ctx, 'read-cold');
  try {
    dropCaches();
    const m0 = await snapshotMetrics(ctx.awc.paths.socket);
    const c0 = dropCount();
    const a = readAllSync(dir, paths);
    const externalDrops = dropCount() - c0;
    const laterRes = await fetchMetricsRetry(ctx.awc.paths.socket);
    const later = parseProm(laterRes.text);
    const metricsError = m0.error ?? laterRes.error;
    const backendReads = m0.delta(later, 'awc_backend_reads_total');
    const backendBytes = m0.delta(later, 'awc_backend_read_bytes_total');
    const fuseReads = m0.delta(later, 'awc_fuse_operations_total', { op: 'read' });
    const fuseLookups = m0.delta(later, 'awc_fuse_operations_total', { op: 'lookup' });
    const workerReads = m0.delta(later, 'awc_fuse_worker_operations_total', { op: 'read' });
    const workerLookups = m0.delta(later, 'awc_fuse_worker_operations_total', { op: 'lookup' });
    dropCaches();
    const n = readAllSync(ctx.dir, paths);
    const ratio = a.ms / n.ms;
    return {
      id: 'read-cold',
      tree: ctx.label,
      name: 'read of every file once, cold host cache (directory object store)',
      awc: a.ms,
      unit: 'ms',
      baseline: n.ms,
      baselines: { 'native after drop_caches': n.ms },
      ratio,
      awcText: `${fmtMs(a.ms)} (${MBps(a.bytes, a.ms).toFixed(0)} MB/s)`,
      baselineText: `native ${fmtMs(n.ms)} (${MBps(n.bytes, n.ms).toFixed(0)} MB/s)`,
      ratioText: `${fmtRatio(ratio)} native time`,
      target: '≤ 1.5× native time',
      met: ratio <= 1.5,
      notes: [
        metricsError
          ? `${paths.length} files, ${fmtBytes(a.bytes)}; the daemon's metrics could not be read around this pass (${metricsError}).`
          : `${paths.length} files, ${fmtBytes(a.bytes)}; content FUSE: ${fuseLookups} LOOKUPs, ${fuseReads} READs (answered by the reader workers without the main thread: ${workerLookups} LOOKUPs, ${workerReads} READs); backend: ${backendReads} reads, ${fmtBytes(backendBytes)}${backendReads === 0 && fuseReads > 0 ? ' (the daemon does not count backend reads yet)' : ''}.`,
        `Sequential blocking reads (1 MiB buffer), one pass${externalDrops > 0 ? `; something else on the machine dropped the page cache ${externalDrops} time(s) during the workspace pass` : ''}.`,
      ],
    };
  } finally {
    await unmountAll(ctx.awc);
  }
}

/**
 * Read of every file once with the page cache dropped and the host's cache on disk: after
 * read-cold filled the host object cache, the daemon restarts (its caches on disk kept), a
 * fresh workspace is mounted, `sync; echo 3 > drop_caches`, and every file is read once.
 * Native: the same read of the native tree after dropping the caches.
 */
export async function figReadDropped(ctx: TreeCtx): Promise<Figure> {
  const paths = ctx.stats.paths;
  const held = await awaitObjectCache(ctx);
  await restartDaemon(ctx.awc);
  const dir = await freshMount(ctx, 'read-dropped');
  try {
    dropCaches();
    const m0 = await snapshotMetrics(ctx.awc.paths.socket);
    const c0 = dropCount();
    const a = readAllSync(dir, paths);
    const externalDrops = dropCount() - c0;
    await new Promise((r) => setTimeout(r, 1500)); // the daemon reads the kernel's opens of CACHE files every second
    const later = parseProm((await fetchMetricsRetry(ctx.awc.paths.socket)).text);
    const fuseReads = m0.delta(later, 'awc_fuse_operations_total', { op: 'read' });
    const kernelOpens = m0.delta(later, 'awc_object_cache_events', { event: 'kernel_open' });
    dropCaches();
    const n = readAllSync(ctx.dir, paths);
    const ratio = a.ms / n.ms;
    return {
      id: 'read-dropped',
      tree: ctx.label,
      name: 'read of every file once, page cache dropped, host cache on disk',
      awc: a.ms,
      unit: 'ms',
      baseline: n.ms,
      baselines: { 'native after drop_caches': n.ms },
      ratio,
      awcText: `${fmtMs(a.ms)} (${MBps(a.bytes, a.ms).toFixed(0)} MB/s)`,
      baselineText: `native ${fmtMs(n.ms)} (${MBps(n.bytes, n.ms).toFixed(0)} MB/s)`,
      ratioText: `${fmtRatio(ratio)} native time`,
      target: '≤ 1.1× native time',
      met: ratio <= 1.1,
      notes: [
        `${paths.length} files, ${fmtBytes(a.bytes)}; the host object cache held ${held.objects} objects (${fmtBytes(held.bytes)}) after read-cold; during this pass the kernel opened ${kernelOpens} of them without FUSE, and the content FUSE server answered ${fuseReads} READs.`,
        `Sequential blocking reads (1 MiB buffer), one pass${externalDrops > 0 ? `; something else on the machine dropped the page cache ${externalDrops} time(s) during the workspace pass` : ''}.`,
      ],
    };
  } finally {
    await unmountAll(ctx.awc);
  }
}
