import { runFanoutDemo } from '../src/cli/demo/demo-fanout.js';
import { fmtRatio, stopDaemon, unmountAll, type Figure, type TreeCtx } from './common.js';
import { duBytes, fmtBytes, fmtMs, setAside } from './util.js';
import { join } from 'node:path';

type Fanout = Awaited<ReturnType<typeof runFanoutDemo>>;

/** Stops the daemon and empties the chunk cache: the next run starts with a cold host. */
async function coldHost(ctx: TreeCtx): Promise<void> {
  await unmountAll(ctx.awc);
  await stopDaemon(ctx.awc);
  setAside(join(ctx.awc.paths.hostDir, 'cache'), ctx.trash);
}

/**
 * N workspaces reading the same files (`awc demo fanout`'s code, on this tree's snapshot):
 * first one workspace alone on a cold host (its backend reads are the "one workspace" unit),
 * then N workspaces at once on a cold host again. Baseline: N × one workspace's reads (what N
 * hosts, or N unshared caches, would fetch). Also host disk against N copies, and the daemon's
 * resident memory with N mounts.
 */
export async function figFanout(ctx: TreeCtx, log: (s: string) => void): Promise<Figure[]> {
  const n = ctx.plan.fanoutWorkspaces;
  const files = ctx.plan.fanoutFiles;
  await coldHost(ctx);
  const one: Fanout = await runFanoutDemo({
    home: ctx.home,
    mountRoot: join(ctx.scratch, 'fanout-1'),
    snapshot: ctx.snapshotId,
    workspaces: 1,
    files,
    quiet: true,
  });
  log(
    `  1 workspace: backend ${one.backend.reads} reads (${fmtBytes(one.backend.bytes)}), FUSE ${one.fuse.reads} READs, ${fmtMs(one.reads.ms)}`,
  );
  await coldHost(ctx);
  const many: Fanout = await runFanoutDemo({
    home: ctx.home,
    mountRoot: join(ctx.scratch, `fanout-${n}`),
    snapshot: ctx.snapshotId,
    workspaces: n,
    files,
    quiet: true,
  });
  log(
    `  ${n} workspaces: backend ${many.backend.reads} reads (${fmtBytes(many.backend.bytes)}), FUSE ${many.fuse.reads} READs, cache ${many.cache.hits} hits / ${many.cache.misses} misses / ${many.cache.singleflightJoins} joins, ${fmtMs(many.reads.ms)}; mount median ${fmtMs(many.mount.medianMs)}; daemon RSS ${fmtBytes(many.daemon.residentBytes)}`,
  );
  const counted = one.backend.counted && many.backend.counted;
  const base = n * one.backend.reads;
  const what = `${many.files} files (${fmtBytes(many.fileBytes)}) × ${n} workspaces = ${many.reads.logicalReads} file reads, ${fmtBytes(many.reads.logicalBytes)} logical`;
  const fuseNote = `content FUSE READs: ${many.fuse.reads} for ${n} workspaces vs ${one.fuse.reads} for one (the kernel shares one page cache copy per content object); chunk cache ${many.cache.hits} hits, ${many.cache.misses} misses, ${many.cache.singleflightJoins} singleflight joins.`;
  // every distinct range fetched once, whatever N: no more GETs than distinct chunks (neighbours
  // merge into one GET), and no more bytes than one workspace alone fetched (+5%) — the fetcher's
  // read-ahead may read a little past what was asked, but that must not grow with N
  // (the fetcher's read-ahead windows adapt to the access pattern, so either the GET count or the
  // bytes may differ between the one-workspace and the N-workspace run; neither may grow with N)
  const backendMet = counted
    ? many.backend.reads <= many.distinct.chunks &&
      (many.backend.reads <= one.backend.reads * 1.05 + 1 ||
        many.backend.bytes <= Math.max(one.backend.bytes, many.distinct.storedBytes) * 1.05)
    : null;
  // one copy of the tree on this disk, allocated like the host's own bytes (du): the fair unit for disk
  const nativeAlloc = duBytes(ctx.dir);
  const diskBase = nativeAlloc + many.disk.uppersBytes;
  return [
    {
      id: 'fanout-backend',
      tree: ctx.label,
      name: `${n} workspaces reading the same files: backend reads`,
      awc: many.backend.reads,
      unit: 'reads',
      baseline: base,
      baselines: { [`${n} × one workspace's reads`]: base, 'distinct chunks read': many.distinct.chunks },
      ratio: base > 0 ? many.backend.reads / base : null,
      awcText: `${many.backend.reads} reads, ${fmtBytes(many.backend.bytes)} (distinct: ${many.distinct.chunks} chunks, ${fmtBytes(many.distinct.storedBytes)} stored)`,
      baselineText: `${n} × ${one.backend.reads} = ${base} reads (${n} × ${fmtBytes(one.backend.bytes)} = ${fmtBytes(n * one.backend.bytes)})`,
      ratioText:
        base > 0
          ? `${fmtRatio(many.backend.reads / base)} of ${n} × one; bytes ${fmtRatio(many.backend.bytes / Math.max(1, one.backend.bytes))} one workspace's, ${fmtRatio(many.backend.bytes / Math.max(1, many.distinct.storedBytes))} the distinct chunks' stored bytes`
          : '—',
      target: "= 1× the distinct ranges: GETs ≤ distinct chunks, and GETs or bytes ≤ one workspace's (+5%)",
      met: backendMet,
      notes: [
        what + '.',
        counted
          ? fuseNote
          : `NOT MEASURED: the daemon exported no backend reads (awc_backend_reads_total stayed 0 while ${many.fuse.reads} FUSE READs reached it): the chunk cache and its counters are not wired into this daemon yet. ${fuseNote}`,
        `${many.reads.concurrency} reads in flight across all mounts; ${fmtMs(many.reads.ms)} (${(many.reads.bytesPerSecond / 1e6).toFixed(0)} MB/s logical).`,
        `Backend bytes: ${fmtBytes(many.backend.bytes)} for ${n} workspaces, ${fmtBytes(one.backend.bytes)} for one, ${fmtBytes(many.distinct.storedBytes)} stored for the distinct chunks: anything above the last is the fetcher's read-ahead (windows of the pack past the chunks asked for, fetched once; their size adapts to the access pattern).`,
      ],
    },
    {
      id: 'fanout-disk',
      tree: ctx.label,
      name: `${n} workspaces reading the same files: host disk`,
      awc: many.disk.hostBytes,
      unit: 'bytes',
      baseline: n * nativeAlloc,
      baselines: {
        [`${n} native copies (allocated)`]: n * nativeAlloc,
        [`${n} × logical bytes`]: many.disk.fullCopiesBytes,
        'object store': many.disk.objectStoreBytes,
      },
      ratio: many.disk.hostBytes / (n * nativeAlloc),
      awcText: `${fmtBytes(many.disk.hostBytes)} (chunk cache ${fmtBytes(many.disk.cacheBytes)}, layers ${fmtBytes(many.disk.layersBytes)}, uppers ${fmtBytes(many.disk.uppersBytes)})`,
      baselineText: `${n} copies ${fmtBytes(n * nativeAlloc)} (${n} × logical ${fmtBytes(many.disk.fullCopiesBytes)}); object store ${fmtBytes(many.disk.objectStoreBytes)}`,
      ratioText: `${fmtRatio(many.disk.hostBytes / (n * nativeAlloc))} of ${n} copies; ${fmtRatio(many.disk.hostBytes / nativeAlloc)} of one`,
      target: `≤ base + uppers = ${fmtBytes(nativeAlloc)} + ${fmtBytes(many.disk.uppersBytes)}`,
      met: many.disk.hostBytes <= diskBase,
      notes: [
        `du -sx --block-size=1 of <home>/host (allocated bytes; never enters the mounts): chunk cache + layer directory + uppers. Base = one copy of the tree on this disk (du -sx of the native tree, ${fmtBytes(nativeAlloc)}; logical ${fmtBytes(many.snapshot.bytes)}). Page cache for the distinct content objects after the reads: ${many.pageCache.residentBytes === null ? 'n/a' : fmtBytes(many.pageCache.residentBytes)} resident for ${fmtBytes(many.pageCache.contentBytes)} of content (whole 4 KiB pages): one copy, not ${n}.`,
      ],
    },
    {
      id: 'daemon-rss',
      tree: ctx.label,
      name: `daemon resident memory with ${n} mounted workspaces`,
      awc: many.daemon.residentBytes / 1e6,
      unit: 'MB',
      baseline: null,
      baselines: {},
      ratio: null,
      awcText: `${(many.daemon.residentBytes / 1e6).toFixed(0)} MB (${many.daemon.mountedWorkspaces} mounts; from ${many.daemon.residentSource === 'metrics' ? 'awc_process_resident_memory_bytes' : '/proc/<pid>/status'})`,
      baselineText: '—',
      ratioText: '—',
      target: '≤ 300 MB',
      met: many.daemon.residentBytes <= 300e6,
      notes: [
        `Mount time per workspace: first ${fmtMs(many.mount.firstMs)}, then median ${fmtMs(many.mount.medianMs)}, p95 ${fmtMs(many.mount.p95Ms)}.`,
      ],
    },
  ];
}
