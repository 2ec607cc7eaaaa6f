import type { Figure, TreeLabel } from './common.js';
import { fmtBytes, fmtMs, type MachineInfo } from './util.js';
import { catalogLoadSection } from './catalog-load.js';
import { exportWindowSection } from './export-window.js';
import { cliLatencySection } from './cli-latency.js';
import { buildReuseSection } from './build-reuse.js';

/** What one run produced (also the `--json` output). */
export interface BenchResult {
  quick: boolean;
  machine: MachineInfo;
  trees: {
    label: TreeLabel;
    title: string;
    dir: string;
    files: number;
    bytes: number;
    dirs: number;
    symlinks: number;
    snapshotId: string;
    importMs: number;
    storedBytes: number;
  }[];
  figures: Figure[];
  durationMs: number;
  /** Load averages when the run ended. */
  loadAvgEnd: number[];
  plan: Record<string, unknown>;
}

/** What the trees are and how a fresh machine makes them (under the Trees table of docs/benchmarks.md). */
/** How the host group (bench/fig-host.ts) measures, for "How each figure is measured". */
export const HOST_GROUP_TEXT = [
  'The host group (bench/fig-host.ts). **Host disk**: a fresh home with the embedded defaults (SQLite catalog, directory object store;',
  'no layer images, which `layerImages: auto` builds only with PostgreSQL) imports the tree, forks one workspace, mounts it (overlay),',
  'reads every file once after a drop of the page cache and rewrites 5 files; once the chunk cache has written what it holds and after a',
  '`sync`, `du -sx --block-size=1` of each part of the home: the object store (`objects/`), the chunk cache (`host/cache`), the layers and',
  "images (`host/layers`), the upper and the rest of the workspace's state (`host/workspaces/<id>`), the catalog (`catalog.sqlite` and",
  'its WAL), and every other entry of `host/` and of the home by name; against the stored bytes (the object store) + the upper. Of',
  'these, the chunk cache holds a second copy of content the local store holds (its chunks decompressed, one file per chunk); the layers',
  'hold one placeholder per file (overlay xattrs, no data) and, in a git checkout, a `.git/index` of their own. **Reads while the host is',
  "busy**: a reader in its own process (bench/host-reader.ts, so its latencies leave out the bench process's and the daemon's event",
  'loops) reads small files (1–16 KiB, outside .git, a fixed shuffle) of a mounted workspace A one at a time, a few ms apart, and times',
  'each read (open, read to EOF, close). Every read is cold: each phase starts with a freshly started daemon whose chunk cache is empty,',
  'a new workspace A that has never read the files, and `sync; echo 3 > /proc/sys/vm/drop_caches`; every phase reads the same files in',
  'the same order. Idle: the whole list with nothing else running. Busy, in the bench process (in-process Awc calls, as the rest of the',
  'suite): imports of the tree with one file left out (a new root each; its content is already stored, so each import reads and hashes',
  'every file and stores little), the first fork + mount of each of those snapshots (the daemon builds the layer), checkpoints of other',
  'workspaces of the tree that each rewrote up to 1000 files. A busy row counts the reads that start while the operation runs (the first',
  "n of the list) against the idle phase's first n reads; target p99 ≤ 2× (the max is reported too).",
].join(' ');

export const TREES_TEXT = [
  'Tree (a) is copied from this checkout at the start of each run. Tree (b) is built once under the bench cache directory',
  '(`--cache-dir`, default /var/tmp/awc-bench: `npm install --ignore-scripts` of the packages in bench/big-tree.ts, then a',
  'git repository with package.json and the lockfile) and reused. Tree (c), the large tree (issue 26, "fast at the users\'',
  'size"), runs only when asked (`--trees a,c` or `a,b,c`): a still copy (`cp -a`) of the machine\'s `/usr` (on the bench',
  'machine, Debian 12 with Node.js, Python and CUDA: about 117 000 files, 5.3 GiB on disk), or of `--large-source DIR`. A',
  'fresh machine makes it on first use, `<cache>/large-tree` with the marker `<cache>/large-tree.ready.json` beside it (a few',
  'minutes); later runs reuse it (remove both to make it again). The run refuses a source under 5 GiB on disk (`du`) or',
  '100 000 files unless `--quick`. It has no git repository and no npm lockfile, so the worktree baseline and the build and',
  'test figures are skipped on it (build and test run on tree (a) only).',
].join(' ');

