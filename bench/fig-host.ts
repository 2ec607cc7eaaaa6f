import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { hostDisk, waitForCacheFlush } from '../src/cli/demo/demo-fanout.js';
import { workspaceDirs } from '../src/drivers/port/workspace-state.js';
import type { Awc } from '../src/service/workspace/awc.js';
import { fmtRatio, openAwc, restartDaemon, stopDaemon, unmountAll, type Figure, type FigureId, type TreeCtx } from './common.js';
import { dropCaches, duBytes, fmtBytes, fmtMs, lazyUnmountUnder, percentile, readAllSync, setAside } from './util.js';

/**
 * The host group (issue 26): what one snapshot and one workspace cost the host's disk with the
 * embedded defaults (`host-disk`), and whether one workspace's reads stay fast while the host
 * is busy with another snapshot (`reads-during-import`, `reads-during-first-mount`,
 * `reads-during-checkpoint`). docs/benchmarks.md "How each figure is measured" says how.
 */

/** Files the host-disk figure rewrites in its workspace ("a few files changed"). */
const FEW_FILES = 5;

/** A fresh home's parts on disk (allocated bytes, du -sx --block-size=1), by name. */
interface DiskParts {
  store: number;
  catalog: number;
  /** Of `catalog`: its write-ahead log (and shared-memory file) at the time of the measure. */
  catalogWal: number;
  cache: number;
  /** The chunk cache's logical bytes (du --apparent-size) and files: against `cache`, what one file per chunk costs in whole blocks. */
  cacheApparent: number;
  cacheFiles: number;
  layers: number;
  /** Layer images (image.erofs under host/layers), already counted in `layers`. */
  images: number;
  upper: number;
  /** The workspace's other host state (overlay work dir, state.json). */
  workspaceState: number;
  /** host/ beyond cache, layers and workspaces (log, content node table, …), by entry name. */
  hostOther: Record<string, number>;
  /** The home beyond host/, objects/ and the catalog (config.json, …), by entry name. */
  homeOther: Record<string, number>;
  total: number;
}

/** Allocated bytes of each entry of `dir` but those in `known`, the ones above 0. */
function otherEntries(dir: string, known: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    if (known.includes(name)) continue;
    const b = duBytes(join(dir, name));
    if (b > 0) out[name] = b;
  }
  return out;
}

/** Allocated bytes of every `image.erofs` under `dir` (layer images). */
function imageBytes(dir: string): number {
  let total = 0;
  for (const hex of existsSync(dir) ? readdirSync(dir) : []) {
    const f = join(dir, hex, 'image.erofs');
    if (existsSync(f)) total += statSync(f).blocks * 512;
  }
  return total;
}

/** The parts of a home holding one workspace `wsId` (fanout's hostDisk, plus the catalog, the upper alone and the rest). */
function diskParts(awc: Awc, wsId: string): DiskParts {
  const p = awc.paths;
  const d = hostDisk(p);
  const catalogFiles = [p.catalog, `${p.catalog}-wal`, `${p.catalog}-shm`].filter((f) => existsSync(f));
  const catalog = catalogFiles.reduce((s, f) => s + duBytes(f), 0);
  const upper = duBytes(workspaceDirs(p.workspaces, wsId).upper);
  const cacheFiles = spawnSync('find', [p.cache, '-type', 'f', '-printf', '.'], { encoding: 'utf8', maxBuffer: 1 << 30 }).stdout.length;
  const apparent = spawnSync('du', ['-s', '--apparent-size', '--block-size=1', p.cache], { encoding: 'utf8' });
  const hostName = (q: string) => q.slice(p.hostDir.length + 1);
  const homeName = (q: string) => q.slice(p.home.length + 1);
  return {
    store: d.objectStoreBytes,
    catalog,
    catalogWal: catalogFiles.slice(1).reduce((s, f) => s + duBytes(f), 0),
    cache: d.cacheBytes,
    cacheApparent: Number(apparent.stdout.split(/\s+/)[0]) || 0,
    cacheFiles,
    layers: d.layersBytes,
    images: imageBytes(p.layers),
    upper,
    workspaceState: d.uppersBytes - upper,
    hostOther: otherEntries(p.hostDir, [hostName(p.cache), hostName(p.layers), hostName(p.workspaces)]),
    homeOther: otherEntries(p.home, [homeName(p.hostDir), homeName(p.objects), ...catalogFiles.map(homeName)]),
    total: duBytes(p.home),
  };
}

