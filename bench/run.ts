#!/usr/bin/env node
/**
 * The AWC benchmark suite: every figure of docs/benchmarks.md in one run on one machine, each
 * next to its baseline from the same run.
 *
 *   node dist/bench/run.js [--quick] [--only <group>[,<group>…]] [--out FILE] [--json] [--keep] [--cache-dir DIR] [--trees a,b]
 *
 * Groups: fork, mount (fork-mount, first-mount, cli-fork-mount), read-warm, read-cold,
 * build (build, test), fanout (fanout-backend, fanout-disk, daemon-rss); a figure id selects
 * its group. Trees: (a) a copy of this checkout with its node_modules (dist/ left out);
 * (b) unless --quick, a tree of real npm packages ≥ 10× (a), built once under the cache dir
 * (default /var/tmp/awc-bench/big-tree) and reused. `--quick`: tree (a) only, few iterations,
 * 10 workspaces, no network. Without --quick and --only, docs/benchmarks.md is rewritten (or
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
import { closeTree, openAwc, PROJECT, type Figure, type Plan, type TreeCtx } from './common.js';
import { CATALOG_LOAD_DEFAULTS, CATALOG_LOAD_FILE, runCatalogLoad } from './catalog-load.js';
import { EXPORT_WINDOW_FILE, runExportWindow } from './export-window.js';
import { CLI_LATENCY_FILE, runCliLatency } from './cli-latency.js';
import { BUILD_REUSE_DEFAULTS, BUILD_REUSE_FILE, buildReuseUnavailable, runBuildReuse } from './build-reuse.js';
import { figBuild } from './fig-build.js';
import { figFanout } from './fig-fanout.js';
import { figFork, figForkMount, measureBaselines } from './fig-fork.js';
import { figReadCold, figReadWarm } from './fig-read.js';
import { renderMarkdown, renderTable, type BenchResult } from './report.js';
import { fmtBytes, fmtMs, lazyUnmountUnder, machineInfo, mountsUnder, now, runTimed, treeStats } from './util.js';

const GROUPS: Record<string, string[]> = {
  fork: ['fork'],
  mount: ['fork-mount', 'first-mount', 'cli-fork-mount'],
  'read-warm': ['read-warm'],
  'read-cold': ['read-cold'],
  build: ['build', 'test'],
  fanout: ['fanout-backend', 'fanout-disk', 'daemon-rss'],
};

interface Args {
  quick: boolean;
  only: Set<string>;
  out?: string;
  json: boolean;
  keep: boolean;
  cacheDir: string;
  /** Trees to run (default: a and b; --quick: a). */
  trees: Set<string>;
  /** Re-render the markdown from a saved `--json` result (no measuring). */
  render?: string;
  /** Source of tree (a) instead of this checkout (so two builds can be measured on one tree). */
  treeA?: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { quick: false, only: new Set(), json: false, keep: false, cacheDir: '/var/tmp/awc-bench', trees: new Set(['a', 'b']) };
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
    else if (k === '--trees') {
      a.trees = new Set(val().split(','));
      if ([...a.trees].some((t) => t !== 'a' && t !== 'b')) throw new Error('--trees takes a, b or a,b');
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
        'usage: node dist/bench/run.js [--quick] [--only <group>[,…]] [--out FILE] [--json] [--keep] [--cache-dir DIR] [--trees a,b] [--tree-a DIR] [--render RESULT.json]\n',
      );
      process.exit(0);
    } else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

