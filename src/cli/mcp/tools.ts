import { join } from 'node:path';
import * as z from 'zod';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { AwcApi } from '../../service/workspace/awc-api.js';
import type { ScopeRegistry } from '../../service/workspace/scope-registry.js';
import { computeUsage } from '../../service/workspace/usage.js';
import { throughDaemon, type OpenedAwc } from '../remote/through-daemon.js';
import type { McpRoot } from './path-root.js';
import { absPathInput, OUTPUT, refInput } from './schemas.js';
import { snapshotOrNone, type SnapshotScope } from './snapshot-scope.js';
import { toolError, toolOk } from './tool-result.js';

/** What the tools need: the service for one call (opened and closed around it), the scope, the snapshots it sees, its root, and a stderr logger. */
export interface ToolContext {
  withAwc<T>(fn: (awc: OpenedAwc) => Promise<T>): Promise<T>;
  scope: ScopeRegistry;
  snapshots: SnapshotScope;
  root: McpRoot;
  log(line: Record<string, unknown>): void;
}

/** Annotations: every AWC tool works on this host's home and catalog only (`openWorldHint: false`). */
function hints(readOnly: boolean, destructive: boolean, idempotent: boolean): ToolAnnotations {
  return { readOnlyHint: readOnly, destructiveHint: destructive, idempotentHint: idempotent, openWorldHint: false };
}

/** A workspace by ref that this server's scope owns. @throws E_NOT_FOUND, E_AMBIGUOUS, E_OUT_OF_SCOPE */
async function owned(awc: AwcApi, scope: ScopeRegistry, ref: string): Promise<WorkspaceRow> {
  const ws = await awc.getWorkspace(ref);
  await scope.check(ws);
  return ws;
}

/** A snapshot ref the server sees (SnapshotScope.find). @throws E_NOT_FOUND (hidden or missing alike) */
async function snapshotRef(awc: AwcApi, snapshots: SnapshotScope, ref: string): Promise<SnapshotRow> {
  return snapshots.find(awc, ref, await snapshotOrNone(awc, ref));
}

/** The id of a snapshot or workspace ref (checkedRef). @throws as checkedRef */
async function refId(awc: AwcApi, ctx: Pick<ToolContext, 'scope' | 'snapshots'>, ref: string): Promise<string> {
  const r = await checkedRef(awc, ctx, ref);
  return r.kind === 'snapshot' ? r.snapshot.id : r.id;
}

/**
 * A snapshot or workspace ref: a workspace must be the scope's, a snapshot one the server
 * sees (SnapshotScope; a hidden one is E_NOT_FOUND, as a missing one).
 * @throws E_NOT_FOUND, E_AMBIGUOUS, E_OUT_OF_SCOPE
 */