/** `n` regular files of the tree spread over it (outside .git), for edits. */
function spreadFiles(ctx: TreeCtx, n: number): string[] {
  const candidates = ctx.stats.paths.filter((q) => !q.startsWith('.git/'));
  const step = Math.max(1, Math.floor(candidates.length / n));
  const out: string[] = [];
  for (let i = 0; i < candidates.length && out.length < n; i += step) out.push(candidates[i]);
  return out;
}

/** Rewrites `paths` under `mnt` (4 KiB each, distinct content per call). */
function rewrite(mnt: string, paths: string[], tag: string): void {
  for (const [i, q] of paths.entries()) writeFileSync(join(mnt, q), `${tag} ${i}\n`.padEnd(4096, '.'));
}

const fmtParts = (r: Record<string, number>): string =>
  Object.entries(r)
    .map(([k, v]) => `${k} ${fmtBytes(v)}`)
    .join(', ') || 'nothing';

/**
 * `host-disk`: a fresh home with the embedded defaults (SQLite catalog, directory object store)
 * imports the tree, forks one workspace, mounts it (overlay), reads every file once after a drop
 * of the page cache, rewrites FEW_FILES files; then, once the chunk cache's write-behind is done
 * and after a sync, du of each part of the home against stored bytes + the upper.
 */
export async function figHostDisk(ctx: TreeCtx, log: (s: string) => void): Promise<Figure> {
  const home = join(ctx.scratch, 'host-disk-home');
  const mnt = join(ctx.scratch, 'host-disk-mnt');
  const awc = await openAwc(home);
  let parts: DiskParts;
  let readBytes: number;
  try {
    const snap = await awc.importSnapshot(ctx.dir, { name: `host-disk-${ctx.label}` });
    const [ws] = await awc.fork(snap.id);
    await awc.mount(ws.id, mnt);
    dropCaches();
    readBytes = readAllSync(mnt, ctx.stats.paths).bytes;
    rewrite(mnt, spreadFiles(ctx, FEW_FILES), 'host-disk edit');
    await waitForCacheFlush(awc.paths.socket);
    spawnSync('sync');
    parts = diskParts(awc, ws.id);
  } finally {
    await unmountAll(awc);
    await stopDaemon(awc);
    lazyUnmountUnder(mnt);
    lazyUnmountUnder(home);
    await awc.close();
  }
  setAside(home, ctx.trash);
  const base = parts.store + parts.upper;
  const breakdown = `store ${fmtBytes(parts.store)}, chunk cache ${fmtBytes(parts.cache)}, layers ${fmtBytes(parts.layers)} (images ${fmtBytes(parts.images)}), upper ${fmtBytes(parts.upper)}, workspace state ${fmtBytes(parts.workspaceState)}, catalog ${fmtBytes(parts.catalog)} (WAL ${fmtBytes(parts.catalogWal)}); other in host/: ${fmtParts(parts.hostOther)}; other in the home: ${fmtParts(parts.homeOther)}`;
  log(`  host disk: ${fmtBytes(parts.total)} = ${breakdown}`);
  return {
    id: 'host-disk',
    tree: ctx.label,
    name: "the host's disk for one snapshot and one workspace (embedded defaults)",
    awc: parts.total,
    unit: 'bytes',
    baseline: base,
    baselines: { 'stored bytes + upper': base, 'chunk cache': parts.cache, layers: parts.layers, catalog: parts.catalog },
    ratio: parts.total / base,
    awcText: `${fmtBytes(parts.total)}: ${breakdown}`,
    baselineText: `stored ${fmtBytes(parts.store)} + upper ${fmtBytes(parts.upper)} = ${fmtBytes(base)}`,
    ratioText: `${fmtRatio(parts.total / base)}; beyond it: ${fmtBytes(parts.total - base)}`,
    target: '— (reported: a breakdown against stored bytes + upper)',
    met: null,
    notes: [
      `A fresh home with the embedded defaults (SQLite catalog, directory object store, layerImages auto: no images with SQLite) imports the tree, forks one workspace, mounts it (overlay), reads every file once after a drop of the page cache (${fmtBytes(readBytes)}), rewrites ${FEW_FILES} files spread over the tree (4 KiB each); then, once the chunk cache has written what it holds (write-behind) and after a sync, \`du -sx --block-size=1\` of each part of the home (never entering the mounts).`,
      `Second copies of what the local store holds: the chunk cache (host/cache) holds the decompressed chunks of every file read, so after a read of every file it is a second, uncompressed copy of the store's content: here ${fmtBytes(parts.cacheApparent)} of chunks in ${parts.cacheFiles} files (${fmtBytes(parts.cache)} allocated: one file per chunk rounds each up to whole blocks). The layers hold one placeholder per file (overlay xattrs, no data: their bytes are directories and the layer's meta.json) and, in a git checkout, the layer's own .git/index (a rewrite of a file the store holds). The upper holds only what the workspace changed; the catalog (SQLite, with its WAL while the daemon runs) and the rest are metadata.`,
    ],
  };
}

