#!/usr/bin/env node
/**
 * The AWC benchmark suite: every figure of docs/benchmarks.md in one run on one machine, each
 * next to its baseline from the same run.
 *
 *   node dist/bench/run.js [--quick] [--only <group>[,<group>…]] [--out FILE] [--json] [--keep] [--cache-dir DIR]
 *                          [--trees a,b,c] [--large-source DIR]
 *
 * Groups: fork, mount (fork-mount, first-mount, cli-fork-mount), read-warm, read-cold,
 * build (build, test), fanout (fanout-backend, fanout-disk, daemon-rss), checkpoint
 * (checkpoint-first, checkpoint, checkpoint-unchanged, cli-checkpoint, cli-checkpoint-unchanged),
 * import, new-host (image-share, new-host-mount: a host that never saw the snapshot mounts the
 * layer image this host shared, against building the layer there), host (host-disk: one snapshot and one
 * workspace on a fresh home's disk, by part; reads-during-import, reads-during-first-mount,
 * reads-during-checkpoint: one workspace's cold reads while the host is busy, against an idle host); a figure id selects its group. Trees (`--trees`, default a,b): (a) a copy of this
 * checkout with its node_modules (dist/ left out); (b) unless --quick, a tree of real npm
 * packages ≥ 10× (a), built once under the cache dir (default /var/tmp/awc-bench/big-tree) and
 * reused; (c) only when asked (`--trees a,c`), the large tree: a still copy (`cp -a`) of this
 * machine's /usr (or of `--large-source DIR`) made once under the cache dir
 * (`<cache>/large-tree`) and reused, refused under 5 GiB on disk or 100 000 files unless
 * --quick (bench/large-tree.ts says how a fresh machine makes it). Tree (c) has no git
 * repository or lockfile: the worktree baseline and build/test are skipped on it (as build is on
 * (b)). The import figure times the tree's import against `cp -a`, both after a drop of the
 * caches. `--quick`: tree (a) only (and (c) when --trees names it), few iterations, 10 workspaces,
 * no network; the checkpoint group on tree (a) only, the import figure and the new-host group on tree (c) only.
 * Without --quick and --only, docs/benchmarks.md is rewritten (or
 * --out FILE); such a full run also measures the catalog under load, the export read window, the
 * CLI latency (bench/cli-latency.ts), the build reuse at the stable path (bench/build-reuse.ts)
 * and the first `git status` in a fresh workspace (bench/git-status.ts) and keeps their sections. Needs root, /dev/fuse and Linux ≥ 6.5 (the overlay driver).
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { keepDocSections } from './doc-section.js';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { detectDriver } from '../src/drivers/detect/detect-driver.js';
import { ensureBigTree } from './big-tree.js';
import { closeTree, openAwc, PROJECT, type Figure, type FigureId, type Plan, type TreeCtx, type TreeLabel } from './common.js';
import { ensureLargeTree, LargeTreeRefused, type LargeTree } from './large-tree.js';
import { figCheckpoint } from './fig-checkpoint.js';
import { figImport } from './fig-import.js';
import { CATALOG_LOAD_DEFAULTS, CATALOG_LOAD_FILE, runCatalogLoad } from './catalog-load.js';
import { EXPORT_WINDOW_FILE, runExportWindow } from './export-window.js';
import { CLI_LATENCY_FILE, runCliLatency } from './cli-latency.js';
import { BUILD_REUSE_DEFAULTS, BUILD_REUSE_FILE, buildReuseUnavailable, runBuildReuse } from './build-reuse.js';
import { figBuild } from './fig-build.js';
import { figFanout } from './fig-fanout.js';
import { figFork, figForkMount, measureBaselines } from './fig-fork.js';
import { figNewHostMount } from './fig-new-host.js';
import { figHostDisk, figHostReads } from './fig-host.js';
import { figReadCold, figReadDropped, figReadWarm } from './fig-read.js';
import { renderMarkdown, renderTable, type BenchResult } from './report.js';
import { dropCaches, fmtBytes, fmtMs, lazyUnmountUnder, machineInfo, mountsUnder, now, runTimed, treeStats } from './util.js';

const GROUPS: Record<string, string[]> = {
  fork: ['fork'],
  mount: ['fork-mount', 'first-mount', 'cli-fork-mount'],
  'read-warm': ['read-warm'],
  'read-cold': ['read-cold', 'read-dropped'],
  build: ['build', 'test'],
  fanout: ['fanout-backend', 'fanout-disk', 'daemon-rss'],
  checkpoint: ['checkpoint-first', 'checkpoint', 'checkpoint-unchanged', 'cli-checkpoint', 'cli-checkpoint-unchanged'],
  import: ['import'],
  'new-host': ['image-share', 'new-host-mount'],
  host: ['host-disk', 'reads-during-import', 'reads-during-first-mount', 'reads-during-checkpoint'],
};

interface Args {
  quick: boolean;
  only: Set<string>;
  out?: string;
  json: boolean;
  keep: boolean;
  cacheDir: string;
  /** Trees to run (default: a and b; --quick: a, and c when named). */
  trees: Set<string>;
  /** What tree (c) is a copy of (default /usr). */
  largeSource: string;
  /** Re-render the markdown from a saved `--json` result (no measuring). */
  render?: string;
  /** Source of tree (a) instead of this checkout (so two builds can be measured on one tree). */
  treeA?: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    quick: false,
    only: new Set(),
    json: false,
    keep: false,
    cacheDir: '/var/tmp/awc-bench',
    trees: new Set(['a', 'b']),
    largeSource: '/usr',
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${k} needs a value`);
      return v;
    };
    if (k === '--quick') a.quick = true;
    else if (k === '--json') a.json = true;
    else if (k === '--keep') a.keep = true;
    else if (k === '--out') a.out = val();
    else if (k === '--render') a.render = resolve(val());
    else if (k === '--cache-dir') a.cacheDir = resolve(val());
    else if (k === '--tree-a') a.treeA = resolve(val());
    else if (k === '--large-source') a.largeSource = resolve(val());
    else if (k === '--trees') {
      a.trees = new Set(val().split(','));
      if ([...a.trees].some((t) => !['a', 'b', 'c'].includes(t))) throw new Error('--trees takes a comma-separated list of a, b and c');
    } else if (k === '--only') {
      for (const name of val().split(',')) {
        const g = Object.entries(GROUPS).find(([group, ids]) => group === name || ids.includes(name));
        if (!g)
          throw new Error(
            `--only: unknown figure ${JSON.stringify(name)} (groups: ${Object.keys(GROUPS).join(', ')}; ids: ${Object.values(GROUPS).flat().join(', ')})`,
          );
        a.only.add(g[0]);
      }
    } else if (k === '--help' || k === '-h') {
      process.stdout.write(
        'usage: node dist/bench/run.js [--quick] [--only <group>[,…]] [--out FILE] [--json] [--keep] [--cache-dir DIR] [--trees a,b,c] [--large-source DIR] [--tree-a DIR] [--render RESULT.json]\n',
      );
      process.exit(0);
    } else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

function plan(quick: boolean, tree: TreeLabel): Plan {
  if (quick) {
    return {
      forkIters: 5,
      forkMountIters: 5,
      cliIters: 2,
      cpIters: 1,
      worktreeIters: 1,
      readIters: 1,
      buildIters: 1,
      fanoutWorkspaces: 10,
      fanoutFiles: 1000,
      // a small file: a quick run shows the figure is made, not what it is (fastcdc's took 30 s a side)
      testFiles: ['dist/test/core/tree.test.js'],
      buildProject: 'bench/tsconfig.quick.json',
      primeNpmCache: false,
      checkpointIters: 3,
      cliCheckpointIters: 2,
      walkIters: 1,
      hostOpRounds: 1,
      hostReads: 300,
      hostReadIntervalMs: 2,
    };
  }
  return {
    forkIters: 25,
    forkMountIters: 20,
    cliIters: 5,
    // tree (c): one cp -a of 5+ GiB is a minute; it has no repository for a worktree
    cpIters: { a: 3, b: 2, c: 1 }[tree],
    worktreeIters: { a: 2, b: 1, c: 0 }[tree],
    readIters: 3,
    buildIters: 5,
    fanoutWorkspaces: 100,
    // tree (b): 100 × all 100k+ files would be ~10^7 opens; the first 10 000 files show the same economics
    fanoutFiles: tree === 'a' ? undefined : 10_000,
    testFiles: [
      'dist/test/core/fastcdc.test.js',
      'dist/test/core/tree.test.js',
      'dist/test/store/pack/pack.test.js',
      'dist/test/service/diff/diff.test.js',
    ],
    buildProject: '.',
    primeNpmCache: true,
    checkpointIters: 10,
    cliCheckpointIters: 5,
    walkIters: 3,
    // tree (a)'s operations take a second or two each: three in a row give the reader a few thousand reads
    hostOpRounds: { a: 3, b: 1, c: 1 }[tree],
    hostReads: { a: 10_000, b: 10_000, c: 15_000 }[tree],
    hostReadIntervalMs: { a: 2, b: 5, c: 10 }[tree],
  };
}

/** The hand-written analysis appended to the report (bench/ANALYSIS.md), if any. */
/** The last before/after comparison (bench/compare.ts), kept in docs/benchmarks.md across full runs. */
function readComparison(): string | undefined {
  const f = join(PROJECT, 'bench', 'COMPARISON.md');
  return existsSync(f) ? readFileSync(f, 'utf8') : undefined;
}

/** A kept section of the report (bench/<name>), if any. */
function readBenchFile(name: string): string | undefined {
  const f = join(PROJECT, 'bench', name);
  return existsSync(f) ? readFileSync(f, 'utf8') : undefined;
}

function readAnalysis(): string | undefined {
  const f = join(PROJECT, 'bench', 'ANALYSIS.md');
  return existsSync(f) ? readFileSync(f, 'utf8') : undefined;
}

/** A tree to measure: its label, what the report calls it, where it is, and its git repository (if any). */
interface Source {
  label: TreeLabel;
  title: string;
  dir: string;
  repo: string | null;
}

/** What tree (c) is, for the report: the source and, for /usr, the system it belongs to. */
function largeTitle(source: string, files: number): string {
  const os = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(existsSync('/etc/os-release') ? readFileSync('/etc/os-release', 'utf8') : '')?.[1];
  const what = source === '/usr' ? `this machine's /usr${os ? ` (${os})` : ''}` : source;
  return `the large tree: a still copy (cp -a) of ${what}, ${files} files; no git repository or lockfile (worktree baseline, build and test skipped)`;
}

