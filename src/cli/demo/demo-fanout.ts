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
import { openAwc } from '../remote/open-awc.js';
import { DaemonClient } from '../../daemon/supervisor/client.js';
import { walkTree } from '../../store/content/tree-source.js';
import { formatBytes } from '../output/output.js';
import { parseProm, sumOf } from '../../daemon/metrics/prom-text.js';

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
  const n = opts.workspaces ?? 100;
  const conc = opts.concurrency ?? 32;
  if (!Number.isInteger(n) || n < 1 || n > 10_000)
    throw new AwcError('E_USAGE', `--workspaces must be a whole number from 1 to 10000, got ${opts.workspaces}`);
  if (opts.files !== undefined && (!Number.isInteger(opts.files) || opts.files < 1))
    throw new AwcError('E_USAGE', `--files must be a whole number ≥ 1, got ${opts.files}`);
  if (!Number.isInteger(conc) || conc < 1 || conc > 4096)
    throw new AwcError('E_USAGE', `--concurrency must be a whole number from 1 to 4096, got ${opts.concurrency}`);
  const projectRoot = resolve(fileURLToPath(new URL('../../../..', import.meta.url)));
  const work = opts.home === undefined || opts.mountRoot === undefined ? mkdtempSync(join(tmpdir(), 'awc-fanout-')) : undefined;
  const home = resolve(opts.home ?? join(work!, 'home'));
  const say = (s: string) => {
    if (!opts.json && !opts.quiet) process.stdout.write(s + '\n');
  };
  const t = () => performance.now();
  const awc = await openAwc({ home });
  const client = new DaemonClient(awc.config);
  const mnt = resolve(opts.mountRoot ?? join(work!, 'mnt'));
  const mounted: string[] = [];
  let daemonPid: number | undefined;
  try {
    const doc = awc.doctor();
    if (doc.driver !== 'overlay')
      throw new AwcError('E_PERMISSION', `the fan-out demo needs the overlay driver, but ${doc.reason}`, {
        hint: 'Run it as root on Linux ≥ 6.5 with /dev/fuse (see `awc doctor`).',
      });
    say(`AWC fan-out demo — home ${home}`);

    // 1. the snapshot
    let snapshot: FanoutFigures['snapshot'];
    let source: string | null = null;
    if (opts.snapshot !== undefined) {
      const s = await awc.getSnapshot(opts.snapshot);
      snapshot = { id: s.id, files: s.fileCount, bytes: s.byteCount, storedBytes: null, importMs: null };
      say(`\nusing snapshot ${s.id}: ${s.fileCount} files, ${formatBytes(s.byteCount)}`);
    } else {
      source = resolve(opts.source ?? projectRoot);
      const t0 = t();
      const s = await awc.importSnapshot(source, { message: 'fan-out demo base' });
      snapshot = { id: s.id, files: s.files, bytes: s.bytes, storedBytes: s.storedBytes, importMs: t() - t0 };
      say(
        `\n$ awc snapshot import ${source}\n  ${s.id}: ${s.files} files, ${formatBytes(s.bytes)}; stored ${formatBytes(s.storedBytes)} in ${(snapshot.importMs! / 1000).toFixed(1)} s`,
      );
    }

    // 2. fork N: catalog rows only
    let t0 = t();
    const wss = await awc.fork(snapshot.id, { count: n });
    const forkMs = t() - t0;
    say(`\n$ awc fork ${snapshot.id} --count ${n}\n  ${n} workspaces in ${forkMs.toFixed(1)} ms (one catalog transaction, no data copied)`);

    // 3. mount all N (the daemon starts on demand; the first mount builds the snapshot's layer)
    if (!(await client.running())) await client.start();
    daemonPid = ((await client.call('GET', '/v1/status', undefined, { start: false })) as { pid: number }).pid;
    const mountMs: number[] = [];
    for (let i = 0; i < n; i++) {
      const dir = join(mnt, `ws-${String(i + 1).padStart(4, '0')}`);
      t0 = t();
      await awc.mount(wss[i].id, dir);
      mountMs.push(t() - t0);
      mounted.push(wss[i].id);
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
    say(
      `\n$ awc mount <each workspace> ${mnt}/ws-NNNN   (×${n}, overlay driver)\n  first mount ${mount.firstMs.toFixed(0)} ms (builds the snapshot's layer on this host); then median ${mount.medianMs.toFixed(1)} ms, p95 ${mount.p95Ms.toFixed(1)} ms per workspace; ${(mount.totalMs / 1000).toFixed(1)} s in all`,
    );

    // 4. what every workspace reads, and the distinct chunks behind it
    const reader = awc.reader();
    const files: { path: string; size: number; digest: Digest; chunks: ChunkRef[] }[] = [];
    for await (const { path, entry } of walkTree(reader, (await awc.getSnapshot(snapshot.id)).root)) {
      if (entry.type !== 'file') continue;
      files.push({ path, size: entry.size, digest: entry.digest, chunks: entry.chunks });
      if (opts.files !== undefined && files.length >= opts.files) break;
    }
    const fileBytes = files.reduce((a, f) => a + f.size, 0);
    const distinctChunks = new Map<Digest, number>();
    for (const f of files) for (const c of f.chunks) distinctChunks.set(c.digest, c.size);
    let distinctRaw = 0;
    for (const s of distinctChunks.values()) distinctRaw += s;
    let distinctStored = 0;
    const index = awc.catalog.blobIndex(awc.namespace);
    const digests = [...distinctChunks.keys()];
    for (let i = 0; i < digests.length; i += 1000) {
      for (const loc of (await index.lookup(digests.slice(i, i + 1000))).values()) distinctStored += loc.storedLength;
    }

    // 5. every workspace reads the same files, all at once
    const before = parseProm(await metricsText(awc.paths.socket));
    const total = n * files.length;
    let next = 0;
    let readBytes = 0;
    t0 = t();
    const worker = async () => {
      const buf = Buffer.allocUnsafe(1 << 20);
      for (;;) {
        const j = next++;
        if (j >= total) return;
        // file-major order: the same file is asked for by many workspaces at the same moment
        const f = files[Math.floor(j / n)];
        const ws = j % n;
        const fh = await open(join(mnt, `ws-${String(ws + 1).padStart(4, '0')}`, f.path), 'r');
        try {
          let got = 0;
          for (;;) {
            const { bytesRead } = await fh.read(buf, 0, buf.length, null);
            if (bytesRead === 0) break;
            got += bytesRead;
          }
          if (got !== f.size)
            throw new AwcError('E_INTEGRITY', `workspace ${ws + 1} read ${got} bytes of ${f.path}, the snapshot says ${f.size}`);
          readBytes += got;
        } finally {
          await fh.close();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(conc, total) }, worker));
    const readMs = t() - t0;
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
    const contents = new Map<string, number>();
    for (const f of files) if (f.size > 0) contents.set(f.digest.slice(f.digest.indexOf(':') + 1), f.size);
    const pageCache = {
      contentObjects: contents.size,
      contentBytes: [...contents.values()].reduce((a, b) => a + b, 0),
      residentBytes: fincoreBytes([...contents.keys()].map((hex) => join(awc.paths.content, hex.slice(0, 2), hex))),
    };
    say(
      `\nEvery workspace reads the same ${files.length} files (${formatBytes(fileBytes)}), ${conc} reads in flight across all ${n} mounts:`,
    );
    say(
      `  logical reads   ${total} files, ${formatBytes(readBytes)} in ${(readMs / 1000).toFixed(2)} s (${formatBytes(reads.bytesPerSecond)}/s)`,
    );
    say(
      `  distinct chunks ${distinctChunks.size} (${formatBytes(distinctRaw)} raw, ${formatBytes(distinctStored)} stored): what this host has to fetch, at most`,
    );
    say(
      `  backend reads   ${backend.reads} ranged GETs, ${formatBytes(backend.bytes)}${backend.counted ? '' : '  (this daemon does not count backend reads yet: awc_backend_reads_total stayed 0 while FUSE READs reached it)'}`,
    );
    say(
      `  chunk cache     ${cache.hits} hits, ${cache.misses} misses, ${cache.singleflightJoins} singleflight joins${cache.bytes === null ? '' : `, ${formatBytes(cache.bytes)} held`}`,
    );
    say(
      `  content FUSE    ${fuse.lookups} LOOKUPs, ${fuse.reads} READs for ${total} file reads (the kernel serves the rest from one page cache copy)`,
    );
    if (pageCache.residentBytes !== null)
      say(
        `  page cache      ${formatBytes(pageCache.residentBytes)} resident for the ${pageCache.contentObjects} content objects (${formatBytes(pageCache.contentBytes)}): one copy, not ${n}`,
      );

    // 6. disk and memory, once the daemon has written what it fetched to its disk cache
    //    (write-behind: chunks wait in memory until the burst of reads is over)
    const flushDeadline = Date.now() + 60_000;
    while (Date.now() < flushDeadline) {
      const m = parseProm(await metricsText(awc.paths.socket));
      if (!m.has('awc_cache_pending_bytes') || sumOf(m, 'awc_cache_pending_bytes') <= 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const p = awc.paths;
    const disk = {
      hostBytes: du(p.hostDir),
      cacheBytes: du(join(p.hostDir, 'cache')),
      layersBytes: du(p.layers),
      uppersBytes: du(p.workspaces),
      objectStoreBytes: du(p.objects),
      fullCopiesBytes: n * snapshot.bytes,
    };
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
      distinct: { chunks: distinctChunks.size, rawBytes: distinctRaw, storedBytes: distinctStored },
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
    // unmount everything we mounted, then stop the daemon; last resort: lazy unmounts
    for (const id of mounted) {
      try {
        await awc.unmount(id, { discard: true, force: true });
      } catch {
        // handled below
      }
    }
    if (!opts.keepDaemon) {
      try {
        await client.call('POST', '/v1/stop', { force: true }, { start: false });
        // wait for the process to exit, not only its socket (it removes socket and pid file last)
        const deadline = Date.now() + 30_000;
        while (Date.now() < deadline && ((await client.running()) || (daemonPid !== undefined && processAlive(daemonPid))))
          await new Promise((r) => setTimeout(r, 100));
      } catch {
        // not running
      }
    }
    lazyUnmountUnder(mnt);
    await awc.close();
    if (work !== undefined) {
      if (opts.home !== undefined) rmSync(work, { recursive: true, force: true });
      else
        say(`\nDone; the workspaces are unmounted and the daemon is stopped. Everything lives in ${work}; remove it with: rm -rf ${work}`);
    }
  }
}

/** GET /metrics on the daemon socket: the Prometheus text exposition. */
function metricsText(socket: string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const req = request({ socketPath: socket, method: 'GET', path: '/metrics', timeout: 30_000 }, (res) => {
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
