#!/usr/bin/env node
/**
 * Claude Code's WorktreeCreate through AWC against what it replaces, in one run on one
 * fixture: a git repository of this checkout's tracked files with its node_modules.
 *
 *   node dist/bench/claude-hook.js [--iters N] [--no-write]
 *
 * AWC: `awc init claude` once (timed, reported: it is outside any hook), then `iters` times
 * `awc hook claude` fed a WorktreeCreate payload on stdin, timed as Claude Code sees it (the
 * CLI process's wall time until it exits, stdout the path), then WorktreeRemove (one edited
 * file; timed too). Baseline, same fixture: `git worktree add -b <branch> <path>` plus
 * `cp -a node_modules` into it (what users do in a WorktreeCreate hook today), then
 * `git worktree remove --force`. The CLI's own start (`awc --version`) is measured in the same
 * run so the reader sees how much of the hook is Node starting. Medians of `iters` (default 5),
 * the two sides interleaved. Needs root, /dev/fuse (the overlay driver). Writes
 * bench/CLAUDE-HOOK.md and its section of docs/benchmarks.md (unless --no-write).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, PROJECT } from './common.js';
import { emitDocSection } from './doc-section.js';
import { fmtBytes, fmtMs, lazyUnmountUnder, median, now, treeStats } from './util.js';

const BEGIN = '<!-- claude-hook:begin (bench/claude-hook.ts writes this section; bench/CLAUDE-HOOK.md keeps it) -->';
const END = '<!-- claude-hook:end -->';

/** Runs a command, returns its wall time in ms. @throws with its stderr when it fails */
function timed(
  cmd: string,
  args: string[],
  opts: { input?: string; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): { ms: number; stdout: string } {
  const t0 = now();
  const r = spawnSync(cmd, args, {
    encoding: 'utf8',
    input: opts.input,
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    maxBuffer: 64 << 20,
  });
  const ms = now() - t0;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { ms, stdout: r.stdout };
}

/** A git repository of this checkout's tracked files (one commit) with a copy of its node_modules. */
function makeFixture(dir: string): void {
  const files = execFileSync('git', ['-C', PROJECT, 'ls-files', '-z'], { encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const f of files) {
    if (!existsSync(join(PROJECT, f))) continue;
    mkdirSync(join(dir, f, '..'), { recursive: true });
    cpSync(join(PROJECT, f), join(dir, f));
  }
  execFileSync('cp', ['-a', join(PROJECT, 'node_modules'), join(dir, 'node_modules')]);
  writeFileSync(join(dir, '.gitignore'), 'node_modules/\n.claude/worktrees/\n.wt/\n');
  const git = (...a: string[]) => execFileSync('git', ['-C', dir, '-c', 'user.name=bench', '-c', 'user.email=bench@example.com', ...a]);
  git('init', '-q', '-b', 'main');
  git('add', '-A');
  git('commit', '-q', '-m', 'fixture');
}

function main(): void {
  const args = process.argv.slice(2);
  const iters = args.includes('--iters') ? Number(args[args.indexOf('--iters') + 1]) : 5;
  const write = !args.includes('--no-write');
  const work = realpathSync(mkdtempSync(join(tmpdir(), 'awc-bench-claude-')));
  const home = join(work, 'home');
  const proj = join(work, 'proj');
  try {
    mkdirSync(proj);
    makeFixture(proj);
    const stats = treeStats(proj);
    const awc = (...a: string[]) => [CLI, '--home', home, ...a];
    const init = timed(process.execPath, awc('--json', 'init', 'claude', proj));
    const cliStart: number[] = [];
    const create: number[] = [];
    const remove: number[] = [];
    const baseCreate: number[] = [];
    const baseRemove: number[] = [];
    for (let i = 0; i < iters; i++) {
      cliStart.push(timed(process.execPath, [CLI, '--version']).ms);
      const name = `bench-${i}`;
      const payload = JSON.stringify({
        session_id: `s-${i}`,
        transcript_path: join(work, `t-${i}.jsonl`),
        cwd: proj,
        hook_event_name: 'WorktreeCreate',
        name,
      });
      const c = timed(process.execPath, awc('hook', 'claude'), { input: payload, cwd: proj, env: { CLAUDE_PROJECT_DIR: proj } });
      create.push(c.ms);
      const path = c.stdout.trim();
      writeFileSync(join(path, 'src', 'bench-edit.ts'), `export const i = ${i};\n`);
      const rm = JSON.stringify({ session_id: `s-${i}`, cwd: proj, hook_event_name: 'WorktreeRemove', worktree_path: path });
      remove.push(timed(process.execPath, awc('hook', 'claude'), { input: rm, cwd: proj }).ms);

      const wt = join(proj, '.wt', name);
      const t0 = now();
      execFileSync('git', ['-C', proj, 'worktree', 'add', '-q', '-b', `wt-${name}`, wt]);
      execFileSync('cp', ['-a', join(proj, 'node_modules'), join(wt, 'node_modules')]);
      baseCreate.push(now() - t0);
      baseRemove.push(timed('git', ['-C', proj, 'worktree', 'remove', '--force', wt]).ms);
      execFileSync('git', ['-C', proj, 'branch', '-q', '-D', `wt-${name}`]);
    }
    const m = (xs: number[]) => fmtMs(median(xs));
    const text = [
      '## Claude Code worktree: `awc hook claude` against `git worktree add` + copying node_modules',
      '',
      `Fixture: this checkout's tracked files as a one-commit git repository plus its node_modules: ${stats.files} files, ${fmtBytes(stats.bytes)}. ` +
        `${iters} rounds, the two sides interleaved; medians. Machine: ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)} at the end (other work was running). ` +
        `\`awc init claude\` (the one import, outside any hook): ${fmtMs(init.ms)}.`,
      '',
      '| step | AWC (`awc hook claude`, the CLI process as Claude Code runs it) | `git worktree add` + `cp -a node_modules` |',
      '|---|---|---|',
      `| create | ${m(create)} (of which the CLI's start, \`awc --version\`: ${m(cliStart)}) | ${m(baseCreate)} |`,
      `| remove | ${m(remove)} (checkpoint of one edited file, unmount, rm) | ${m(baseRemove)} (\`git worktree remove --force\`) |`,
      '',
      `Each run (ms): create ${create.map((x) => x.toFixed(0)).join(', ')}; baseline ${baseCreate.map((x) => x.toFixed(0)).join(', ')}. ` +
        'An AWC worktree adds no bytes on disk until it is written to; each baseline worktree is a full copy of node_modules.',
      '',
      'Run it: `npm run bench:claude` (`node dist/bench/claude-hook.js [--iters N] [--no-write]`, root, /dev/fuse).',
    ].join('\n');
    emitDocSection(text, write, 'CLAUDE-HOOK.md', BEGIN, END);
  } finally {
    spawnSync(process.execPath, [CLI, '--home', home, 'daemon', 'stop', '--force'], { encoding: 'utf8' });
    lazyUnmountUnder(work);
    rmSync(work, { recursive: true, force: true });
  }
}

main();
