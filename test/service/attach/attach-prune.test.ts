/**
 * `awc prune` of attached worktrees a tool removed behind AWC's back
 * (src/service/attach/attach-prune.ts; docs/how-to/cursor.md "When Cursor removes the
 * worktree"): real git worktrees removed with `git worktree remove --force` while attached
 * (git deletes through the bind mounts, then fails on the mount point), real bind mounts, the
 * real overlay driver through the host daemon; the daemon's periodic sweep
 * (`pruneIntervalMs`) doing the same with no prune call. One home.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Awc } from '../../../src/service/workspace/awc.js';
import { openAwc } from '../../../src/cli/remote/open-awc.js';
import { awc, awcOk, cleanupMounts, CLI } from '../../helpers/cli.js';
import { readMountInfo } from '../../../src/host/mount/mount-table.js';

const git = (cwd: string, ...args: string[]): { code: number; stderr: string } => {
  const r = spawnSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', ...args], { cwd, encoding: 'utf8' });
  return { code: r.status ?? -1, stderr: r.stderr };
};

describe('awc prune: attached worktrees removed behind AWC', () => {
  let work: string;
  let home: string;
  let repo: string;
  let svc: Awc;
  const worktree = (name: string): string => {
    const wt = join(work, name);
    assert.equal(git(repo, 'worktree', 'add', '-q', '-b', name, wt).code, 0);
    return wt;
  };
  /** Mount points at or below `dir`. */
  const mountsUnder = (dir: string): string[] =>
    readMountInfo()
      .map((m) => m.mountPoint)
      .filter((p) => p === dir || p.startsWith(`${dir}/`));
  const attachWorkspaces = async () => (await svc.listWorkspaces()).filter((w) => w.labels['awc.attach.dir'] !== undefined);
  /** Removes the worktree as Cursor does (git worktree remove --force): git fails at the bind mount, the directory stays. */
  const removeByGit = (wt: string): void => {
    const r = git(repo, 'worktree', 'remove', '--force', wt);
    assert.notEqual(r.code, 0, 'git cannot delete the mount point');
    assert.match(r.stderr, /busy/i);
    assert.equal(existsSync(join(wt, '.git')), false, "git deleted the worktree's .git");
    assert.equal(existsSync(join(wt, 'node_modules')), true, 'the bind mount keeps its mount point');
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-attach-prune-'));
    home = join(work, 'home');
    svc = await openAwc({ home });
    repo = join(work, 'repo');
    mkdirSync(join(repo, 'node_modules', 'dep'), { recursive: true });
    writeFileSync(join(repo, 'package.json'), '{"name":"app","version":"1.0.0","dependencies":{"dep":"1.0.0"}}\n');
    writeFileSync(
      join(repo, 'package-lock.json'),
      '{"name":"app","lockfileVersion":3,"packages":{"node_modules/dep":{"version":"1.0.0"}}}\n',
    );
    writeFileSync(join(repo, '.gitignore'), 'node_modules/\n');
    writeFileSync(join(repo, 'index.js'), "console.log(require('dep'));\n");
    writeFileSync(join(repo, 'node_modules', 'dep', 'index.js'), "module.exports = 'dep says hi';\n");
    execFileSync('git', ['init', '-q', '-b', 'main'], { cwd: repo });
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', 'app');
    awcOk(home, ['prepare', repo, '--name', 'app-env']);
  });
  after(async () => {
    await svc.close();
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('a worktree removed by git while attached: prune releases the workspace and its mounts; a live one is untouched; --dry-run changes nothing', async () => {
    const dead = worktree('dead');
    const live = worktree('live');
    const a = awcOk(home, ['attach', dead]);
    awcOk(home, ['attach', live]);
    assert.equal((await attachWorkspaces()).length, 2);
    removeByGit(dead);
    assert.equal(existsSync(join(repo, '.git', 'worktrees', 'dead')), false, 'git dropped its registration');

    const dry = awcOk(home, ['prune', '--dry-run']);
    assert.deepEqual(
      dry.attached.orphaned.map((e: any) => [e.dir, e.reason, e.status, e.work.work]),
      [[dead, 'not-a-worktree', 'would-release', false]],
    );
    assert.equal(dry.attached.kept, 1);
    assert.equal(mountsUnder(dead).length, 1, 'dry run changed nothing');

    const r = awcOk(home, ['prune']);
    const [e] = r.attached.orphaned;
    assert.deepEqual([e.dir, e.workspace, e.status, e.checkpoint, e.left], [dead, a.workspace, 'released', undefined, true]);
    assert.deepEqual(e.unmounted, [join(dead, 'node_modules')]);
    assert.match(e.work.why, /deletions only|no changes/);
    assert.deepEqual(mountsUnder(dead), []);
    assert.deepEqual(mountsUnder(a.mountPath), []);
    assert.equal(existsSync(join(dead, 'node_modules')), false, 'the mount point attach made is removed');
    const ls = awcOk(home, ['ls']);
    assert.equal(
      ls.workspaces.some((w: any) => w.id === a.workspace),
      false,
      'awc ls no longer lists it',
    );
    assert.equal(existsSync(join(repo, 'node_modules', 'dep', 'index.js')), true, 'the prepared source is untouched');
    // the live one: still attached, its dependencies still there; a second prune finds nothing
    assert.equal(mountsUnder(live).length, 1);
    assert.equal(existsSync(join(live, 'node_modules', 'dep', 'index.js')), true);
    const again = awcOk(home, ['prune']);
    assert.deepEqual(again.attached.orphaned, []);
    assert.equal(again.attached.kept, 1);
    awcOk(home, ['detach', live]);
    rmSync(dead, { recursive: true, force: true });
  });

  it("work in the workspace's upper is checkpointed before the release, and reported", async () => {
    const wt = worktree('with-work');
    const a = awcOk(home, ['attach', wt]);
    // a file outside the dependency directory the worktree sees: git's removal cannot reach it
    writeFileSync(join(a.mountPath, 'built.txt'), 'made by a build');
    removeByGit(wt);
    const r = awcOk(home, ['prune']);
    const [e] = r.attached.orphaned;
    assert.equal(e.status, 'released');
    assert.equal(e.work.work, true);
    assert.ok(e.checkpoint, 'a checkpoint keeps the work');
    const [snap] = await svc.listSnapshots({ labels: { 'awc.attach.checkpoint-of': wt } });
    assert.equal(snap?.id, e.checkpoint);
    const out = join(work, 'out-work');
    awcOk(home, ['export', e.checkpoint, '--dir', out]);
    assert.equal(existsSync(join(out, 'built.txt')), true);
    assert.match(awc(home, ['prune'], {}, { json: false }).stdout, /0 orphaned attached/);
    assert.deepEqual(mountsUnder(wt), []);
    rmSync(wt, { recursive: true, force: true });
  });

  it('a busy one is skipped with its holders named; two prunes at once release it once', async () => {
    const wt = worktree('busy');
    awcOk(home, ['attach', wt]);
    removeByGit(wt);
    const shell = spawn('sleep', ['60'], { cwd: join(wt, 'node_modules'), stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const r = awc(home, ['prune']);
      assert.equal(r.code, 0, r.stderr);
      const [e] = r.json.attached.orphaned;
      assert.equal(e.status, 'busy');
      assert.ok(
        e.holders.some((h: any) => h.pid === shell.pid && h.command === 'sleep'),
        JSON.stringify(e.holders),
      );
      assert.equal(mountsUnder(wt).length, 1, 'left mounted');
      const human = awc(home, ['prune'], {}, { json: false });
      assert.match(human.stdout, new RegExp(`in use by pid ${shell.pid} \\(sleep`));
    } finally {
      shell.kill();
      await new Promise((r) => shell.once('exit', r));
    }
    const both = await Promise.all([0, 1].map(() => runPrune()));
    const statuses = both.flatMap((r) => r.attached.orphaned.map((e: any) => e.status)).sort();
    assert.ok(statuses.filter((s: string) => s === 'released').length === 1, statuses.join(','));
    assert.ok(
      statuses.every((s: string) => ['released', 'in-progress', 'gone'].includes(s)),
      statuses.join(','),
    );
    assert.deepEqual(mountsUnder(wt), []);
    assert.equal(readdirSync(join(home, 'host', 'attach')).filter((n) => n.endsWith('.prune')).length, 0, 'no lock left');
    rmSync(wt, { recursive: true, force: true });
  });

  it("the host daemon's sweep (pruneIntervalMs) releases one with no prune call", async () => {
    const cfg = join(home, 'config.json');
    const old = existsSync(cfg) ? JSON.parse(readFileSync(cfg, 'utf8')) : {};
    writeFileSync(cfg, JSON.stringify({ ...old, pruneIntervalMs: 1000 }));
    awcOk(home, ['daemon', 'stop']);
    const wt = worktree('swept');
    const a = awcOk(home, ['attach', wt]);
    writeFileSync(join(a.mountPath, 'notes.txt'), 'work');
    removeByGit(wt);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && mountsUnder(wt).length > 0) await new Promise((r) => setTimeout(r, 250));
    assert.deepEqual(mountsUnder(wt), [], 'the sweep detached the bind mount');
    while (Date.now() < deadline && (await attachWorkspaces()).some((w) => w.id === a.workspace))
      await new Promise((r) => setTimeout(r, 250));
    assert.deepEqual(
      (await attachWorkspaces()).map((w) => w.id),
      [],
      'the sweep removed the workspace',
    );
    assert.deepEqual(mountsUnder(a.mountPath), []);
    const [snap] = await svc.listSnapshots({ labels: { 'awc.attach.checkpoint-of': wt } });
    assert.ok(snap, 'its work is checkpointed');
    assert.deepEqual(awcOk(home, ['prune']).attached.orphaned, []);
    writeFileSync(cfg, JSON.stringify(old));
    rmSync(wt, { recursive: true, force: true });
  });

  /** `awc prune --json` in a child process (resolves with its result). */
  const runPrune = (): Promise<any> =>
    new Promise((resolveRun, reject) => {
      const c = spawn(process.execPath, [CLI, '--home', home, '--json', 'prune'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      c.stdout.on('data', (b: Buffer) => (out += b));
      c.stderr.on('data', (b: Buffer) => (err += b));
      c.on('close', (code) => (code === 0 ? resolveRun(JSON.parse(out)) : reject(new Error(`prune: ${code}: ${err}`))));
    });
});
