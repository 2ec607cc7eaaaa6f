#!/usr/bin/env node
/**
 * Issue 27, "Incremental prepare": `awc prepare --update` after 100 changed files in a
 * 100 000-file tree against the first `awc prepare` of it (target ≤ 5 % of its wall time),
 * side by side in one run, with a full re-import of the same changed tree (what `--update`
 * cost before the stat cache) as a second baseline.
 *
 *   node dist/bench/prepare-update.js [--files N] [--changed N] [--cache-dir DIR] [--no-write]
 *
 * The tree is generated (a checkout with a lockfile: 20 % sources, 80 % under node_modules,
 * 100 files per directory, 200 B – 4 KiB each; seeded, so every run makes the same one) under
 * the cache directory (default /var/tmp/awc-bench/prepare-tree) and removed at the end. Every
 * step is the real CLI in its own process, on a fresh home with the copy driver (no daemon):
 * (1) `awc prepare <tree>` 2.5 s after the tree was written (its files older than the racy
 * margin, as a checkout's are), then 2.5 s more; (2) `awc prepare --update` with nothing changed; (3) 100 files
 * changed (appended to), `awc prepare --update` (the figure); (4) `awc snapshot import` of the
 * same tree (a full read). Writes bench/PREPARE-UPDATE.md (unless --no-write).
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { CLI, PROJECT } from './common.js';
import { fmtMs, now } from './util.js';

interface Args {
  files: number;
  changed: number;
  cacheDir: string;
  write: boolean;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { files: 100_000, changed: 100, cacheDir: '/var/tmp/awc-bench', write: true };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--files') a.files = Number(argv[++i]);
    else if (k === '--changed') a.changed = Number(argv[++i]);
    else if (k === '--cache-dir') a.cacheDir = argv[++i]!;
    else if (k === '--no-write') a.write = false;
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

/** A seeded PRNG (mulberry32). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The generated checkout: returns the paths of its files (relative). */
function makeTree(dir: string, files: number): string[] {
  const next = rng(27);
  const paths: string[] = [];
  writeFileSync(join(dir, 'package.json'), '{"name":"bench","version":"1.0.0"}\n');
  writeFileSync(join(dir, 'package-lock.json'), '{"name":"bench","lockfileVersion":3,"packages":{}}\n');
  for (let i = 0; i < files; i++) {
    const top = i % 5 === 0 ? 'src' : 'node_modules';
    const rel = `${top}/p${Math.floor(i / 100)}/f${i}.js`;
    if (i % 100 === 0 || i % 100 === 1) mkdirSync(join(dir, `${top}/p${Math.floor(i / 100)}`), { recursive: true });
    const size = 200 + Math.floor(next() * 3900);
    const line = `export const v${i} = ${Math.floor(next() * 1e9)}; // generated\n`;
    writeFileSync(join(dir, rel), line.repeat(Math.ceil(size / line.length)).slice(0, size));
    paths.push(rel);
  }
  return paths;
}

/**
 * Runs the CLI on `home`; its wall time (ms), its CPU time (user + system, ms, through
 * /usr/bin/time: on a shared machine the wall time mostly says how loaded it was) and JSON
 * answer. @throws on a failure
 */
