import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { CLI, fmtRatio, restartDaemon, unmountAll, type Figure, type TreeCtx } from './common.js';
import { fmtMs, median, now, runTimed, setAside } from './util.js';
import type { Awc } from '../src/service/workspace/awc.js';

/**
 * The two baselines of "a new workspace" (measured once per tree, shared by the fork and
 * fork+mount rows): `cp -a` of the whole tree, and `git worktree add` + a dependency install
 * with `npm ci --offline --ignore-scripts` from the local npm cache (no network; install
 * scripts skipped, so native addons are not rebuilt: a lower bound of a real install).
 */
export async function measureBaselines(ctx: TreeCtx, log: (s: string) => void): Promise<NonNullable<TreeCtx['baselines']>> {
  const cp: number[] = [];
  for (let i = 0; i < ctx.plan.cpIters; i++) {
    const dest = join(ctx.scratch, `cp-${i}`);
    spawnSync('sync');
    const r = await runTimed('cp', ['-a', ctx.dir, dest]);
    cp.push(r.ms);
    setAside(dest, ctx.trash);
  }
  spawnSync('sync');
  log(`  baseline cp -a: ${cp.map(fmtMs).join(', ')}`);
  const wt: number[] = [];
  const parts: { checkout: number; install: number }[] = [];
  let worktreeError: string | undefined;
  const repo = ctx.repo;
  if (repo === null) {
    worktreeError = 'skipped: the tree has no git repository and no npm lockfile';
    log(`  baseline worktree + npm ci ${worktreeError}`);
  }
  for (let i = 0; repo !== null && i < ctx.plan.worktreeIters; i++) {
    const dest = join(ctx.scratch, `wt-${i}`);
    try {
      const a = await runTimed('git', ['-C', repo, 'worktree', 'add', '--detach', '-q', dest, 'HEAD']);
      // the checkout's current manifest and lockfile (a worktree of the state that was snapshotted)
      for (const f of ['package.json', 'package-lock.json', '.npmrc'])
        if (existsSync(join(ctx.dir, f))) copyFileSync(join(ctx.dir, f), join(dest, f));
      if (i === 0 && ctx.plan.primeNpmCache) {
        // untimed: make sure every tarball of the lockfile is in the local npm cache (the only network use of the suite)
        await runTimed('npm', ['ci', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dest });
        setAside(join(dest, 'node_modules'), ctx.trash);
        spawnSync('sync');
      }
      const b = await runTimed('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], {
        cwd: dest,
      });
      wt.push(a.ms + b.ms);
      parts.push({ checkout: a.ms, install: b.ms });
    } catch (err) {
      const msg = (err as Error).message.replace(/\s+/g, ' ');
      worktreeError = /npm error code (\w+)/.exec(msg)?.[1] ?? msg.slice(0, 160);
      if (/ENOTCACHED/.test(msg)) worktreeError += ': a package of the lockfile is not in the local npm cache (a full run primes it)';
      log(`  baseline worktree + npm ci failed: ${worktreeError}`);
      break;
    } finally {
      setAside(dest, ctx.trash);
      spawnSync('git', ['-C', repo, 'worktree', 'prune']); // forgets the worktree whose directory is gone
      spawnSync('sync');
    }
  }
  if (wt.length > 0) log(`  baseline git worktree add + npm ci --offline: ${wt.map(fmtMs).join(', ')}`);
  return {
    cpA: median(cp),
    worktree: wt.length > 0 ? median(wt) : null,
    worktreeError,
    worktreeMs:
      parts.length > 0 ? { checkout: median(parts.map((p) => p.checkout)), install: median(parts.map((p) => p.install)) } : undefined,
  };
}

function baselineCells(
  b: NonNullable<TreeCtx['baselines']>,
  awcMs: number,
): Pick<Figure, 'baseline' | 'baselines' | 'baselineText' | 'ratio' | 'ratioText'> {
  const wtText =
    b.worktree === null ? `worktree + npm ci: n/a (${b.worktreeError ?? 'not run'})` : `worktree + npm ci ${fmtMs(b.worktree)}`;
  return {
    baseline: b.cpA,
    baselines: { 'cp -a': b.cpA, 'git worktree add + npm ci --offline': b.worktree },
    baselineText: `cp -a ${fmtMs(b.cpA)}; ${wtText}`,
    ratio: awcMs / b.cpA,
    ratioText: `${fmtRatio(awcMs / b.cpA)} cp -a${b.worktree === null ? '' : `; ${fmtRatio(awcMs / b.worktree)} worktree`}`,
  };
}