const metText = (m: boolean | null) => (m === null ? '—' : m ? 'met' : '**not met**');

/** A plain-text table for the terminal. */
export function renderTable(r: BenchResult): string {
  const rows = [
    ['figure', 'tree', 'AWC', 'baseline', 'ratio', 'target', 'met'],
    ...r.figures.map((f) => [
      f.id,
      f.tree,
      f.awcText,
      f.baselineText,
      f.ratioText,
      f.target,
      f.met === null ? '—' : f.met ? 'met' : 'NOT MET',
    ]),
  ];
  const widths = rows[0].map((_, i) => Math.min(i === 2 || i === 3 ? 60 : 48, Math.max(...rows.map((row) => row[i].length))));
  const cut = (s: string, w: number) => (s.length > w ? s.slice(0, w - 1) + '…' : s.padEnd(w));
  return rows
    .map((row, k) => row.map((c, i) => cut(c, widths[i])).join('  ') + (k === 0 ? '\n' + widths.map((w) => '-'.repeat(w)).join('  ') : ''))
    .join('\n');
}

function esc(s: string): string {
  return s.replace(/\|/g, '\\|');
}

/** docs/benchmarks.md: machine, trees, the table, what was missed, and the method. */
export function renderMarkdown(
  r: BenchResult,
  analysis: string | undefined,
  comparison?: string,
  catalogLoad?: string,
  exportWindow?: string,
  cliLatency?: string,
  buildReuse?: string,
): string {
  const m = r.machine;
  const out: string[] = [];
  out.push('# Benchmarks');
  out.push('');
  out.push(
    `Generated by \`npm run bench\` (bench/run.ts) on ${m.date.slice(0, 10)}, in one run of ${fmtMs(r.durationMs)} on one machine; every AWC figure sits next to its baseline from the same run. Do not edit the tables by hand: rerun the suite. The analysis at the end is written by hand (bench/ANALYSIS.md) for the run it names.`,
  );
  out.push('');
  out.push('```sh');
  out.push('npm run bench                          # every figure, both trees; rewrites this file');
  out.push('node dist/bench/run.js --quick         # small inputs only (tree (a), 10 workspaces), no network, < 2 min');
  out.push(
    'node dist/bench/run.js --only fanout   # one figure group (fork, mount, read-warm, read-cold, build, fanout, checkpoint, import, new-host, host); --json for machine output',
  );
  out.push(
    'node dist/bench/run.js --trees a,c    # trees (a, b, c; default a,b): (c) is the large tree, a copy of /usr (--large-source DIR)',
  );
  out.push('npm run bench:compare -- --before DIR   # quick runs of another built checkout and this one, alternating');
  out.push('```');
  out.push('');
  out.push('## Machine');
  out.push('');
  out.push('| | |');
  out.push('|---|---|');
  out.push(`| CPU | ${m.cpu}, ${m.cores} cores |`);
  out.push(`| RAM | ${fmtBytes(m.ramBytes)} |`);
  out.push(`| kernel | Linux ${m.kernel} |`);
  out.push(`| disk | ${m.diskFs} (bench data, native trees, AWC homes, object store: all on it) |`);
  out.push(`| Node.js | ${m.node} |`);
  out.push(`| date | ${m.date} |`);
  out.push(
    `| load average (1/5/15 min) | at start ${m.loadAvg.map((x) => x.toFixed(2)).join(' / ')}; at end ${r.loadAvgEnd.map((x) => x.toFixed(2)).join(' / ')} (other work on the machine during the run skews timings) |`,
  );
  out.push('');
  out.push('## Trees');
  out.push('');
  out.push('| tree | what | files | bytes | directories | symlinks | import (snapshot) | stored in the object store |');
  out.push('|---|---|---:|---:|---:|---:|---:|---:|');
  for (const t of r.trees)
    out.push(
      `| (${t.label}) | ${esc(t.title)} | ${t.files} | ${fmtBytes(t.bytes)} | ${t.dirs} | ${t.symlinks} | ${fmtMs(t.importMs)} | ${fmtBytes(t.storedBytes)} |`,
    );
  out.push('');
  out.push(TREES_TEXT);
  out.push('');
  out.push('## Results');
  out.push('');
  out.push('| figure | tree | AWC | baseline (same run) | AWC vs baseline | target | met? |');
  out.push('|---|---|---|---|---|---|---|');
  for (const f of r.figures)
    out.push(
      `| ${esc(f.name)} | (${f.tree}) | ${esc(f.awcText)} | ${esc(f.baselineText)} | ${esc(f.ratioText)} | ${esc(f.target)} | ${metText(f.met)} |`,
    );
  out.push('');
  const missed = r.figures.filter((f) => f.met === false);
  const unmeasured = r.figures.filter((f) => f.met === null && /NOT MEASURED/.test(f.notes.join(' ')));
  out.push('## Targets not met');
  out.push('');
  if (missed.length === 0 && unmeasured.length === 0) out.push('None: every target with a measurable figure was met in this run.');
  for (const f of missed)
    out.push(`- **${f.name}**, tree (${f.tree}): ${f.awcText} against ${f.baselineText} — ${f.ratioText}; target ${f.target}.`);
  for (const f of unmeasured)
    out.push(`- **${f.name}**, tree (${f.tree}): not measurable on this build — ${f.notes.find((n) => /NOT MEASURED/.test(n))}`);
  out.push('');
  out.push('## How each figure is measured');
  out.push('');
  const seen = new Set<string>();
  for (const f of r.figures) {
    const notes = f.notes.filter((n) => !seen.has(n));
    if (notes.length === 0) continue;
    out.push(`- **${f.name}** (${f.tree}): ${notes.join(' ')}`);
    for (const n of notes) if (!/\d/.test(n)) seen.add(n);
  }
  out.push('');
  out.push(
    'Baselines: `cp -a` copies the whole tree; `git worktree add --detach` + `npm ci --offline --ignore-scripts` checks the repository out again and installs its dependencies from the local npm cache (no network; install scripts skipped, so native addons are not rebuilt: a lower bound of a real install). Reads use one sequential reader with blocking 1 MiB reads (what cat, tar or grep -r do). "Cold" means a freshly started daemon with an empty chunk cache, a fresh mount, then `sync; echo 3 > /proc/sys/vm/drop_caches` right before reading; the native side drops the caches the same way. The checkpoint rows are set against a warm native stat walk of the tree (readdir + lstat of every entry: what a checkpoint that looks at every file costs at least), the CLI checkpoints against the start of the same CLI (`--version`), the import against `cp -a` of the tree (both after a drop of the caches).',
  );
  out.push('');
  out.push(HOST_GROUP_TEXT);
  if (analysis) {
    out.push('');
    out.push(analysis.trim());
  }
  if (comparison) {
    out.push('');
    out.push('<!-- comparison:begin (bench/compare.ts writes this section; bench/COMPARISON.md keeps it) -->');
    out.push(comparison.trim());
    out.push('<!-- comparison:end -->');
  }
  if (catalogLoad) {
    out.push('');
    out.push(catalogLoadSection(catalogLoad));
  }
  if (exportWindow) {
    out.push('');
    out.push(exportWindowSection(exportWindow));
  }
  if (cliLatency) {
    out.push('');
    out.push(cliLatencySection(cliLatency));
  }
  if (buildReuse) {
    out.push('');
    out.push(buildReuseSection(buildReuse));
  }
  out.push('');
  return out.join('\n');
}
