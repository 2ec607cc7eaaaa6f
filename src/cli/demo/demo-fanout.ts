import { request } from 'node:http';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import type { ChunkRef } from '../../core/tree.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { AwcPaths } from '../../config/config.js';
import { openAwc } from '../remote/open-awc.js';
import { DaemonClient } from '../../daemon/supervisor/client.js';
import { walkTree } from '../../store/content/tree-source.js';
import { formatBytes } from '../output/output.js';
import { parseProm, sumOf, type Samples } from '../../daemon/metrics/prom-text.js';

/** Options of {@link runFanoutDemo}. */
interface FanoutOptions {
  /** Data directory (default: `<fresh temp dir>/home`). */
  home?: string;
  /** Where the workspaces are mounted (`<dir>/ws-NNNN`; outside the home; default: `<fresh temp dir>/mnt`). */
  mountRoot?: string;
  /** Tree to import (default: this project's checkout with its node_modules). Ignored with `snapshot`. */
  source?: string;
  /** Use this existing snapshot of `home` instead of importing `source`. */
  snapshot?: string;
  /** Workspaces to fork and mount (default 100). */
  workspaces?: number;
  /** Read only the first F regular files (tree order; default: all). */
  files?: number;
  /** Reads in flight at once across all mounts (default 32). */
  concurrency?: number;
  /** Print the figures as one JSON object instead of text. */
  json?: boolean;
  /** Print nothing (the caller uses the returned figures). */
  quiet?: boolean;
  /** Keep the daemon running at the end (workspaces are still unmounted). */
  keepDaemon?: boolean;
}

/** The figures the fan-out demo measures (returned, and printed with --json). */
interface FanoutFigures {
  home: string;
  source: string | null;
  snapshot: { id: string; files: number; bytes: number; storedBytes: number | null; importMs: number | null };
  workspaces: number;
  forkMs: number;
  mount: { totalMs: number; medianMs: number; meanMs: number; p95Ms: number; maxMs: number; firstMs: number };
  /** What every workspace reads: the first `files` regular files of the snapshot. */
  files: number;
  fileBytes: number;
  reads: { concurrency: number; ms: number; logicalReads: number; logicalBytes: number; bytesPerSecond: number };
  /** Distinct chunks behind the files read: what one host has to fetch, at most. */
  distinct: { chunks: number; rawBytes: number; storedBytes: number };
  /** `counted` is false when the daemon served FUSE reads but counted no backend read (it does not export the counter yet). */
  backend: { reads: number; bytes: number; counted: boolean };
  cache: { hits: number; misses: number; singleflightJoins: number; bytes: number | null };
  fuse: { lookups: number; reads: number };
  /** Page cache resident for the distinct content objects after reading (fincore), against their bytes: one copy, whatever N. null without fincore. */
  pageCache: { contentObjects: number; contentBytes: number; residentBytes: number | null };
  disk: {
    hostBytes: number;
    cacheBytes: number;
    layersBytes: number;
    uppersBytes: number;
    objectStoreBytes: number;
    fullCopiesBytes: number;
  };
  daemon: { pid: number; residentBytes: number; residentSource: 'metrics' | 'proc'; mountedWorkspaces: number };
}

/** What the steps of one fan-out run share. */
interface FanoutRun {
  opts: FanoutOptions;
  awc: Awc;
  client: DaemonClient;
  /** Workspaces to fork and mount. */
  n: number;
  /** Reads in flight at once. */
  conc: number;
  /** Where the workspaces are mounted (`<mnt>/ws-NNNN`). */
  mnt: string;
  /** Prints a line of the text report (nothing with --json or quiet). */
  say: (s: string) => void;
  /** Workspaces mounted so far: unmounted at the end. */
  mounted: string[];
  /** The daemon's pid once it runs: the end waits for it to exit. */
  daemonPid?: number;
}

/** A regular file every workspace reads. */
interface FileToRead {
  path: string;
  size: number;
  digest: Digest;
  chunks: ChunkRef[];
}

/** The figures of the read step (5), and the daemon's metrics right after it. */
type ReadFigures = Pick<FanoutFigures, 'reads' | 'backend' | 'cache' | 'fuse' | 'pageCache'> & { after: Samples };

