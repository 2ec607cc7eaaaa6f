import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { mcpSession, type McpSession } from '../../helpers/mcp-client.js';

/**
 * `awc mcp` through the official SDK's client over stdio, against the built CLI, as root with
 * a temp home: every tool, every output checked against its output schema (by the client and
 * by an independent Ajv), errors as tool errors with AWC's code, and the scope.
 */

const TOOLS = [
  'snapshot_list',
  'workspace_fork',
  'workspace_list',
  'workspace_show',
  'workspace_mount',
  'workspace_unmount',
  'workspace_checkpoint',
  'workspace_diff',
  'workspace_export',
  'workspace_remove',
  'usage',
  'prepare',
  'label',
];

describe('awc mcp: every tool through the SDK client', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mcp-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  let s: McpSession;

  before(async () => {
    mkdirSync(join(src, 'lib'), { recursive: true });
    writeFileSync(join(src, 'README.md'), 'hello\n');
    writeFileSync(join(src, 'lib', 'a.js'), 'export const a = 1;\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    s = await mcpSession(home, 'agent-a', {}, undefined, { args: ['--root', work, '--snapshot', 'base', '--snapshot', 'g'] });
  });
  after(async () => {
    await s?.close();
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('lists every tool with input and output schemas and all four annotations', () => {
    assert.deepEqual([...s.tools.keys()].sort(), [...TOOLS].sort());
    for (const t of s.tools.values()) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.equal(t.outputSchema?.type, 'object', t.name);
      const a = t.annotations ?? {};
      for (const k of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const)
        assert.equal(typeof a[k], 'boolean', `${t.name}.${k}`);
      assert.equal(a.openWorldHint, false, t.name);
    }
    const ro = (n: string) => s.tools.get(n)!.annotations!.readOnlyHint;
    assert.deepEqual(TOOLS.filter(ro).sort(), ['snapshot_list', 'usage', 'workspace_diff', 'workspace_list', 'workspace_show'].sort());
    assert.equal(s.tools.get('workspace_remove')!.annotations!.destructiveHint, true);
  });

  test('the client itself checks structuredContent against the output schema', async () => {
    const r = await s.ok('snapshot_list');
    assert.equal(r.snapshots.length, 1);
    assert.equal(r.snapshots[0].name, 'base');
    // the SDK's Client validates what it receives against the tool's output schema: with one that asks for more, the same call throws
    const listed = s.tools.get('snapshot_list')!;
    const stricter = { ...listed.outputSchema!, required: [...(listed.outputSchema!.required ?? []), 'missing'] };
    await assert.rejects(
      s.callWithDefinition('snapshot_list', {}, { ...listed, outputSchema: stricter }),
      /does not match the tool's output schema/,
    );
    await s.ok('snapshot_list');
  });

  test('fork, mount, diff, checkpoint, show, list, export, usage, unmount, mount, remove', async () => {
    const two = await s.ok('workspace_fork', { snapshot: 'base', count: 2, name: 'w' });
    assert.deepEqual(
      two.workspaces.map((w: { name: string; mount: unknown }) => [w.name, w.mount]),
      [
        ['w-1', null],
        ['w-2', null],
      ],
    );
    const mnt = join(work, 'mnt');
    const one = await s.ok('workspace_fork', { snapshot: 'base', name: 'm', mountPath: mnt });
    const m = one.workspaces[0];
    assert.equal(m.mount.path, mnt);
    assert.equal(readFileSync(join(mnt, 'README.md'), 'utf8'), 'hello\n');
    writeFileSync(join(mnt, 'new.txt'), 'made by an agent\n');

    const list = await s.ok('workspace_diff', { from: 'm' });
    assert.deepEqual(
      list.changes.map((c: { path: string; status: string }) => [c.path, c.status]),
      [['new.txt', 'added']],
    );
    assert.equal(list.patch, undefined);
    const patch = await s.ok('workspace_diff', { from: 'm', format: 'patch' });
    assert.match(patch.patch, /^\+made by an agent$/m);

    const cp = await s.ok('workspace_checkpoint', { workspace: 'm', message: 'agent work' });
    assert.equal(cp.changed, true);
    assert.notEqual(cp.id, cp.parent);
    const again = await s.ok('workspace_checkpoint', { workspace: 'm' });
    assert.equal(again.changed, false);
    assert.equal(again.id, cp.id);

    const show = await s.ok('workspace_show', { workspace: 'm' });
    assert.equal(show.workspace.id, m.id);
    assert.equal(show.workspace.headSnapshotId, cp.id);
    assert.equal(show.workspace.mountState, 'mounted');
    assert.equal(show.workspace.lease.here, 'held');

    const ls = await s.ok('workspace_list');
    assert.equal(ls.scope, 'agent-a');
    assert.deepEqual(ls.workspaces.map((w: { name: string }) => w.name).sort(), ['m', 'w-1', 'w-2']);

    const tar = join(work, 'out.tar');
    const t = await s.ok('workspace_export', { ref: 'm', format: 'tar', path: tar });
    assert.equal(t.id, cp.id);
    assert.equal(t.path, tar);
    assert.equal(statSync(tar).size > 0, true);
    const dir = join(work, 'out');
    const d = await s.ok('workspace_export', { ref: cp.id, format: 'dir', path: dir });
    assert.equal(d.files, 3);
    assert.equal(readFileSync(join(dir, 'new.txt'), 'utf8'), 'made by an agent\n');
    // the tar target exists now: AWC's own refusal, as a tool error
    await s.fails('workspace_export', { ref: 'm', format: 'tar', path: tar }, 'E_TARGET_EXISTS');

    const u = await s.ok('usage');
    assert.equal(u.scope, 'agent-a');
    assert.equal(u.totals.workspaces, 3);
    assert.equal(u.workspaces.length, 3);

    const un = await s.ok('workspace_unmount', { workspace: 'm' });
    assert.deepEqual([un.workspace, un.path, un.pending], [m.id, mnt, false]);
    const mnt2 = join(work, 'mnt2');
    const re = await s.ok('workspace_mount', { workspace: 'm', path: mnt2, warm: true });
    assert.equal(re.mount.path, mnt2);
    assert.equal(re.warmed.entries, readdirSync(mnt2, { recursive: true }).length, 'warm looked up every path once');
    assert.equal(readFileSync(join(mnt2, 'new.txt'), 'utf8'), 'made by an agent\n');

    // several with a mountPath: one directory each below it, by name
    const many = join(work, 'many');
    const p = await s.ok('workspace_fork', { snapshot: 'base', count: 2, name: 'p', mountPath: many });
    assert.deepEqual(
      p.workspaces.map((w: { mount: { path: string } }) => w.mount.path),
      [join(many, 'p-1'), join(many, 'p-2')],
    );
    assert.equal(readFileSync(join(many, 'p-2', 'README.md'), 'utf8'), 'hello\n');
    for (const w of p.workspaces) await s.ok('workspace_remove', { workspace: w.id, force: true });

    await s.fails('workspace_remove', { workspace: 'm' }, 'E_ALREADY_MOUNTED');
    const rm = await s.ok('workspace_remove', { workspace: 'm', force: true });
    assert.deepEqual([rm.id, rm.unmounted], [m.id, true]);
    await s.ok('workspace_remove', { workspace: 'w-1' });
    const after = await s.ok('workspace_list');
    assert.deepEqual(
      after.workspaces.map((w: { name: string }) => w.name),
      ['w-2'],
    );
    assert.equal(existsSync(join(home, 'mcp-scopes', 'agent-a', m.id)), false, 'a removed workspace leaves the scope');
  });

  test('workspace_export format git: one commit on a branch of the repository the snapshot came from', async () => {
    const repo = join(work, 'repo');
    mkdirSync(repo);
    const git = (...args: string[]) =>
      execFileSync('git', ['-C', repo, '-c', 'user.name=T', '-c', 'user.email=t@example.com', ...args], { encoding: 'utf8' }).trim();
    git('init', '-q', '-b', 'main');
    writeFileSync(join(repo, 'a.txt'), 'a\n');
    git('add', '-A');
    git('commit', '-qm', 'first');
    const head = git('rev-parse', 'HEAD');
    awcOk(home, ['snapshot', 'import', '--git', repo, '--name', 'g']);
    const mnt = join(work, 'mnt-git');
    const f = await s.ok('workspace_fork', { snapshot: 'g', name: 'gw', mountPath: mnt });
    writeFileSync(join(mnt, 'b.txt'), 'from the agent\n');
    writeFileSync(join(mnt, '.env'), 'TOKEN=secret\n');
    await s.ok('workspace_checkpoint', { workspace: 'gw' });
    await s.fails('workspace_export', { ref: 'gw', format: 'git', path: repo }, 'E_USAGE');
    const e = await s.ok('workspace_export', { ref: 'gw', format: 'git', path: repo, branch: 'agent/gw', message: 'agent work' });
    assert.equal(e.git.branch, 'agent/gw');
    assert.equal(e.git.parent, head);
    assert.equal(e.git.created, true);
    assert.deepEqual(e.git.changes, [{ path: 'b.txt', status: 'A' }]);
    assert.equal(git('rev-parse', 'agent/gw'), e.git.commit);
    assert.equal(git('rev-parse', 'agent/gw^'), head);
    assert.equal(git('show', 'agent/gw:b.txt'), 'from the agent');
    assert.equal(git('log', '-1', '--format=%s', 'agent/gw'), 'agent work');
    assert.equal(git('ls-tree', '--name-only', 'agent/gw'), 'a.txt\nb.txt', 'no secret in the commit');
    assert.equal(git('rev-parse', 'HEAD'), head, "the repository's own checkout did not move");
    await s.ok('workspace_remove', { workspace: f.workspaces[0].id, force: true });
  });

  test("errors come back as tool errors with AWC's code, message and hint", async () => {
    await s.fails('workspace_show', { workspace: 'nope' }, 'E_NOT_FOUND');
    await s.fails('workspace_fork', { snapshot: 'nope' }, 'E_NOT_FOUND');
    await s.fails('workspace_export', { ref: 'base', format: 'tar', path: 'relative.tar' }, 'E_USAGE');
    await s.fails('workspace_fork', { snapshot: 'base', name: 'w-2' }, 'E_NAME_TAKEN');
    await s.fails('workspace_unmount', { workspace: 'w-2' }, 'E_NOT_MOUNTED');
  });
});

describe('awc mcp: scope', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mcp-scope-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const open: McpSession[] = [];
  const session = async (scope: string | undefined, h = home) => {
    const s = await mcpSession(h, scope, {}, undefined, { args: ['--root', work, '--snapshot', 'base'] });
    open.push(s);
    return s;
  };
  let aWs = '';

  before(async () => {
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'x\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    const a = await session('agent-a');
    aWs = (await a.ok('workspace_fork', { snapshot: 'base', name: 'a-work' })).workspaces[0].id;
    await a.close();
  });
  after(async () => {
    for (const s of open) await s.close().catch(() => undefined);
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('a server with another scope cannot see, remove, checkpoint, mount or export what it did not create', async () => {
    const b = await session('agent-b');
    assert.deepEqual((await b.ok('workspace_list')).workspaces, []);
    assert.deepEqual((await b.ok('usage')).workspaces, []);
    // snapshots are the namespace's: B reads them and forks its own
    assert.equal((await b.ok('snapshot_list')).snapshots.length, 1);
    await b.ok('workspace_fork', { snapshot: 'base', name: 'b-work' });
    const target = join(work, 'b-mnt');
    for (const ref of ['a-work', aWs]) {
      const e = await b.fails('workspace_remove', { workspace: ref, force: true }, 'E_OUT_OF_SCOPE');
      assert.deepEqual(e.details, { workspace: aWs, scope: 'agent-b' });
      assert.match(e.hint, /--scope all/);
      await b.fails('workspace_checkpoint', { workspace: ref }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_mount', { workspace: ref, path: target }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_unmount', { workspace: ref, discard: true }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_show', { workspace: ref }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_diff', { from: ref }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_diff', { from: 'base', to: ref }, 'E_OUT_OF_SCOPE');
      await b.fails('workspace_export', { ref, format: 'tar', path: join(work, 'a.tar') }, 'E_OUT_OF_SCOPE');
    }
    assert.equal(existsSync(target), false, 'the refused mount made no directory');
    assert.equal(existsSync(join(work, 'a.tar')), false);
    // A's workspace is untouched
    const rows = awcOk(home, ['ls']).workspaces;
    assert.deepEqual(rows.map((w: { name: string }) => w.name).sort(), ['a-work', 'b-work']);
    // a server with no --scope gets a fresh one of its own: it owns neither
    const fresh = await session(undefined);
    const scope = (await fresh.ok('workspace_list')).scope;
    assert.match(scope, /^mcp-[0-9a-f]{12}$/);
    assert.deepEqual((await fresh.ok('workspace_list')).workspaces, []);
    await fresh.fails('workspace_remove', { workspace: 'b-work' }, 'E_OUT_OF_SCOPE');
  });

  test('a restarted server with the same scope still owns its workspaces; --scope all owns every one', async () => {
    const a = await session('agent-a');
    assert.deepEqual(
      (await a.ok('workspace_list')).workspaces.map((w: { id: string }) => w.id),
      [aWs],
    );
    assert.equal((await a.ok('workspace_checkpoint', { workspace: 'a-work' })).changed, false);
    await a.fails('workspace_remove', { workspace: 'b-work' }, 'E_OUT_OF_SCOPE');
    await a.ok('workspace_remove', { workspace: 'a-work' });
    const all = await session('all');
    assert.equal((await all.ok('workspace_list')).scope, 'all');
    assert.deepEqual(
      (await all.ok('workspace_list')).workspaces.map((w: { name: string }) => w.name),
      ['b-work'],
    );
    await all.ok('workspace_remove', { workspace: 'b-work' });
    assert.deepEqual(awcOk(home, ['ls']).workspaces, []);
    // the markers are private
    const dir = join(home, 'mcp-scopes', 'agent-b');
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    for (const f of readdirSync(dir)) assert.equal(statSync(join(dir, f)).mode & 0o777, 0o600);
  });

  test('a server on a home that does not exist answers E_NO_HOME as a tool error', async () => {
    const s = await session('x', join(work, 'no-home'));
    await s.fails('snapshot_list', {}, 'E_NO_HOME');
    assert.equal(existsSync(join(work, 'no-home')), false);
  });
});
