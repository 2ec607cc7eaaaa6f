#!/usr/bin/env node
/**
 * Issue 11, the build-reuse figures: what an incremental build costs in a workspace run at its
 * stable path (`awc run`, docs/reference/run.md), against the same build in the base and against
 * the same builds in git worktrees, side by side in one run.
 *
 *   node dist/bench/build-reuse.js [--libs N] [--units N] [--funcs N] [--workspaces N] [--timed N] [--link shared|static] [--keep] [--no-write]
 *
 * The project: a generated CMake project in C (Unix Makefiles, Debug: `-g`), `--libs` libraries of
 * `--units` source files each (`--funcs` helper functions per file), one test executable per
 * library and one app linking every library. Why CMake: its build outputs embed absolute paths
 * everywhere a build looks. CMakeCache.txt records the source and build directories (and cmake
 * refuses a build tree moved elsewhere), every Makefile and depfile names absolute paths, the
 * objects' DWARF holds the compile directory and absolute file names, `assert()` puts the
 * absolute `__FILE__` into the code, and every executable carries an RPATH into the build
 * directory. A build tree is therefore reusable only at the path it was built at: the case
 * `awc run` exists for. Why shared libraries (`--link shared`, CMake's BUILD_SHARED_LIBS): a
 * one-file edit then relinks the edited library and the small executables that link it, which
 * is what an incremental build of a large C or C++ project looks like; with static libraries
 * (`--link static`) every executable that links the edited library is rewritten in full, and the
 * bytes figure measures the project's link layout rather than AWC.
 *
 * Steps. The base: a git repository (sources committed, `/build/` ignored) in a temporary
 * directory, configured and built once at that path (the full build: its wall time, and
 * `du -sx --block-size=1` of build/, the baseline of the bytes figure), then built once more (a
 * no-op that settles CMake's consolidated depfiles, as any second build of a tree does), then
 * `awc snapshot import` (it records the path as the `awc.path` label: the stable path).
 * Then, for each of `--timed` fresh workspaces (default 12), alternating the order: `awc fork`,
 * `awc mount` (overlay) anywhere, and `awc run <ws> -- sh -c '<edit>; cmake --build build'`, where
 * the edit changes one constant in one source file (a different file, in library i mod N, per
 * workspace), beside the same script with the same edit in the base itself. Both sides then
 * recompile the same file and relink the same targets: the base keeps the earlier runs' edits,
 * each of which is already built, so its run i does exactly the work workspace i does on the
 * snapshot. Bytes added to the host per workspace, over the first `--workspaces` (default 6, as
 * the issue sets it): `du -sx --block-size=1` of the workspace's upper
 * (`<home>/host/workspaces/<id>/upper`; target ≤ 10 % of the full build's output). Wall time,
 * over all pairs (12 by default: the machine is shared, and one build takes about a second):
 * the whole `awc run` (CLI start, namespace, edit, build) against the whole script in the base
 * (target ≤ 1.10×, medians; the fastest of each side beside it); the build alone, timed inside
 * the script, and `awc run <ws> -- true` against `sh -c true` beside them. Each run
 * is checked: make's output must show exactly one compiled file, and the app must print the
 * total the edits predict (each edit adds its constant to it once).
 *
 * Beside it, the issue's baseline: the first `--workspaces` edits and builds in as many `git worktree add`
 * checkouts of the base repository, each at its own path, so each configures and builds in
 * full (bytes: du of the worktree and its admin directory in the base's .git). For contrast, one
 * more workspace built at its mount path without `awc run`: cmake finds the cache of another
 * directory, and the Makefiles it generated build the base's path, not the workspace (measured:
 * what it compiled, whether the edit reached the app, what it wrote into the base); then what
 * recovering there costs (`rm -rf build`, configure, full build at the mount path).
 *
 * Needs root (awc run), /dev/fuse, cmake, make and a C compiler. Writes bench/BUILD-REUSE.md and
 * its section of docs/benchmarks.md (unless --no-write); `npm run bench` runs it too and keeps it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI } from './common.js';
import { emitDocSection } from './doc-section.js';
import { duBytes, fmtBytes, fmtMs, lazyUnmountUnder, median, mountsUnder, now } from './util.js';
import {
  BUILD_REUSE_DEFAULTS,
  buildMs,
  counts,
  edit,
  exec,
  git,
  JOBS,
  largestFiles,
  ok,
  projectFiles,
  runCount,
  script,
  total,
  type BuildReuseOptions,
} from './build-reuse-project.js';

export { BUILD_REUSE_DEFAULTS, type BuildReuseOptions };

/** The file under bench/ that keeps the section (bench/run.ts appends it to docs/benchmarks.md). */
export const BUILD_REUSE_FILE = 'BUILD-REUSE.md';
const BEGIN = '<!-- build-reuse:begin (bench/build-reuse.ts writes this section; bench/BUILD-REUSE.md keeps it) -->';
const END = '<!-- build-reuse:end -->';
/** Issue 11's targets. */
const BYTES_TARGET = 0.1;
const TIME_TARGET = 1.1;