/** Milliseconds on the monotonic clock. */
const now = (): number => performance.now();

/** The mount directory name of workspace `i` (0-based): `ws-0001`, `ws-0002`, … */
const wsDir = (i: number): string => `ws-${String(i + 1).padStart(4, '0')}`;

/**
 * `awc demo fanout`: the economics of many workspaces on one host. Imports a tree (default:
 * this checkout with its node_modules) into a fresh home, forks N workspaces (one catalog
 * transaction), mounts all N (overlay driver, through the host daemon), then has every
 * workspace read the same files concurrently (async reads across all mounts at once, bounded
 * concurrency), and reports logical reads against backend reads, cache hits and singleflight
 * joins (from the daemon's metrics), host disk against N full copies and the object store,
 * mount time per workspace, and the daemon's resident memory with N mounts. Unmounts
 * everything and stops the daemon at the end, also on failure.
 * @returns the figures.
 * @throws E_USAGE on bad numbers, E_PERMISSION when this host cannot use the overlay driver
 */
export async function runFanoutDemo(opts: FanoutOptions = {}): Promise<FanoutFigures> {
  const { n, conc } = checkOptions(opts);
  const projectRoot = resolve(fileURLToPath(new URL('../../../..', import.meta.url)));
  const work = opts.home === undefined || opts.mountRoot === undefined ? mkdtempSync(join(tmpdir(), 'awc-fanout-')) : undefined;
  const home = resolve(opts.home ?? join(work!, 'home'));
  const say = (s: string) => {
    if (!opts.json && !opts.quiet) process.stdout.write(s + '\n');
  };
  const awc = await openAwc({ home });
  const client = new DaemonClient(awc.config);
  const run: FanoutRun = { opts, awc, client, n, conc, mnt: resolve(opts.mountRoot ?? join(work!, 'mnt')), say, mounted: [] };
  try {
    requireOverlay(awc);
    say(`AWC fan-out demo — home ${home}`);
    const { snapshot, source } = await takeSnapshot(run, projectRoot);
    const { wss, forkMs } = await forkAll(run, snapshot.id);
    const mount = await mountAll(run, wss);
    const files = await filesToRead(awc, snapshot.id, opts.files);
    const fileBytes = files.reduce((a, f) => a + f.size, 0);
    const distinct = await distinctChunks(awc, files);
    const { reads, backend, cache, fuse, pageCache, after } = await readEverywhere(run, files);
    sayReads(run, files, fileBytes, distinct, { reads, backend, cache, fuse, pageCache });
    const { disk, daemon } = await diskAndMemory(run, snapshot.bytes, after);
    const figures: FanoutFigures = {
      home,
      source,
      snapshot,
      workspaces: n,
      forkMs,
      mount,
      files: files.length,
      fileBytes,
      reads,
      distinct,
      backend,
      cache,
      fuse,
      pageCache,
      disk,
      daemon,
    };
    if (opts.json && !opts.quiet) process.stdout.write(JSON.stringify(figures, null, 2) + '\n');
    return figures;
  } finally {
    await cleanUp(run, work);
  }
}

/** The numbers of `opts`, checked. @throws E_USAGE on a number out of range */
function checkOptions(opts: FanoutOptions): { n: number; conc: number } {
  const n = opts.workspaces ?? 100;
  const conc = opts.concurrency ?? 32;
  if (!Number.isInteger(n) || n < 1 || n > 10_000)
    throw new AwcError('E_USAGE', `--workspaces must be a whole number from 1 to 10000, got ${opts.workspaces}`);
  if (opts.files !== undefined && (!Number.isInteger(opts.files) || opts.files < 1))
    throw new AwcError('E_USAGE', `--files must be a whole number ≥ 1, got ${opts.files}`);
  if (!Number.isInteger(conc) || conc < 1 || conc > 4096)
    throw new AwcError('E_USAGE', `--concurrency must be a whole number from 1 to 4096, got ${opts.concurrency}`);
  return { n, conc };
}

/** @throws E_PERMISSION when this host cannot use the overlay driver */
function requireOverlay(awc: Awc): void {
  const doc = awc.doctor();
  if (doc.driver !== 'overlay')
    throw new AwcError('E_PERMISSION', `the fan-out demo needs the overlay driver, but ${doc.reason}`, {
      hint: 'Run it as root on Linux ≥ 6.5 with /dev/fuse (see `awc doctor`).',
    });
}

