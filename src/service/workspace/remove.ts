import { AwcError } from '../../core/errors.js';
import type { Catalog, SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { UnmountResult } from '../../drivers/port/mount-driver.js';
import { readHostState, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import type { KeptFile } from '../kept/kept-files.js';

/** What `awc rm` removed: catalog rows only (bytes go with `awc gc`). */
export interface RemoveResult {
  kind: 'workspace' | 'snapshot';
  id: string;
  /** Workspace: it was mounted on this host and `force` unmounted it (its uncheckpointed changes dropped). */
  unmounted?: boolean;
  /** Workspace: uncheckpointed changes kept on this host were dropped (`force`; without it only secrets, kept, and scratch are). */
  discarded?: boolean;
  /** Snapshot: children that now have its parent as their parent. */
  reparented?: string[];
  /** Snapshot (`force`): workspaces whose base moved to its parent (or their head). */
  rebased?: string[];
  /** Workspace: secret files that existed nowhere else, kept on this host (`awc kept`). */
  kept?: KeptFile[];
}

/**
 * Flags of an unmount (`Awc.unmount`): drop uncheckpointed changes, detach a busy mount
 * lazily; `keptOnly` (a remove's discard) refuses a workspace that is mounted (E_ALREADY_MOUNTED).
 */
export interface UnmountFlags {
  discard?: boolean;
  force?: boolean;
  keptOnly?: boolean;
}

/** Whether a workspace's host state holds changes a checkpoint would store (`LiveState.changed` without secrets). */
export interface PendingCheck {
  changed(ws: WorkspaceRow, state: WorkspaceHostState, secrets: false): Promise<boolean>;
}

/** What `removeRef` needs from the service (implemented by `Awc`). */
export interface RemoveContext {
  readonly catalog: Catalog;
  readonly namespace: string;
  readonly config: { host: string };
  readonly paths: { workspaces: string };
  resolve(ref: string): Promise<{ kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; workspace: WorkspaceRow }>;
  unmount(ref: string, opts: UnmountFlags): Promise<UnmountResult & { kept?: KeptFile[] }>;
}

/**
 * `awc rm <workspace|snapshot>` (docs/explanation/gc.md#rm-removes-rows-never-bytes): removes
 * catalog rows only.
 * - A workspace mounted anywhere is refused (E_ALREADY_MOUNTED); with `force`, one mounted on
 *   this host is unmounted first, discarding its uncheckpointed changes (never lazily: a busy
 *   mount is E_TARGET_BUSY). Uncheckpointed changes kept on this host after an unmount are
 *   refused (E_IN_USE) unless `force` drops them; secrets and scratch are not such changes
 *   (a checkpoint never stores them): a host state holding nothing else is removed without
 *   `force`. Either way its secrets are kept on the host first and listed in `kept`
 *   (docs/explanation/capture-classes.md#nothing-lost-on-remove).
 * - A snapshot: see `Catalog.removeSnapshot` (E_IN_USE for a head or layer; for a base or the
 *   parent of named snapshots unless `force`).
 * @throws E_NOT_FOUND, E_AMBIGUOUS, E_ALREADY_MOUNTED, E_IN_USE, E_TARGET_BUSY, E_STILL_MOUNTED
 */
export async function removeRef(
  ctx: RemoveContext,
  live: PendingCheck,
  ref: string,
  opts: { force?: boolean } = {},
): Promise<RemoveResult> {
  const r = await ctx.resolve(ref);
  if (r.kind === 'snapshot') {
    const { reparented, rebased } = await ctx.catalog.removeSnapshot(ctx.namespace, r.snapshot.id, { force: opts.force });
    return { kind: 'snapshot', id: r.snapshot.id, reparented, rebased };
  }
  const ws = r.workspace;
  const out: RemoveResult = { kind: 'workspace', id: ws.id };
  if (ws.mountState === 'mounted') {
    const here = ws.mountHost === ctx.config.host;
    if (!opts.force || !here) {
      throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.name ?? ws.id} is mounted at ${ws.mountPath} on ${ws.mountHost}`, {
        hint: here
          ? `Unmount it first (\`awc unmount ${ws.id}\`), or pass --force to unmount it and drop its uncheckpointed changes.`
          : `Unmount it on ${ws.mountHost} first; rm --force never touches another host's mount.`,
        details: { path: ws.mountPath, host: ws.mountHost },
      });
    }
    const u = await ctx.unmount(ws.id, { discard: true });
    if (u.kept) out.kept = u.kept;
    out.unmounted = true;
  }
  const state = await readHostState(ctx.paths.workspaces, ws.id);
  if (state) {
    if (!opts.force && (await pendingBesidesSecrets(live, ws, state))) {
      throw new AwcError('E_IN_USE', `workspace ${ws.name ?? ws.id} has uncheckpointed changes kept on this host`, {
        hint: `Checkpoint them (\`awc checkpoint ${ws.id}\`), or pass --force to drop them. Secrets alone would not stop a remove: they are kept on this host.`,
        details: { workspace: ws.id },
      });
    }
    const u = await ctx.unmount(ws.id, { discard: true, keptOnly: !opts.force });
    if (u.kept) out.kept = [...(out.kept ?? []), ...u.kept];
    if (opts.force) out.discarded = true;
  }
  await ctx.catalog.deleteWorkspace(ctx.namespace, ws.id);
  return out;
}

/** Whether a host state holds changes a checkpoint would store; one whose files cannot be scanned (gone) counts as holding some (only `force` drops it). */
async function pendingBesidesSecrets(live: PendingCheck, ws: WorkspaceRow, state: WorkspaceHostState): Promise<boolean> {
  try {
    return await live.changed(ws, state, false);
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_SOURCE_NOT_FOUND') return true;
    throw err;
  }
}