/** The section with its markers (bench/run.ts). */
export function buildReuseSection(text: string): string {
  return `${BEGIN}\n${text.trim()}\n${END}`;
}

interface Sample {
  i: number;
  file: string;
  /** The whole command: `awc run …` in the workspace, `sh -c …` in the base. */
  ms: number;
  /** The build alone (cmake --build), timed inside the script. */
  buildMs: number;
  compiled: number;
  linked: number;
  total: number | null;
  expected: number;
}

interface WsSample extends Sample {
  /** Allocated bytes of the workspace's upper after its build. */
  upper: number;
  /** Of the workspace's whole directory in the home (upper, overlay work directory, state). */
  wsDir: number;
}

interface WtSample {
  i: number;
  bytes: number;
  checkoutMs: number;
  configureMs: number;
  buildMs: number;
  compiled: number;
  totalOk: boolean;
}

/** Why this machine cannot run the figures (not root, a tool missing), or null when it can. */
export function buildReuseUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (awc run makes a mount namespace)';
  for (const [tool, arg] of [
    ['cmake', '--version'],
    ['make', '--version'],
    ['cc', '--version'],
    ['unshare', '--version'],
  ]) {
    const r = spawnSync(tool, [arg], { encoding: 'utf8' });
    if (r.error || r.status !== 0) return `needs ${tool}`;
  }
  return null;
}