/** Fork of one workspace: the service call in-process (one catalog transaction), median of plan.forkIters. */
export async function figFork(ctx: TreeCtx, other: Figure | undefined): Promise<Figure> {
  const ms: number[] = [];
  for (let i = 0; i < ctx.plan.forkIters; i++) {
    const t0 = now();
    await ctx.awc.fork(ctx.snapshotId);
    ms.push(now() - t0);
  }
  const m = median(ms);
  const same = other === undefined || m <= other.awc * 1.5 + 1;
  return {
    id: 'fork',
    tree: ctx.label,
    name: 'fork of one workspace',
    awc: m,
    unit: 'ms',
    ...baselineCells(ctx.baselines!, m),
    awcText: `${fmtMs(m)} median of ${ms.length} (min ${fmtMs(Math.min(...ms))}, max ${fmtMs(Math.max(...ms))})`,
    target: other === undefined ? '≤ 10 ms' : `≤ 10 ms, same as tree (a) (≤ 1.5× + 1 ms of ${fmtMs(other.awc)})`,
    met: m <= 10 && same,
    notes: ['Awc.fork() in-process: one catalog transaction (SQLite), no data copied.'],
  };
}

/** Mounts a fresh fork of the tree's snapshot at `dir` through `awc` (default: the tree's home) and reads one file through it: "ready to read". Returns the ms. */
export async function forkMountRead(ctx: TreeCtx, dir: string, awc: Awc = ctx.awc): Promise<number> {
  const t0 = now();
  const [ws] = await awc.fork(ctx.snapshotId);
  await awc.mount(ws.id, dir);
  readFileSync(join(dir, ctx.probe));
  return now() - t0;
}

/**
 * Fork + mount, ready to read: the first mount of the snapshot on this host (builds the layer
 * directory), then plan.forkMountIters further workspaces of the snapshot (layer already built),
 * in-process through the daemon; and the same through the CLI (two processes, as a user runs it).
 */
export async function figForkMount(ctx: TreeCtx, other: Figure | undefined, log: (s: string) => void): Promise<Figure[]> {
  const startMs = await restartDaemon(ctx.awc);
  log(`  daemon started in ${fmtMs(startMs)}`);
  const first = await forkMountRead(ctx, join(ctx.scratch, 'fm-first'));
  log(`  first mount (builds the layer): ${fmtMs(first)}`);
  // untimed: write the new layer's metadata back now, so its writeback does not land inside the
  // further mounts below (in steady state a snapshot's layer was built long before)
  spawnSync('sync');
  const ms: number[] = [];
  try {
    for (let i = 0; i < ctx.plan.forkMountIters; i++) ms.push(await forkMountRead(ctx, join(ctx.scratch, `fm-${i}`)));
  } finally {
    await unmountAll(ctx.awc);
  }
  const cli: number[] = [];
  try {
    for (let i = 0; i < ctx.plan.cliIters; i++) {
      const dir = join(ctx.scratch, `cli-${i}`);
      const t0 = now();
      const f = await runTimed(process.execPath, [CLI, '--home', ctx.home, '--json', 'fork', ctx.snapshotId]);
      const id = (JSON.parse(f.stdout) as { workspaces: { id: string }[] }).workspaces[0].id;
      await runTimed(process.execPath, [CLI, '--home', ctx.home, '--json', 'mount', id, dir]);
      readFileSync(join(dir, ctx.probe));
      cli.push(now() - t0);
    }
  } finally {
    await unmountAll(ctx.awc);
  }
  const m = median(ms);
  const same = other === undefined || m <= other.awc * 1.5 + 5;
  const b = ctx.baselines!;
  const rows: Figure[] = [
    {
      id: 'fork-mount',
      tree: ctx.label,
      name: 'fork + mount, ready to read (layer already built)',
      awc: m,
      unit: 'ms',
      ...baselineCells(b, m),
      awcText: `${fmtMs(m)} median of ${ms.length} (min ${fmtMs(Math.min(...ms))}, max ${fmtMs(Math.max(...ms))})`,
      target: other === undefined ? '≤ 100 ms' : `≤ 100 ms, same as tree (a) (≤ 1.5× + 5 ms of ${fmtMs(other.awc)})`,
      met: m <= 100 && same,
      notes: [
        `In-process Awc.fork() + Awc.mount() (daemon API) + one read of ${ctx.probe}, after a \`sync\` that writes the freshly built layer back; daemon start (not included): ${fmtMs(startMs)}.`,
      ],
    },
    {
      id: 'first-mount',
      tree: ctx.label,
      name: 'first fork + mount of the snapshot on this host (builds the layer)',
      awc: first,
      unit: 'ms',
      ...baselineCells(b, first),
      awcText: fmtMs(first),
      target: '— (reported; once per snapshot per host)',
      met: null,
      notes: ['Layer directory: one placeholder per file with overlay xattrs, built by the daemon on the first mount.'],
    },
    {
      id: 'cli-fork-mount',
      tree: ctx.label,
      name: 'fork + mount through the CLI (`awc fork` + `awc mount`, two processes)',
      awc: median(cli),
      unit: 'ms',
      ...baselineCells(b, median(cli)),
      awcText: `${fmtMs(median(cli))} median of ${cli.length}`,
      target: '— (user experience; includes two Node.js process starts)',
      met: null,
      notes: [],
    },
  ];
  return rows;
}
