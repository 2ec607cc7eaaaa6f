import { join } from 'node:path';
import * as z from 'zod';
import type { McpServer } from '@modelcontextprotocol/server';
import { AwcError, toAwcError } from '../../core/errors.js';
import { computeUsage } from '../../service/workspace/usage.js';
import { throughDaemon } from '../remote/through-daemon.js';
import { absPathInput, anyRefInput, OUTPUT, refInput, workspaceInput } from './schemas.js';
import { checkedRef, hints, owned, refId, snapshotRef, toolRegistrar, type Tool, type ToolContext } from './tool-kit.js';
import { envTools } from './tools-env.js';

/**
 * Registers the AWC tools on an MCP server (docs/reference/mcp.md): each with an input
 * schema (every parameter described), an output schema (results as `structuredContent`) and
 * annotations; failures come back as tool errors carrying AWC's code, message and hint, the
 * hint in the tool's parameters (toolError). Workspaces are checked against `ctx.scope`
 * before anything is done to them (E_OUT_OF_SCOPE), snapshots against `ctx.snapshots`
 * (E_NOT_FOUND), and every path against `ctx.root` (E_OUT_OF_SCOPE).
 */
export function registerTools(server: McpServer, ctx: ToolContext): void {
  const tool = toolRegistrar(server, ctx);
  for (const group of [snapshotTools, workspaceTools, changeTools, outputTools, usageTool, envTools]) group(tool, ctx);
}

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
        snapshot: refInput.describe('the snapshot to fork: an id, a unique id prefix or a name, of one this server sees'),
        count: z.number().int().min(1).max(1000).default(1).describe('how many workspaces to fork (1 to 1000)'),
        name: z.string().min(1).max(120).optional().describe('the workspace name; with count > 1 the names are <name>-1 … <name>-K'),
        mountPath: absPathInput
          .optional()
          .describe("where to mount: an absolute path under the server's root (with count > 1, a directory per workspace under it)"),
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
        "The workspaces this server may act on (its scope's; every one of the namespace when it was started with the scope all), with mount state and lease.",
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
      input: { workspace: workspaceInput },
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
        workspace: workspaceInput,
        path: absPathInput.describe("the mount point: an absolute path under the server's root, missing or an empty directory"),
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
        workspace: workspaceInput,
        discard: z.boolean().default(false).describe('drop the uncheckpointed changes instead of keeping them on this host'),
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
      input: {
        workspace: workspaceInput,
        message: z.string().max(4096).optional().describe("the new snapshot's message"),
      },
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
        from: anyRefInput.describe(
          'the older side: a snapshot this server sees or one of its workspaces (alone: a workspace is compared with its live state, a snapshot with its parent)',
        ),
        to: anyRefInput.optional().describe('the newer side: a snapshot this server sees or one of its workspaces'),
        format: z.enum(['list', 'patch']).default('list').describe('list: the changed paths; patch: also a git-style patch'),
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
        ref: anyRefInput.describe('what to write out: a snapshot this server sees, or one of its workspaces (its head)'),
        format: z
          .enum(['tar', 'dir', 'git'])
          .describe('tar: a tar file; dir: a directory; git: a commit on a branch of a local repository'),
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
      input: {
        workspace: workspaceInput,
        force: z.boolean().default(false).describe('unmount a mounted workspace and drop its uncheckpointed changes first'),
      },
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
