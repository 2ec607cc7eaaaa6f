import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awcOk, CLI, cleanupMounts } from '../../helpers/cli.js';
import { LEGACY_PROTOCOL, mcpSession, MODERN_PROTOCOL, type McpSession } from '../../helpers/mcp-client.js';

/**
 * Issue 27, "MCP on the current specification": `awc mcp` speaks the 2026-07-28 specification
 * (a client probes with `server/discover`, then every request is stateless, carrying its
 * protocol version in `_meta`) through the official v2 SDK, and still serves 2025-11-25
 * clients (the `initialize` handshake). Checked with the v2 SDK client pinned to 2026-07-28,
 * with the v1 SDK client (whose `initialize` offers 2025-11-25), and with raw JSON-RPC lines;
 * and every tool parameter carries a description.
 */

const TOOLS = [
  'label',
  'prepare',
  'snapshot_list',
  'usage',
  'workspace_checkpoint',
  'workspace_diff',
  'workspace_export',
  'workspace_fork',
  'workspace_list',
  'workspace_mount',
  'workspace_remove',
  'workspace_show',
  'workspace_unmount',
];

/** Every property of a JSON Schema object (nested objects and array items too), by its path, with its schema. */
function properties(schema: any, at = ''): [string, any][] {
  const out: [string, any][] = [];
  for (const [k, v] of Object.entries<any>(schema?.properties ?? {})) {
    out.push([`${at}${k}`, v]);
    out.push(...properties(v, `${at}${k}.`));
    if (v?.items) out.push(...properties(v.items, `${at}${k}[].`));
  }
  return out;
}

describe('awc mcp on the 2026-07-28 and 2025-11-25 protocols', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mcp-proto-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const open: McpSession[] = [];
  const session = async (scope: string, protocol: 'modern' | 'legacy') => {
    const s = await mcpSession(home, scope, {}, undefined, { args: ['--root', work, '--snapshot', 'base'], protocol });
    open.push(s);
    return s;
  };

  before(() => {
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'x\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
  });
  after(async () => {
    for (const s of open) await s.close().catch(() => undefined);
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('the v2 SDK client pinned to 2026-07-28 connects (server/discover), lists every tool and calls them', async () => {
    const m = await session('modern', 'modern');
    assert.equal(m.protocolVersion, MODERN_PROTOCOL);
    assert.deepEqual([...m.tools.keys()].sort(), TOOLS);
    const f = await m.ok('workspace_fork', { snapshot: 'base', name: 'm-ws' });
    const ws = f.workspaces[0].id;
    assert.equal((await m.ok('workspace_show', { workspace: ws })).workspace.id, ws);
    assert.deepEqual(
      (await m.ok('workspace_list')).workspaces.map((w: { id: string }) => w.id),
      [ws],
    );
    await m.fails('workspace_show', { workspace: 'nope' }, 'E_NOT_FOUND');
    await m.ok('workspace_remove', { workspace: ws });
  });

  test('the v1 SDK client on 2025-11-25 (initialize) gets the same tools and schemas, and calls them', async () => {
    const l = await session('legacy', 'legacy');
    const m = await session('modern-2', 'modern');
    assert.equal(l.protocolVersion, LEGACY_PROTOCOL);
    assert.deepEqual([...l.tools.keys()].sort(), TOOLS);
    for (const [name, t] of l.tools) {
      assert.deepEqual(t.inputSchema, m.tools.get(name)!.inputSchema, name);
      assert.deepEqual(t.outputSchema, m.tools.get(name)!.outputSchema, name);
      assert.deepEqual(t.annotations, m.tools.get(name)!.annotations, name);
    }
    const f = await l.ok('workspace_fork', { snapshot: 'base', name: 'l-ws', mountPath: join(work, 'l-mnt') });
    const ws = f.workspaces[0].id;
    writeFileSync(join(work, 'l-mnt', 'new.txt'), 'made on 2025-11-25\n');
    const c = await l.ok('workspace_checkpoint', { workspace: ws, message: 'legacy' });
    assert.equal(c.changed, true);
    const d = await l.ok('workspace_diff', { from: 'base', to: ws });
    assert.deepEqual(
      d.changes.map((x: { path: string }) => x.path),
      ['new.txt'],
    );
    await l.fails('workspace_fork', { snapshot: 'hidden' }, 'E_NOT_FOUND');
    await l.ok('workspace_remove', { workspace: ws, force: true });
  });

  test('every tool parameter has a non-empty description (tools/list, nested properties too)', async () => {
    const m = await session('describe', 'modern');
    let seen = 0;
    for (const t of m.tools.values()) {
      for (const [path, p] of properties(t.inputSchema)) {
        seen++;
        assert.equal(typeof p.description, 'string', `${t.name}.${path} has no description: ${JSON.stringify(p)}`);
        assert.ok(p.description.trim().length > 0, `${t.name}.${path}`);
        assert.doesNotMatch(p.description, /(^|[\s(`])--[a-z]/, `${t.name}.${path} names a CLI option`);
      }
      assert.ok(t.description && t.description.length > 0, t.name);
    }
    assert.ok(seen >= 30, `walked ${seen} parameters`);
  });

  test('raw JSON-RPC: server/discover, then stateless tools/call with the version in _meta and no initialize', async () => {
    const child = spawn(process.execPath, [CLI, '--home', home, 'mcp', '--scope', 'raw', '--root', work, '--snapshot', 'base'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const answer = (id: number) =>
      new Promise<any>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer to ${id}; stdout ${out}; stderr ${err}`)), 120_000);
        const check = () => {
          const line = out.split('\n').find((l) => l.includes(`"id":${id}`));
          if (line === undefined) return;
          clearTimeout(timer);
          child.stdout.off('data', check);
          resolve(JSON.parse(line));
        };
        child.stdout.on('data', check);
        check();
      });
    const _meta = {
      'io.modelcontextprotocol/protocolVersion': MODERN_PROTOCOL,
      'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '0' },
      'io.modelcontextprotocol/clientCapabilities': {},
    };
    const send = (m: object) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
    send({ id: 1, method: 'server/discover', params: { _meta } });
    const discover = await answer(1);
    assert.ok(discover.result.supportedVersions.includes(MODERN_PROTOCOL), JSON.stringify(discover));
    assert.ok(discover.result.capabilities.tools, JSON.stringify(discover));
    assert.equal(discover.result._meta['io.modelcontextprotocol/serverInfo'].name, 'awc');
    send({ id: 2, method: 'tools/call', params: { name: 'snapshot_list', arguments: {}, _meta } });
    const list = await answer(2);
    assert.deepEqual(
      list.result.structuredContent.snapshots.map((s: { name: string }) => s.name),
      ['base'],
    );
    send({ id: 3, method: 'tools/call', params: { name: 'workspace_show', arguments: { workspace: 'nope' }, _meta } });
    const e = await answer(3);
    assert.equal(e.result.isError, true);
    assert.equal(e.result._meta['awc/error'].code, 'E_NOT_FOUND');
    // once the connection is on 2026-07-28, a 2025 initialize is refused
    send({
      id: 4,
      method: 'initialize',
      params: { protocolVersion: LEGACY_PROTOCOL, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    });
    assert.ok((await answer(4)).error, 'initialize after the modern era is pinned');
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.stdin.end();
    assert.equal(await exited, 0, err);
    for (const l of out.split('\n').filter((x) => x !== '')) assert.equal(JSON.parse(l).jsonrpc, '2.0');
  });
});