/** Step 1: the snapshot, `opts.snapshot` or a fresh import of `opts.source` (default: the project checkout). */
async function takeSnapshot(run: FanoutRun, projectRoot: string): Promise<Pick<FanoutFigures, 'snapshot' | 'source'>> {
  const { awc, opts, say } = run;
  if (opts.snapshot !== undefined) {
    const s = await awc.getSnapshot(opts.snapshot);
    say(`\nusing snapshot ${s.id}: ${s.fileCount} files, ${formatBytes(s.byteCount)}`);
    return { snapshot: { id: s.id, files: s.fileCount, bytes: s.byteCount, storedBytes: null, importMs: null }, source: null };
  }
  const source = resolve(opts.source ?? projectRoot);
  const t0 = now();
  const s = await awc.importSnapshot(source, { message: 'fan-out demo base' });
  const snapshot = { id: s.id, files: s.files, bytes: s.bytes, storedBytes: s.storedBytes, importMs: now() - t0 };
  say(
    `\n$ awc snapshot import ${source}\n  ${s.id}: ${s.files} files, ${formatBytes(s.bytes)}; stored ${formatBytes(s.storedBytes)} in ${(snapshot.importMs / 1000).toFixed(1)} s`,
  );
  return { snapshot, source };
}

/** Step 2: fork N workspaces of the snapshot: catalog rows only. */
async function forkAll(run: FanoutRun, snapshotId: string): Promise<{ wss: WorkspaceRow[]; forkMs: number }> {
  const t0 = now();
  const wss = await run.awc.fork(snapshotId, { count: run.n });
  const forkMs = now() - t0;
  run.say(
    `\n$ awc fork ${snapshotId} --count ${run.n}\n  ${run.n} workspaces in ${forkMs.toFixed(1)} ms (one catalog transaction, no data copied)`,
  );
  return { wss, forkMs };
}

/** Step 3: mount all N (the daemon starts on demand; the first mount builds the snapshot's layer). */
async function mountAll(run: FanoutRun, wss: WorkspaceRow[]): Promise<FanoutFigures['mount']> {
  const { awc, client, n, mnt } = run;
  if (!(await client.running())) await client.start();
  run.daemonPid = ((await client.call('GET', '/v1/status', undefined, { start: false })) as { pid: number }).pid;
  const mountMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    await awc.mount(wss[i].id, join(mnt, wsDir(i)));
    mountMs.push(now() - t0);
    run.mounted.push(wss[i].id);
  }
  const sorted = [...mountMs].sort((a, b) => a - b);
  const rest = n > 1 ? mountMs.slice(1) : mountMs;
  const mount = {
    totalMs: mountMs.reduce((a, b) => a + b, 0),
    firstMs: mountMs[0],
    medianMs: median(rest),
    meanMs: rest.reduce((a, b) => a + b, 0) / rest.length,
    p95Ms: sorted[Math.min(sorted.length - 1, Math.ceil(0.95 * sorted.length) - 1)],
    maxMs: sorted[sorted.length - 1],
  };
  run.say(
    `\n$ awc mount <each workspace> ${mnt}/ws-NNNN   (×${n}, overlay driver)\n  first mount ${mount.firstMs.toFixed(0)} ms (builds the snapshot's layer on this host); then median ${mount.medianMs.toFixed(1)} ms, p95 ${mount.p95Ms.toFixed(1)} ms per workspace; ${(mount.totalMs / 1000).toFixed(1)} s in all`,
  );
  return mount;
}

/** Step 4: what every workspace reads, the first `limit` regular files of the snapshot in tree order (all without a limit). */
async function filesToRead(awc: Awc, snapshotId: string, limit: number | undefined): Promise<FileToRead[]> {
  const files: FileToRead[] = [];
  for await (const { path, entry } of walkTree(awc.reader(), (await awc.getSnapshot(snapshotId)).root)) {
    if (entry.type !== 'file') continue;
    files.push({ path, size: entry.size, digest: entry.digest, chunks: entry.chunks });
    if (limit !== undefined && files.length >= limit) break;
  }
  return files;
}

