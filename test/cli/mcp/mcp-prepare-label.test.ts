import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OPERATOR_PREFIX, toolHint } from '../../../src/cli/mcp/tool-hints.js';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { mcpSession, type McpSession } from '../../helpers/mcp-client.js';

/**
 * Issue 27, MCP: the `prepare` tool snapshots a checkout under the server's root with its
 * installed dependencies (as `awc prepare`), refusing paths outside the root, `..` and symbolic
 * links that leave it (the root's confinement, E_OUT_OF_SCOPE); the `label` tool sets and
 * removes labels of what the server sees; error hints name tool parameters, not CLI options.
 * Through the v2 SDK client over stdio against the built CLI, as root.
 */

/** A CLI option in running text. */
const CLI_OPTION = /(^|[\s(`[])--[a-z]/;

describe('awc mcp: the prepare and label tools', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mcp-prep-'));
  const home = join(work, 'home');
  const root = join(work, 'root');
  const outside = join(work, 'outside');
  const checkout = join(root, 'app');
  const open: McpSession[] = [];
  let s: McpSession;
  const session = async (scope: string, args: string[] = []) => {
    const x = await mcpSession(home, scope, {}, undefined, { args: ['--root', root, ...args] });
    open.push(x);
    return x;
  };
  const snapshotCount = () => awcOk(home, ['snapshot', 'ls']).snapshots.length;

  before(async () => {
    mkdirSync(join(checkout, 'node_modules', 'left-pad'), { recursive: true });
    writeFileSync(join(checkout, 'package-lock.json'), '{"name":"app","lockfileVersion":3,"packages":{}}\n');
    writeFileSync(join(checkout, 'index.js'), 'module.exports = 1;\n');
    writeFileSync(join(checkout, 'node_modules', 'left-pad', 'index.js'), 'module.exports = (s) => s;\n');
    mkdirSync(join(outside, 'app'), { recursive: true });
    writeFileSync(join(outside, 'secret.txt'), 'the host keeps this\n');
    writeFileSync(join(outside, 'app', 'package-lock.json'), '{}\n');
    mkdirSync(join(outside, 'app', 'node_modules'));
    // a link inside the checkout that leads out of the root: stored as a link, never followed
    symlinkSync(join(outside, 'secret.txt'), join(checkout, 'peek.txt'));
    awcOk(home, ['snapshot', 'import', join(work, 'outside'), '--name', 'hidden']);
    s = await session('prep');
  });
  after(async () => {
    for (const x of open) await x.close().catch(() => undefined);
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('prepare imports a checkout under the root with its dependencies; the server sees and forks it', async () => {
    const r = await s.ok('prepare', { path: checkout, name: 'app-env' });
    assert.equal(r.name, 'app-env');
    assert.deepEqual(r.envDirs, ['node_modules']);
    assert.match(r.envKey, /^env1-[0-9a-f]+$/);
    assert.equal(r.path, checkout);
    assert.equal(r.labels['awc.env-key'], r.envKey);
    assert.equal(r.labels['awc.env-dirs'], 'node_modules');
    assert.equal(r.labels['awc.path'], checkout, 'the checkout it was read from');
    const row = awcOk(home, ['show', r.id]);
    assert.equal(row.message, `prepare ${checkout}`);
    assert.doesNotMatch(JSON.stringify(row), /\/proc\//);
    // the same environment key as `awc env-key` of the checkout
    assert.equal(awcOk(home, ['env-key', checkout]).key, r.envKey);
    assert.ok(
      (await s.ok('snapshot_list')).snapshots.some((x: { id: string }) => x.id === r.id),
      'the server sees what it prepared',
    );
    const out = join(root, 'out');
    await s.ok('workspace_export', { ref: r.id, format: 'dir', path: out });
    assert.equal(readFileSync(join(out, 'node_modules', 'left-pad', 'index.js'), 'utf8'), 'module.exports = (s) => s;\n');
    assert.equal(readlinkSync(join(out, 'peek.txt')), join(outside, 'secret.txt'), 'a link stays a link');
    const f = await s.ok('workspace_fork', { snapshot: 'app-env', name: 'from-env' });
    await s.ok('workspace_remove', { workspace: f.workspaces[0].id });
  });

  test('prepare refuses paths outside the root, "..", links that leave it and the home (E_OUT_OF_SCOPE), and imports nothing', async () => {
    const before = snapshotCount();
    for (const path of [join(outside, 'app'), `${root}/../outside/app`, work]) {
      const e = await s.fails('prepare', { path }, 'E_OUT_OF_SCOPE');
      assert.doesNotMatch(e.hint, CLI_OPTION, e.hint);
    }
    symlinkSync(join(outside, 'app'), join(root, 'escape'));
    const e = await s.fails('prepare', { path: join(root, 'escape') }, 'E_OUT_OF_SCOPE');
    assert.equal(e.details.resolved, join(outside, 'app'));
    mkdirSync(join(root, 'sub'));
    symlinkSync('../../outside', join(root, 'sub', 'up'));
    await s.fails('prepare', { path: join(root, 'sub', 'up', 'app') }, 'E_OUT_OF_SCOPE');
    await s.fails('prepare', { path: 'app' }, 'E_USAGE');
    await s.fails('prepare', { path: join(root, 'missing') }, 'E_SOURCE_NOT_FOUND');
    await s.fails('prepare', { path: join(checkout, 'index.js') }, 'E_USAGE');
    mkdirSync(join(root, 'nolock'));
    const n = await s.fails('prepare', { path: join(root, 'nolock') }, 'E_USAGE');
    assert.match(n.message, new RegExp(`${join(root, 'nolock')} has no lockfile`));
    assert.equal(snapshotCount(), before, 'nothing was imported');
  });

  test('prepare makes the home when it is missing, as `awc prepare` does', async () => {
    const fresh = join(work, 'fresh-home');
    const x = await mcpSession(fresh, 'fresh', {}, undefined, { args: ['--root', root] });
    open.push(x);
    await x.fails('snapshot_list', {}, 'E_NO_HOME').then((e) => assert.doesNotMatch(e.hint, CLI_OPTION, e.hint));
    const r = await x.ok('prepare', { path: checkout });
    assert.ok(existsSync(fresh));
    assert.equal(awcOk(fresh, ['show', r.id]).id, r.id);
  });

  test('label sets and removes labels of a visible snapshot and of its own workspaces, and nothing else', async () => {
    const p = await s.ok('prepare', { path: checkout, name: 'to-label' });
    const r = await s.ok('label', { ref: 'to-label', set: { team: 'core', task: 't-1' } });
    assert.deepEqual(r, { kind: 'snapshot', id: p.id, labels: { ...p.labels, task: 't-1', team: 'core' } });
    const r2 = await s.ok('label', { ref: p.id, remove: ['task', 'never-set'], set: { team: 'infra' } });
    assert.equal(r2.labels.team, 'infra');
    assert.equal(r2.labels.task, undefined);
    assert.equal(awcOk(home, ['show', p.id]).labels.team, 'infra');
    // awc.git.commit is the one key of AWC's it may set (the parent of an export to git)
    assert.equal((await s.ok('label', { ref: p.id, set: { 'awc.git.commit': 'a'.repeat(40) } })).labels['awc.git.commit'], 'a'.repeat(40));
    const f = await s.ok('workspace_fork', { snapshot: p.id, name: 'lw' });
    const w = await s.ok('label', { ref: 'workspace:lw', set: { owner: 'agent' } });
    assert.deepEqual(w, { kind: 'workspace', id: f.workspaces[0].id, labels: { owner: 'agent' } });

    for (const key of ['awc.env-key', 'awc.path', 'awc.claude.session']) {
      const e = await s.fails('label', { ref: p.id, set: { [key]: 'x' } }, 'E_USAGE');
      assert.deepEqual(e.details, { keys: [key] });
    }
    await s.fails('label', { ref: p.id, remove: ['awc.env-key'] }, 'E_USAGE');
    assert.equal(awcOk(home, ['show', p.id]).labels['awc.env-key'], p.envKey, 'the environment key is untouched');
    await s.fails('label', { ref: p.id }, 'E_USAGE');
    await s.fails('label', { ref: p.id, set: { a: '1' }, remove: ['a'] }, 'E_USAGE');
    await s.fails('label', { ref: p.id, set: { 'Bad Key': '1' } }, 'E_USAGE');
    // a snapshot it does not see is missing; another scope's workspace is out of scope
    const hidden = await s.fails('label', { ref: 'hidden', set: { team: 'x' } }, 'E_NOT_FOUND');
    assert.doesNotMatch(hidden.hint, CLI_OPTION, hidden.hint);
    const other = await session('other', ['--snapshot', 'to-label']);
    await other.fails('label', { ref: 'workspace:lw', set: { team: 'x' } }, 'E_OUT_OF_SCOPE');
    assert.equal(awcOk(home, ['show', 'hidden']).labels.team, undefined);
    await s.ok('workspace_remove', { workspace: f.workspaces[0].id });
  });

  test('error hints name the tool parameters, not CLI options', async () => {
    const f = await s.ok('workspace_fork', { snapshot: 'app-env', name: 'busy', mountPath: join(root, 'busy') });
    const id = f.workspaces[0].id;
    const e = await s.fails('workspace_remove', { workspace: id }, 'E_ALREADY_MOUNTED');
    assert.equal(
      e.hint,
      `Unmount it first (the workspace_unmount tool (workspace ${id})), or pass force: true to unmount it and drop its uncheckpointed changes.`,
    );
    const u = await s.fails('workspace_unmount', { workspace: 'app-env-missing' }, 'E_NOT_FOUND');
    assert.doesNotMatch(u.hint, CLI_OPTION, u.hint);
    const bad = await s.fails('workspace_fork', { snapshot: 'app-env', name: 'bad name/x' }, 'E_USAGE');
    assert.doesNotMatch(bad.hint, CLI_OPTION, bad.hint);
    await s.ok('workspace_remove', { workspace: id, force: true });
  });

  test('toolHint: CLI options and commands in the words of each tool', () => {
    assert.equal(
      toolHint(
        'workspace_export',
        'The branch exists and its tip is not the base commit; pass --force to move it, or choose another --branch.',
      ),
      'The branch exists and its tip is not the base commit; pass overwrite: true to move it, or choose another branch.',
    );
    assert.equal(
      toolHint('workspace_unmount', 'Run `awc unmount ws_1 --discard` again once those processes have exited.'),
      'Run the workspace_unmount tool (workspace ws_1, discard: true) again once those processes have exited.',
    );
    assert.equal(
      toolHint('workspace_export', 'or name the commit: `awc label <snapshot> awc.git.commit=<commit>`.'),
      'or name the commit: the label tool (ref <snapshot>, set {"awc.git.commit": "<commit>"}).',
    );
    assert.equal(
      toolHint('workspace_mount', 'Mount it first with `awc mount <workspace> <dir>`.', 'E_NOT_MOUNTED'),
      'Mount it first with the workspace_mount tool (workspace <workspace>, path <dir>).',
    );
    assert.equal(toolHint('prepare', 'Name it: pass --name N or -m MSG.'), 'Name it: pass name N or message MSG.');
    // what no tool parameter does is said to be for the person who runs the server
    const op = toolHint('workspace_remove', 'Run `awc fsck --repair --force`.');
    assert.ok(op.startsWith(OPERATOR_PREFIX), op);
    const usage = toolHint('workspace_fork', 'Run `awc --help` or `awc <command> --help` for usage.', 'E_USAGE');
    assert.doesNotMatch(usage, CLI_OPTION, usage);
    // not an option: words with hyphens, and a hint without any
    assert.equal(toolHint('workspace_mount', 'a re-mount of x--y'), 'a re-mount of x--y');
  });
});
