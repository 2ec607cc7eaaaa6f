import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fmtRatio, type Figure, type TreeCtx } from './common.js';
import { dropCaches, fmtBytes, fmtMs, now, runTimed, setAside } from './util.js';

/**
 * The import figure (issue 26): `awc snapshot import` of the tree, in process (`Awc.importSnapshot`
 * into the tree's fresh home: the suite's own import of the tree, `ctx.importMs`, which bench/run.ts
 * starts right after `sync; echo 3 > /proc/sys/vm/drop_caches` when this figure is wanted), against
 * `cp -a` of the same tree into the scratch directory in the same run, also right after a drop of the
 * caches. Target: ≤ 1.0× cp -a. The `sync` after the copy (its data reaching the disk, which the
 * import's store pays for before it answers) is timed apart and reported as a second baseline.
 */
export async function figImport(ctx: TreeCtx, log: (s: string) => void): Promise<Figure> {
  if (!ctx.importCold) throw new Error('figImport: the tree was not imported after a drop of the caches (bench/run.ts)');
  const dest = join(ctx.scratch, 'import-cp');
  dropCaches();
  const cp = await runTimed('cp', ['-a', ctx.dir, dest]);
  const t0 = now();
  spawnSync('sync');
  const sync = now() - t0;
  setAside(dest, ctx.trash);
  log(`  import: awc ${fmtMs(ctx.importMs)}; cp -a ${fmtMs(cp.ms)} (+ sync ${fmtMs(sync)})`);
  const ratio = ctx.importMs / cp.ms;
  return {
    id: 'import',
    tree: ctx.label,
    name: 'snapshot import of the tree (`awc snapshot import`, in process)',
    awc: ctx.importMs,
    unit: 'ms',
    baseline: cp.ms,
    baselines: { 'cp -a': cp.ms, 'cp -a; sync': cp.ms + sync },
    ratio,
    awcText: `${fmtMs(ctx.importMs)} (${ctx.stats.files} files, ${fmtBytes(ctx.stats.bytes)}; stored ${fmtBytes(ctx.storedBytes)})`,
    baselineText: `cp -a ${fmtMs(cp.ms)} (then sync ${fmtMs(sync)})`,
    ratioText: `${fmtRatio(ratio)} cp -a; ${fmtRatio(ctx.importMs / (cp.ms + sync))} cp -a + sync`,
    target: '≤ 1.0× cp -a',
    met: ratio <= 1,
    notes: [
      'Each side starts after `sync; echo 3 > /proc/sys/vm/drop_caches` (the tree read from disk): the import into a fresh home (chunking, compression, packs in the directory object store, catalog), then `cp -a` of the tree into the scratch directory; the copy is set aside, not deleted, during the run.',
    ],
  };
}