/** Step 4: the distinct chunks behind `files`, their raw bytes and their stored bytes (from the blob index). */
async function distinctChunks(awc: Awc, files: FileToRead[]): Promise<FanoutFigures['distinct']> {
  const chunks = new Map<Digest, number>();
  for (const f of files) for (const c of f.chunks) chunks.set(c.digest, c.size);
  let rawBytes = 0;
  for (const s of chunks.values()) rawBytes += s;
  let storedBytes = 0;
  const index = awc.catalog.blobIndex(awc.namespace);
  const digests = [...chunks.keys()];
  for (let i = 0; i < digests.length; i += 1000) {
    for (const loc of (await index.lookup(digests.slice(i, i + 1000))).values()) storedBytes += loc.storedLength;
  }
  return { chunks: chunks.size, rawBytes, storedBytes };
}

/** Step 5: every workspace reads the same files, all at once; the figures from the daemon's metrics before and after. */
async function readEverywhere(run: FanoutRun, files: FileToRead[]): Promise<ReadFigures> {
  const { awc, n, conc } = run;
  const before = parseProm(await metricsText(awc.paths.socket));
  const total = n * files.length;
  const t0 = now();
  const readBytes = await readAll(run, files);
  const readMs = now() - t0;
  const after = parseProm(await metricsText(awc.paths.socket));
  const delta = (name: string, labels?: Record<string, string>) => sumOf(after, name, labels) - sumOf(before, name, labels);
  const reads = {
    concurrency: conc,
    ms: readMs,
    logicalReads: total,
    logicalBytes: readBytes,
    bytesPerSecond: readBytes / (readMs / 1000),
  };
  const backendReads = delta('awc_backend_reads_total');
  const cache = {
    hits: delta('awc_cache_hits_total'),
    misses: delta('awc_cache_misses_total'),
    singleflightJoins: delta('awc_singleflight_joins_total'),
    bytes: after.has('awc_cache_bytes') ? sumOf(after, 'awc_cache_bytes') : null,
  };
  const fuse = {
    lookups: delta('awc_fuse_operations_total', { op: 'lookup' }),
    reads: delta('awc_fuse_operations_total', { op: 'read' }),
  };
  const backend = { reads: backendReads, bytes: delta('awc_backend_read_bytes_total'), counted: backendReads > 0 || fuse.reads === 0 };
  return { reads, backend, cache, fuse, pageCache: pageCacheOf(awc, files), after };
}

/**
 * Every workspace reads every file whole, `run.conc` reads in flight, in file-major order (the
 * same file is asked for by many workspaces at the same moment).
 * @returns the bytes read
 * @throws E_INTEGRITY when a read returns other than the snapshot's size
 */
async function readAll(run: FanoutRun, files: FileToRead[]): Promise<number> {
  const { n, mnt } = run;
  const total = n * files.length;
  let next = 0;
  let readBytes = 0;
  const worker = async () => {
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const j = next++;
      if (j >= total) return;
      const f = files[Math.floor(j / n)];
      const ws = j % n;
      const got = await readWhole(join(mnt, wsDir(ws), f.path), buf);
      if (got !== f.size)
        throw new AwcError('E_INTEGRITY', `workspace ${ws + 1} read ${got} bytes of ${f.path}, the snapshot says ${f.size}`);
      readBytes += got;
    }
  };
  await Promise.all(Array.from({ length: Math.min(run.conc, total) }, worker));
  return readBytes;
}

/** Reads `path` to its end through `buf`; returns the bytes read. */
async function readWhole(path: string, buf: Buffer): Promise<number> {
  const fh = await open(path, 'r');
  try {
    let got = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) return got;
      got += bytesRead;
    }
  } finally {
    await fh.close();
  }
}

/** Page cache resident for the distinct content objects of `files` (empty files have none). */
function pageCacheOf(awc: Awc, files: FileToRead[]): FanoutFigures['pageCache'] {
  const contents = new Map<string, number>();
  for (const f of files) if (f.size > 0) contents.set(f.digest.slice(f.digest.indexOf(':') + 1), f.size);
  return {
    contentObjects: contents.size,
    contentBytes: [...contents.values()].reduce((a, b) => a + b, 0),
    residentBytes: fincoreBytes([...contents.keys()].map((hex) => join(awc.paths.content, hex.slice(0, 2), hex))),
  };
}

