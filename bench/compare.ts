/**
 * Before/after comparison of two builds of AWC on this machine: runs the quick benchmark of each checkout
 * alternately (before, after, after, before, …) so drift of the machine falls on both sides, and compares
 * the medians of cold read, warm read, fork, fork + mount and the fanout backend reads.
 *
 *   node dist/bench/compare.js --before DIR [--after DIR] [--runs N] [--title TEXT] [--tree-a DIR]
 *
 * Each DIR is a built checkout (`npm ci && npm run build`). `--after` defaults to this checkout, `--runs` to 3
 * (per side); `--tree-a` gives both sides the same tree (a) (both need `run.js --tree-a`; without it each
 * measures a copy of its own checkout, and the backend reads then differ with the trees). The result is written to bench/COMPARISON.md, and docs/benchmarks.md gets it in place (a full
 * `npm run bench` keeps it: report.ts appends bench/COMPARISON.md). A figure passes when the after median is
 * within 10 % of the before median (times and throughput) or equal (backend reads).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { PROJECT } from './common.js';
import type { Figure, FigureId } from './common.js';
import type { BenchResult } from './report.js';
import { median } from './util.js';
import { replaceDocSection } from './doc-section.js';

/** The figures compared, with how a difference is judged. */
const COMPARED: { id: FigureId; what: string; judge: 'within10' | 'equal' }[] = [
  { id: 'read-cold', what: 'read of every file once, cold host cache', judge: 'within10' },
  { id: 'read-warm', what: 'read of every file, warm', judge: 'within10' },
  { id: 'fork', what: 'fork of one workspace', judge: 'within10' },
  { id: 'fork-mount', what: 'fork + mount, ready to read', judge: 'within10' },
  { id: 'fanout-backend', what: 'workspaces reading the same files: backend reads', judge: 'equal' },
];

const BEGIN = '<!-- comparison:begin (bench/compare.ts writes this section; bench/COMPARISON.md keeps it) -->';
const END = '<!-- comparison:end -->';

interface Side {
  dir: string;
  commit: string;
  runs: Record<string, number[]>;
  units: Record<string, string>;
}

function parseArgs(argv: string[]): { before: string; after: string; runs: number; title: string; tree: string } {
  const a = { before: '', after: PROJECT, runs: 3, title: 'before and after a change', tree: '' };
  const flags = ['--before', '--after', '--runs', '--title', '--tree-a'];
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    const v = argv[i + 1];
    if (!flags.includes(k) || v === undefined)
      throw new Error(
        `usage: node dist/bench/compare.js --before DIR [--after DIR] [--runs N] [--title TEXT] [--tree-a DIR] (bad argument ${k})`,
      );
    if (k === '--before') a.before = resolve(v);
    else if (k === '--after') a.after = resolve(v);
    else if (k === '--runs') a.runs = Number(v);
    else if (k === '--tree-a') a.tree = resolve(v);
    else a.title = v;
  }
  if (!a.before) throw new Error('--before DIR is required');
  if (!Number.isInteger(a.runs) || a.runs < 1) throw new Error('--runs must be a positive integer');
  for (const d of [a.before, a.after])
    if (!existsSync(join(d, 'dist', 'bench', 'run.js'))) throw new Error(`${d} is not a built checkout (no dist/bench/run.js)`);
  return a;
}

function commitOf(dir: string): string {
  const r = spawnSync('git', ['-C', dir, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim().slice(0, 90) : '(not a git checkout)';
}

/** One quick run of a checkout's benchmark, restricted to the compared groups. */
function runOnce(side: Side, tree: string, log: (s: string) => void): void {
  const args = [join(side.dir, 'dist', 'bench', 'run.js'), '--quick', '--json', '--only', 'fork,mount,read-warm,read-cold,fanout'];
  if (tree) args.push('--tree-a', tree);
  log(`compare: ${side.dir}: node ${args.join(' ')}`);
  const r = spawnSync(process.execPath, args, {
    cwd: side.dir,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`benchmark in ${side.dir} failed with status ${r.status}`);
  const result = JSON.parse(r.stdout) as BenchResult;
  for (const c of COMPARED) {
    const f = result.figures.find((x: Figure) => x.id === c.id && x.tree === 'a');
    if (!f) throw new Error(`benchmark in ${side.dir} gave no figure ${c.id}`);
    (side.runs[c.id] ??= []).push(f.awc);
    side.units[c.id] = f.unit;
  }
}

function fmt(x: number): string {
  return Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2);
}

function render(title: string, before: Side, after: Side, runs: number): { text: string; pass: boolean } {
  const out: string[] = [];
  let pass = true;
  out.push(`## Comparison: ${title}`);
  out.push('');
  out.push(
    `\`node dist/bench/compare.js\` on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC: the quick benchmark of each build on one tree (a), ${runs} runs each, alternating (before, after, after, before, …). Pass: after median within 10 % of before (equal for backend reads).`,
  );
  out.push('');
  out.push(`- before: \`${before.commit}\``);
  out.push(`- after: \`${after.commit}\``);
  out.push('');
  out.push('| figure | unit | before: median (runs) | after: median (runs) | after / before | pass |');
  out.push('|---|---|---|---|---:|---|');
  for (const c of COMPARED) {
    const b = before.runs[c.id];
    const a = after.runs[c.id];
    const mb = median(b);
    const ma = median(a);
    const ratio = mb === 0 ? (ma === 0 ? 1 : Infinity) : ma / mb;
    const ok = c.judge === 'equal' ? ma === mb : Math.abs(ratio - 1) <= 0.1;
    pass &&= ok;
    out.push(
      `| ${c.what} | ${before.units[c.id]} | ${fmt(mb)} (${b.map(fmt).join(', ')}) | ${fmt(ma)} (${a.map(fmt).join(', ')}) | ${ratio.toFixed(3)} | ${ok ? 'yes' : '**no**'} |`,
    );
  }
  out.push('');
  return { text: out.join('\n'), pass };
}

function main(): number {
  const args = parseArgs(process.argv.slice(2));
  const log = (s: string) => process.stderr.write(s + '\n');
  const before: Side = { dir: args.before, commit: commitOf(args.before), runs: {}, units: {} };
  const after: Side = { dir: args.after, commit: commitOf(args.after), runs: {}, units: {} };
  for (let i = 0; i < args.runs; i++) for (const s of i % 2 === 0 ? [before, after] : [after, before]) runOnce(s, args.tree, log);
  const { text, pass } = render(args.title, before, after, args.runs);
  replaceDocSection('COMPARISON.md', BEGIN, END, text);
  process.stdout.write(text + '\n');
  log(`compare: wrote bench/COMPARISON.md and docs/benchmarks.md; ${pass ? 'every figure passes' : 'SOME FIGURE DOES NOT PASS'}`);
  return pass ? 0 : 1;
}

process.exit(main());
