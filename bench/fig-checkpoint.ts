import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { CLI, fmtRatio, unmountAll, type Figure, type FigureId, type TreeCtx } from './common.js';
import { fmtMs, median, now, runTimed, treeStats } from './util.js';

/**
 * The checkpoint group (issue 26): how long `checkpoint` takes in a mounted workspace of the
 * tree (overlay driver), in process (`Awc.checkpoint`, the service as the suite opens it) and
 * through the CLI. A checkpoint should cost what changed, not what the tree holds: ≤ 100 ms after
 * changing one file, ≤ 50 ms with nothing changed, and the same at 10× the tree.
 *
 * Rows: `checkpoint-first` (the first checkpoint after the mount, one file changed: caches may be
 * cold; reported), `checkpoint` (one file changed since the last checkpoint: a small file in a
 * subdirectory rewritten, median of plan.checkpointIters), `checkpoint-unchanged` (nothing changed
 * since the last checkpoint, median of as many; the two alternate), and `cli-checkpoint` /
 * `cli-checkpoint-unchanged` (`node dist/src/cli/entry/main.js checkpoint <ws>`, median of
 * plan.cliCheckpointIters, against the same CLI's `--version` in the same rounds). The in-process
 * rows' baseline is a native stat walk of the tree (readdir + lstat of every entry, warm, median of
 * plan.walkIters): the least a checkpoint that looks at every file costs.
 */

/** The timed rounds (ms): in process, then through the CLI. */
interface Timings {
  first: number;
  changed: number[];
  unchanged: number[];
  cliStart: number[];
  cliChanged: number[];
  cliUnchanged: number[];
  /** The workspace-relative path the rounds rewrite. */
  file: string;
}

/** A directory two levels down holding a file of the tree (where a user's edit lands), or the root. */
function editDir(ctx: TreeCtx): string {
  const deep = ctx.stats.paths.find((p) => p.split('/').length >= 3 && !p.startsWith('.'));
  return deep === undefined ? '' : dirname(deep);
}

/** Times one in-process checkpoint; throws when it did not see what was (or was not) changed. */
async function timeCheckpoint(ctx: TreeCtx, wsId: string, expectChanged: boolean): Promise<number> {
  const t0 = now();
  const r = await ctx.awc.checkpoint(wsId);
  const ms = now() - t0;
  if (r.changed !== expectChanged) throw new Error(`checkpoint of ${wsId}: changed ${r.changed}, expected ${expectChanged}`);
  return ms;
}

/** Times one `awc checkpoint` through the CLI (its own Node.js process); throws like timeCheckpoint. */
async function timeCliCheckpoint(ctx: TreeCtx, wsId: string, expectChanged: boolean): Promise<number> {
  const r = await runTimed(process.execPath, [CLI, '--home', ctx.home, '--json', 'checkpoint', wsId]);
  const changed = (JSON.parse(r.stdout) as { changed: boolean }).changed;
  if (changed !== expectChanged) throw new Error(`awc checkpoint ${wsId}: changed ${changed}, expected ${expectChanged}`);
  return r.ms;
}

/** Forks and mounts a workspace, then runs every timed round in it (unmounted at the end). */
async function measure(ctx: TreeCtx, log: (s: string) => void): Promise<Timings> {
  const mnt = join(ctx.scratch, 'checkpoint');
  const [ws] = await ctx.awc.fork(ctx.snapshotId);
  const t0 = now();
  await ctx.awc.mount(ws.id, mnt);
  log(`  checkpoint: mounted ${ws.id} in ${fmtMs(now() - t0)}`);
  const file = join(editDir(ctx), 'awc-bench-checkpoint.txt');
  let edits = 0;
  const edit = () => {
    mkdirSync(dirname(join(mnt, file)), { recursive: true });
    writeFileSync(join(mnt, file), `edit ${++edits} at ${new Date().toISOString()}\n`);
  };
  const t: Timings = { first: 0, changed: [], unchanged: [], cliStart: [], cliChanged: [], cliUnchanged: [], file };
  try {
    edit();
    t.first = await timeCheckpoint(ctx, ws.id, true);
    for (let i = 0; i < ctx.plan.checkpointIters; i++) {
      edit();
      t.changed.push(await timeCheckpoint(ctx, ws.id, true));
      t.unchanged.push(await timeCheckpoint(ctx, ws.id, false));
    }
    log(
      `  checkpoint: first ${fmtMs(t.first)}; changed ${t.changed.map(fmtMs).join(', ')}; unchanged ${t.unchanged.map(fmtMs).join(', ')}`,
    );
    for (let i = 0; i < ctx.plan.cliCheckpointIters; i++) {
      t.cliStart.push((await runTimed(process.execPath, [CLI, '--version'])).ms);
      edit();
      t.cliChanged.push(await timeCliCheckpoint(ctx, ws.id, true));
      t.cliUnchanged.push(await timeCliCheckpoint(ctx, ws.id, false));
    }
    log(`  checkpoint (CLI): --version ${t.cliStart.map(fmtMs).join(', ')}; changed ${t.cliChanged.map(fmtMs).join(', ')}`);
    return t;
  } finally {
    await unmountAll(ctx.awc);
  }
}