/** Prints the figures of steps 4 and 5. */
function sayReads(
  run: FanoutRun,
  files: FileToRead[],
  fileBytes: number,
  distinct: FanoutFigures['distinct'],
  { reads, backend, cache, fuse, pageCache }: Omit<ReadFigures, 'after'>,
): void {
  const { n, conc, say } = run;
  say(
    `\nEvery workspace reads the same ${files.length} files (${formatBytes(fileBytes)}), ${conc} reads in flight across all ${n} mounts:`,
  );
  say(
    `  logical reads   ${reads.logicalReads} files, ${formatBytes(reads.logicalBytes)} in ${(reads.ms / 1000).toFixed(2)} s (${formatBytes(reads.bytesPerSecond)}/s)`,
  );
  say(
    `  distinct chunks ${distinct.chunks} (${formatBytes(distinct.rawBytes)} raw, ${formatBytes(distinct.storedBytes)} stored): what this host has to fetch, at most`,
  );
  say(
    `  backend reads   ${backend.reads} ranged GETs, ${formatBytes(backend.bytes)}${backend.counted ? '' : '  (this daemon does not count backend reads yet: awc_backend_reads_total stayed 0 while FUSE READs reached it)'}`,
  );
  say(
    `  chunk cache     ${cache.hits} hits, ${cache.misses} misses, ${cache.singleflightJoins} singleflight joins${cache.bytes === null ? '' : `, ${formatBytes(cache.bytes)} held`}`,
  );
  say(
    `  content FUSE    ${fuse.lookups} LOOKUPs, ${fuse.reads} READs for ${reads.logicalReads} file reads (the kernel serves the rest from one page cache copy)`,
  );
  if (pageCache.residentBytes !== null)
    say(
      `  page cache      ${formatBytes(pageCache.residentBytes)} resident for the ${pageCache.contentObjects} content objects (${formatBytes(pageCache.contentBytes)}): one copy, not ${n}`,
    );
}

/**
 * Step 6: disk and memory, once the daemon has written what it fetched to its disk cache
 * (write-behind: chunks wait in memory until the burst of reads is over). `after` is the
 * daemon's metrics after the reads (its resident memory, when it exports it).
 */
async function diskAndMemory(run: FanoutRun, snapshotBytes: number, after: Samples): Promise<Pick<FanoutFigures, 'disk' | 'daemon'>> {
  const { awc, client, n, say } = run;
  await waitForCacheFlush(awc.paths.socket);
  const p = awc.paths;
  const disk = { ...hostDisk(p), fullCopiesBytes: n * snapshotBytes };
  const status = (await client.call('GET', '/v1/status', undefined, { start: false })) as { pid: number; mounts: unknown[] };
  const rssMetric = after.get('awc_process_resident_memory_bytes');
  const daemon = rssMetric
    ? { pid: status.pid, residentBytes: rssMetric[0].value, residentSource: 'metrics' as const, mountedWorkspaces: status.mounts.length }
    : { pid: status.pid, residentBytes: procRss(status.pid), residentSource: 'proc' as const, mountedWorkspaces: status.mounts.length };
  say(`\nDisk on this host (allocated, du -x ${p.hostDir}): ${formatBytes(disk.hostBytes)}`);
  say(
    `  chunk cache ${formatBytes(disk.cacheBytes)} + layers ${formatBytes(disk.layersBytes)} + uppers and state ${formatBytes(disk.uppersBytes)}`,
  );
  say(`  ${n} full copies would take ${formatBytes(disk.fullCopiesBytes)}; the object store holds ${formatBytes(disk.objectStoreBytes)}`);
  say(`Daemon (pid ${daemon.pid}) resident memory with ${daemon.mountedWorkspaces} mounts: ${formatBytes(daemon.residentBytes)}`);
  return { disk, daemon };
}

/**
 * Allocated bytes (`du -sx --block-size=1`, never entering mounts) of a home's parts on this
 * host: `<home>/host` in all, its chunk cache (`host/cache`), its layer directories and images
 * (`host/layers`), its workspaces' uppers and state (`host/workspaces`), and the object store
 * (`objects`, a directory store; 0 when it lives elsewhere). The bench suite reuses it.
 */
