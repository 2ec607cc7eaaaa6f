import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv';
import { CLI } from './cli.js';

/** The MCP revision of the current specification (stateless requests, `server/discover`). */
export const MODERN_PROTOCOL = '2026-07-28';
/** The newest revision of the `initialize` era, which `awc mcp` still serves. */
export const LEGACY_PROTOCOL = '2025-11-25';

/**
 * Which client a session uses: `modern`, the official v2 SDK client (`@modelcontextprotocol/client`)
 * pinned to {@link MODERN_PROTOCOL} (it probes with `server/discover` and never falls back);
 * `legacy`, the v1 SDK client (`@modelcontextprotocol/sdk` 1.x), whose `initialize` offers
 * {@link LEGACY_PROTOCOL}.
 */
export type McpProtocol = 'modern' | 'legacy';

/** The v2 stdio transport, probing on its own connection (a subclass: the SDK probes a subclass in place, not in a sibling process). */
class InPlaceStdioClientTransport extends StdioClientTransport {}

/** The v1 stdio transport, recording the protocol version the `initialize` handshake agreed on. */
class RecordingLegacyTransport extends LegacyStdioClientTransport {
  agreed: string | undefined;
  setProtocolVersion(version: string): void {
    this.agreed = version;
  }
}

/** What a session calls on either client. */
interface AnyClient {
  listTools(): Promise<{ tools: unknown[] }>;
  callTool(params: { name: string; arguments?: Record<string, unknown> }, ...rest: any[]): Promise<CallToolResult>;
  close(): Promise<void>;
}

/** An SDK client connected over stdio to `awc --home HOME mcp [--scope S]` (the built CLI), with each tool's output schema compiled by an independent Ajv. */
export interface McpSession {
  /** The v2 client (`protocol` modern) or the v1 client (legacy). */
  client: AnyClient;
  /** The protocol version the connection agreed on. */
  protocolVersion: string | undefined;
  /** Calls a tool through the client with a definition of it given by the caller (v2: `toolDefinition`, the client validates the result against its output schema). */
  callWithDefinition(name: string, args: Record<string, unknown>, definition: Tool): Promise<CallToolResult>;
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
 * `opts.cwd`: the directory the server starts in (default this process's); `opts.protocol`: the
 * client (default `modern`, see {@link McpProtocol}); the session asserts that the connection
 * agreed on that protocol's version.
 */
export async function mcpSession(
  home: string,
  scope: string | undefined,
  env: NodeJS.ProcessEnv = {},
  runAs?: { uid: number; gid: number },
  opts: { args?: readonly string[]; cwd?: string; protocol?: McpProtocol } = {},
): Promise<McpSession> {
  const awcArgs = [CLI, '--home', home, 'mcp', ...(scope === undefined ? [] : ['--scope', scope]), ...(opts.args ?? [])];
  const setpriv = runAs ? ['--reuid', String(runAs.uid), '--regid', String(runAs.gid), '--clear-groups', '--', process.execPath] : [];
  const params = {
    command: runAs ? 'setpriv' : process.execPath,
    args: [...setpriv, ...awcArgs],
    env: Object.fromEntries(Object.entries({ ...process.env, ...env }).filter((e): e is [string, string] => e[1] !== undefined)),
    stderr: 'pipe' as const,
    ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
  };
  let err = '';
  const protocol = opts.protocol ?? 'modern';
  let client: AnyClient;
  let protocolVersion: string | undefined;
  let callWithDefinition: McpSession['callWithDefinition'];
  if (protocol === 'modern') {
    const transport = new InPlaceStdioClientTransport(params);
    transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    const modern = new Client(
      { name: 'awc-test', version: '0.0.0' },
      { versionNegotiation: { mode: { pin: MODERN_PROTOCOL }, probe: { timeoutMs: 60_000 } } },
    );
    await modern.connect(transport);
    assert.equal(modern.getProtocolEra(), 'modern');
    protocolVersion = modern.getNegotiatedProtocolVersion();
    client = modern as unknown as AnyClient;
    callWithDefinition = async (name, args, definition) =>
      (await modern.callTool({ name, arguments: args }, { toolDefinition: definition as never, timeout: 120_000 })) as CallToolResult;
  } else {
    const transport = new RecordingLegacyTransport(params);
    transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
    const legacy = new LegacyClient({ name: 'awc-test-2025', version: '0.0.0' });
    await legacy.connect(transport);
    protocolVersion = transport.agreed;
    client = legacy as unknown as AnyClient;
    callWithDefinition = async (name, args, definition) => {
      // the v1 client validates against the tools it listed: give it this definition in their place
      (legacy as unknown as { cacheToolMetadata(tools: unknown[]): void }).cacheToolMetadata([definition]);
      try {
        return (await legacy.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as CallToolResult;
      } finally {
        await legacy.listTools();
      }
    };
  }
  assert.equal(protocolVersion, protocol === 'modern' ? MODERN_PROTOCOL : LEGACY_PROTOCOL, err);
  const listed = (await client.listTools()) as { tools: Tool[] };
  const tools = new Map(listed.tools.map((t) => [t.name, t]));
  const ajv = new Ajv2020({ strict: false });
  const validators = new Map<string, ValidateFunction>();
  for (const t of listed.tools) if (t.outputSchema) validators.set(t.name, ajv.compile(t.outputSchema));

  const call = async (name: string, args: Record<string, unknown>) =>
    (protocol === 'modern'
      ? await client.callTool({ name, arguments: args }, { timeout: 120_000 })
      : await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as CallToolResult;
  return {
    client,
    protocolVersion,
    callWithDefinition,
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
