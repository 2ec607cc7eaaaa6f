#!/usr/bin/env node
/**
 * CLI latency (issue 10 item 7): wall time of `node -e 0`, `awc --version`, `awc ls`, `awc fork`,
 * `awc mount` (a fresh workspace, the host daemon already running) and, to clean up,
 * `awc unmount --discard` and `awc rm`, each run N times interleaved in one run on one machine,
 * each both through the daemon's warm workers ("warm") and in its own process (`AWC_NO_WARM=1`,
 * "in process"): median, min and max of each, and each median's ratio to `node -e 0`'s against
 * the target (≤ 2× for ls, fork and mount, warm).
 *
 *   node dist/bench/cli-latency.js [--runs N] [--before <path of another build's main.js>] [--no-write]
 *
 * `--before`: the same commands through another build (e.g. a checkout of main before the
 * change) on the same home, interleaved, for a before/after table. Writes its section of
 * docs/benchmarks.md (kept in bench/CLI-LATENCY.md; `npm run bench` runs it too and keeps it).
 * Needs root and the overlay driver (mount).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { replaceDocSection } from './doc-section.js';

/** What a user runs: the package's `bin` (dist/cli/front.cjs; dist/src/cli/entry/main.js imports the same front). */
const CLI = fileURLToPath(
  new URL(
    (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin: { awc: string } }).bin.awc,
    new URL('../../', import.meta.url),
  ),
);
/** The file under bench/ that keeps the section (bench/run.ts appends it to docs/benchmarks.md). */
export const CLI_LATENCY_FILE = 'CLI-LATENCY.md';
const BEGIN = '<!-- cli-latency:begin (bench/cli-latency.ts writes this section; bench/CLI-LATENCY.md keeps it) -->';
const END = '<!-- cli-latency:end -->';
/** The commands issue 10 item 7 sets the target for: each ≤ TARGET × `node -e 0`. */
const TARGETED = new Set(['awc ls', 'awc fork', 'awc mount']);
const TARGET = 2;

/**
 * Runs `node args…` under bash's `time` and returns its wall time and CPU time (user + system)
 * in ms, as bash measures the child (bash's own start is not in them); throws when it fails.
 * CPU time is what a loaded, shared machine distorts least.
 */
function timed(args: string[], env: NodeJS.ProcessEnv): { wall: number; cpu: number } {
  const script = 'TIMEFORMAT="%3R %3U %3S"; { time "$@" >/dev/null 2>"$AWC_BENCH_ERR"; } 2>&1';
  const errFile = join(tmpdir(), `awc-bench-cli-${process.pid}.err`);
  const r = spawnSync('bash', ['-c', script, 'bash', process.execPath, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env, AWC_BENCH_ERR: errFile },
  });
  const [wall, user, sys] = r.stdout.trim().split(/\s+/).map(Number);
  if (r.status !== 0 || !(wall >= 0))
    throw new Error(`node ${args.join(' ')} exited ${r.status}: ${readFileSync(errFile, 'utf8')}${r.stderr}`);
  return { wall: wall * 1000, cpu: (user + sys) * 1000 };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** The section `## CLI latency` in a string (its markers added by the callers). */
export function cliLatencySection(text: string): string {
  return `${BEGIN}\n${text.trim()}\n${END}`;
}

/**
 * Measures the commands (`runs` interleaved rounds, ≥ 10 for the figure; `before`: another
 * build's main.js, measured in the same rounds) on a fresh SQLite home with a file: store, and
 * returns the markdown section. Wall times in ms. @throws when a command fails
 */
