import { randomBytes } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { defaultHome, loadConfig } from '../../config/config.js';
import { remoteAwc } from '../remote/remote-awc.js';
import { userSocketFor } from '../remote/user-socket.js';
import { ScopeRegistry } from '../../service/workspace/scope-registry.js';
import { openAwc } from '../remote/open-awc.js';
import type { Labels } from '../../catalog/port/labels.js';
import { McpRoot } from './path-root.js';
import { SnapshotScope } from './snapshot-scope.js';
import type { ToolContext } from './tool-kit.js';
import { registerTools } from './tools.js';

/** Options of {@link runMcpServer}. */
export interface McpServerOptions {
  home?: string;
  namespace?: string;
  /** Scope id (`all` lifts scoping); default: a fresh `mcp-<12 hex>` for this run only. */
  scope?: string;
  /** The directory every path of a tool must be under (`--root`); default the current directory (refused when it is `/`). */
  root?: string;
  /** Snapshots the server sees, by ref (`--snapshot`, resolved at each call). */
  snapshots?: readonly string[];
  /** A label selector of snapshots the server sees (`--snapshot-label k=v`, all must match); none: no snapshot by label. */
  snapshotLabels?: Labels;
  /** The package version, reported as the server's version. */
  version: string;
}

/**
 * `awc mcp`: an MCP server over stdio (docs/reference/mcp.md) with the workspace primitives
 * as tools, built on the official TypeScript SDK v2 (`@modelcontextprotocol/server`:
 * `McpServer`, `serveStdio`): it speaks the 2026-07-28 specification (a client probes with
 * `server/discover`, then every request is stateless, carrying its protocol version in
 * `_meta`) and serves 2025 clients (the `initialize` handshake, 2025-11-25 and older) from the
 * same tools.
 * stdout carries MCP frames only: `console.log`/`info`/`debug` are sent to stderr, logs are
 * JSON lines on stderr. The service is opened for each tool call and closed after it (a home
 * created after the server started is found; a missing one is the tool error E_NO_HOME).
 * Resolves when the client closes stdin (the transport closes). For an ordinary user allowed
 * to use the root daemon, each tool is a call through their socket (src/cli/remote/remote-awc.ts) and
 * the scope's markers are kept in their own default home (`~/.local/share/awc`). Every path a
 * tool is given must be under the root (McpRoot), and the scope sees only the snapshots it was
 * started with and its own workspaces' (SnapshotScope).
 * @throws E_USAGE (a bad scope id, a root that is not a directory or the default `/`), E_CONFIG (bad configuration), before anything is served
 */
export async function runMcpServer(opts: McpServerOptions): Promise<void> {
  const log = (line: Record<string, unknown>) =>
    process.stderr.write(JSON.stringify({ time: new Date().toISOString(), role: 'mcp', ...line }) + '\n');
  const toStderr = (...args: unknown[]) => process.stderr.write(args.map(String).join(' ') + '\n');
  console.log = console.info = console.debug = toStderr;
  // an ordinary user allowed to use root's daemon: every tool goes through their socket, and the
  // scope's markers live in the user's own data directory (docs/reference/mcp.md#scope)
  const socket = userSocketFor(opts.home);
  const namespace = opts.namespace ?? process.env.AWC_NAMESPACE ?? 'default';
  const config = socket === undefined ? loadConfig({ home: opts.home, namespace: opts.namespace }) : { home: defaultHome(), namespace };
  const scope = new ScopeRegistry(config.home, opts.scope ?? `mcp-${randomBytes(6).toString('hex')}`);
  const root = await McpRoot.open(opts.root, config.home);
  const snapshots = new SnapshotScope(scope, { refs: opts.snapshots ?? [], labels: opts.snapshotLabels });
  const ctx: ToolContext = {
    scope,
    snapshots,
    root,
    log,
    withAwc: async (fn, { create = false } = {}) => {
      if (socket !== undefined) return fn(remoteAwc(socket, namespace));
      const awc = await openAwc({ home: opts.home, namespace: opts.namespace }, { create });
      try {
        return await fn(awc);
      } finally {
        await awc.close();
      }
    },
  };
  // one instance per connection, for the era its client opened with (a 2026-07-28 client, or a
  // 2025 client's initialize); the tools hold no state of the connection
  const build = () => {
    const server = new McpServer({ name: 'awc', version: opts.version }, { capabilities: { tools: {} } });
    registerTools(server, ctx);
    return server;
  };
  let ended!: () => void;
  const closed = new Promise<void>((resolve) => (ended = resolve));
  const handle = serveStdio(build, {
    transport: new EndingStdio(() => ended()),
    onerror: (err) => log({ level: 'warn', msg: err.message }),
  });
  log({ level: 'info', msg: 'serving', home: config.home, namespace: config.namespace, scope: scope.scope, root: root.dir });
  await closed;
  await handle.close();
}

/** The stdio transport, telling `onEnd` when it closes (stdin ended, or stdout broke): serveStdio owns its `onclose`. */
class EndingStdio extends StdioServerTransport {
  constructor(private readonly onEnd: () => void) {
    super();
  }

  override async close(): Promise<void> {
    await super.close();
    this.onEnd();
  }
}