/** The reader process's result: each read's start (epoch ms) and latency (ms). */
interface ReaderResult {
  reads: [number, number][];
  exhausted: boolean;
}

/** A running reader (bench/host-reader.ts) over `paths` of a mounted workspace. */
interface Reader {
  go(): void;
  /** Its result, once it has stopped (asked to, or at the end of its list). */
  result: Promise<ReaderResult>;
  stop(): Promise<ReaderResult>;
}

const READER = fileURLToPath(new URL('./host-reader.js', import.meta.url));

/** Starts the reader process and resolves once it is ready (its list loaded). */
async function startReader(root: string, paths: string[], listFile: string, intervalMs: number): Promise<Reader> {
  writeFileSync(listFile, JSON.stringify(paths));
  const outFile = `${listFile}.out`;
  const child = spawn(process.execPath, [READER, root, listFile, String(intervalMs), outFile], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.on('error', () => undefined); // the reader may have ended its list and exited
  const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  let ready: () => void = () => undefined;
  const isReady = new Promise<void>((r) => (ready = r));
  let done: (x: ReaderResult) => void = () => undefined;
  let fail: (err: Error) => void = () => undefined;
  const result = new Promise<ReaderResult>((resolveResult, reject) => {
    done = resolveResult;
    fail = reject;
    void exited.then((code) => reject(new Error(`host-reader exited ${code} without a result: ${stderr.trim()}`)));
  });
  result.catch(() => undefined);
  createInterface({ input: child.stdout }).on('line', (l) => {
    if (l === 'ready') ready();
    else if (l === 'done') {
      try {
        done(JSON.parse(readFileSync(outFile, 'utf8')) as ReaderResult);
      } catch (err) {
        fail(err as Error);
      }
    }
  });
  await Promise.race([isReady, exited.then((code) => Promise.reject(new Error(`host-reader exited ${code}: ${stderr.trim()}`)))]);
  return {
    go: () => child.stdin.write('go\n'),
    result,
    stop: async () => {
      child.stdin.write('stop\n');
      const out = await result;
      child.stdin.end();
      await exited;
      return out;
    },
  };
}

/** A phase's reads: latencies (ms) of the reads that started inside the busy window. */
interface PhaseReads {
  ms: number[];
  exhausted: boolean;
  /** The busy operation's wall time (ms). */
  opMs: number;
  /** The machine's 1-minute load average when the reads started (other work on it skews the tails). */
  load: number;
}

const epoch = (): number => performance.timeOrigin + performance.now();

/** Small files of the tree (1–16 KiB, outside .git), spread by a fixed shuffle, at most `max`. */
function smallFiles(ctx: TreeCtx, max: number): string[] {
  const small = ctx.stats.paths.filter((q) => {
    if (q.startsWith('.git/')) return false;
    const size = statSync(join(ctx.dir, q)).size;
    return size >= 1024 && size <= 16 * 1024;
  });
  // a fixed permutation (multiplicative step coprime with the length): neighbours in the tree are far apart in the list
  const n = small.length;
  let step = Math.max(1, Math.floor(n * 0.618));
  while (gcd(step, n) !== 1) step++;
  return Array.from({ length: Math.min(n, max) }, (_, i) => small[(i * step) % n]);
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** What the host does while the reader reads: `setup` untimed (after the cache reset, before the drop), `op` the busy window. */
interface Busy {
  setup?: () => Promise<void>;
  op?: () => Promise<void>;
}

/**
 * One phase: a fresh daemon with an empty chunk cache, a fresh workspace of the tree's snapshot
 * mounted (A), `busy.setup`, a sync and a drop of the page cache; then the reader starts on A's
 * small files and `busy.op` runs (none: the reader reads the whole list, idle). The same files
 * every phase: each phase's A has never read them, and nothing on the host holds them.
 */
async function phase(ctx: TreeCtx, name: string, files: string[], busy: Busy, intervalMs: number): Promise<PhaseReads> {
  await restartDaemon(ctx.awc, { clearCacheTo: ctx.trash });
  const mnt = join(ctx.scratch, `host-reads-${name}`);
  const [ws] = await ctx.awc.fork(ctx.snapshotId);
  await ctx.awc.mount(ws.id, mnt);
  await busy.setup?.();
  dropCaches();
  const reader = await startReader(mnt, files, join(ctx.scratch, `host-reads-${name}.json`), intervalMs);
  const load = loadavg()[0];
  const t0 = epoch();
  let t1 = t0;
  let out: ReaderResult;
  reader.go();
  try {
    if (busy.op) await busy.op();
    else await reader.result;
    t1 = epoch();
  } finally {
    out = await reader.stop();
  }
  const inside = out.reads.filter(([at]) => at >= t0 && at <= t1).map(([, ms]) => ms);
  return { ms: busy.op ? inside : out.reads.map(([, ms]) => ms), exhausted: out.exhausted, opMs: t1 - t0, load };
}

/** Latency summary of a phase's reads. */
interface Summary {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

function summary(ms: number[]): Summary {
  if (ms.length === 0) return { n: 0, p50: NaN, p99: NaN, max: NaN };
  return { n: ms.length, p50: percentile(ms, 50), p99: percentile(ms, 99), max: Math.max(...ms) };
}

const fmtSummary = (s: Summary): string => `p99 ${fmtMs(s.p99)} (max ${fmtMs(s.max)}, p50 ${fmtMs(s.p50)}; ${s.n} reads)`;

/** The busy operations of the three loaded phases, on `rounds` second snapshots of the tree (the tree with one file left out: a new root each). */
function busyOps(ctx: TreeCtx, rounds: number): Record<'import' | 'first-mount' | 'checkpoint', Busy> {
  const skips = spreadFiles(ctx, rounds);
  const s2: string[] = [];
  const edited: string[] = [];
  const many = spreadFiles(ctx, manyFiles(ctx));
  return {
    import: {
      op: async () => {
        for (const [j, skip] of skips.entries()) {
          const r = await ctx.awc.importSnapshot(ctx.dir, { name: `host-s2-${ctx.label}-${j}`, skip: (rel) => rel === skip });
          s2.push(r.id);
        }
      },
    },
    'first-mount': {
      op: async () => {
        for (const [j, id] of s2.entries()) {
          const [ws] = await ctx.awc.fork(id);
          await ctx.awc.mount(ws.id, join(ctx.scratch, `host-s2-mnt-${j}`));
        }
      },
    },
    checkpoint: {
      setup: async () => {
        for (let j = 0; j < skips.length; j++) {
          const [ws] = await ctx.awc.fork(ctx.snapshotId);
          const mnt = join(ctx.scratch, `host-ckpt-${j}`);
          await ctx.awc.mount(ws.id, mnt);
          rewrite(mnt, many, `host-ckpt ${j}`);
          edited.push(ws.id);
        }
      },
      op: async () => {
        for (const id of edited) {
          const r = await ctx.awc.checkpoint(id);
          if (!r.changed) throw new Error(`checkpoint of ${id} saw no change`);
        }
      },
    },
  };
}

const READ_ROWS: Record<'import' | 'first-mount' | 'checkpoint', { id: FigureId; what: string }> = {
  import: { id: 'reads-during-import', what: 'another snapshot is imported' },
  'first-mount': { id: 'reads-during-first-mount', what: 'another snapshot is first mounted (layer build)' },
  checkpoint: { id: 'reads-during-checkpoint', what: 'another workspace checkpoints after changing many files' },
};

/**
 * `reads-during-*`: one workspace's cold reads of small files (bench/host-reader.ts, its own
 * process) on an idle host, then while the host imports `rounds` second snapshots, first-mounts
 * them, and checkpoints as many workspaces that each rewrote many files. Each busy phase's reads
 * are the first n files of the list; its baseline is the idle phase's reads of the same n files.
 */
export async function figHostReads(ctx: TreeCtx, log: (s: string) => void): Promise<Figure[]> {
  const { hostOpRounds: rounds, hostReads, hostReadIntervalMs: interval } = ctx.plan;
  const files = smallFiles(ctx, hostReads);
  if (files.length < 20) {
    log(`  host reads skipped on tree (${ctx.label}): only ${files.length} files of 1–16 KiB`);
    return [];
  }
  const idle = await phase(ctx, 'idle', files, {}, interval);
  log(`  reads, idle host: ${fmtSummary(summary(idle.ms))}; ${fmtMs(idle.opMs)}`);
  const ops = busyOps(ctx, rounds);
  const rows: Figure[] = [];
  for (const key of ['import', 'first-mount', 'checkpoint'] as const) {
    const r = await phase(ctx, key, files, ops[key], interval);
    const s = summary(r.ms);
    const base = summary(idle.ms.slice(0, Math.max(1, r.ms.length)));
    log(
      `  reads while ${READ_ROWS[key].what}: ${fmtSummary(s)}; busy ${fmtMs(r.opMs)}${r.exhausted ? ' (the reader ran out of files)' : ''}; idle, same reads: ${fmtSummary(base)}`,
    );
    rows.push(readRow(ctx, key, { s, base, r, idleLoad: idle.load, pool: files.length, first: rows.length === 0 }));
  }
  await unmountAll(ctx.awc);
  return rows;
}

/** A busy phase's row: its reads `s` against the idle phase's same reads `base`; the method's note on the `first` row only (the rest say what differs). */
function readRow(
  ctx: TreeCtx,
  key: keyof typeof READ_ROWS,
  { s, base, r, idleLoad, pool, first }: { s: Summary; base: Summary; r: PhaseReads; idleLoad: number; pool: number; first: boolean },
): Figure {
  const ratio = s.n > 0 && base.p99 > 0 ? s.p99 / base.p99 : null;
  return {
    id: READ_ROWS[key].id,
    tree: ctx.label,
    name: `one workspace's cold reads of small files while ${READ_ROWS[key].what}`,
    awc: s.n > 0 ? s.p99 : NaN,
    unit: 'ms',
    baseline: base.p99,
    baselines: { 'idle host p99 (same reads)': base.p99, 'idle host max (same reads)': base.max },
    ratio,
    awcText: `${fmtSummary(s)}; busy ${fmtMs(r.opMs)}`,
    baselineText: `idle host, the same ${base.n} reads: ${fmtSummary(base)}`,
    ratioText: ratio === null ? '—' : `p99 ${fmtRatio(ratio)}; max ${fmtRatio(s.max / base.max)}`,
    target: 'p99 ≤ 2× the same reads on an idle host',
    met: ratio === null ? null : ratio <= 2,
    notes: [
      ...(first ? [method(ctx, pool)] : []),
      busyNote(ctx, key),
      `1-minute load average when the reads started: ${r.load.toFixed(2)} (idle phase: ${idleLoad.toFixed(2)}; ${cpus().length} cores).`,
      ...(r.exhausted ? [`The reader read all ${pool} files before the operation ended: its reads cover only the start of it.`] : []),
    ],
  };
}

/** How the reads are made and compared (the first busy row's note). */
function method(ctx: TreeCtx, pool: number): string {
  const { hostOpRounds: rounds, hostReadIntervalMs: interval } = ctx.plan;
  return [
    `A reader in its own process (bench/host-reader.ts) reads small files (1–16 KiB, outside .git; a fixed shuffle of ${pool} of them) of a mounted workspace A of the tree's snapshot one at a time (open, read to EOF, close: one read), ${interval} ms apart. Each phase starts with a freshly started daemon whose chunk cache is empty, a new workspace A that has never read the files, and a sync + drop of the page cache, so every read is cold (content FUSE, and a fetch from the directory store when no cached window holds its chunk); every phase reads the same files in the same order. Idle: the whole list with nothing else running. Busy: the reads that start while the operation runs in the bench process (in-process Awc calls; the daemon as the suite opens it), the first n of the list; the baseline is the idle phase's first n reads (p99 by nearest rank: with fewer than 100 reads it is the largest).`,
    `Each busy phase runs its operation ${rounds} time${rounds === 1 ? '' : 's'} in a row.`,
  ].join(' ');
}

/** What a busy phase does. */
function busyNote(ctx: TreeCtx, key: keyof typeof READ_ROWS): string {
  if (key === 'import')
    return 'Busy: import of the tree with one file left out (a new root each time; its content is already stored, so the import reads and hashes every file and stores little).';
  if (key === 'first-mount') return 'Busy: the first fork + mount of each snapshot the import phase made (the daemon builds its layer).';
  return `Busy: checkpoints of other workspaces of the tree's snapshot, each of which rewrote ${manyFiles(ctx)} files (4 KiB each) before the drop of the page cache.`;
}

/** How many files a checkpoint phase's workspace rewrites ("many files"). */
const manyFiles = (ctx: TreeCtx): number => Math.min(1000, Math.floor(ctx.stats.files / 5));