/** The trees the run measures (those --trees selects), made or found in the cache as needed. */
async function treeSources(args: Args, runDir: string, large: LargeTree | undefined, log: (s: string) => void): Promise<Source[]> {
  const sources: Source[] = [];
  if (args.trees.has('a') || (!args.quick && args.trees.has('b'))) {
    // tree (a): a still copy of this checkout with its node_modules (dist/ is build output and changes)
    const treeA = join(runDir, 'tree-a');
    await runTimed('cp', ['-a', (args.treeA ?? PROJECT).replace(/\/$/, ''), treeA]);
    for (const d of ['dist', '.awc-test']) rmSync(join(treeA, d), { recursive: true, force: true });
    sources.push({ label: 'a', title: 'this checkout with its node_modules (a still copy; dist/ left out)', dir: treeA, repo: treeA });
    if (!args.quick && args.trees.has('b')) {
      const aBytes = treeStats(treeA).bytes;
      const big = await ensureBigTree({ cacheDir: args.cacheDir, minBytes: 10 * aBytes, log });
      sources.push({
        label: 'b',
        title: `real npm packages (${big.packages.length} top-level: ${big.packages.slice(0, 8).join(', ')}, …) as a git repo with package.json + lockfile`,
        dir: big.dir,
        repo: big.dir,
      });
    }
  }
  if (large) {
    sources.push({ label: 'c', title: largeTitle(large.source, large.files), dir: large.dir, repo: null });
  }
  return sources.filter((x) => args.trees.has(x.label));
}

