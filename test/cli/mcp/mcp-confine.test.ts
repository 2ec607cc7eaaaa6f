import { once } from 'node:events';
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMounted } from '../../../src/host/mount/mount-table.js';
import { awcOk, CLI, cleanupMounts } from '../../helpers/cli.js';
import { mcpSession, type McpSession } from '../../helpers/mcp-client.js';

/**
 * Issue 24 item 5: an `awc mcp` server is confined (docs/explanation/security.md "The MCP
 * server's root and scope"). Every path a tool is given is under the server's root (`--root`,
 * default the directory it started in), symbolic links and `..` included; a scope sees only the
 * snapshots it was started with (`--snapshot`, `--snapshot-label`) and its own workspaces'
 * checkpoints, and any other is E_NOT_FOUND, as a missing one. Through the SDK's client over
 * stdio against the built CLI, as root.
 */
describe('awc mcp: confined to its root and to its snapshots', () => {
  const work = realpathSync(mkdtempSync(join(tmpdir(), 'awc-mcp-confine-')));
  const home = join(work, 'home');
  const root = join(work, 'root');
  const outside = join(work, 'outside');
  const open: McpSession[] = [];
  const session = async (scope: string, args: string[], cwd?: string) => {
    const s = await mcpSession(home, scope, {}, undefined, { args, cwd });
    open.push(s);
    return s;
  };
  /** The JSON error `awc --json` printed last on stderr. */
  const lastError = (stderr: string): { code: string } => JSON.parse(stderr.trim().split('\n').pop()!);
  const workspaces = () =>
    awcOk(home, ['ls'])
      .workspaces.map((w: { name: string }) => w.name)
      .sort();

  before(() => {
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'base\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    writeFileSync(join(src, 'f.txt'), 'other\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'other']);
    writeFileSync(join(src, 'f.txt'), 'labelled\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'lab', '--label', 'team=x']);
    mkdirSync(root);
    mkdirSync(outside);
    writeFileSync(join(outside, 'keep.txt'), 'the host keeps this\n');
  });
  after(async () => {
    for (const s of open) await s.close().catch(() => undefined);
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('export and mountPath outside the root are refused (E_OUT_OF_SCOPE), also through "..", and nothing is written, forked or mounted', async () => {
    const s = await session('confine-a', ['--root', root, '--snapshot', 'base']);
    // the hole: overwrite replaced an arbitrary host directory
    const e = await s.fails('workspace_export', { ref: 'base', format: 'dir', path: outside, overwrite: true }, 'E_OUT_OF_SCOPE');
    assert.deepEqual(e.details, { path: outside, root, resolved: outside });
    assert.match(e.message, /outside this MCP server's root/);
    // the hint names the root, in the words of a tool (no CLI option: the agent cannot restart its server)
    assert.ok(e.hint.includes(root), e.hint);
    assert.doesNotMatch(e.hint, /(^|[\s`(])--[a-z]/);
    assert.deepEqual(readdirSync(outside), ['keep.txt']);
    await s.fails('workspace_export', { ref: 'base', format: 'tar', path: join(work, 'x.tar') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_export', { ref: 'base', format: 'tar', path: `${root}/../x.tar` }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_export', { ref: 'base', format: 'dir', path: `${root}/sub/../../outside`, overwrite: true }, 'E_OUT_OF_SCOPE');
    assert.equal(existsSync(join(work, 'x.tar')), false);
    assert.equal(readFileSync(join(outside, 'keep.txt'), 'utf8'), 'the host keeps this\n');
    // mountPath: refused before the fork
    await s.fails('workspace_fork', { snapshot: 'base', name: 'far', mountPath: join(outside, 'm') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_fork', { snapshot: 'base', name: 'far', count: 2, mountPath: '/' }, 'E_OUT_OF_SCOPE');
    assert.deepEqual(workspaces(), []);
    const w = (await s.ok('workspace_fork', { snapshot: 'base', name: 'near' })).workspaces[0];
    await s.fails('workspace_mount', { workspace: w.id, path: join(outside, 'm') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_mount', { workspace: w.id, path: '/etc' }, 'E_OUT_OF_SCOPE');
    assert.equal(existsSync(join(outside, 'm')), false);
    // under the root, all of it works
    const mnt = join(root, 'near');
    assert.equal((await s.ok('workspace_mount', { workspace: w.id, path: mnt })).mount.path, mnt);
    const tar = join(root, 'out', 'base.tar');
    mkdirSync(join(root, 'out'));
    assert.equal((await s.ok('workspace_export', { ref: 'base', format: 'tar', path: tar })).path, tar);
    await s.ok('workspace_remove', { workspace: w.id, force: true });
  });

  test('a symbolic link that leaves the root is refused; one that stays inside is followed', async () => {
    const s = await session('confine-b', ['--root', root, '--snapshot', 'base']);
    symlinkSync(outside, join(root, 'escape'));
    symlinkSync('/nowhere/at/all', join(root, 'dangling'));
    mkdirSync(join(root, 'real'));
    symlinkSync(join(root, 'real'), join(root, 'inside'));
    const e = await s.fails(
      'workspace_export',
      { ref: 'base', format: 'dir', path: join(root, 'escape'), overwrite: true },
      'E_OUT_OF_SCOPE',
    );
    assert.match(e.message, new RegExp(`resolves to ${outside}`));
    assert.equal(e.details.resolved, outside);
    await s.fails('workspace_export', { ref: 'base', format: 'tar', path: join(root, 'escape', 'a.tar') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_export', { ref: 'base', format: 'dir', path: join(root, 'escape', 'new') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_export', { ref: 'base', format: 'tar', path: join(root, 'dangling') }, 'E_OUT_OF_SCOPE');
    await s.fails('workspace_fork', { snapshot: 'base', name: 'via-link', mountPath: join(root, 'escape', 'm') }, 'E_OUT_OF_SCOPE');
    assert.deepEqual(readdirSync(outside), ['keep.txt']);
    assert.equal(existsSync('/nowhere'), false);
    assert.equal(
      workspaces().some((n: string) => n === 'via-link'),
      false,
    );
    // inside the root: the tool works on the resolved path
    const d = await s.ok('workspace_export', { ref: 'base', format: 'dir', path: join(root, 'inside', 'd') });
    assert.equal(d.path, join(root, 'real', 'd'));
    assert.equal(readFileSync(join(root, 'real', 'd', 'f.txt'), 'utf8'), 'base\n');
    // a git repository whose git directory is outside the root (a .git file naming it)
    const repo = join(root, 'repo');
    execFileSync('git', ['init', '-q', '--separate-git-dir', join(outside, 'sep.git'), repo]);
    const g = await s.fails('workspace_export', { ref: 'base', format: 'git', path: repo, branch: 'agent/x' }, 'E_OUT_OF_SCOPE');
    assert.match(g.message, /the git directory of path/);
    assert.deepEqual(readdirSync(join(outside, 'sep.git', 'refs', 'heads')), []);
  });

  test('a directory swapped for a symbolic link after the check is never written through: exports go through the descriptor the check opened', async () => {
    const s = await session('confine-swap', ['--root', root, '--snapshot', 'base']);
    const away = join(work, 'away');
    mkdirSync(away);
    mkdirSync(join(root, 'flip-dir'));
    symlinkSync(away, join(root, 'flip-link'));
    // another process flips root/flip between a directory and a symbolic link to `away`, as fast as it can
    const flipper = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('fs'); const [d, l, f] = process.argv.slice(1);
         for (;;) { for (const x of [d, l]) { try { fs.renameSync(x, f); fs.renameSync(f, x); } catch {} } }`,
        join(root, 'flip-dir'),
        join(root, 'flip-link'),
        join(root, 'flip'),
      ],
      { stdio: 'ignore' },
    );
    let written = 0;
    try {
      const until = Date.now() + 4000;
      for (let i = 0; Date.now() < until; i++) {
        const r = await s.client.callTool({
          name: 'workspace_export',
          arguments: { ref: 'base', format: 'tar', path: join(root, 'flip', `x${i}.tar`) },
        });
        if (!r.isError) written++;
      }
    } finally {
      // gone before anything is looked at: a kill is delivered later, and one more rename would move the directory under the checks below
      const exited = flipper.exitCode !== null || flipper.signalCode !== null ? Promise.resolve() : once(flipper, 'exit');
      flipper.kill('SIGKILL');
      await exited;
    }
    assert.deepEqual(readdirSync(away), [], 'nothing was written outside the root');
    assert.ok(written > 0, 'some exports landed in the directory (the test raced)');
    // the directory is named flip-dir or flip when the flipper was stopped
    const dir = ['flip-dir', 'flip'].map((n) => join(root, n)).find((d) => lstatSync(d, { throwIfNoEntry: false })?.isDirectory());
    assert.equal(readdirSync(dir!).filter((n) => n.endsWith('.tar')).length, written, 'every export that succeeded is in the directory');
  });

  test('the AWC home is never a target; the default root is the start directory, and a start in / without --root is refused', async () => {
    const wide = await session('confine-c', ['--root', work, '--snapshot', 'base']);
    const h = await wide.fails('workspace_export', { ref: 'base', format: 'dir', path: join(home, 'x') }, 'E_OUT_OF_SCOPE');
    assert.match(h.message, /AWC home/);
    await wide.fails('workspace_export', { ref: 'base', format: 'dir', path: work, overwrite: true }, 'E_OUT_OF_SCOPE');
    assert.equal(existsSync(join(home, 'x')), false);
    // no --root: the directory the client started it in
    const here = await session('confine-d', ['--snapshot', 'base'], root);
    await here.fails('workspace_export', { ref: 'base', format: 'tar', path: join(outside, 'd.tar') }, 'E_OUT_OF_SCOPE');
    await here.ok('workspace_export', { ref: 'base', format: 'tar', path: join(root, 'd.tar') });
    assert.match(here.stderr(), new RegExp(`"msg":"serving".*"root":"${root}"`));
    const slash = spawnSync(process.execPath, [CLI, '--json', '--home', home, 'mcp', '--scope', 'x'], {
      cwd: '/',
      input: '',
      encoding: 'utf8',
    });
    assert.equal(slash.status, 2, slash.stderr);
    assert.equal(slash.stdout, '');
    assert.equal(lastError(slash.stderr).code, 'E_USAGE');
    assert.match(slash.stderr, /--root/);
    const missing = spawnSync(process.execPath, [CLI, '--json', '--home', home, 'mcp', '--root', join(work, 'nope')], {
      input: '',
      encoding: 'utf8',
    });
    assert.equal(missing.status, 2, missing.stderr);
    assert.equal(lastError(missing.stderr).code, 'E_USAGE');
  });

  test("scope B cannot see, export, fork or diff scope A's checkpoint; snapshot_list shows only what each may see", async () => {
    const args = ['--root', root, '--snapshot', 'base'];
    const a = await session('scope-a', args);
    const aw = (await a.ok('workspace_fork', { snapshot: 'base', name: 'a-work', mountPath: join(root, 'a') })).workspaces[0];
    writeFileSync(join(root, 'a', 'private.txt'), "A's private work\n");
    const cp = await a.ok('workspace_checkpoint', { workspace: 'a-work', message: 'session a' });
    assert.equal(cp.changed, true);
    const names = (r: { snapshots: { id: string; name: string | null }[] }) => r.snapshots.map((x) => x.name ?? x.id).sort();
    assert.deepEqual(names(await a.ok('snapshot_list')), ['base', cp.id].sort());

    const b = await session('scope-b', args);
    assert.deepEqual(names(await b.ok('snapshot_list')), ['base'], 'not A’s checkpoint, not the snapshots it was not given');
    const missing = await b.fails(
      'workspace_export',
      { ref: 'sn_zzzzzzzzzzzzzzzzzzzzzz', format: 'dir', path: join(root, 'm') },
      'E_NOT_FOUND',
    );
    const hidden = await b.fails('workspace_export', { ref: cp.id, format: 'dir', path: join(root, 'b-out') }, 'E_NOT_FOUND');
    // a hidden snapshot answers as a missing one does
    assert.equal(hidden.message, missing.message.replace('sn_zzzzzzzzzzzzzzzzzzzzzz', cp.id));
    assert.equal(hidden.hint, missing.hint);
    assert.equal(existsSync(join(root, 'b-out')), false);
    await b.fails('workspace_export', { ref: cp.id.slice(0, -2), format: 'tar', path: join(root, 'b.tar') }, 'E_NOT_FOUND');
    await b.fails('workspace_export', { ref: 'other', format: 'tar', path: join(root, 'b.tar') }, 'E_NOT_FOUND');
    await b.fails('workspace_fork', { snapshot: cp.id, name: 'stolen' }, 'E_NOT_FOUND');
    await b.fails('workspace_fork', { snapshot: 'lab', name: 'stolen' }, 'E_NOT_FOUND');
    await b.fails('workspace_diff', { from: 'base', to: cp.id, format: 'patch' }, 'E_NOT_FOUND');
    await b.fails('workspace_diff', { from: cp.id, format: 'patch' }, 'E_NOT_FOUND');
    await b.fails('workspace_diff', { from: cp.id, to: 'base' }, 'E_NOT_FOUND');
    assert.equal(existsSync(join(root, 'b.tar')), false);
    assert.equal(
      workspaces().some((n: string) => n === 'stolen'),
      false,
    );

    // a workspace of B's named as a snapshot B does not see: the name is B's workspace, never "ambiguous" (which would name the snapshot)
    const dup = (await b.ok('workspace_fork', { snapshot: 'base', name: 'other' })).workspaces[0];
    assert.deepEqual((await b.ok('workspace_diff', { from: 'other' })).changes, []);
    const dupHead = (await b.ok('workspace_show', { workspace: 'other' })).workspace.headSnapshotId;
    assert.equal((await b.ok('workspace_export', { ref: 'other', format: 'tar', path: join(root, 'dup.tar') })).id, dupHead);
    await b.ok('workspace_remove', { workspace: dup.id });

    // B's own workspace: a checkpoint made outside the server (the CLI) is B's too, and A does not see it
    await b.ok('workspace_fork', { snapshot: 'base', name: 'b-work', mountPath: join(root, 'b') });
    writeFileSync(join(root, 'b', 'b.txt'), 'b\n');
    const bcp = awcOk(home, ['checkpoint', 'b-work']);
    assert.ok((await b.ok('snapshot_list')).snapshots.some((x: { id: string }) => x.id === bcp.id));
    assert.ok(!(await a.ok('snapshot_list')).snapshots.some((x: { id: string }) => x.id === bcp.id));
    await a.fails('workspace_diff', { from: bcp.id }, 'E_NOT_FOUND');

    // A's checkpoint stays A's after its workspace is removed; A reads it back
    await a.ok('workspace_remove', { workspace: aw.id, force: true });
    assert.ok((await a.ok('snapshot_list')).snapshots.some((x: { id: string }) => x.id === cp.id));
    await a.ok('workspace_export', { ref: cp.id, format: 'dir', path: join(root, 'a-out') });
    assert.equal(readFileSync(join(root, 'a-out', 'private.txt'), 'utf8'), "A's private work\n");
    assert.ok(!isMounted(join(root, 'a')));
  });

  test('--snapshot-label grants the snapshots carrying the labels; a snapshot given alone is not diffed against a parent the server does not see; --scope all sees every one', async () => {
    const c = await session('scope-c', ['--root', root, '--snapshot-label', 'team=x']);
    assert.deepEqual(
      (await c.ok('snapshot_list')).snapshots.map((x: { name: string }) => x.name),
      ['lab'],
    );
    await c.fails('workspace_fork', { snapshot: 'base' }, 'E_NOT_FOUND');
    const f = await c.ok('workspace_fork', { snapshot: 'lab', name: 'c-work' });
    await c.ok('workspace_remove', { workspace: f.workspaces[0].id });

    const head = awcOk(home, ['snapshot', 'ls']).snapshots.find((x: { parentId: string | null }) => x.parentId !== null);
    assert.ok(head, 'a checkpoint from the test before');
    const d = await session('scope-d', ['--root', root, '--snapshot', head.id]);
    const e = await d.fails('workspace_diff', { from: head.id, format: 'patch' }, 'E_OUT_OF_SCOPE');
    assert.match(e.message, /parent/);

    const all = await session('all', ['--root', root]);
    assert.equal((await all.ok('snapshot_list')).snapshots.length, awcOk(home, ['snapshot', 'ls']).snapshots.length);
  });
});