function plan(quick: boolean, tree: 'a' | 'b'): Plan {
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
      testFiles: ['dist/test/core/fastcdc.test.js'],
      buildProject: 'bench/tsconfig.quick.json',
      primeNpmCache: false,
    };
  }
  return {
    forkIters: 25,
    forkMountIters: 20,
    cliIters: 5,
    cpIters: tree === 'a' ? 3 : 2,
    worktreeIters: tree === 'a' ? 2 : 1,
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
  const runDir = mkdtempSync(join(args.cacheDir, 'run-'));
  log(`AWC benchmark${args.quick ? ' (quick)' : ''} — scratch ${runDir}`);
  const machine = machineInfo(runDir);
  const ctxs: TreeCtx[] = [];
  let failed = false;
  const figures: Figure[] = [];
  const trees: BenchResult['trees'] = [];
  try {
    // tree (a): a still copy of this checkout with its node_modules (dist/ is build output and changes)
    const treeA = join(runDir, 'tree-a');
    await runTimed('cp', ['-a', (args.treeA ?? PROJECT).replace(/\/$/, ''), treeA]);
    for (const d of ['dist', '.awc-test']) rmSync(join(treeA, d), { recursive: true, force: true });
    const sources: { label: 'a' | 'b'; title: string; dir: string }[] = [
      { label: 'a', title: 'this checkout with its node_modules (a still copy; dist/ left out)', dir: treeA },
    ];
    if (!args.quick && args.trees.has('b')) {
      const aBytes = treeStats(treeA).bytes;
      const big = await ensureBigTree({ cacheDir: args.cacheDir, minBytes: 10 * aBytes, log });
      sources.push({
        label: 'b',
        title: `real npm packages (${big.packages.length} top-level: ${big.packages.slice(0, 8).join(', ')}, …) as a git repo with package.json + lockfile`,
        dir: big.dir,
      });
    }
    for (const s of sources.filter((x) => args.trees.has(x.label))) {
      log(`\n== tree (${s.label}): ${s.dir}`);
      const stats = treeStats(s.dir);
      const home = join(runDir, `home-${s.label}`);
      const scratch = join(runDir, `scratch-${s.label}`);
      mkdirSync(scratch, { recursive: true });
      const awc = await openAwc(home);
      const ti = now();
      const snap = await awc.importSnapshot(s.dir, { name: `tree-${s.label}` });
      const importMs = now() - ti;
      log(`  ${stats.files} files, ${fmtBytes(stats.bytes)}; imported in ${fmtMs(importMs)} (stored ${fmtBytes(snap.storedBytes)})`);
      const ctx: TreeCtx = {
        label: s.label,
        title: s.title,
        dir: s.dir,
        stats,
        repo: s.dir,
        home,
        awc,
        snapshotId: snap.id,
        importMs,
        storedBytes: snap.storedBytes,
        scratch,
        trash: join(runDir, 'trash'),
        plan: plan(args.quick, s.label),
      };
      ctxs.push(ctx);
      trees.push({
        label: s.label,
        title: s.title,
        dir: s.dir,
        files: stats.files,
        bytes: stats.bytes,
        dirs: stats.dirs,
        symlinks: stats.symlinks,
        snapshotId: snap.id,
        importMs,
        storedBytes: snap.storedBytes,
      });
      const prev = (id: string) => (s.label === 'b' ? figures.find((f) => f.id === id && f.tree === 'a') : undefined);
      const add = (fs: Figure | Figure[]) => {
        for (const f of Array.isArray(fs) ? fs : [fs]) {
          figures.push(f);
          log(`  ${f.id}: ${f.awcText} | ${f.baselineText} | ${f.ratioText} | ${f.met === null ? '—' : f.met ? 'met' : 'NOT MET'}`);
        }
      };
      try {
        if (want('fork') || want('mount')) {
          log('  baselines (cp -a; git worktree add + npm ci --offline --ignore-scripts)…');
          ctx.baselines = await measureBaselines(ctx, log);
        }
        if (want('fork')) add(await figFork(ctx, prev('fork')));
        if (want('mount')) add(await figForkMount(ctx, prev('fork-mount'), log));
        if (want('read-warm')) add(await figReadWarm(ctx));
        if (want('read-cold')) add(await figReadCold(ctx));
        if (want('build') && s.label === 'a') add(await figBuild(ctx, log));
        if (want('fanout')) add(await figFanout(ctx, log));
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
  const out = args.out ?? (args.quick || args.only.size > 0 || args.trees.size < 2 ? undefined : join(PROJECT, 'docs', 'benchmarks.md'));
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
    process.stderr.write(`bench: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