/**
 * Whether a figure group runs on a tree: build/test on (a) only (the others have no project to
 * build); in --quick, the checkpoint group on (a) only and the import figure on (c) only.
 */
function runsOn(group: string, label: TreeLabel, quick: boolean): boolean {
  if (group === 'build') return label === 'a';
  if (quick && group === 'checkpoint') return label === 'a';
  if (quick && (group === 'import' || group === 'new-host')) return label === 'c';
  return true;
}

/** Opens the tree's home and imports the tree (after a drop of the caches when `coldImport`: the import figure times it). */
async function openTree(s: Source, args: Args, runDir: string, log: (s: string) => void, coldImport: boolean): Promise<TreeCtx> {
  const stats = treeStats(s.dir);
  const home = join(runDir, `home-${s.label}`);
  const scratch = join(runDir, `scratch-${s.label}`);
  mkdirSync(scratch, { recursive: true });
  const awc = await openAwc(home);
  if (coldImport) dropCaches();
  const ti = now();
  const snap = await awc.importSnapshot(s.dir, { name: `tree-${s.label}` });
  const importMs = now() - ti;
  log(`  ${stats.files} files, ${fmtBytes(stats.bytes)}; imported in ${fmtMs(importMs)} (stored ${fmtBytes(snap.storedBytes)})`);
  // what the snapshot does not hold (the secret filter's files, e.g. a .p12 of a test suite): no figure reads them in a workspace
  const leftOut = new Set([...snap.secrets, ...snap.skipped].map((e) => e.path));
  if (leftOut.size > 0) {
    stats.paths = stats.paths.filter((p) => !leftOut.has(p));
    log(`  ${leftOut.size} file(s) left out by the import (secrets, sockets): not read by the figures`);
  }
  return {
    label: s.label,
    title: s.title,
    dir: s.dir,
    stats,
    repo: s.repo,
    probe: existsSync(join(s.dir, 'package.json')) ? 'package.json' : stats.paths[0],
    home,
    awc,
    snapshotId: snap.id,
    importMs,
    importCold: coldImport,
    storedBytes: snap.storedBytes,
    scratch,
    trash: join(runDir, 'trash'),
    plan: plan(args.quick, s.label),
  };
}

