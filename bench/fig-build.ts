import { existsSync, rmSync } from 'node:fs';

const hasTime = existsSync('/usr/bin/time');
import { join } from 'node:path';
import { fmtRatio, unmountAll, type Figure, type TreeCtx } from './common.js';
import { cleanRound, fmtMs, median, runTimed } from './util.js';

/**
 * A real build and test inside a mounted workspace against the same on native disk: this
 * project's own `tsc -p .` (dist/ removed before every run, so each run writes every output:
 * into the upper in the workspace), then a subset of its node:test files. Runs alternate
 * between the workspace and the native tree; in the full run one warm-up build each comes
 * first (reported separately: the workspace's first build also fetches file contents lazily).
 */
export async function figBuild(ctx: TreeCtx, log: (s: string) => void): Promise<Figure[]> {
  const dir = join(ctx.scratch, 'build');
  const [ws] = await ctx.awc.fork(ctx.snapshotId);
  await ctx.awc.mount(ws.id, dir);
  const tsc = [join('node_modules', 'typescript', 'bin', 'tsc'), '-p', ctx.plan.buildProject];
  // wall time is the figure; CPU time (user + sys of the process tree, from /usr/bin/time) is kept
  // as a cross-check, since other work on a shared machine inflates wall time but hardly CPU time
  const cpu: Record<string, number[]> = { 'build awc': [], 'build native': [], 'test awc': [], 'test native': [] };
  const timed = async (what: string, cwd: string, args: string[]) => {
    const r = hasTime
      ? await runTimed('/usr/bin/time', ['-f', 'AWC_BENCH_CPU %U %S', process.execPath, ...args], { cwd })
      : await runTimed(process.execPath, args, { cwd });
    const m = /AWC_BENCH_CPU (\S+) (\S+)\s*$/.exec(r.stderr);
    if (m) cpu[`${what} ${cwd === dir ? 'awc' : 'native'}`].push((Number(m[1]) + Number(m[2])) * 1000);
    return r.ms;
  };
  const build = async (cwd: string) => {
    rmSync(join(cwd, 'dist'), { recursive: true, force: true });
    return timed('build', cwd, tsc);
  };
  const test = async (cwd: string) => timed('test', cwd, ['--test', '--test-concurrency=1', ...ctx.plan.testFiles]);
  try {
    const warm = ctx.plan.buildIters > 1;
    let firstAwc: number | undefined;
    let firstNative: number | undefined;
    if (warm) {
      firstAwc = await build(dir);
      firstNative = await build(ctx.dir);
      log(`  first builds: workspace ${fmtMs(firstAwc)}, native ${fmtMs(firstNative)}`);
    }
    const a: number[] = [];
    const n: number[] = [];
    let discarded = 0;
    for (let i = 0; i < ctx.plan.buildIters; i++) {
      // a round during which anyone dropped the page cache is repeated (at most twice more)
      const r = await cleanRound(
        async () => (i % 2 === 0 ? [await build(dir), await build(ctx.dir)] : [await build(ctx.dir), await build(dir)].reverse()),
        { tries: ctx.plan.buildIters > 1 ? 3 : 1 },
      );
      a.push(r.value[0]);
      n.push(r.value[1]);
      discarded += r.discarded;
    }
    log(`  tsc -p ${ctx.plan.buildProject}: workspace ${a.map(fmtMs).join(', ')}; native ${n.map(fmtMs).join(', ')}`);
    const ta: number[] = [];
    const tn: number[] = [];
    for (let i = 0; i < ctx.plan.buildIters; i++) {
      const r = await cleanRound(async () => [await test(dir), await test(ctx.dir)], { tries: ctx.plan.buildIters > 1 ? 3 : 1 });
      ta.push(r.value[0]);
      tn.push(r.value[1]);
      discarded += r.discarded;
    }
    log(`  node --test (subset): workspace ${ta.map(fmtMs).join(', ')}; native ${tn.map(fmtMs).join(', ')}`);
    for (const k of Object.keys(cpu)) cpu[k] = cpu[k].slice(warm && k.startsWith('build') ? 1 : 0);
    const cpuNote = (what: string) =>
      cpu[`${what} awc`].length > 0 && cpu[`${what} native`].length > 0
        ? ` CPU time (user + sys, median): workspace ${fmtMs(median(cpu[`${what} awc`]))}, native ${fmtMs(median(cpu[`${what} native`]))} (${fmtRatio(median(cpu[`${what} awc`]) / median(cpu[`${what} native`]))}).`
        : '';
    const ma = median(a);
    const mn = median(n);
    const sa = median(ta);
    const sn = median(tn);
    return [
      {
        id: 'build',
        tree: ctx.label,
        name: `this project's own build (\`tsc -p ${ctx.plan.buildProject}\`) in a mounted workspace`,
        awc: ma,
        unit: 'ms',
        baseline: mn,
        baselines: { native: mn },
        ratio: ma / mn,
        awcText: `${fmtMs(ma)} median of ${a.length}${firstAwc === undefined ? '' : ` (first build ${fmtMs(firstAwc)})`}`,
        baselineText: `native ${fmtMs(mn)}${firstNative === undefined ? '' : ` (first ${fmtMs(firstNative)})`}`,
        ratioText: `${fmtRatio(ma / mn)} native time`,
        target: '≤ 1.10× native time',
        met: ma / mn <= 1.1,
        notes: [
          `dist/ removed before each run; runs alternate between the workspace and the native tree; a round during which something on the machine dropped the page cache is repeated (up to twice; ${discarded} build/test rounds repeated). Wall times: workspace ${a.map(fmtMs).join(', ')}; native ${n.map(fmtMs).join(', ')} (fastest: ${fmtRatio(Math.min(...a) / Math.min(...n))}).${cpuNote('build')}`,
        ],
      },
      {
        id: 'test',
        tree: ctx.label,
        name: `a subset of its tests (\`node --test ${ctx.plan.testFiles.map((f) => f.replace('dist/test/', '')).join(' ')}\`)`,
        awc: sa,
        unit: 'ms',
        baseline: sn,
        baselines: { native: sn },
        ratio: sa / sn,
        awcText: `${fmtMs(sa)} median of ${ta.length}`,
        baselineText: `native ${fmtMs(sn)}`,
        ratioText: `${fmtRatio(sa / sn)} native time`,
        target: '≤ 1.10× native time',
        met: sa / sn <= 1.1,
        notes: [
          `Runs the test files the build just compiled, inside the workspace and on the native tree. Wall times: workspace ${ta.map(fmtMs).join(', ')}; native ${tn.map(fmtMs).join(', ')} (fastest: ${fmtRatio(Math.min(...ta) / Math.min(...tn))}).${cpuNote('test')}`,
        ],
      },
    ];
  } finally {
    await unmountAll(ctx.awc);
  }
}