function awc(home: string, args: string[]): { ms: number; cpuMs: number; json: any } {
  const t0 = now();
  const r = spawnSync('/usr/bin/time', ['-f', 'awc-cpu %U %S', process.execPath, CLI, '--home', home, '--json', ...args], {
    encoding: 'utf8',
    maxBuffer: 256 << 20,
    env: { ...process.env, AWC_MOUNT_DRIVER: 'copy' },
  });
  const ms = now() - t0;
  if (r.status !== 0) throw new Error(`awc ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  const cpu = /awc-cpu ([\d.]+) ([\d.]+)/.exec(r.stderr);
  const cpuMs = cpu ? (Number(cpu[1]) + Number(cpu[2])) * 1000 : NaN;
  return { ms, cpuMs, json: JSON.parse(r.stdout) };
}

/** "wall (CPU)" of a step. */
function both(r: { ms: number; cpuMs: number }): string {
  return `${fmtMs(r.ms)} (${fmtMs(r.cpuMs)})`;
}

/** "wall % (CPU %)" of a step against the first prepare. */
function pct(r: { ms: number; cpuMs: number }, first: { ms: number; cpuMs: number }): string {
  return `${((100 * r.ms) / first.ms).toFixed(1)} % (${((100 * r.cpuMs) / first.cpuMs).toFixed(1)} %)`;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const base = join(args.cacheDir, 'prepare-tree');
  rmSync(base, { recursive: true, force: true });
  const tree = join(base, 'tree');
  const home = join(base, 'home');
  mkdirSync(tree, { recursive: true });
  try {
    console.log(`generating ${args.files} files in ${tree}…`);
    const paths = makeTree(tree, args.files);
    // a checkout is older than the racy margin when it is prepared (else its first stat cache trusts nothing)
    await new Promise((r) => setTimeout(r, 2500));
    const first = awc(home, ['prepare', tree]);
    console.log(`first prepare: ${both(first)}`);
    await new Promise((r) => setTimeout(r, 2500));
    const unchanged = awc(home, ['prepare', '--update', tree]);
    console.log(`prepare --update, nothing changed: ${both(unchanged)} (${JSON.stringify(unchanged.json.statCache)})`);
    const next = rng(2027);
    const changed = new Set<string>();
    while (changed.size < args.changed) changed.add(paths[Math.floor(next() * paths.length)]!);
    for (const p of changed) appendFileSync(join(tree, p), `// changed\n`);
    const update = awc(home, ['prepare', '--update', tree]);
    console.log(`prepare --update after ${args.changed} changed files: ${both(update)} (${JSON.stringify(update.json.statCache)})`);
    const full = awc(home, ['snapshot', 'import', tree]);
    console.log(`full re-import (snapshot import): ${both(full)}`);
    if (full.json.root !== update.json.root)
      throw new Error(`the incremental root ${update.json.root} is not the full one ${full.json.root}`);
    const ratio = update.ms / first.ms;
    const md = [
      '## `awc prepare --update` after 100 changed files (issue 27, "Incremental prepare")',
      '',
      `Generated checkout of ${args.files} files (${Math.round(args.files * 0.8)} under node_modules, 200 B – 4 KiB each), fresh home, copy driver, the CLI in its own process for each step. Machine: ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)} at the end (the CPU is shared with other work: absolute times vary; the CPU time, user + system of the CLI process, says what the step cost). Target: ≤ 5 % of the first prepare.`,
      '',
      '| step | wall time (CPU time) | files read / taken from the stat cache | directory trees reused | ratio to the first prepare, wall (CPU) |',
      '|---|---|---|---|---|',
      `| first \`awc prepare\` | ${both(first)} | ${first.json.files} / 0 | 0 | 1 |`,
      `| \`awc prepare --update\`, nothing changed | ${both(unchanged)} | ${unchanged.json.statCache.read} / ${unchanged.json.statCache.reused} | ${unchanged.json.statCache.dirs ?? 0} | ${pct(unchanged, first)} |`,
      `| **\`awc prepare --update\` after ${args.changed} changed files** | **${both(update)}** | ${update.json.statCache.read} / ${update.json.statCache.reused} | ${update.json.statCache.dirs ?? 0} | **${pct(update, first)}** (${ratio <= 0.05 ? 'met' : 'NOT MET'}) |`,
      `| full re-import of the same tree (\`awc snapshot import\`, what \`--update\` read before) | ${both(full)} | ${full.json.files} / 0 | 0 | ${pct(full, first)} |`,
      '',
      "The incremental root equals the full re-import's (checked). Run it: `npm run bench:prepare` (`node dist/bench/prepare-update.js [--files N] [--changed N] [--cache-dir DIR] [--no-write]`).",
      '',
    ].join('\n');
    console.log(`\n${md}`);
    if (args.write) writeFileSync(join(PROJECT, 'bench', 'PREPARE-UPDATE.md'), md);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

await main();