/** A native stat walk of the tree (readdir + lstat of every entry, warm: one untimed pass first), median. */
function statWalk(ctx: TreeCtx): number {
  treeStats(ctx.dir);
  const ms: number[] = [];
  for (let i = 0; i < ctx.plan.walkIters; i++) {
    const t0 = now();
    treeStats(ctx.dir);
    ms.push(now() - t0);
  }
  return median(ms);
}

const stats = (xs: number[]) =>
  `${fmtMs(median(xs))} median of ${xs.length} (min ${fmtMs(Math.min(...xs))}, max ${fmtMs(Math.max(...xs))})`;

/** The target text and verdict: ≤ limit ms and, on a tree other than (a), the same as (a)'s (≤ 1.5× + 5 ms). */
function sameTarget(limit: number, m: number, other: Figure | undefined): { target: string; met: boolean } {
  if (other === undefined) return { target: `≤ ${limit} ms`, met: m <= limit };
  return {
    target: `≤ ${limit} ms, the same as tree (a) at its size (≤ 1.5× + 5 ms of ${fmtMs(other.awc)})`,
    met: m <= limit && m <= other.awc * 1.5 + 5,
  };
}

/** The group's rows; `other(id)` is tree (a)'s row of that id when this is a larger tree. */
export async function figCheckpoint(
  ctx: TreeCtx,
  other: (id: FigureId) => Figure | undefined,
  log: (s: string) => void,
): Promise<Figure[]> {
  const t = await measure(ctx, log);
  const walk = statWalk(ctx);
  const inProcess = (id: FigureId, name: string, ms: number, text: string, target: { target: string; met: boolean | null }): Figure => ({
    id,
    tree: ctx.label,
    name,
    awc: ms,
    unit: 'ms',
    baseline: walk,
    baselines: { 'native stat walk': walk },
    ratio: ms / walk,
    awcText: text,
    baselineText: `native stat walk of the tree ${fmtMs(walk)} (${ctx.stats.files + ctx.stats.dirs + ctx.stats.symlinks} entries, warm)`,
    ratioText: `${fmtRatio(ms / walk)} stat walk`,
    ...target,
    // one note for the three rows (the report prints a note once per tree)
    notes:
      id === 'checkpoint-first'
        ? [
            `In-process Awc.checkpoint() of a mounted workspace (overlay driver); the change: ${t.file} rewritten (a few bytes) before each changed checkpoint; changed and unchanged checkpoints alternate. Baseline: readdir + lstat of every entry of the native tree, warm, median of ${ctx.plan.walkIters}.`,
          ]
        : [],
  });
  const cliStart = median(t.cliStart);
  const cli = (id: FigureId, name: string, xs: number[]): Figure => ({
    id,
    tree: ctx.label,
    name,
    awc: median(xs),
    unit: 'ms',
    baseline: cliStart,
    baselines: { 'awc --version': cliStart },
    ratio: median(xs) / cliStart,
    awcText: stats(xs),
    baselineText: `the CLI's own start (\`awc --version\`) ${stats(t.cliStart)}`,
    ratioText: `${fmtRatio(median(xs) / cliStart)} CLI start`,
    target: '— (user experience; includes a Node.js process start)',
    met: null,
    notes: [`\`node dist/src/cli/entry/main.js --json checkpoint <ws>\`, one process each, in rounds of --version, changed, unchanged.`],
  });
  return [
    inProcess('checkpoint-first', 'first checkpoint after the mount (one file changed; caches may be cold)', t.first, fmtMs(t.first), {
      target: '— (reported; once per mount)',
      met: null,
    }),
    inProcess(
      'checkpoint',
      'checkpoint after changing one file',
      median(t.changed),
      stats(t.changed),
      sameTarget(100, median(t.changed), other('checkpoint')),
    ),
    inProcess(
      'checkpoint-unchanged',
      'checkpoint with nothing changed',
      median(t.unchanged),
      stats(t.unchanged),
      sameTarget(50, median(t.unchanged), other('checkpoint-unchanged')),
    ),
    cli('cli-checkpoint', 'checkpoint after changing one file, through the CLI (`awc checkpoint`)', t.cliChanged),
    cli('cli-checkpoint-unchanged', 'checkpoint with nothing changed, through the CLI', t.cliUnchanged),
  ];
}
