import * as z from 'zod';
import type { McpServer, ToolAnnotations } from '@modelcontextprotocol/server';
import { AwcError } from '../../core/errors.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { AwcApi } from '../../service/workspace/awc-api.js';
import type { ScopeRegistry } from '../../service/workspace/scope-registry.js';
import type { OpenedAwc } from '../remote/through-daemon.js';
import type { McpRoot } from './path-root.js';
import { snapshotOrNone, type SnapshotScope } from './snapshot-scope.js';
import { toolError, toolOk } from './tool-result.js';

/**
 * What every `awc mcp` tool module shares: the context the tools run in, the registration of
 * one tool (schemas, annotations, results and errors), and the checks of the refs a tool is
 * given against the server's scope (docs/reference/mcp.md#scope).
 */

/** What the tools need: the service for one call (opened and closed around it), the scope, the snapshots it sees, its root, and a stderr logger. */
export interface ToolContext {
  /** Runs `fn` with the service opened for it; `create`: make the home when it is missing (as `awc prepare` does). */
  withAwc<T>(fn: (awc: OpenedAwc) => Promise<T>, opts?: { create?: boolean }): Promise<T>;
  scope: ScopeRegistry;
  snapshots: SnapshotScope;
  root: McpRoot;
  log(line: Record<string, unknown>): void;
}

/** Annotations: every AWC tool works on this host's home and catalog only (`openWorldHint: false`). */
export function hints(readOnly: boolean, destructive: boolean, idempotent: boolean): ToolAnnotations {
  return { readOnlyHint: readOnly, destructiveHint: destructive, idempotentHint: idempotent, openWorldHint: false };
}

/** A workspace by ref that this server's scope owns. @throws E_NOT_FOUND, E_AMBIGUOUS, E_OUT_OF_SCOPE */
export async function owned(awc: AwcApi, scope: ScopeRegistry, ref: string): Promise<WorkspaceRow> {
  const ws = await awc.getWorkspace(ref);
  await scope.check(ws);
  return ws;
}

/** A snapshot ref the server sees (SnapshotScope.find). @throws E_NOT_FOUND (hidden or missing alike) */
export async function snapshotRef(awc: AwcApi, snapshots: SnapshotScope, ref: string): Promise<SnapshotRow> {
  return snapshots.find(awc, ref, await snapshotOrNone(awc, ref));
}

/** The id of a snapshot or workspace ref (checkedRef). @throws as checkedRef */
export async function refId(awc: AwcApi, ctx: Pick<ToolContext, 'scope' | 'snapshots'>, ref: string): Promise<string> {
  const r = await checkedRef(awc, ctx, ref);
  return r.kind === 'snapshot' ? r.snapshot.id : r.id;
}

/**
 * A snapshot or workspace ref: a workspace must be the scope's, a snapshot one the server
 * sees (SnapshotScope; a hidden one is E_NOT_FOUND, as a missing one).
 * @throws E_NOT_FOUND, E_AMBIGUOUS, E_OUT_OF_SCOPE
 */
export async function checkedRef(
  awc: AwcApi,
  ctx: Pick<ToolContext, 'scope' | 'snapshots'>,
  ref: string,
): Promise<{ kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; id: string }> {
  const r = await awc.resolve(ref).catch(async (err: unknown) => {
    if (ctx.scope.unrestricted || !(err instanceof AwcError)) throw err;
    const d = err.details as { snapshot?: unknown; workspace?: unknown } | undefined;
    if (err.code === 'E_AMBIGUOUS' && typeof d?.snapshot === 'string' && typeof d.workspace === 'string') {
      // a name of a snapshot and of a workspace: ambiguous only when the server sees that snapshot
      if (await ctx.snapshots.sees(awc, d.snapshot)) throw err;
      return { kind: 'workspace' as const, workspace: await awc.getWorkspace(d.workspace) };
    }
    // missing or ambiguous in the namespace: it may still be one visible snapshot (a hidden one shares its prefix)
    if ((err.code === 'E_NOT_FOUND' || err.code === 'E_AMBIGUOUS') && !/^(ws_|workspace:)/i.test(ref)) return undefined;
    throw err;
  });
  if (r?.kind === 'workspace') {
    await ctx.scope.check(r.workspace);
    return { kind: 'workspace', id: r.workspace.id };
  }
  return { kind: 'snapshot', snapshot: await ctx.snapshots.find(awc, ref, r?.snapshot) };
}

/** What a tool is registered with: its title, description, input and output shapes (raw zod shapes), annotations, and whether it may create the home. */
export interface ToolConfig<I extends z.ZodRawShape, O extends z.ZodRawShape> {
  title: string;
  description: string;
  input: I;
  output: O;
  annotations: ToolAnnotations;
  /** Open the service with `create` (the home is made when missing), as `awc prepare` does. */
  create?: boolean;
}

/** Registers one tool: its name, schemas and annotations, and what it runs with the service opened for the call. */
export type Tool = <I extends z.ZodRawShape, O extends z.ZodRawShape>(
  name: string,
  cfg: ToolConfig<I, O>,
  run: (args: z.infer<z.ZodObject<I>>, awc: OpenedAwc) => Promise<object>,
) => void;

/** JSON-clean copy (drops undefined, turns class instances into plain data) of a service result. */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

/**
 * The {@link Tool} function of `server`: registers a tool with `z.object(input)` as its input
 * schema and `z.looseObject(output)` as its output schema (the SDK derives their JSON Schemas,
 * checks the arguments before `run` and the result before sending it). `run` gets the service
 * opened for the call; what it returns is the result's `structuredContent` (toolOk), what it
 * throws a tool error whose hint names this tool's parameters (toolError).
 */
export function toolRegistrar(server: McpServer, ctx: ToolContext): Tool {
  return (name, cfg, run) => {
    const handler = async (args: z.infer<z.ZodObject<typeof cfg.input>>) => {
      try {
        return toolOk(plain(await ctx.withAwc((awc) => run(args, awc), { create: cfg.create })) as Record<string, unknown>);
      } catch (err) {
        return toolError(err, ctx.log, name);
      }
    };
    server.registerTool(
      name,
      {
        title: cfg.title,
        description: cfg.description,
        inputSchema: z.object(cfg.input),
        outputSchema: z.looseObject(cfg.output),
        annotations: cfg.annotations,
      },
      handler,
    );
  };
}