export function hostDisk(p: Pick<AwcPaths, 'hostDir' | 'layers' | 'workspaces' | 'objects'>): {
  hostBytes: number;
  cacheBytes: number;
  layersBytes: number;
  uppersBytes: number;
  objectStoreBytes: number;
} {
  return {
    hostBytes: du(p.hostDir),
    cacheBytes: du(join(p.hostDir, 'cache')),
    layersBytes: du(p.layers),
    uppersBytes: du(p.workspaces),
    objectStoreBytes: du(p.objects),
  };
}

/** Waits (up to 60 s) until the daemon behind `socket` has nothing pending for its chunk cache's disk (write-behind). */
export async function waitForCacheFlush(socket: string): Promise<void> {
  const flushDeadline = Date.now() + 60_000;
  while (Date.now() < flushDeadline) {
    const m = parseProm(await metricsText(socket));
    if (!m.has('awc_cache_pending_bytes') || sumOf(m, 'awc_cache_pending_bytes') <= 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The end, also on failure: unmounts everything mounted, then stops the daemon (unless
 * `keepDaemon`); last resort: lazy unmounts. Removes `work` when the caller chose the home,
 * else says where it is.
 */
async function cleanUp(run: FanoutRun, work: string | undefined): Promise<void> {
  for (const id of run.mounted) {
    try {
      await run.awc.unmount(id, { discard: true, force: true });
    } catch {
      // handled below
    }
  }
  if (!run.opts.keepDaemon) await stopDaemon(run.client, run.daemonPid);
  lazyUnmountUnder(run.mnt);
  await run.awc.close();
  if (work !== undefined) {
    if (run.opts.home !== undefined) rmSync(work, { recursive: true, force: true });
    else
      run.say(
        `\nDone; the workspaces are unmounted and the daemon is stopped. Everything lives in ${work}; remove it with: rm -rf ${work}`,
      );
  }
}

/** Stops the daemon and waits (up to 30 s) for its process to exit, not only its socket (it removes socket and pid file last). */
async function stopDaemon(client: DaemonClient, daemonPid: number | undefined): Promise<void> {
  try {
    await client.call('POST', '/v1/stop', { force: true }, { start: false });
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && ((await client.running()) || (daemonPid !== undefined && processAlive(daemonPid))))
      await new Promise((r) => setTimeout(r, 100));
  } catch {
    // not running
  }
}

/**
 * GET /metrics on the daemon socket: the Prometheus text exposition. On a connection of its own
 * (`agent: false`): a kept-alive connection of an earlier call that the daemon has just closed
 * as idle would fail the write with EPIPE (seen in waitForCacheFlush's first poll after a long read).
 */
function metricsText(socket: string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const req = request({ socketPath: socket, method: 'GET', path: '/metrics', timeout: 30_000, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        // an older daemon without metrics answers an error: no samples
        resolvePromise(res.statusCode === 200 ? text : '');
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon did not answer: ${err.message}`)));
    req.end();
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Allocated bytes under `dir` on its own file system (never enters the FUSE or overlay mounts); 0 when absent. */
function du(dir: string): number {
  const r = spawnSync('du', ['-sx', '--block-size=1', dir], { encoding: 'utf8' });
  return Number((r.stdout ?? '').split(/\s+/)[0]) || 0;
}

/** Page-cache bytes resident for `paths` (util-linux fincore, in batches); null when fincore is missing or fails. */
function fincoreBytes(paths: string[]): number | null {
  let total = 0;
  for (let i = 0; i < paths.length; i += 500) {
    const r = spawnSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', ...paths.slice(i, i + 500)], { encoding: 'utf8' });
    if (r.status !== 0 || r.error) return null;
    for (const l of r.stdout.split('\n')) if (l.trim() !== '') total += Number(l.trim()) || 0;
  }
  return total;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function procRss(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Lazily unmounts whatever is still mounted at or under `dir` (deepest first). */
function lazyUnmountUnder(dir: string): void {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => (l.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m) => m !== '' && (m === dir || m.startsWith(dir + '/')))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) spawnSync('umount', ['-l', m]);
}
