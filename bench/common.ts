import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Awc } from '../src/service/workspace/awc.js';
import { DaemonClient } from '../src/daemon/supervisor/client.js';
import { lazyUnmountUnder, setAside, type TreeStats } from './util.js';

/** The project checkout (dist/bench/ → two levels up). */
export const PROJECT = fileURLToPath(new URL('../..', import.meta.url));
/** The compiled CLI. */
export const CLI = fileURLToPath(new URL('../src/cli/entry/main.js', import.meta.url));

/** Every figure id the suite produces (per tree; `build` and `test` on tree (a) only). */
export const FIGURE_IDS = [
  'fork',
  'fork-mount',
  'first-mount',
  'cli-fork-mount',
  'read-warm',
  'read-cold',
  'read-dropped',
  'build',
  'test',
  'fanout-backend',
  'fanout-disk',
  'daemon-rss',
  'checkpoint-first',
  'checkpoint',
  'checkpoint-unchanged',
  'cli-checkpoint',
  'cli-checkpoint-unchanged',
  'import',
  'image-share',
  'new-host-mount',
  'host-disk',
  'reads-during-import',
  'reads-during-first-mount',
  'reads-during-checkpoint',
] as const;
export type FigureId = (typeof FIGURE_IDS)[number];

/**
 * Figures a `--quick` run measures only on tree (c) (when `--trees` selects it), never on tree (a):
 * the import against `cp -a` (it drops the page cache twice; on tree (a) it says little), and the
 * first mount on a new host (tree (a) is a git checkout whose layer rewrites `.git/index`: its
 * image is never shared, so the group measures nothing there).
 */
export const QUICK_LARGE_TREE_ONLY: readonly FigureId[] = ['import', 'image-share', 'new-host-mount'];

/** A tree's label: (a) this checkout, (b) the npm packages, (c) the large tree (a copy of /usr). */
export type TreeLabel = 'a' | 'b' | 'c';

/** One row of the result table. */
export interface Figure {
  id: FigureId;
  tree: TreeLabel;
  name: string;
  /** AWC's value, in `unit`. */
  awc: number;
  unit: string;
  /** The primary baseline's value (same unit), or null when the figure has none. */
  baseline: number | null;
  /** Further baselines by name (same unit). */
  baselines: Record<string, number | null>;
  /** AWC against the primary baseline, as the target reads it (e.g. AWC/native time, AWC/native throughput). */
  ratio: number | null;
  awcText: string;
  baselineText: string;
  ratioText: string;
  target: string;
  /** Whether the target is met; null when it could not be measured on this build. */
  met: boolean | null;
  notes: string[];
}

/** Options of a run. */
export interface RunOptions {
  quick: boolean;
  /** Figure ids to run (empty: all). */
  only: Set<string>;
  log: (s: string) => void;
}

/** Iteration counts by mode. */
export interface Plan {
  forkIters: number;
  forkMountIters: number;
  cliIters: number;
  cpIters: number;
  worktreeIters: number;
  readIters: number;
  buildIters: number;
  fanoutWorkspaces: number;
  fanoutFiles: number | undefined;
  testFiles: string[];
  /**
   * The tsconfig the build figure compiles (`tsc -p <it>`): `.` (the whole project) in a full run;
   * `--quick` compiles only what its test subset imports (bench/tsconfig.quick.json), since the
   * quick run proves the suite runs, not the figure.
   */
  buildProject: string;
  /** Fill the local npm cache (network) before the timed `npm ci --offline` runs. */
  primeNpmCache: boolean;
  /** Checkpoints of each kind (changed, unchanged) in process; through the CLI; native stat walks (their baseline). */
  checkpointIters: number;
  cliCheckpointIters: number;
  walkIters: number;
  /** The host group's busy operations in a row per phase (imports, first mounts, checkpoints of many changed files). */
  hostOpRounds: number;
  /** Small files the host group's reader reads at most per phase (the idle phase reads them all: its baseline). */
  hostReads: number;
  /** Pause (ms) between two reads of the host group's reader (longer on larger trees, whose busy operations last longer). */
  hostReadIntervalMs: number;
}