/** Runs the figures and returns the markdown section. @throws when a build or a check fails */
export async function runBuildReuse(o: BuildReuseOptions): Promise<string> {
  const log = o.log ?? (() => undefined);
  const why = buildReuseUnavailable();
  if (why) throw new Error(`bench:reuse ${why}`);
  if (runCount(o) + 1 > o.libs * o.units) throw new Error('more runs than source files to edit');
  const t00 = now();
  const load0 = loadavg();
  const work = realpathSync(mkdtempSync(join(tmpdir(), 'awc-bench-reuse-')));
  const home = join(work, 'home');
  const env: NodeJS.ProcessEnv = { ...process.env, AWC_MOUNT_DRIVER: 'overlay' };
  delete env.AWC_HOME;
  const awc = (...a: string[]) => ok(process.execPath, [CLI, '--home', home, ...a], { env, cwd: work });
  const mounted: string[] = [];
  let failed = false;
  try {
    // the base: generated, committed, configured and built at its path
    const base = join(work, 'base');
    const files = projectFiles(o);
    for (const [rel, text] of files) {
      mkdirSync(join(base, rel, '..'), { recursive: true });
      writeFileSync(join(base, rel), text);
    }
    git(base, 'init', '-q', '-b', 'main');
    git(base, 'add', '-A');
    git(base, 'commit', '-q', '-m', 'generated project');
    const cSources = [...files.keys()].filter((f) => f.endsWith('.c')).length;
    log(`build-reuse: ${o.libs} libraries × ${o.units} files (${cSources} C files), ${o.link}; base ${base}`);
    const configure = ok('cmake', ['-S', '.', '-B', 'build', '-G', 'Unix Makefiles'], { cwd: base });
    const full = ok('cmake', ['--build', 'build', '--parallel', JOBS], { cwd: base });
    if (counts(full.stdout).compiled !== cSources)
      throw new Error(`the full build compiled ${counts(full.stdout).compiled} of ${cSources} files`);
    const settle = ok('cmake', ['--build', 'build', '--parallel', JOBS], { cwd: base });
    if (counts(settle.stdout).compiled !== 0)
      throw new Error(`the second build of the base compiled ${counts(settle.stdout).compiled} files`);
    const fullBytes = duBytes(join(base, 'build'));
    const sourceBytes = duBytes(base) - fullBytes;
    const total0 = total(ok(join(base, 'build', 'apps', 'app'), []).stdout);
    if (total0 === null) throw new Error('the app printed no total');
    log(`  full build ${fmtMs(full.ms)} (configure ${fmtMs(configure.ms)}), output ${fmtBytes(fullBytes)}; total ${total0}`);
    const cmakeVersion = /cmake version (\S+)/.exec(ok('cmake', ['--version']).stdout)?.[1] ?? '?';
    const ccVersion = ok('cc', ['--version']).stdout.split('\n')[0];

    const ti = now();
    awc('snapshot', 'import', base, '--name', 'base');
    const importMs = now() - ti;
    const homeBefore = duBytes(home);
    const sharedDirs = [join(home, 'host', 'layers'), join(home, 'host', 'cache')];
    const sharedBefore = sharedDirs.map(duBytes);

    // the workspaces through awc run, alternating with the same edit and build in the base
    const ws: WsSample[] = [];
    let biggest: { path: string; bytes: number }[] = [];
    const bs: Sample[] = [];
    let baseTotal = total0;
    for (let i = 0; i < runCount(o); i++) {
      const e = edit(o, i);
      const id = (JSON.parse(awc('--json', 'fork', 'base', '--name', `w${i}`).stdout) as { workspaces: { id: string }[] }).workspaces[0].id;
      const mnt = join(work, 'mnt', `w${i}`);
      awc('mount', id, mnt);
      mounted.push(id);
      const upper = join(home, 'host', 'workspaces', id, 'upper');
      if (!existsSync(upper)) throw new Error(`no upper directory at ${upper}`);
      const runBase = () => {
        const r = ok('sh', ['-c', script(o, i)], { cwd: base });
        baseTotal += e.tweak;
        bs.push({
          i,
          file: e.file,
          ms: r.ms,
          buildMs: buildMs(r.stdout),
          ...counts(r.stdout),
          total: total(r.stdout),
          expected: baseTotal,
        });
      };
      const runWs = () => {
        const r = awc('run', id, '--', 'sh', '-c', script(o, i));
        const s = {
          i,
          file: e.file,
          ms: r.ms,
          buildMs: buildMs(r.stdout),
          ...counts(r.stdout),
          total: total(r.stdout),
          expected: total0 + e.tweak,
          upper: duBytes(upper),
          wsDir: duBytes(join(upper, '..')),
        };
        if (i === 0) biggest = largestFiles(upper, 5);
        ws.push(s);
      };
      if (i % 2 === 0) {
        runBase();
        runWs();
      } else {
        runWs();
        runBase();
      }
      const w = ws[ws.length - 1];
      const b = bs[bs.length - 1];
      log(
        `  #${i} ${e.file}: awc run ${fmtMs(w.ms)} (build ${fmtMs(w.buildMs)}), upper ${fmtBytes(w.upper)}, compiled ${w.compiled}; base ${fmtMs(b.ms)} (build ${fmtMs(b.buildMs)})`,
      );
      for (const [side, s] of [
        ['workspace', w],
        ['base', b],
      ] as const) {
        if (s.compiled !== 1) throw new Error(`run ${i} (${side}): compiled ${s.compiled} files, not 1 (the build was not incremental)`);
        if (s.total !== s.expected) throw new Error(`run ${i} (${side}): the app printed ${s.total}, expected ${s.expected}`);
      }
      if (w.linked !== b.linked) throw new Error(`run ${i}: the workspace linked ${w.linked} targets, the base ${b.linked}`);
    }
    const homeGrowth = duBytes(home) - homeBefore;
    const [layerGrowth, cacheGrowth] = sharedDirs.map((d, k) => duBytes(d) - sharedBefore[k]);
    // what awc run itself costs (CLI start, catalog, namespace, bind): `awc run <ws> -- true` against `sh -c true`, interleaved
    const runTrue: number[] = [];
    const shTrue: number[] = [];
    for (let k = 0; k < 5; k++) {
      runTrue.push(awc('run', mounted[0], '--', 'true').ms);
      shTrue.push(ok('sh', ['-c', 'true'], { cwd: base }).ms);
    }

    // the baseline: the same edits and builds in git worktrees, each at its own path
    const wts: WtSample[] = [];
    for (let i = 0; i < o.workspaces; i++) {
      const dir = join(work, 'wt', `w${i}`);
      mkdirSync(join(work, 'wt'), { recursive: true });
      const co = git(base, 'worktree', 'add', '-q', '--detach', dir);
      ok('sh', ['-c', edit(o, i).sed], { cwd: dir });
      const cf = ok('cmake', ['-S', '.', '-B', 'build', '-G', 'Unix Makefiles'], { cwd: dir });
      const b = ok('cmake', ['--build', 'build', '--parallel', JOBS], { cwd: dir });
      const t = total(ok(join(dir, 'build', 'apps', 'app'), []).stdout);
      const s: WtSample = {
        i,
        bytes: duBytes(dir) + duBytes(join(base, '.git', 'worktrees', `w${i}`)),
        checkoutMs: co.ms,
        configureMs: cf.ms,
        buildMs: b.ms,
        compiled: counts(b.stdout).compiled,
        totalOk: t === total0 + edit(o, i).tweak,
      };
      wts.push(s);
      log(
        `  worktree #${i}: ${fmtBytes(s.bytes)}, checkout ${fmtMs(s.checkoutMs)} + configure ${fmtMs(s.configureMs)} + build ${fmtMs(s.buildMs)}`,
      );
      if (!s.totalOk) throw new Error(`worktree ${i}: the app printed ${t}, expected ${total0 + edit(o, i).tweak}`);
    }

    // contrast: one more workspace built at its mount path, without awc run
    const ci = runCount(o);
    const ce = edit(o, ci);
    const cid = (JSON.parse(awc('--json', 'fork', 'base', '--name', 'plain').stdout) as { workspaces: { id: string }[] }).workspaces[0].id;
    const cmnt = join(work, 'mnt', 'plain');
    awc('mount', cid, cmnt);
    mounted.push(cid);
    const cupper = join(home, 'host', 'workspaces', cid, 'upper');
    const marker = join(work, 'contrast.marker');
    writeFileSync(marker, '');
    const plain = exec('sh', ['-c', script(o, ci)], { cwd: cmnt });
    writeFileSync(join(work, 'contrast.log'), `exit ${plain.status}\n${plain.stdout}\n--- stderr\n${plain.stderr}`);
    const intoBase = ok('find', [base, '-newer', marker, '-type', 'f']).stdout.split('\n').filter(Boolean).length;
    const editObject = `${ce.file.split('/')[1]}.dir/${ce.file.split('/')[2]}.o`;
    const builtEdit = plain.stdout.includes(`Building C object ${ce.file.split('/').slice(0, 2).join('/')}/CMakeFiles/${editObject}`);
    const plainTotal = total(plain.stdout);
    const cmakeSaid =
      /CMake Error[^\n]*\n?[^\n]*/
        .exec(plain.stderr)?.[0]
        .replace(/\s+/g, ' ')
        .replace(/\.? ?This may result.*$/, '')
        .trim() ?? '';
    const plainUpper = duBytes(cupper);
    const rebuild = exec(
      'sh',
      ['-c', `rm -rf build && cmake -S . -B build -G 'Unix Makefiles' && cmake --build build --parallel ${JOBS}`],
      {
        cwd: cmnt,
      },
    );
    const rebuiltTotal = rebuild.status === 0 ? total(exec(join(cmnt, 'build', 'apps', 'app'), []).stdout) : null;
    const rebuildUpper = duBytes(cupper);
    log(
      `  without awc run: exit ${plain.status}, compiled ${counts(plain.stdout).compiled}, ${intoBase} files written under the base; rebuild ${fmtMs(rebuild.ms)}, upper ${fmtBytes(rebuildUpper)}`,
    );

    // the figures
    const counted = ws.slice(0, o.workspaces);
    const upMed = median(counted.map((s) => s.upper));
    const upMax = Math.max(...counted.map((s) => s.upper));
    const wsMed = median(ws.map((s) => s.ms));
    const baseMed = median(bs.map((s) => s.ms));
    const ratio = wsMed / baseMed;
    const minRatio = Math.min(...ws.map((s) => s.ms)) / Math.min(...bs.map((s) => s.ms));
    const buildRatio = median(ws.map((s) => s.buildMs)) / median(bs.map((s) => s.buildMs));
    const wtBytes = median(wts.map((s) => s.bytes));
    const wtMs = median(wts.map((s) => s.checkoutMs + s.configureMs + s.buildMs));
    const pct = (x: number) => `${((100 * x) / fullBytes).toFixed(1)} %`;
    const range = (xs: number[]) => `${fmtMs(Math.min(...xs))}–${fmtMs(Math.max(...xs))}`;
    const bytesMet = upMax <= BYTES_TARGET * fullBytes;
    const timeMet = ratio <= TIME_TARGET;
    const durationMs = now() - t00;
    const date = new Date().toISOString().slice(0, 10);
    const example = edit(o, 0);
    const text = [
      '## Build reuse at the stable path (issue 11)',
      '',
      `Generated by \`npm run bench:reuse\` (bench/build-reuse.ts; \`npm run bench\` runs it too) on ${date}, in one run of ${fmtMs(durationMs)}. ` +
        `The project: a generated CMake project in C, ${o.libs} ${o.link} libraries of ${o.units} files (${o.funcs} helper functions each), a test executable per library and an app linking them all: ${cSources} C files, ` +
        `Debug (\`-g\`), Unix Makefiles, cmake ${cmakeVersion}, ${ccVersion}, \`--parallel ${JOBS}\`. Its outputs embed absolute paths (CMakeCache.txt, every Makefile and depfile, DWARF, \`assert()\`'s \`__FILE__\`, the executables' RPATH), so its build tree is reusable only at the path it was built at. ` +
        `The base: a git repository in a temporary directory, configured and built there (full build ${fmtMs(full.ms)} after a ${fmtMs(configure.ms)} configure; output ${fmtBytes(fullBytes)}, sources and .git ${fmtBytes(sourceBytes)}), built once more (a no-op: it settles CMake's consolidated depfiles), then \`awc snapshot import\`ed (${fmtMs(importMs)}; its path is the stable path). ` +
        `Each of ${runCount(o)} workspaces: \`awc fork\`, \`awc mount\` (overlay) under another directory, then \`awc run <ws> -- sh -c '<edit>; cmake --build build'\`; the edit changes one constant in one file, a different file per workspace (e.g. \`${example.file}\`). ` +
        `The base runs the same script with the same edit, alternating with the workspaces: every run on both sides compiled exactly 1 file and relinked the same targets, and its app printed the total the edits predict. ` +
        `Bytes: \`du -sx --block-size=1\` of the workspace's upper after its build. Wall time: the whole \`awc run\` (CLI start, namespace, edit, build) against the whole script in the base; medians of ${runCount(o)} pairs (the bytes: the first ${o.workspaces} workspaces, as the issue sets it). ` +
        `Git worktrees: \`git worktree add --detach\` of the base repository, the same edit, configure and build at the worktree's own path. ` +
        `Machine: ${cpus().length} cores, load average (1/5/15 min) ${load0.map((x) => x.toFixed(2)).join(' / ')} at the start and ${loadavg()
          .map((x) => x.toFixed(2))
          .join(' / ')} at the end.`,
      '',
      `| figure | \`awc run\` in a workspace | baseline (same run) | AWC vs baseline | ${o.workspaces} git worktrees (same run) | target | met? |`,
      '|---|---|---|---|---|---|---|',
      `| bytes added to the host per extra workspace (incremental build after a one-file edit) | ${fmtBytes(upMed)} median, ${fmtBytes(upMax)} max | one full build's output: ${fmtBytes(fullBytes)} | ${pct(upMed)} (max ${pct(upMax)}) | ${fmtBytes(wtBytes)} per worktree (${pct(wtBytes)}; sources, .git admin files and its own full build) | ≤ 10 % | ${bytesMet ? 'met' : 'NOT MET'} |`,
      `| wall time of that incremental build | ${fmtMs(wsMed)} (${range(ws.map((s) => s.ms))}); the build alone ${fmtMs(median(ws.map((s) => s.buildMs)))} | the same build in the base: ${fmtMs(baseMed)} (${range(bs.map((s) => s.ms))}); the build alone ${fmtMs(median(bs.map((s) => s.buildMs)))} | ${ratio.toFixed(2)}× (fastest against fastest ${minRatio.toFixed(2)}×; the build alone ${buildRatio.toFixed(2)}×) | ${fmtMs(wtMs)} per worktree (checkout + configure + full build: ${(wtMs / baseMed).toFixed(1)}× the base) | ≤ 1.10× | ${timeMet ? 'met' : 'NOT MET'} |`,
      '',
      '| run | edited file | `awc run`: wall / build alone | base: wall / build alone | upper | of the full build | compiled / linked (both sides) | worktree: bytes, checkout + configure + build |',
      '|---|---|---:|---:|---:|---:|---|---|',
      ...ws.map((w, k) => {
        const b = bs[k];
        const t = wts[k] as WtSample | undefined;
        const wt = t
          ? `${fmtBytes(t.bytes)}, ${fmtMs(t.checkoutMs)} + ${fmtMs(t.configureMs)} + ${fmtMs(t.buildMs)} (${t.compiled} compiled)`
          : '—';
        return `| ${w.i + 1} | \`${w.file}\` | ${fmtMs(w.ms)} / ${fmtMs(w.buildMs)} | ${fmtMs(b.ms)} / ${fmtMs(b.buildMs)} | ${fmtBytes(w.upper)} | ${pct(w.upper)} | ${w.compiled} / ${w.linked} | ${wt} |`;
      }),
      '',
      `\`awc run\`'s own cost, the same run: \`awc run <ws> -- true\` ${fmtMs(median(runTrue))} against \`sh -c true\` ${fmtMs(median(shTrue))} (medians of 5): the CLI's start, the catalog, the namespace and the bind, paid once per command. ` +
        `Of the ${fmtMs(wsMed - baseMed)} between the two medians, that fixed cost is ${fmtMs(median(runTrue) - median(shTrue))}; the build itself, timed inside the namespace, took ${buildRatio.toFixed(2)}× the base's. ` +
        `What run 1's upper holds, largest first: ${biggest.map((f) => `\`${f.path}\` ${fmtBytes(f.bytes)}`).join(', ')}; the rest are depfiles, CMake's consolidated dependency lists and the directories above them. ` +
        `Each workspace's whole directory in the AWC home (upper, overlay work directory, state) took ${fmtBytes(median(ws.map((s) => s.wsDir)))} (median). ` +
        `Paid once per snapshot on the host, whichever workspace comes first, and shared by all: the snapshot's layer (${fmtBytes(layerGrowth)}, built by the first mount) and the chunk cache the builds' reads through the lower filled (${fmtBytes(cacheGrowth)}). ` +
        `All ${runCount(o)} workspaces together added ${fmtBytes(homeGrowth)} to the AWC home.`,
      '',
      `**Without \`awc run\`** (one more workspace, the same kind of edit, built at its mount path): \`cmake --build build\` exited ${plain.status}` +
        (cmakeSaid ? ` after "${cmakeSaid}"` : '') +
        `; it compiled ${counts(plain.stdout).compiled} files (${builtEdit ? 'the edited one among them' : 'not the edited one'}), and the app printed ${plainTotal === null ? 'nothing' : plainTotal === total0 + ce.tweak ? 'the edited total' : plainTotal === baseTotal ? "the base's total (built from the base's sources, without this edit)" : `${plainTotal} (expected ${total0 + ce.tweak})`}. ` +
        `The Makefiles from the base's configure name the base's absolute paths: make compared the workspace's outputs with the base's sources, compiled into the base's build tree (${intoBase} files under the base were written) and linked the app against the base's libraries (RPATH). ` +
        `Recovering there takes a new build tree: \`rm -rf build\`, configure and a full build at the mount path ${rebuild.status === 0 ? `took ${fmtMs(rebuild.ms)} (${(rebuild.ms / baseMed).toFixed(1)}× the incremental build in the base)` : `failed (exit ${rebuild.status})`} ` +
        `and left ${fmtBytes(rebuildUpper)} in the workspace's upper (${pct(rebuildUpper)} of the full build; ${fmtBytes(plainUpper)} before it)${rebuiltTotal === total0 + ce.tweak ? '' : '; its app did not print the edited total'}.`,
      '',
      'Run it: `npm run bench:reuse` (`node dist/bench/build-reuse.js [--libs N] [--units N] [--funcs N] [--workspaces N] [--timed N] [--link shared|static] [--keep] [--no-write]`, root, /dev/fuse, cmake, make, cc).',
    ].join('\n');
    return text;
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    for (const id of mounted) exec(process.execPath, [CLI, '--home', home, 'unmount', id, '--discard'], { env });
    exec(process.execPath, [CLI, '--home', home, 'daemon', 'stop', '--force'], { env });
    lazyUnmountUnder(work);
    if (mountsUnder(work).length > 0) log(`warning: mounts remain under ${work}; not removing it`);
    else if (o.keep) log(`kept ${work}${failed ? ' for inspection' : ''}; remove it with rm -rf`);
    else rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const opt = (k: string, d: number) => (args.includes(k) ? Number(args[args.indexOf(k) + 1]) : d);
  const link = args.includes('--link') ? args[args.indexOf('--link') + 1] : BUILD_REUSE_DEFAULTS.link;
  if (link !== 'shared' && link !== 'static') throw new Error('--link takes shared or static');
  const d = BUILD_REUSE_DEFAULTS;
  const text = await runBuildReuse({
    libs: opt('--libs', d.libs),
    units: opt('--units', d.units),
    funcs: opt('--funcs', d.funcs),
    workspaces: opt('--workspaces', d.workspaces),
    timed: opt('--timed', d.timed),
    link,
    keep: args.includes('--keep'),
    log: (s) => process.stderr.write(s + '\n'),
  });
  emitDocSection(text, !args.includes('--no-write'), BUILD_REUSE_FILE, BEGIN, END);
}
