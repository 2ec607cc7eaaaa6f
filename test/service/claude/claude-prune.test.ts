/**
 * `awc prune` of Claude Code hook worktrees removed behind AWC's back
 * (src/service/claude/claude-prune.ts; docs/reference/claude-code.md#awc-prune): the built
 * CLI, the recorded WorktreeCreate payload fed to `awc hook claude` as Claude Code does, a
 * real git project, the host's real mount driver (overlay through the host daemon as root).
 * A mount detached behind AWC's back, a worktree directory deleted, a linked worktree's
 * registration gone (`.git` a `gitdir:` file, the layout of a registered worktree), a busy
 * one, a live one.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, realpathSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isMounted } from '../../../src/host/mount/mount-table.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { awc, awcOk, CLI, cleanupMounts, PROJECT } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

const FIXTURES = join(PROJECT, 'test', 'fixtures', 'claude-hooks');

describe('awc prune: Claude Code hook worktrees removed behind AWC', () => {
  let work: string;
  let home: string;
  let project: string;
  let svc: Awc | undefined;
  const service = async (): Promise<Awc> => (svc ??= await Awc.open({ home }, { create: false }));
  const git = (dir: string, ...args: string[]): string =>
    execFileSync('git', ['-c', `safe.directory=*`, '-C', dir, ...args], { encoding: 'utf8' }).trim();
  /** Creates a hook worktree `name` as Claude Code does; its path. */
  const create = (name: string): string => {
    const transcript = join(work, `${name}.jsonl`);
    writeFileSync(transcript, '{}\n');
    const text = readFileSync(join(FIXTURES, 'create-2.1.50.json'), 'utf8')
      .replaceAll('@PROJECT@', project)
      .replaceAll('@TRANSCRIPT@', transcript);
    const r = spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
      input: JSON.stringify({ ...JSON.parse(text), name }),
      cwd: project,
      encoding: 'utf8',
      env: { ...process.env, CLAUDE_PROJECT_DIR: project },
      timeout: 60_000,
    });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trimEnd();
  };
  const byName = async (name: string) => (await (await service()).listWorkspaces({ labels: { 'awc.claude.name': name } }))[0];
  /** Makes the workspace at `path` a linked worktree of the project named `reg` (its `.git` a `gitdir:` file), registered or not. */
  const linkTo = (path: string, reg: string, registered: boolean): void => {
    // git names a registration after the last part of the path it was added at
    const gitdir = join(project, '.git', 'worktrees', `reg-${reg}`);
    if (registered) {
      git(project, 'worktree', 'add', '-q', '--no-checkout', join(work, `reg-${reg}`), '-b', `br-${reg}`);
      writeFileSync(join(gitdir, 'gitdir'), `${join(path, '.git')}\n`);
    }
    rmSync(join(path, '.git'), { recursive: true, force: true });
    writeFileSync(join(path, '.git'), `gitdir: ${gitdir}\n`);
  };

  before(async () => {
    work = realpathSync(await makeTempDir('awc-claude-prune-'));
    home = join(work, 'home');
    project = join(work, 'proj');
    mkdirSync(join(project, 'src'), { recursive: true });
    mkdirSync(join(project, 'node_modules', 'dep'), { recursive: true });
    writeFileSync(join(project, 'src', 'index.js'), 'export const x = 1;\n');
    writeFileSync(join(project, '.gitignore'), 'node_modules/\n.claude/worktrees/\n');
    writeFileSync(join(project, 'node_modules', 'dep', 'index.js'), 'module.exports = 42;\n');
    execFileSync('git', ['init', '-q', '-b', 'main', project]);
    git(project, 'add', '.');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'init');
    awcOk(home, ['init', 'claude', project]);
  });
  after(async () => {
    await svc?.close();
    cleanupMounts(home, work);
    await removeTempDir(work);
  });

  it('a mount detached behind AWC, a deleted directory, a lost registration: released (work checkpointed); a live registered one untouched', async () => {
    const detached = create('c-detached');
    const deleted = create('c-deleted');
    const unreg = create('c-unreg');
    const live = create('c-live');
    writeFileSync(join(unreg, 'wip.txt'), 'uncommitted');
    linkTo(unreg, 'c-unreg-gone', false);
    linkTo(live, 'c-live', true);
    execFileSync('umount', ['-l', detached]);
    execFileSync('umount', ['-l', deleted]);
    rmdirSync(deleted);

    const dry = awcOk(home, ['prune', '--dry-run']);
    assert.deepEqual(dry.pruned.map((e: any) => [e.name, e.reason]).sort(), [
      ['c-deleted', 'directory-gone'],
      ['c-detached', 'not-mounted'],
      ['c-unreg', 'unregistered'],
    ]);
    assert.ok(isMounted(unreg), 'dry run changed nothing');

    const r = awcOk(home, ['prune']);
    assert.deepEqual(r.pruned.map((e: any) => [e.name, e.reason, e.error, e.busy]).sort(), [
      ['c-deleted', 'directory-gone', undefined, undefined],
      ['c-detached', 'not-mounted', undefined, undefined],
      ['c-unreg', 'unregistered', undefined, undefined],
    ]);
    const u = r.pruned.find((e: any) => e.name === 'c-unreg');
    assert.equal(u.released.checkpointed, true, 'its uncommitted file is kept');
    const out = join(work, 'out-unreg');
    await (await service()).export(u.released.snapshot, { dir: out });
    assert.equal(readFileSync(join(out, 'wip.txt'), 'utf8'), 'uncommitted');
    for (const p of [detached, deleted, unreg]) {
      assert.equal(isMounted(p), false, p);
      assert.equal(existsSync(p), false, p);
    }
    for (const n of ['c-detached', 'c-deleted', 'c-unreg']) assert.equal(await byName(n), undefined, n);
    assert.ok(isMounted(live), 'the live, registered worktree stays mounted');
    assert.ok(await byName('c-live'));
    assert.equal(r.kept, 1);
    assert.deepEqual(awcOk(home, ['prune']).pruned, [], 'a second prune finds nothing');
  });

  it('a busy one is left alone with its holders named; released once they are gone', async () => {
    const p = create('c-busy');
    linkTo(p, 'c-busy-gone', false);
    const shell = spawn('sleep', ['60'], { cwd: p, stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const r = awc(home, ['prune']);
      assert.equal(r.code, 0, r.stderr);
      const [e] = r.json.pruned;
      assert.equal(e.name, 'c-busy');
      assert.ok(
        e.busy.some((h: any) => h.pid === shell.pid && h.command === 'sleep'),
        JSON.stringify(e.busy),
      );
      assert.equal(e.released, undefined);
      assert.ok(isMounted(p), 'left mounted');
      assert.match(awc(home, ['prune'], {}, { json: false }).stdout, new RegExp(`in use by pid ${shell.pid} \\(sleep`));
    } finally {
      shell.kill();
      await new Promise((r) => shell.once('exit', r));
    }
    const r = awcOk(home, ['prune']);
    assert.deepEqual(
      r.pruned.map((e: any) => [e.name, e.reason, e.error]),
      [['c-busy', 'unregistered', undefined]],
    );
    assert.equal(isMounted(p), false);
  });
});
