#!/usr/bin/env node
/**
 * Issue 11 part 1: the first `git status` in a fresh workspace against a warm `git status`
 * in the base, side by side in one run, for a generated repository (default 100 000 files,
 * cached under the bench's cache directory) and a clone of this project's checkout.
 *
 *   node dist/bench/git-status.js [--files N] [--cache-dir DIR] [--no-write]
 *
 * Per repository: the base is a checkout on the local disk; its warm figure is the median of
 * `git status --short` runs 2–4 there (run 1 warms it) and of one run in each round below. AWC: `awc snapshot import <base>`
 * (timed), `awc fork`, `awc mount` with the overlay driver (timed: it builds the layer and the
 * workspace's index), then the first `git status --short` in the mount: the figure (target ≤
 * 1.5× the warm base, git's default settings); then rounds (3) of a further fresh workspace,
 * (b) mounted plainly and (c) with `--warm`, alternating, medians. Needs root and /dev/fuse. Writes
 * bench/GIT-STATUS.md and its section of docs/benchmarks.md (unless --no-write).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, PROJECT } from './common.js';
import { emitDocSection } from './doc-section.js';
import { fmtMs, lazyUnmountUnder, median, now } from './util.js';

const BEGIN = '<!-- git-status:begin (bench/git-status.ts writes this section; bench/GIT-STATUS.md keeps it) -->';
const END = '<!-- git-status:end -->';

function git(cwd: string, ...a: string[]): string {
  return execFileSync('git', ['-C', cwd, '-c', 'user.name=bench', '-c', 'user.email=bench@example.com', ...a], {
    encoding: 'utf8',
    maxBuffer: 256 << 20,
  });
}

/** Wall time (ms) of `git status --short` in `dir`; checks it is clean. */
function gitStatusMs(dir: string): number {
  const t0 = now();
  const out = git(dir, 'status', '--short');
  const ms = now() - t0;
  if (out.trim() !== '') throw new Error(`git status in ${dir} is not clean:\n${out.slice(0, 500)}`);
  return ms;
}

/** A repository of `files` small files in directories of 1000, one commit, cached in `cacheDir`. */
function generated(cacheDir: string, files: number): string {
  const dir = join(cacheDir, `git-status-${files}`);
  const marker = `${dir}.ready`;
  if (existsSync(marker)) return dir;
  rmSync(dir, { recursive: true, force: true });
  for (let i = 0; i < files; i++) {
    const d = join(dir, `d${Math.floor(i / 1000)}`, `s${Math.floor(i / 100) % 10}`);
    if (i % 100 === 0) mkdirSync(d, { recursive: true });
    writeFileSync(join(d, `f${i}.txt`), `file ${i}\n${'x'.repeat(i % 512)}\n`);
  }
  git(dir, 'init', '-q', '-b', 'main');
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'generated');
  git(dir, 'status', '--short');
  writeFileSync(marker, '');
  return dir;
}

/** Wall time (ms) of lstat'ing every path under `dir` but `.git` once (`find -printf %s`: one fstatat each). */
function lstatWalkMs(dir: string): number {
  const t0 = now();
  const r = spawnSync('find', [dir, '-path', join(dir, '.git'), '-prune', '-o', '-printf', '%s\n'], {
    encoding: 'utf8',
    maxBuffer: 256 << 20,
  });
  if (r.status !== 0) throw new Error(`find ${dir}: ${r.stderr}`);
  return now() - t0;
}

interface Row {
  name: string;
  files: number;
  warm: number;
  first: number;
  second: number;
  /** First git status in a further fresh workspace of the same snapshot (its layer built, the repository's .git read once on the host). */
  further: number;
  furtherMountMs: number;
  /** Content FUSE READs during (b)'s git status (the most of its rounds). */
  furtherReads: number;
  /** lstat of every path once: warm in the base, and in a fresh workspace (a third fork): the floor of a first git status there. */
  walkBase: number;
  walkFresh: number;
  /** (c) a further workspace mounted with `--warm`: the mount (with its walk), the walk alone, and the first git status after it. */
  warmMountMs: number;
  warmWalkMs: number;
  afterWarm: number;
  importMs: number;
  mountMs: number;
}