/** The report's row for a tree. */
function treeRow(ctx: TreeCtx): BenchResult['trees'][number] {
  const { label, title, dir, stats, snapshotId, importMs, storedBytes } = ctx;
  return {
    label,
    title,
    dir,
    files: stats.files,
    bytes: stats.bytes,
    dirs: stats.dirs,
    symlinks: stats.symlinks,
    snapshotId,
    importMs,
    storedBytes,
  };
}

/** Runs the wanted figure groups on one tree, appending (and logging) their rows to `figures`. */
async function runFigures(ctx: TreeCtx, args: Args, figures: Figure[], log: (s: string) => void): Promise<void> {
  const want = (group: string) => (args.only.size === 0 || args.only.has(group)) && runsOn(group, ctx.label, args.quick);
  // a larger tree's row is judged against tree (a)'s ("the same at 10× the tree")
  const prev = (id: FigureId) => (ctx.label !== 'a' ? figures.find((f) => f.id === id && f.tree === 'a') : undefined);
  const add = (fs: Figure | Figure[]) => {
    for (const f of Array.isArray(fs) ? fs : [fs]) {
      figures.push(f);
      log(`  ${f.id}: ${f.awcText} | ${f.baselineText} | ${f.ratioText} | ${f.met === null ? '—' : f.met ? 'met' : 'NOT MET'}`);
    }
  };
  if (ctx.repo === null && (args.only.size === 0 || args.only.has('build')))
    log(`  build and test skipped on tree (${ctx.label}): no git repository or project to build`);
  if (want('import')) add(await figImport(ctx, log));
  if (want('fork') || want('mount')) {
    log('  baselines (cp -a; git worktree add + npm ci --offline --ignore-scripts)…');
    ctx.baselines = await measureBaselines(ctx, log);
  }
  if (want('fork')) add(await figFork(ctx, prev('fork')));
  if (want('mount')) add(await figForkMount(ctx, prev('fork-mount'), log));
  if (want('checkpoint')) add(await figCheckpoint(ctx, prev, log));
  if (want('new-host')) add(await figNewHostMount(ctx, log));
  if (want('read-cold')) {
    add(await figReadCold(ctx));
    add(await figReadDropped(ctx));
  }
  if (want('read-warm')) add(await figReadWarm(ctx));
  if (want('build')) add(await figBuild(ctx, log));
  if (want('fanout')) add(await figFanout(ctx, log));
  if (want('host')) {
    add(await figHostDisk(ctx, log));
    add(await figHostReads(ctx, log));
  }
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const log = (s: string) => process.stderr.write(s + '\n');
  const want = (group: string) => args.only.size === 0 || args.only.has(group);
  if (args.render) {
    const saved = JSON.parse(readFileSync(args.render, 'utf8')) as BenchResult;
    const out = args.out ?? join(PROJECT, 'docs', 'benchmarks.md');
    writeFileSync(
      out,
      keepDocSections(
        existsSync(out) ? readFileSync(out, 'utf8') : '',
        renderMarkdown(
          saved,
          readAnalysis(),
          readComparison(),
          readBenchFile(CATALOG_LOAD_FILE),
          readBenchFile(EXPORT_WINDOW_FILE),
          readBenchFile(CLI_LATENCY_FILE),
          readBenchFile(BUILD_REUSE_FILE),
        ),
      ),
    );
    log(`wrote ${out} from ${args.render}`);
    return 0;
  }
  const t0 = now();
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (overlay mounts, drop_caches)');
  const doc = detectDriver('overlay');
  if (doc.driver !== 'overlay') throw new Error(`the benchmark needs the overlay driver: ${doc.reason}`);
  mkdirSync(args.cacheDir, { recursive: true });
  // tree (c) first: a source too small is refused before anything else is made
  const large = args.trees.has('c')
    ? await ensureLargeTree({ cacheDir: args.cacheDir, source: args.largeSource, quick: args.quick, log })
    : undefined;
  const runDir = mkdtempSync(join(args.cacheDir, 'run-'));
  log(`AWC benchmark${args.quick ? ' (quick)' : ''} — scratch ${runDir}`);
  const machine = machineInfo(runDir);
  const ctxs: TreeCtx[] = [];
  let failed = false;
  const figures: Figure[] = [];
  const trees: BenchResult['trees'] = [];
  try {
    for (const s of await treeSources(args, runDir, large, log)) {
      log(`\n== tree (${s.label}): ${s.dir}`);
      const ctx = await openTree(s, args, runDir, log, want('import') && runsOn('import', s.label, args.quick));
      ctxs.push(ctx);
      trees.push(treeRow(ctx));
      try {
        await runFigures(ctx, args, figures, log);
      } finally {
        await closeTree(ctx);
      }
    }
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    for (const c of ctxs) await closeTree(c);
    lazyUnmountUnder(runDir);
    if (mountsUnder(runDir).length > 0) log(`warning: mounts remain under ${runDir}; not removing it`);
    else if (failed) log(`kept ${runDir} for inspection (daemon logs: ${runDir}/home-*/host/awcd.log); remove it with rm -rf`);
    else if (!args.keep) rmSync(runDir, { recursive: true, force: true });
  }
  const result: BenchResult = {
    quick: args.quick,
    machine,
    trees,
    figures,
    durationMs: now() - t0,
    loadAvgEnd: loadavg(),
    plan: Object.fromEntries(ctxs.map((c) => [c.label, c.plan])),
  };
  if (args.json) process.stdout.write(JSON.stringify(result, null, 2) + '\n');
  else process.stdout.write('\n' + renderTable(result) + '\n');
  // docs/benchmarks.md only from a full run (every group on trees (a) and (b), with or without (c))
  const full = !args.quick && args.only.size === 0 && args.trees.has('a') && args.trees.has('b');
  const out = args.out ?? (full ? join(PROJECT, 'docs', 'benchmarks.md') : undefined);
  if (out) {
    // the catalog under many clients (bench/catalog-load.ts), on full runs; bench/CATALOG-LOAD.md keeps the last one
    if (!args.quick && args.only.size === 0)
      writeFileSync(join(PROJECT, 'bench', CATALOG_LOAD_FILE), (await runCatalogLoad(CATALOG_LOAD_DEFAULTS(log))) + '\n');
    // export with an empty cache, old path against the read window (bench/export-window.ts); bench/EXPORT-WINDOW.md keeps it
    if (!args.quick && args.only.size === 0)
      writeFileSync(join(PROJECT, 'bench', EXPORT_WINDOW_FILE), (await runExportWindow({ files: 10_000, iters: 3, log })) + '\n');
    // CLI latency against `node -e 0` (bench/cli-latency.ts); bench/CLI-LATENCY.md keeps it
    if (!args.quick && args.only.size === 0)
      writeFileSync(join(PROJECT, 'bench', CLI_LATENCY_FILE), (await runCliLatency({ runs: 15, log })) + '\n');
    // incremental builds in workspaces at the stable path (awc run) against the base and git worktrees (bench/build-reuse.ts); bench/BUILD-REUSE.md keeps it
    if (!args.quick && args.only.size === 0) {
      const why = buildReuseUnavailable();
      if (why) log(`build reuse not measured: it ${why}; bench/${BUILD_REUSE_FILE} keeps the last run's section`);
      else writeFileSync(join(PROJECT, 'bench', BUILD_REUSE_FILE), (await runBuildReuse({ ...BUILD_REUSE_DEFAULTS, log })) + '\n');
    }
    // the first `git status` in a fresh workspace (bench/git-status.ts, issue 11 part 1): it writes bench/GIT-STATUS.md
    // and its own section of docs/benchmarks.md, which the rewrite below keeps
    if (!args.quick && args.only.size === 0) {
      const git = spawnSync(process.execPath, [fileURLToPath(new URL('./git-status.js', import.meta.url)), '--cache-dir', args.cacheDir], {
        stdio: 'inherit',
      });
      if (git.status !== 0) throw new Error(`bench/git-status.ts exited ${git.status ?? git.signal}`);
    }
    writeFileSync(
      out,
      keepDocSections(
        existsSync(out) ? readFileSync(out, 'utf8') : '',
        renderMarkdown(
          result,
          readAnalysis(),
          readComparison(),
          readBenchFile(CATALOG_LOAD_FILE),
          readBenchFile(EXPORT_WINDOW_FILE),
          readBenchFile(CLI_LATENCY_FILE),
          readBenchFile(BUILD_REUSE_FILE),
        ),
      ),
    );
    log(`\nwrote ${out}`);
  }
  log(`done in ${fmtMs(result.durationMs)}`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`bench: ${err instanceof LargeTreeRefused ? err.message : ((err as Error)?.stack ?? String(err))}\n`);
    process.exit(1);
  },
);
