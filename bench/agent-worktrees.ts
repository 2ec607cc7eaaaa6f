#!/usr/bin/env node
/**
 * Issue 27's figures: agent worktrees of a large project through Claude Code's hooks, against
 * what users do without AWC, in one run on one fixture.
 *
 *   node dist/bench/agent-worktrees.js [--cache-dir DIR] [--iters N] [--no-write]
 *
 * Fixture: tree (b) of the suite (real npm packages with package.json and lockfile committed;
 * bench/big-tree.ts builds it once under the cache dir, default /var/tmp/awc-bench), cloned
 * into a project with its node_modules copied in and 400 generated source files committed.
 * Then, in this order:
 *
 * 1. `awc init claude <project>`: the first prepare (timed).
 * 2. 20 commits changing 200 tracked files in all: HEAD is now ahead of the prepared snapshot.
 * 3. WorktreeCreate through `awc hook claude` (the payload on stdin, as Claude Code sends it),
 *    `iters` times (median), each checked to be at the project's HEAD; against `git worktree
 *    add` + `npm ci --prefer-offline --ignore-scripts` (once: it takes minutes).
 * 4. The first `git status` in a new AWC worktree, against a warm `git status` in the project.
 * 5. Host bytes per extra worktree: the allocated bytes AWC's home and the project's `.git`
 *    grew by for one more worktree, against the baseline worktree's own bytes.
 * 6. Five WorktreeCreate at once (wall time until all five printed their path), against one;
 *    the home keeps five warm CLI workers (`warmWorkers: 5`, as the how-to says for sessions
 *    started together).
 * 7. `awc init claude --update` after 100 changed files, against the first prepare.
 *
 * Every AWC worktree is removed through WorktreeRemove at the end. Needs root, /dev/fuse.
 * Writes bench/AGENT-WORKTREES.md and its section of docs/benchmarks.md (unless --no-write).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { ensureBigTree } from './big-tree.js';
import { CLI } from './common.js';
import { emitDocSection } from './doc-section.js';
import { duBytes, fmtBytes, fmtMs, lazyUnmountUnder, median, now, treeStats } from './util.js';

const BEGIN = '<!-- agent-worktrees:begin (bench/agent-worktrees.ts writes this section; bench/AGENT-WORKTREES.md keeps it) -->';
const END = '<!-- agent-worktrees:end -->';
const GIT_ID = ['-c', 'user.name=awc-bench', '-c', 'user.email=bench@awc.invalid'];
/** The home's `warmWorkers`: as many as hooks start at once in step 6. */
const WARM_WORKERS = 5;

