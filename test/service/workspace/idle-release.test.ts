/**
 * Idle release (src/service/workspace/idle.ts, idle-release.ts; docs/explanation/lifecycle.md#idle-release):
 * the pure decision and TTL, then through the CLI with the real overlay driver and host daemon:
 * an idle workspace with changes is checkpointed, unmounted, shown released and resumed with the
 * same content; one a process holds (cwd, open file; a process about to open a file) is never
 * released; the `awc.idle-ttl` label shortens and extends the TTL; the retention removes a
 * released workspace; the daemon's periodic sweep releases one with no command (one home); a
 * Claude Code hook worktree is git-worktree-locked while released and unlocked when mounted again.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { idleDecision, idleTtlOf } from '../../../src/service/workspace/idle.js';
import { awc, awcOk, cleanupMounts, CLI, PROJECT } from '../../helpers/cli.js';
import { mountPoints } from '../../../src/host/mount/mount-table.js';

const holder = { pid: 1, command: 'sh', via: 'cwd' };

describe('idle decision (pure)', () => {
  it('idle only beyond the TTL, never while held or with TTL 0', () => {
    const base = { lastActivityMs: 1_000, ttlMs: 500, holders: [] };
    assert.deepEqual(idleDecision({ ...base, nowMs: 1_500 }), { idle: true, idleForMs: 500 });
    assert.deepEqual(idleDecision({ ...base, nowMs: 1_499 }), { idle: false, reason: 'recent', idleForMs: 499 });
    const held = idleDecision({ ...base, holders: [holder], nowMs: 99_000 });
    assert.equal(held.idle, false);
    assert.equal(!held.idle && held.reason, 'held');
    assert.deepEqual(idleDecision({ ...base, ttlMs: 0, nowMs: 99_000 }), { idle: false, reason: 'never', idleForMs: 98_000 });
    // a clock that went backwards: active now
    assert.deepEqual(idleDecision({ ...base, nowMs: 10 }), { idle: false, reason: 'recent', idleForMs: 0 });
  });

  it('the awc.idle-ttl label overrides the default; never is 0; a bad one is ignored', () => {
    assert.equal(idleTtlOf({ labels: {} }, 86_400_000), 86_400_000);
    assert.equal(idleTtlOf({ labels: { 'awc.idle-ttl': '6h' } }, 86_400_000), 6 * 3_600_000);
    assert.equal(idleTtlOf({ labels: { 'awc.idle-ttl': 'never' } }, 1000), 0);
    assert.equal(idleTtlOf({ labels: { 'awc.idle-ttl': 'soon' } }, 1000), 1000);
  });
});

describe('idle release through the CLI (overlay)', () => {
  let work: string;
  let home: string;
  const children: ChildProcess[] = [];
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const mounted = (dir: string) => mountPoints().has(dir);
  /** A workspace forked from `base`, mounted at a new directory; `labels` at fork. */
  const mountNew = (name: string, labels: string[] = []): { id: string; dir: string } => {
    const id = awcOk(home, ['fork', 'base', '--name', name, ...labels.flatMap((l) => ['--label', l])]).workspaces[0].id;
    const dir = join(work, name);
    awcOk(home, ['mount', id, dir]);
    return { id, dir };
  };
  /** `awc release --idle` with the idle TTL and retention given (ms); its entry for `id`. */
  const sweep = (id: string, env: Record<string, string>) => {
    const r = awcOk(home, ['release', '--idle'], env);
    return r.entries.find((e: { workspace: string }) => e.workspace === id);
  };
  const tiny = { AWC_IDLE_RELEASE_MS: '300' };

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'awc-idle-'));
    home = join(work, 'home');
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
  });
  after(() => {
    for (const c of children) c.kill('SIGKILL');
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('an idle workspace with changes is checkpointed, unmounted, shown released, and resumed with the same content', async () => {
    const { id, dir } = mountNew('idle-1');
    writeFileSync(join(dir, 'b.txt'), 'work\n');
    await sleep(400);
    const e = sweep(id, tiny);
    assert.equal(e.status, 'released', JSON.stringify(e));
    assert.equal(e.released.checkpointed, true);
    assert.equal(e.released.pending, false);
    assert.equal(mounted(dir), false, 'unmounted');
    assert.equal(existsSync(join(home, 'workspaces', id)), false, 'host state dropped');
    const ls = awc(home, ['ls'], {}, { json: false }).stdout;
    assert.match(
      ls.split('\n').find((l) => l.startsWith(id))!,
      /released/,
    );
    const show = awcOk(home, ['show', id]);
    assert.equal(show.released.includes(`awc mount ${id} ${dir}`), true, show.released);
    assert.equal(show.labels['awc.released-snapshot'], e.released.snapshot);
    awcOk(home, ['mount', id, dir]);
    assert.equal(readFileSync(join(dir, 'b.txt'), 'utf8'), 'work\n');
    assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'alpha\n');
    const again = awcOk(home, ['show', id]);
    assert.equal(again.released, undefined);
    assert.equal(again.labels['awc.released-at'], undefined, 'mounting clears the release');
  });

  it('a workspace a process holds (cwd, open file, or about to open a file) is never released', async () => {
    const { id, dir } = mountNew('held-1');
    writeFileSync(join(dir, 'later.txt'), 'read later\n');
    // cwd inside, opens a file only once the sweeps ran (when `go` exists)
    const go = join(work, 'go');
    const reader = spawn('sh', ['-c', `while [ ! -e '${go}' ]; do sleep 0.1; done; cat later.txt`], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(reader);
    let out = '';
    reader.stdout.on('data', (b: Buffer) => (out += b));
    const done = new Promise<number | null>((r) => reader.on('close', r));
    const other = mountNew('held-2');
    // an open file (fd 3), cwd outside
    const opener = spawn('sh', ['-c', `exec 3<'${join(other.dir, 'a.txt')}'; exec sleep 60`], { cwd: work, stdio: 'ignore' });
    children.push(opener);
    await sleep(500);
    for (const w of [id, other.id]) {
      const e = sweep(w, tiny);
      assert.equal(e.status, 'kept', JSON.stringify(e));
      assert.equal(e.verdict.reason, 'held');
      assert.ok(
        e.verdict.holders.some((h: { via: string }) => h.via === (w === id ? 'cwd' : 'fd 3')),
        JSON.stringify(e.verdict.holders),
      );
    }
    writeFileSync(go, '');
    assert.equal(await done, 0);
    assert.equal(out, 'read later\n', 'the file it was about to open was there');
    assert.equal(mounted(dir), true);
    assert.equal(mounted(other.dir), true);
    opener.kill('SIGKILL');
    await new Promise((r) => opener.on('close', r));
  });

  it('the awc.idle-ttl label shortens and extends the TTL', async () => {
    const short = mountNew('ttl-short', ['awc.idle-ttl=300ms']);
    const long = mountNew('ttl-long', ['awc.idle-ttl=1h']);
    await sleep(400);
    // default TTL (24 h) for the first; the configured tiny one for the second
    assert.equal(sweep(short.id, {}).status, 'released');
    const e = sweep(long.id, tiny);
    assert.equal(e.status, 'kept');
    assert.equal(e.verdict.reason, 'recent');
    assert.equal(mounted(long.dir), true);
  });

  it('a released workspace beyond the retention is removed', async () => {
    const { id } = mountNew('retired');
    await sleep(400);
    assert.equal(sweep(id, tiny).status, 'released');
    // within the retention (default 7 days): kept
    assert.equal(sweep(id, tiny), undefined);
    await sleep(50);
    assert.equal(sweep(id, { ...tiny, AWC_RELEASED_RETENTION_MS: '10' }).status, 'removed');
    assert.equal(awc(home, ['show', id]).code !== 0, true, 'the workspace row is gone');
  });

  it("the host daemon's idle sweep (idleSweepIntervalMs) releases one with no command", async () => {
    const cfg = join(home, 'config.json');
    const old = existsSync(cfg) ? JSON.parse(readFileSync(cfg, 'utf8')) : {};
    writeFileSync(cfg, JSON.stringify({ ...old, idleSweepIntervalMs: 1000 }));
    awcOk(home, ['daemon', 'stop']);
    // the mount starts it again, with the new config
    const { id, dir } = mountNew('by-daemon', ['awc.idle-ttl=4s']);
    assert.equal(mounted(dir), true);
    // the release unmounts, then records itself in the labels: wait for both
    const released = () => !mounted(dir) && awcOk(home, ['show', id]).labels['awc.released-at'] !== undefined;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && !released()) await sleep(250);
    assert.equal(mounted(dir), false, 'the daemon released it');
    assert.ok(awcOk(home, ['show', id]).labels['awc.released-at']);
    writeFileSync(cfg, JSON.stringify(old));
  });
});