async function checkedRef(
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

/** JSON-clean copy (drops undefined, turns class instances into plain data) of a service result. */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

/**
 * Registers the AWC tools on an MCP server (docs/reference/mcp.md): each with an input
 * schema, an output schema (results as `structuredContent`) and annotations; failures come
 * back as tool errors carrying AWC's code, message and hint (see toolError). Workspaces are
 * checked against `ctx.scope` before anything is done to them (E_OUT_OF_SCOPE), snapshots
 * against `ctx.snapshots` (E_NOT_FOUND), and every path against `ctx.root` (E_OUT_OF_SCOPE).
 */
export function registerTools(server: McpServer, ctx: ToolContext): void {
  const tool: Tool = <I extends z.ZodRawShape, O extends z.ZodRawShape>(
    name: string,
    cfg: { title: string; description: string; input: I; output: O; annotations: ToolAnnotations },
    // (checked against `output` at run time, by the SDK's server before sending, and by its client)
    run: (args: z.infer<z.ZodObject<I>>, awc: OpenedAwc) => Promise<object>,
  ): void => {
    const handler = async (args: z.infer<z.ZodObject<I>>) => {
      try {
        return toolOk(plain(await ctx.withAwc((awc) => run(args, awc))) as Record<string, unknown>);
      } catch (err) {
        return toolError(err, ctx.log);
      }
    };
    server.registerTool(
      name,
      {
        title: cfg.title,
        description: cfg.description,
        inputSchema: cfg.input,
        outputSchema: z.looseObject(cfg.output),
        annotations: cfg.annotations,
      },
      handler as never,
    );
  };
  for (const group of [snapshotTools, workspaceTools, changeTools, outputTools, usageTool]) group(tool, ctx);
}

/** Registers one tool: its name, schemas and annotations, and what it runs with the service opened for the call. */
type Tool = <I extends z.ZodRawShape, O extends z.ZodRawShape>(
  name: string,
  cfg: { title: string; description: string; input: I; output: O; annotations: ToolAnnotations },
  run: (args: z.infer<z.ZodObject<I>>, awc: OpenedAwc) => Promise<object>,
) => void;

/** The tools `snapshot_list` and `workspace_fork`. */
function snapshotTools(tool: Tool, ctx: ToolContext): void {
  const { scope, snapshots, root } = ctx;
  tool(
    'snapshot_list',
    {
      title: 'List snapshots',
      description:
        'The snapshots this server sees, newest first (ids, names, sizes in bytes): those it was started with and the checkpoints of its own workspaces.',
      input: {},
      output: OUTPUT.snapshot_list,
      annotations: hints(true, false, true),
    },
    async (_args, awc) => ({ snapshots: await snapshots.list(awc) }),
  );

  tool(
    'workspace_fork',
    {
      title: 'Fork workspaces',
      description:
        "Create `count` workspaces from a snapshot (constant time; names <name>-1 … <name>-K when count > 1). With mountPath (under the server's root), each is mounted too: at mountPath for one workspace, at mountPath/<name or id> for several. The server owns what it forks (its scope).",
      input: {
        snapshot: refInput.describe('snapshot id, id prefix or name'),
        count: z.number().int().min(1).max(1000).default(1),
        name: z.string().min(1).max(120).optional(),
        mountPath: absPathInput.optional(),
      },
      output: OUTPUT.workspace_fork,
      annotations: hints(false, false, false),
    },
    async ({ snapshot, count, name, mountPath }, awc) => {
      const at = mountPath === undefined ? undefined : await root.path(mountPath, 'mountPath');
      const rows = await awc.fork((await snapshotRef(awc, snapshots, snapshot)).id, { name, count });
      await scope.claim(rows.map((w) => w.id));
      const out = [];
      for (const w of rows) {
        try {
          const target = at === undefined ? undefined : count === 1 ? at : await root.path(join(at, w.name ?? w.id), 'mountPath');
          out.push({ id: w.id, name: w.name, mount: target === undefined ? null : await awc.mount(w.id, target) });
        } catch (err) {
          const e = toAwcError(err);
          throw new AwcError(e.code, `${e.message} (forked ${rows.map((r) => r.id).join(', ')}; mounted ${out.length})`, {
            hint: e.hint,
            details: { ...e.details, forked: rows.map((r) => r.id) },
          });
        }
      }
      return { workspaces: out };
    },
  );
}

/** The tools `workspace_list`, `workspace_show`, `workspace_mount` and `workspace_unmount`. */
function workspaceTools(tool: Tool, ctx: ToolContext): void {
  const { scope, root } = ctx;
  tool(
    'workspace_list',
    {
      title: 'List workspaces',
      description:
        "The workspaces this server may act on (its scope's; every one of the namespace with --scope all), with mount state and lease.",
      input: {},
      output: OUTPUT.workspace_list,
      annotations: hints(true, false, true),
    },
    async (_args, awc) => {
      const mine = await scope.owned();
      const rows = (await awc.listWorkspaces()).filter((w) => mine === undefined || mine.has(w.id));
      return { scope: scope.scope, workspaces: await awc.leases.list(rows) };
    },
  );

  tool(
    'workspace_show',
    {
      title: 'Show a workspace',
      description: 'One workspace: its row, when its head was checkpointed, and its lease.',
      input: { workspace: refInput },
      output: OUTPUT.workspace_show,
      annotations: hints(true, false, true),
    },
    async ({ workspace }, awc) => {
      const { kind: _kind, ...ws } = await awc.leases.show(await owned(awc, scope, workspace));
      return { workspace: ws };
    },
  );

  tool(
    'workspace_mount',
    {
      title: 'Mount a workspace',
      description:
        "Mount a workspace at an absolute path under the server's root (missing or empty, outside the AWC home). With warm, then look up every path once, so that the first walk of the tree (git status) finds it warm; it costs about one cold walk.",
      input: {
        workspace: refInput,
        path: absPathInput,
        warm: z.boolean().default(false).describe('look up every path once after mounting (docs/explanation/git.md)'),
      },
      output: OUTPUT.workspace_mount,
      annotations: hints(false, false, false),
    },
    async ({ workspace, path, warm }, awc) => {
      const target = await root.path(path, 'path');
      const mount = await awc.mount((await owned(awc, scope, workspace)).id, target);
      return warm ? { mount, warmed: await (await import('../../service/git/warm-workspace.js')).warmWorkspace(mount.path) } : { mount };
    },
  );

  tool(
    'workspace_unmount',
    {
      title: 'Unmount a workspace',
      description:
        'Unmount a workspace. Uncheckpointed changes are kept on this host (the next mount resumes them) unless discard, which drops them.',
      input: {
        workspace: refInput,
        discard: z.boolean().default(false),
        force: z.boolean().default(false).describe('detach a busy mount lazily'),
      },
      output: OUTPUT.workspace_unmount,
      annotations: hints(false, true, false),
    },
    async ({ workspace, discard, force }, awc) => {
      const r = await awc.unmount((await owned(awc, scope, workspace)).id, { discard, force });
      return { workspace: r.workspace, path: r.path, pending: r.pending };
    },
  );
}

/** The tools `workspace_checkpoint` and `workspace_diff`. */
function changeTools(tool: Tool, ctx: ToolContext): void {
  const { scope, snapshots } = ctx;
  tool(
    'workspace_checkpoint',
    {
      title: 'Checkpoint a workspace',
      description: "Turn a workspace's current state into a new snapshot and move its head there (no new snapshot when nothing changed).",
      input: { workspace: refInput, message: z.string().max(4096).optional() },
      output: OUTPUT.workspace_checkpoint,
      annotations: hints(false, false, true),
    },
    async ({ workspace, message }, awc) => {
      const r = await awc.checkpoint((await owned(awc, scope, workspace)).id, { message });
      if (r.changed) await snapshots.record(r.id);
      return r;
    },
  );

  tool(
    'workspace_diff',
    {
      title: 'Diff',
      description:
        "Compare two refs (snapshots or this server's workspaces), or one workspace's head with its live state: the changed paths (format list) and a git-style patch (format patch).",
      input: {
        from: refInput,
        to: refInput.optional(),
        format: z.enum(['list', 'patch']).default('list'),
        binary: z.boolean().default(false).describe('with format patch: full git binary patches'),
        metadata: z.boolean().default(false).describe('also report owner, mtime and xattr changes'),
      },
      output: OUTPUT.workspace_diff,
      annotations: hints(true, false, true),
    },
    async ({ from, to, format, binary, metadata }, awc) => {
      const a = await checkedRef(awc, ctx, from);
      const b = to === undefined ? undefined : await checkedRef(awc, ctx, to);
      // one snapshot alone is compared with its parent: that parent must be one this server sees
      const alone = b === undefined && a.kind === 'snapshot' ? a.snapshot : undefined;
      if (alone?.parentId && !(await snapshots.sees(awc, alone.parentId)))
        throw new AwcError('E_OUT_OF_SCOPE', `snapshot ${alone.id} alone is compared with its parent, which this MCP server does not see`, {
          hint: 'Pass `to` as well: compare two snapshots (or workspaces) this server sees.',
          details: { snapshot: alone.id },
        });
      const id = (x: typeof a) => (x.kind === 'snapshot' ? x.snapshot.id : x.id);
      const r = await awc.diff(id(a), b === undefined ? undefined : id(b), { patch: format === 'patch', binary, metadata });
      const left = r.secrets ? { secrets: r.secrets, dropped: r.dropped } : {};
      return { from: r.from, to: r.to, changes: r.changes, ...left, ...(format === 'patch' ? { patch: r.patch ?? '' } : {}) };
    },
  );
}

/** The tools `workspace_export` and `workspace_remove`. */
function outputTools(tool: Tool, ctx: ToolContext): void {
  const { scope, root } = ctx;
  tool(
    'workspace_export',
    {
      title: 'Export',
      description:
        "Write a snapshot (or one of this server's workspaces' head) out, under the server's root: as a tar file (must not exist), into a directory (missing or empty; overwrite replaces one), or (format git) as one commit on branch `branch` of the local git repository at path, parented on the commit the snapshot was imported at (only paths git would track there, never a secret; an existing branch is moved only when it fast-forwards, or with overwrite). The user's index and work tree are never touched.",
      input: {
        ref: refInput,
        format: z.enum(['tar', 'dir', 'git']),
        path: absPathInput.describe('the tar file, the directory, or (format git) the repository'),
        overwrite: z.boolean().default(false).describe('format dir: replace a non-empty directory; format git: move an existing branch'),
        branch: z.string().min(1).max(255).optional().describe('format git: the branch to write (required)'),
        message: z.string().max(65536).optional().describe('format git: the commit message (default: generated)'),
      },
      output: OUTPUT.workspace_export,
      annotations: hints(false, true, false),
    },
    async ({ ref, format, path, overwrite, branch, message }, awc) => {
      if (format === 'git' && branch === undefined)
        throw new AwcError('E_USAGE', 'format git needs a branch', { hint: 'Pass branch, e.g. "agent/fix-1".' });
      // the export goes through the directory the check opened (McpRoot.use): a swap after the check cannot move it
      if (format === 'git' && branch !== undefined)
        return root.gitRepo(path, async (_via, target) => {
          const id = await refId(awc, ctx, ref);
          const g = await awc.exportGit(id, { repo: target, branch, message, force: overwrite });
          const snap = await awc.getSnapshot(g.snapshot);
          return { id: snap.id, root: snap.root, files: snap.fileCount, bytes: snap.byteCount, path: target, git: g };
        });
      return root.use(
        path,
        'path',
        async (via, target) => {
          const id = await refId(awc, ctx, ref);
          const r = await awc.export(id, format === 'tar' ? { tar: via } : { dir: via, overwrite });
          return { ...r, path: target };
        },
        { parents: format === 'dir' },
      );
    },
  );

  tool(
    'workspace_remove',
    {
      title: 'Remove a workspace',
      description:
        "Remove a workspace's catalog row (bytes go with gc). A mounted workspace, or one with uncheckpointed changes kept here, is refused unless force, which unmounts it and drops them. Secret files (never stored) are kept on the host and listed in kept; secrets alone never refuse a remove.",
      input: { workspace: refInput, force: z.boolean().default(false) },
      output: OUTPUT.workspace_remove,
      annotations: hints(false, true, false),
    },
    async ({ workspace, force }, awc) => {
      const ws = await owned(awc, scope, workspace);
      const r = await awc.rm(ws.id, { force });
      await scope.release(ws.id);
      return { kind: 'workspace' as const, id: r.id, unmounted: r.unmounted, discarded: r.discarded, ...(r.kept ? { kept: r.kept } : {}) };
    },
  );
}

/** The tools `usage`. */
function usageTool(tool: Tool, ctx: ToolContext): void {
  const { scope } = ctx;
  tool(
    'usage',
    {
      title: 'Usage',
      description:
        "What the namespace costs in bytes: logical (full copies), unique stored, materialised on this host; totals are the namespace's, the workspace rows this server's.",
      input: {},
      output: OUTPUT.usage,
      annotations: hints(true, false, true),
    },
    async (_args, awc) => {
      // an ordinary user's server: the daemon computes it (src/daemon/users/user-methods.ts)
      const u = throughDaemon(awc) ? await awc.usage() : await computeUsage(awc);
      const mine = await scope.owned();
      return {
        namespace: u.namespace,
        scope: scope.scope,
        totals: u.totals,
        workspaces: u.workspaces.filter((w) => mine === undefined || mine.has(w.id)),
      };
    },
  );
}