/** Runs a command with `input` on stdin; resolves with its wall time (ms) and stdout; rejects on a non-zero exit. */
function run(
  cmd: string,
  args: string[],
  opts: { input?: string; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ ms: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    const t0 = now();
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => {
      const ms = now() - t0;
      if (code === 0) resolve({ ms, stdout });
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${stderr.slice(-2000)}`));
    });
    child.stdin.end(opts.input ?? '');
  });
}

const git = (dir: string, ...a: string[]): string => execFileSync('git', ['-C', dir, ...GIT_ID, ...a], { encoding: 'utf8' });

/** Rewrites `count` of the generated sources (from `first`), `perCommit` to a commit. */
function changeSources(proj: string, first: number, count: number, perCommit: number, tag: string): void {
  for (let i = 0; i < count; i++) {
    writeFileSync(join(proj, 'src', `mod-${first + i}.js`), `export const v${first + i} = ${JSON.stringify(tag)};\n`.repeat(40));
    if ((i + 1) % perCommit === 0) {
      git(proj, 'add', 'src');
      git(proj, 'commit', '-q', '-m', `${tag} ${i + 1}`);
    }
  }
}

/** The project: tree (b)'s repository cloned, its node_modules copied in, 400 sources committed. */
function makeProject(big: string, proj: string): void {
  execFileSync('git', ['clone', '-q', big, proj]);
  execFileSync('cp', ['-a', join(big, 'node_modules'), join(proj, 'node_modules')]);
  writeFileSync(join(proj, '.gitignore'), 'node_modules/\n.claude/\n.wt/\n');
  mkdirSync(join(proj, 'src'));
  changeSources(proj, 0, 400, 400, 'initial');
  git(proj, 'add', '.gitignore');
  git(proj, 'commit', '-q', '-m', 'ignore worktrees');
}

interface Hook {
  create(name: string): Promise<{ ms: number; path: string }>;
  remove(path: string): Promise<number>;
}

function hook(home: string, proj: string, work: string): Hook {
  const args = [CLI, '--home', home, 'hook', 'claude'];
  // as Claude Code runs a hook: in the project, with CLAUDE_PROJECT_DIR naming it
  const env = { ...process.env, CLAUDE_PROJECT_DIR: proj };
  return {
    async create(name) {
      const input = JSON.stringify({
        session_id: `s-${name}`,
        transcript_path: join(work, `${name}.jsonl`),
        cwd: proj,
        hook_event_name: 'WorktreeCreate',
        name,
      });
      const r = await run(process.execPath, args, { input, cwd: proj, env });
      return { ms: r.ms, path: r.stdout.trim() };
    },
    async remove(path) {
      const input = JSON.stringify({
        session_id: 's',
        transcript_path: join(work, 'rm.jsonl'),
        cwd: proj,
        hook_event_name: 'WorktreeRemove',
        worktree_path: path,
      });
      return (await run(process.execPath, args, { input, cwd: proj, env })).ms;
    },
  };
}

interface Figures {
  files: number;
  bytes: number;
  prepareMs: number;
  createMs: number[];
  atHead: boolean;
  baseCreateMs: number;
  statusMs: number;
  warmStatusMs: number;
  bytesPerWorktree: number;
  baseBytes: number;
  fiveMs: number;
  updateMs: number;
}

/** Steps 3–5: single creates (checked at HEAD), the first status, the bytes of one more. */
async function singles(
  h: Hook,
  home: string,
  proj: string,
  iters: number,
  paths: string[],
): Promise<Pick<Figures, 'createMs' | 'atHead' | 'statusMs' | 'warmStatusMs' | 'bytesPerWorktree'>> {
  const head = git(proj, 'rev-parse', 'HEAD').trim();
  const createMs: number[] = [];
  let atHead = true;
  let statusMs = 0;
  let bytesPerWorktree = 0;
  for (let i = 0; i < iters; i++) {
    const before = duBytes(join(home, 'host')) + duBytes(join(proj, '.git'));
    const c = await h.create(`one-${i}`);
    createMs.push(c.ms);
    paths.push(c.path);
    atHead &&= git(c.path, 'rev-parse', 'HEAD').trim() === head;
    if (i === 0) statusMs = (await run('git', ['-C', c.path, 'status', '--porcelain'])).ms;
    bytesPerWorktree = duBytes(join(home, 'host')) + duBytes(join(proj, '.git')) - before;
  }
  await run('git', ['-C', proj, 'status', '--porcelain']);
  const warmStatusMs = (await run('git', ['-C', proj, 'status', '--porcelain'])).ms;
  return { createMs, atHead, statusMs, warmStatusMs, bytesPerWorktree };
}

/** The baseline worktree: `git worktree add` + `npm ci --offline`; its time and bytes. */
async function baseline(proj: string): Promise<{ baseCreateMs: number; baseBytes: number }> {
  const wt = join(proj, '.wt', 'base');
  const t0 = now();
  await run('git', ['-C', proj, 'worktree', 'add', '-q', '-b', 'bench-base', wt]);
  // --prefer-offline: from npm's cache, as --offline, but a tarball the cache lost is fetched instead of failing the run
  await run('npm', ['ci', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: wt });
  const baseCreateMs = now() - t0;
  const baseBytes = duBytes(wt);
  await run('git', ['-C', proj, 'worktree', 'remove', '--force', wt]);
  return { baseCreateMs, baseBytes };
}

async function measure(h: Hook, home: string, proj: string, iters: number): Promise<Figures> {
  const stats = treeStats(proj);
  const prepareMs = (await run(process.execPath, [CLI, '--home', home, 'init', 'claude', proj])).ms;
  changeSources(proj, 0, 200, 10, 'ahead');
  const paths: string[] = [];
  const one = await singles(h, home, proj, iters, paths);
  const base = await baseline(proj);
  const t0 = now();
  const five = await Promise.all([0, 1, 2, 3, 4].map((i) => h.create(`five-${i}`)));
  const fiveMs = now() - t0;
  paths.push(...five.map((f) => f.path));
  for (const p of paths) await h.remove(p);
  changeSources(proj, 200, 100, 100, 'update');
  const updateMs = (await run(process.execPath, [CLI, '--home', home, 'init', 'claude', proj, '--update'])).ms;
  return { files: stats.files, bytes: stats.bytes, prepareMs, ...one, ...base, fiveMs, updateMs };
}

function render(f: Figures, iters: number): string {
  const one = median(f.createMs);
  const r = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  return [
    '## Agent worktrees at HEAD (issue 27): `awc hook claude` against `git worktree add` + `npm ci`',
    '',
    `Fixture: tree (b) as a project (real npm packages installed, 400 sources), ${f.files} files, ${fmtBytes(f.bytes)}; ` +
      `HEAD 20 commits and 200 changed files ahead of the prepared snapshot. Machine: ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)} at the end.`,
    '',
    '| figure | AWC | baseline (same run) | ratio | target |',
    '|---|---|---|---|---|',
    `| WorktreeCreate (median of ${iters}) | ${fmtMs(one)} | \`git worktree add\` + \`npm ci --offline\` ${fmtMs(f.baseCreateMs)} | ${r(one, f.baseCreateMs)} | ≤ 0.1× and ≤ 1 s |`,
    `| five WorktreeCreate at once (\`warmWorkers: ${WARM_WORKERS}\`) | ${fmtMs(f.fiveMs)} | one: ${fmtMs(one)} | ${r(f.fiveMs, one)} | ≤ 2× one |`,
    `| first \`git status\` in the new worktree | ${fmtMs(f.statusMs)} | warm status in the project ${fmtMs(f.warmStatusMs)} | ${r(f.statusMs, f.warmStatusMs)} | ≤ 1.5× |`,
    `| \`awc init claude --update\` after 100 changed files | ${fmtMs(f.updateMs)} | the first prepare ${fmtMs(f.prepareMs)} | ${r(f.updateMs, f.prepareMs)} | ≤ 5 % |`,
    `| host bytes per extra worktree | ${fmtBytes(f.bytesPerWorktree)} | one worktree + \`npm ci\`: ${fmtBytes(f.baseBytes)} | ${((100 * f.bytesPerWorktree) / f.baseBytes).toFixed(2)} % | ≤ 2 % |`,
    '',
    `Each worktree was at the project's HEAD: ${f.atHead ? 'yes' : '**no**'}. Each create (ms): ${f.createMs.map((x) => x.toFixed(0)).join(', ')}. ` +
      'Times include one Node start per hook (the CLI process as Claude Code runs it).',
    '',
    'Run it: `npm run bench:agents` (`node dist/bench/agent-worktrees.js [--cache-dir DIR] [--iters N] [--no-write]`, root, /dev/fuse).',
  ].join('\n');
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const opt = (name: string, dflt: string) => (args.includes(name) ? args[args.indexOf(name) + 1]! : dflt);
  const iters = Number(opt('--iters', '5'));
  const big = await ensureBigTree({ cacheDir: opt('--cache-dir', '/var/tmp/awc-bench'), minBytes: 1.4e9, log: (s) => console.error(s) });
  const work = realpathSync(mkdtempSync('/var/tmp/awc-bench-agents-'));
  const home = join(work, 'home');
  const proj = join(work, 'proj');
  try {
    makeProject(big.dir, proj);
    // five sessions started together: the host keeps five CLI workers loaded (docs/how-to/claude-code.md)
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ warmWorkers: WARM_WORKERS }));
    const f = await measure(hook(home, proj, work), home, proj, iters);
    emitDocSection(render(f, iters), !args.includes('--no-write'), 'AGENT-WORKTREES.md', BEGIN, END);
  } finally {
    spawnSync(process.execPath, [CLI, '--home', home, 'daemon', 'stop', '--force'], { encoding: 'utf8' });
    lazyUnmountUnder(work);
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
