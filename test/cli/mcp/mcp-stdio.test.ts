import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { awc, awcOk, CLI, cleanupMounts, errorOf, PROJECT } from '../../helpers/cli.js';

/**
 * `awc mcp` at the byte level: stdout carries MCP frames and nothing else (also while a
 * mount starts the host daemon), the server ends when its client closes stdin, a bad
 * scope is refused before anything is served, and other commands never load the SDK.
 */
describe('awc mcp over raw stdio', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mcp-stdio-'));
  const home = join(work, 'home');
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('every line on stdout is a JSON-RPC message; the server exits 0 when stdin ends', async () => {
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'x\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    const child = spawn(process.execPath, [CLI, '--home', home, 'mcp', '--scope', 'raw', '--root', work, '--snapshot', 'base'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const send = (m: object) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
    const answered = (id: number) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer to ${id}; stdout ${out}; stderr ${err}`)), 120_000);
        const check = () => {
          if (out.split('\n').some((l) => l.includes(`"id":${id}`))) {
            clearTimeout(timer);
            child.stdout.off('data', check);
            resolve();
          }
        };
        child.stdout.on('data', check);
        check();
      });
    send({
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    });
    await answered(1);
    send({ method: 'notifications/initialized' });
    // a mount starts the host daemon: nothing of it may reach this stdout
    send({
      id: 2,
      method: 'tools/call',
      params: { name: 'workspace_fork', arguments: { snapshot: 'base', mountPath: join(work, 'mnt') } },
    });
    await answered(2);
    send({ id: 3, method: 'tools/call', params: { name: 'workspace_show', arguments: { workspace: 'nope' } } });
    await answered(3);
    send({ id: 4, method: 'tools/list' });
    await answered(4);
    const exited = new Promise<number | string | null>((resolve) => {
      const timer = setTimeout(() => {
        child.kill();
        resolve('still running 30 s after stdin ended');
      }, 30_000);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    child.stdin.end();
    assert.equal(await exited, 0, err);
    const lines = out.split('\n').filter((l) => l !== '');
    assert.equal(lines.length, 4, out);
    const msgs = lines.map((l) => JSON.parse(l));
    for (const m of msgs) assert.equal(m.jsonrpc, '2.0');
    assert.deepEqual(
      msgs.map((m) => m.id),
      [1, 2, 3, 4],
    );
    assert.equal(msgs[1].result.isError, undefined, JSON.stringify(msgs[1]));
    assert.equal(msgs[1].result.structuredContent.workspaces[0].mount.path, join(work, 'mnt'));
    assert.equal(msgs[2].result.isError, true);
    assert.equal(msgs[2].result._meta['awc/error'].code, 'E_NOT_FOUND');
    // the logs went to stderr, as JSON lines
    assert.match(err, /"role":"mcp".*"msg":"serving".*"scope":"raw"/);
  });

  test('a bad --scope is E_USAGE before anything is served, with nothing on stdout', () => {
    for (const bad of ['../x', 'a/b', '', '-x', 'x'.repeat(65)]) {
      const r = awc(home, ['mcp', `--scope=${bad}`]);
      assert.equal(r.code, 2, `${bad}: ${r.stderr}`);
      assert.equal(errorOf(r).code, 'E_USAGE');
      assert.equal(r.stdout, '');
    }
  });

  test('other commands never load the MCP SDK; awc mcp does', () => {
    // a module loader hook that writes every URL it resolves to a file
    const log = join(work, 'resolved.log');
    const hooks = join(work, 'hooks.mjs');
    writeFileSync(
      hooks,
      `import { appendFileSync } from 'node:fs';
export async function resolve(spec, ctx, next) {
  const r = await next(spec, ctx);
  appendFileSync(${JSON.stringify(log)}, r.url + '\\n');
  return r;
}\n`,
    );
    const register = `data:text/javascript,import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(hooks).href)});`;
    // the CLI is a bundle (scripts/bundle-cli.mjs): a chunk that loads stands for the sources its manifest lists
    const manifest = JSON.parse(readFileSync(join(PROJECT, 'dist', 'cli', 'manifest.json'), 'utf8')) as Record<
      string,
      { sources: string[] }
    >;
    const run = (args: string[]) => {
      writeFileSync(log, '');
      // in its own process (a warm worker of the daemon has everything loaded ahead, by design)
      const r = spawnSync(process.execPath, ['--import', register, CLI, '--home', home, ...args], {
        encoding: 'utf8',
        input: '',
        env: { ...process.env, AWC_NO_WARM: '1' },
      });
      const urls = readFileSync(log, 'utf8').split('\n');
      const sources = urls.flatMap((u) => manifest[/\/dist\/cli\/([^/]+\.js)$/.exec(u)?.[1] ?? '']?.sources ?? []);
      return { status: r.status, urls: [...urls, ...sources.map((f) => `bundled:/${f}`)], stderr: r.stderr };
    };
    const ls = run(['--json', 'ls']);
    assert.equal(ls.status, 0, ls.stderr);
    assert.ok(
      ls.urls.some((u) => u.endsWith('/src/service/workspace/awc.ts')),
      'the hook sees what the CLI loads',
    );
    assert.deepEqual(
      ls.urls.filter((u) => /@modelcontextprotocol|\/zod\/|\/cli\/mcp\//.test(u)),
      [],
    );
    const mcp = run(['mcp', '--scope', 'lazy']);
    assert.equal(mcp.status, 0, mcp.stderr);
    assert.ok(
      mcp.urls.some((u) => u.includes('/@modelcontextprotocol/server/')),
      'awc mcp loads the v2 server SDK',
    );
  });
});