describe('idle release of a Claude Code hook worktree', () => {
  let work: string;
  let home: string;
  let project: string;
  const git = (dir: string, ...args: string[]): string =>
    execFileSync('git', ['-c', 'safe.directory=*', '-C', dir, ...args], { encoding: 'utf8' }).trim();

  before(() => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'awc-idle-claude-')));
    home = join(work, 'home');
    project = join(work, 'proj');
    mkdirSync(join(project, 'src'), { recursive: true });
    writeFileSync(join(project, 'src', 'index.js'), 'export const x = 1;\n');
    writeFileSync(join(project, '.gitignore'), '.claude/worktrees/\n');
    execFileSync('git', ['init', '-q', '-b', 'main', project]);
    git(project, 'add', '.');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'init');
    awcOk(home, ['init', 'claude', project]);
  });
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('is locked (git worktree lock) while released, so git worktree prune keeps it; mounting it again unlocks it', () => {
    const transcript = join(work, 't.jsonl');
    writeFileSync(transcript, '{}\n');
    const text = readFileSync(join(PROJECT, 'test', 'fixtures', 'claude-hooks', 'create-2.1.50.json'), 'utf8')
      .replaceAll('@PROJECT@', project)
      .replaceAll('@TRANSCRIPT@', transcript);
    const r = spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
      input: JSON.stringify({ ...JSON.parse(text), name: 'idle' }),
      cwd: project,
      encoding: 'utf8',
      env: { ...process.env, CLAUDE_PROJECT_DIR: project },
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const path = r.stdout.trimEnd();
    const admin = join(project, '.git', 'worktrees', 'idle');
    assert.equal(readFileSync(join(path, '.git'), 'utf8'), `gitdir: ${admin}\n`);
    writeFileSync(join(path, 'wip.txt'), 'uncommitted\n');
    const ws = awcOk(home, ['ls', '--label', 'awc.claude.name=idle']).workspaces[0].id;
    const rel = awcOk(home, ['release', ws]);
    assert.equal(rel.locked, true);
    assert.equal(rel.checkpointed, true);
    assert.equal(mountPoints().has(path), false);
    assert.equal(readFileSync(join(admin, 'locked'), 'utf8').trim(), 'released by awc');
    git(project, 'worktree', 'prune');
    assert.equal(existsSync(admin), true, 'git worktree prune kept the locked registration');
    awcOk(home, ['mount', ws, path]);
    assert.equal(existsSync(join(admin, 'locked')), false, 'unlocked');
    // linked to the project's registration again (the release checkpoint keeps the .git file out)
    assert.equal(readFileSync(join(path, '.git'), 'utf8'), `gitdir: ${admin}\n`);
    assert.equal(readFileSync(join(admin, 'gitdir'), 'utf8'), `${join(path, '.git')}\n`);
    assert.ok(git(project, 'worktree', 'list', '--porcelain').includes(`worktree ${path}\n`));
    assert.equal(readFileSync(join(path, 'wip.txt'), 'utf8'), 'uncommitted\n');
    assert.equal(git(path, 'status', '--porcelain'), '?? wip.txt');
  });
});