/** A tree under test and its AWC home. */
export interface TreeCtx {
  label: TreeLabel;
  title: string;
  /** Native directory (the import source, and the native baseline). */
  dir: string;
  stats: TreeStats;
  /** Git repository for the worktree baseline (a copy of the checkout, or the big tree); null: none (tree (c)), the baseline is skipped. */
  repo: string | null;
  /** A file of the tree (relative path) that "ready to read" reads: package.json, or the tree's first file. */
  probe: string;
  home: string;
  awc: Awc;
  snapshotId: string;
  importMs: number;
  /** Whether the import started right after a drop of the caches (the import figure needs it). */
  importCold: boolean;
  storedBytes: number;
  /** Scratch space for mounts and copies. */
  scratch: string;
  /** Where what a figure is done with goes (setAside), removed when the run ends. */
  trash: string;
  plan: Plan;
  /** Baseline times (ms) measured once per tree, shared by the fork and fork+mount rows. */
  baselines?: { cpA: number; worktree: number | null; worktreeError?: string; worktreeMs?: { checkout: number; install: number } };
}

/** Opens the service on a bench home, forcing the overlay driver (the figures are about it). */
export function openAwc(home: string): Promise<Awc> {
  return Awc.open({ home, mountDriver: 'overlay' }, { daemon: (config) => new DaemonClient(config) });
}

/** Unmounts every workspace mounted on this home (discarding their changes), leaving the daemon up. */
export async function unmountAll(awc: Awc): Promise<void> {
  for (const ws of await awc.listWorkspaces()) {
    if (ws.mountState !== 'mounted') continue;
    try {
      await awc.unmount(ws.id, { discard: true, force: true });
    } catch {
      // stopDaemon and the lazy fallback handle it
    }
  }
}

/** Stops the home's daemon (it unmounts what is left) and waits until it is gone; kills our own daemon by pid if it hangs. */
export async function stopDaemon(awc: Awc): Promise<void> {
  const client = new DaemonClient(awc.config);
  const pidFile = awc.paths.pidFile;
  let pid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : NaN;
  try {
    pid = ((await client.call('GET', '/v1/status', undefined, { start: false, timeoutMs: 10_000 })) as { pid: number }).pid;
  } catch {
    // not running (or not answering): the pid file is all we have
  }
  try {
    await client.call('POST', '/v1/stop', { force: true }, { start: false, timeoutMs: 30_000 });
  } catch {
    // not running
  }
  // wait for the process itself to exit, not only its socket: a daemon that is still shutting
  // down removes the socket and pid file at its very end, which would hit a successor's
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && ((await client.running()) || (Number.isInteger(pid) && pid > 0 && alive(pid))))
    await new Promise((r) => setTimeout(r, 100));
  if (Number.isInteger(pid) && pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('daemon');
  } catch {
    return false;
  }
}

/** Starts the home's daemon (fresh: stopped first; with `clearCacheTo`, its chunk cache set aside there first), returning how long the start took. */
export async function restartDaemon(awc: Awc, opts: { clearCacheTo?: string } = {}): Promise<number> {
  await unmountAll(awc);
  await stopDaemon(awc);
  if (opts.clearCacheTo) setAside(join(awc.paths.hostDir, 'cache'), opts.clearCacheTo);
  const t0 = performance.now();
  await new DaemonClient(awc.config).start();
  return performance.now() - t0;
}

/** Everything a tree context owns: mounts, daemon, catalog. Never throws. */
export async function closeTree(ctx: TreeCtx): Promise<void> {
  try {
    await unmountAll(ctx.awc);
  } catch {
    // fall through
  }
  try {
    await stopDaemon(ctx.awc);
  } catch {
    // fall through
  }
  lazyUnmountUnder(ctx.scratch);
  lazyUnmountUnder(ctx.home);
  try {
    await ctx.awc.close();
  } catch {
    // already closed
  }
}

/** `x` as "0.12×". */
export function fmtRatio(x: number | null): string {
  if (x === null || !Number.isFinite(x)) return '—';
  if (x < 0.01) return `${x.toExponential(1)}×`;
  return `${x.toFixed(x < 10 ? 2 : 0)}×`;
}
