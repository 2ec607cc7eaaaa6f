import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { Ajv, type ValidateFunction } from 'ajv';
import { CLI } from './cli.js';

/** An SDK client connected over stdio to `awc --home HOME mcp [--scope S]` (the built CLI), with each tool's output schema compiled by an independent Ajv. */
export interface McpSession {
  client: Client;
  tools: Map<string, Tool>;
  /** What the server wrote on stderr so far. */
  stderr(): string;
  /** Calls a tool that must succeed: asserts no isError, that structuredContent validates against the tool's output schema (Ajv), and that the text is the same JSON. */
  ok(name: string, args?: Record<string, unknown>): Promise<any>;
  /** Calls a tool that must fail with AWC's `code`: asserts isError, `_meta["awc/error"]` and the text; returns the error object. */
  fails(name: string, args: Record<string, unknown>, code: string): Promise<{ code: string; message: string; hint: string; details?: any }>;
  close(): Promise<void>;
}

/**
 * Starts a server and connects to it (the client lists the tools first, so it caches their output validators).
 * `runAs`: the server runs as that user (`setpriv`), e.g. an ordinary user of the root daemon.
 * `opts.args`: more options of `awc mcp` (`--root DIR`, `--snapshot REF`, `--snapshot-label k=v`);
 * `opts.cwd`: the directory the server starts in (default this process's).
 */
export async function mcpSession(
  home: string,
  scope: string | undefined,
  env: NodeJS.ProcessEnv = {},
  runAs?: { uid: number; gid: number },
  opts: { args?: readonly string[]; cwd?: string } = {},
): Promise<McpSession> {
  const awcArgs = [CLI, '--home', home, 'mcp', ...(scope === undefined ? [] : ['--scope', scope]), ...(opts.args ?? [])];
  const setpriv = runAs ? ['--reuid', String(runAs.uid), '--regid', String(runAs.gid), '--clear-groups', '--', process.execPath] : [];
  const transport = new StdioClientTransport({
    command: runAs ? 'setpriv' : process.execPath,
    args: [...setpriv, ...awcArgs],
    env: Object.fromEntries(Object.entries({ ...process.env, ...env }).filter((e): e is [string, string] => e[1] !== undefined)),
    stderr: 'pipe',
    ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: 'awc-test', version: '0.0.0' });
  await client.connect(transport);
  const listed = await client.listTools();
  const tools = new Map(listed.tools.map((t) => [t.name, t]));
  const ajv = new Ajv({ strict: false });
  const validators = new Map<string, ValidateFunction>();
  for (const t of listed.tools) if (t.outputSchema) validators.set(t.name, ajv.compile(t.outputSchema));

  const call = async (name: string, args: Record<string, unknown>) =>
    (await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as CallToolResult;
  return {
    client,
    tools,
    stderr: () => err,
    async ok(name, args = {}) {
      const r = await call(name, args);
      assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
      const validate = validators.get(name);
      assert.ok(validate, `${name} has an output schema`);
      assert.ok(validate(r.structuredContent), `${name}: ${JSON.stringify(validate.errors)} in ${JSON.stringify(r.structuredContent)}`);
      assert.equal(r.content[0].type, 'text');
      assert.deepEqual(JSON.parse((r.content[0] as { text: string }).text), r.structuredContent);
      return r.structuredContent;
    },
    async fails(name, args, code) {
      const r = await call(name, args);
      assert.equal(r.isError, true, `${name} should fail with ${code}: ${JSON.stringify(r)}`);
      const e = (r._meta as Record<string, any> | undefined)?.['awc/error'];
      assert.equal(e?.code, code, `${name}: ${JSON.stringify(r)}`);
      assert.ok(e.message.length > 0 && e.hint.length > 0 && typeof e.retryable === 'boolean');
      assert.equal(r.structuredContent, undefined);
      assert.equal((r.content[0] as { text: string }).text, `${code}: ${e.message}\nhint: ${e.hint}`);
      return e;
    },
    close: () => client.close(),
  };
}