/**
 * Idle time (ms) between a mount and the first status in it. An agent's first command comes
 * seconds after its workspace is mounted; right after any awc command the warm worker that
 * replaces the one the command used is still loading (about 0.3 s of one core, at nice 10),
 * and a status then competes with it (measured: 0.22 s against 0.17 s after 2 s idle). So no
 * awc command runs between the settle and the status.
 */
const SETTLE_MS = 1500;

function settle(): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, SETTLE_MS);
}

/** Fresh workspaces measured for (b) and for (c) each. */
const ROUNDS = 3;

function measure(name: string, base: string, work: string): Row {
  const home = join(work, `home-${name}`);
  const env = { ...process.env, AWC_MOUNT_DRIVER: 'overlay' };
  const awc = (...a: string[]): unknown => {
    const r = spawnSync(process.execPath, [CLI, '--home', home, '--json', ...a], { encoding: 'utf8', env, maxBuffer: 64 << 20 });
    if (r.status !== 0) throw new Error(`awc ${a.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };
  const fuseReads = (): number => {
    const m = (awc('metrics') as { metrics: Record<string, unknown> }).metrics.awc_fuse_operations_total;
    return Array.isArray(m) ? m.filter((x) => x.labels?.op === 'read').reduce((a: number, x) => a + Number(x.value), 0) : 0;
  };
  const files = git(base, 'ls-files', '-z').split('\0').filter(Boolean).length;
  const runs = [0, 1, 2, 3].map(() => gitStatusMs(base));
  runs.shift(); // the first run warms the base
  let t0 = now();
  awc('snapshot', 'import', base, '--name', 'base');
  const importMs = now() - t0;
  const ws = (awc('fork', 'base') as { workspaces: { id: string }[] }).workspaces[0].id;
  const mnt = join(work, `mnt-${name}`);
  t0 = now();
  awc('mount', ws, mnt);
  const mountMs = now() - t0;
  settle();
  const first = gitStatusMs(mnt);
  const second = gitStatusMs(mnt);
  awc('unmount', ws, '--discard');
  // (b) and (c) alternate over ROUNDS fresh workspaces each, with a warm base run in every round, so
  // that a change of the machine's load reaches both sides; each figure is the median of its rounds
  const fresh = (...extra: string[]): { mountMs: number; statusMs: number; walkMs?: number; reads: number } => {
    const w = (awc('fork', 'base') as { workspaces: { id: string }[] }).workspaces[0].id;
    const at = `${mnt}-${w}`;
    const t = now();
    const m = awc('mount', w, at, ...extra) as { warmed?: { ms: number } };
    const mountMs = now() - t;
    const r0 = fuseReads(); // an awc command: before the settle, so that its replacement worker is loaded by the status
    settle();
    const statusMs = gitStatusMs(at);
    const reads = fuseReads() - r0;
    awc('unmount', w, '--discard');
    return { mountMs, statusMs, walkMs: m.warmed?.ms, reads };
  };
  const bs: ReturnType<typeof fresh>[] = [];
  const cs: ReturnType<typeof fresh>[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    runs.push(gitStatusMs(base));
    bs.push(fresh());
    cs.push(fresh('--warm'));
  }
  const further = median(bs.map((x) => x.statusMs));
  const furtherMountMs = median(bs.map((x) => x.mountMs));
  const furtherReads = Math.max(...bs.map((x) => x.reads));
  const warmMountMs = median(cs.map((x) => x.mountMs));
  const warmWalkMs = median(cs.map((x) => x.walkMs!));
  const afterWarm = median(cs.map((x) => x.statusMs));
  lstatWalkMs(base);
  const walkBase = lstatWalkMs(base);
  const ws3 = (awc('fork', 'base') as { workspaces: { id: string }[] }).workspaces[0].id;
  awc('mount', ws3, `${mnt}-3`);
  const walkFresh = lstatWalkMs(`${mnt}-3`);
  awc('unmount', ws3, '--discard');
  spawnSync(process.execPath, [CLI, '--home', home, 'daemon', 'stop', '--force'], { encoding: 'utf8' });
  return {
    name,
    files,
    warm: median(runs),
    first,
    second,
    further,
    furtherMountMs,
    furtherReads,
    walkBase,
    walkFresh,
    warmMountMs,
    warmWalkMs,
    afterWarm,
    importMs,
    mountMs,
  };
}

function main(): void {
  const args = process.argv.slice(2);
  const opt = (k: string, d: string): string => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
  const files = Number(opt('--files', '100000'));
  const cacheDir = opt('--cache-dir', '/var/tmp/awc-bench');
  const write = !args.includes('--no-write');
  mkdirSync(cacheDir, { recursive: true });
  const work = realpathSync(mkdtempSync(join(tmpdir(), 'awc-bench-git-')));
  try {
    const gen = generated(cacheDir, files);
    const proj = join(work, 'project');
    execFileSync('git', ['clone', '-q', '--no-hardlinks', PROJECT, proj]);
    git(proj, 'status', '--short');
    const rows = [measure(`generated (${files} files)`, gen, work), measure("this project's checkout (a clone of HEAD)", proj, work)];
    const text = [
      '## First `git status` in a fresh workspace (issue 11 part 1)',
      '',
      `Git ${git(work, '--version')
        .trim()
        .replace(
          /^git version /,
          '',
        )}, default settings, overlay driver. Warm base: the median of \`git status --short\` runs 2–4 in the base checkout on the local disk and of one run in each of ${ROUNDS} rounds. ` +
        `First in a fresh workspace: \`git status --short\` ${SETTLE_MS / 1000} s after \`awc mount\` of a fresh fork returned (an agent's first command comes later; right at the return, the warm worker replacing the one the mount used is still loading), (a) the snapshot's first workspace on the host (that mount builds the layer and its workspace index; the repository's \`.git\` files come through the cold content path), ` +
        `(b) a further workspace of the same snapshot (a new fork, a new mount, its own fresh overlay; what every agent after the first gets), ` +
        `(c) a further workspace mounted with \`awc mount --warm\` (the mount then looks up every path once; its time includes that walk, which a pool of spare workspaces pays before an agent arrives; the median of ${ROUNDS}, alternating with (b)). ` +
        `Machine: ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)} at the end (other work was running). Target: ≤ 1.5× the warm base.`,
      '',
      '| repository | tracked files | warm in the base | (a) first workspace on the host | ratio | (b) a further workspace | ratio | content FUSE READs in (b) | second run in (a) | lstat of every path: warm base / fresh workspace | import | mount (a) / (b) | (c) `mount --warm`: mount (of it the walk) | (c) first git status after it | ratio |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
      ...rows.map(
        (r) =>
          `| ${r.name} | ${r.files} | ${fmtMs(r.warm)} | ${fmtMs(r.first)} | ${(r.first / r.warm).toFixed(2)}× | ${fmtMs(r.further)} | ${(r.further / r.warm).toFixed(2)}× | ${r.furtherReads} | ${fmtMs(r.second)} | ${fmtMs(r.walkBase)} / ${fmtMs(r.walkFresh)} (${(r.walkFresh / r.walkBase).toFixed(2)}×) | ${fmtMs(r.importMs)} | ${fmtMs(r.mountMs)} / ${fmtMs(r.furtherMountMs)} | ${fmtMs(r.warmMountMs)} (${fmtMs(r.warmWalkMs)}) | ${fmtMs(r.afterWarm)} | ${(r.afterWarm / r.warm).toFixed(2)}× |`,
      ),
      '',
      'Run it: `npm run bench:git` (`node dist/bench/git-status.js [--files N] [--cache-dir DIR] [--no-write]`, root, /dev/fuse).',
    ].join('\n');
    emitDocSection(text, write, 'GIT-STATUS.md', BEGIN, END);
  } finally {
    lazyUnmountUnder(work);
    rmSync(work, { recursive: true, force: true });
  }
}

main();