export async function runCliLatency(o: { runs: number; before?: string; log?: (s: string) => void }): Promise<string> {
  const { runs, before } = o;
  const dir = mkdtempSync('/tmp/awc-bench-cli-');
  const home = join(dir, 'home');
  const env = { AWC_HOME: home };
  // this build twice: through the daemon's warm workers (what a command gets when the daemon runs) and in its own process
  const builds: [string, string, NodeJS.ProcessEnv][] = [
    ['warm', CLI, {}],
    ['in process', CLI, { AWC_NO_WARM: '1' }],
    ...(before ? ([['before', before, {}]] as [string, string, NodeJS.ProcessEnv][]) : []),
  ];
  try {
    const src = join(dir, 'src');
    mkdirSync(src);
    for (let i = 0; i < 20; i++) writeFileSync(join(src, `f${i}.txt`), `file ${i}\n`);
    timed([CLI, 'snapshot', 'import', src, '--name', 'base'], env);
    timed([CLI, 'fork', 'base', '--count', '5', '--name', 'w'], env);
    timed([CLI, 'daemon', 'start'], env);
    const samples = new Map<string, number[]>();
    const cpu = new Map<string, number[]>();
    const add = (k: string, t: { wall: number; cpu: number }) => {
      samples.set(k, [...(samples.get(k) ?? []), t.wall]);
      cpu.set(k, [...(cpu.get(k) ?? []), t.cpu]);
    };
    let n = 0;
    for (let i = 0; i < runs; i++) {
      add('node -e 0', timed(['-e', '0'], env));
      for (const [b, cli, extra] of builds) {
        const e = { ...env, ...extra };
        add(`${b}|awc --version`, timed([cli, '--version'], e));
        add(`${b}|awc ls`, timed([cli, 'ls'], e));
        const ws = `m${n++}`;
        add(`${b}|awc fork`, timed([cli, 'fork', 'base', '--name', ws], e));
        add(`${b}|awc mount`, timed([cli, 'mount', ws, join(dir, 'mnt', ws)], e));
        add(`${b}|awc unmount`, timed([cli, 'unmount', ws, '--discard'], e));
        add(`${b}|awc rm`, timed([cli, 'rm', ws], e));
      }
      o.log?.(`  cli latency: round ${i + 1}/${runs}`);
    }
    const base = median(samples.get('node -e 0')!);
    const cpuBase = median(cpu.get('node -e 0')!);
    const cell = (xs: number[]) => {
      const m = median(xs);
      return `${m.toFixed(0)} ms (${(m / base).toFixed(2)}×; ${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;
    };
    const cpuCell = (xs: number[]) => `${median(xs).toFixed(0)} ms (${(median(xs) / cpuBase).toFixed(2)}×)`;
    const met = (c: string, xs: number[]) => (TARGETED.has(c) ? (median(xs) <= TARGET * base ? 'met' : 'NOT MET') : '—');
    const rows = ['awc --version', 'awc ls', 'awc fork', 'awc mount', 'awc unmount', 'awc rm'].map((c) => {
      const cells = builds.map(([b]) => samples.get(`${b}|${c}`)!);
      const cpus = builds.map(([b]) => cpu.get(`${b}|${c}`)!);
      return `| \`${c}\` | ${cells.map(cell).join(' | ')} | ${cpus.map(cpuCell).join(' | ')} | ${TARGETED.has(c) ? `≤ ${TARGET}×` : '—'} | ${met(c, cells[0])} |`;
    });
    const date = new Date().toISOString().slice(0, 10);
    return [
      '## CLI latency',
      '',
      `Generated by \`npm run bench:cli\` (bench/cli-latency.ts; \`npm run bench\` runs it too) on ${date}: wall time of each command as \`node <bin>\` (the package's \`bin\`, ${relative(process.cwd(), CLI) || CLI}), ` +
        `median of ${runs} interleaved rounds (min–max in brackets) and median CPU time (user + system), on a SQLite home with a file: store holding one snapshot and a few workspaces; ` +
        `\`fork\` makes one workspace, \`mount\` mounts it with the host daemon already running (overlay), \`unmount --discard\` and \`rm\` clean it up. ` +
        `"warm": the command as a user runs it while the daemon runs, through a warm worker (docs/explanation/cli-latency.md); "in process": the same build with \`AWC_NO_WARM=1\`, as without a daemon. ` +
        `CPU is the measured process's own (for "warm" that is the front alone: the worker's CPU is the daemon's, spent ahead). ` +
        `Ratio to \`node -e 0\` (${base.toFixed(0)} ms) in the same run; target ≤ ${TARGET}× for ls, fork and mount (issue 10 item 7). ` +
        `Load average (1/5/15 min) at the end: ${loadavg()
          .map((x) => x.toFixed(2))
          .join(' / ')} on a shared machine: read the ratios, not the milliseconds.`,
      '',
      `| command | ${builds.map(([b]) => `wall, ${b}`).join(' | ')} | ${builds.map(([b]) => `CPU, ${b}`).join(' | ')} | target (wall) | met? (warm) |`,
      `|---|${builds.map(() => '---:').join('|')}|${builds.map(() => '---:').join('|')}|---|---|`,
      `| \`node -e 0\` | ${builds.map(() => cell(samples.get('node -e 0')!)).join(' | ')} | ${builds.map(() => cpuCell(cpu.get('node -e 0')!)).join(' | ')} | | |`,
      ...rows,
    ].join('\n');
  } finally {
    spawnSync(process.execPath, [CLI, 'daemon', 'stop', '--force'], { env: { ...process.env, ...env } });
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const argv = process.argv.slice(2);
  const runs = argv.includes('--runs') ? Number(argv[argv.indexOf('--runs') + 1]) : 15;
  const before = argv.includes('--before') ? argv[argv.indexOf('--before') + 1] : undefined;
  const text = await runCliLatency({ runs, before, log: (s) => process.stderr.write(s + '\n') });
  process.stdout.write(text + '\n');
  if (!argv.includes('--no-write')) replaceDocSection(CLI_LATENCY_FILE, BEGIN, END, text);
}
