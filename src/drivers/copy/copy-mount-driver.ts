import { lstat, mkdir } from 'node:fs/promises';
import { removeTree } from '../../core/remove-tree.js';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { mkdirPrivate } from '../../core/private-fs.js';
import type { Entry } from '../../core/tree.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import { walkTree } from '../../store/content/tree-source.js';
import { exportDir } from '../../host/tree/export-dir.js';
import { importDir } from '../../host/tree/import-dir.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { prepareMountTarget, unmount } from '../../host/mount/mount-commands.js';
import type {
  DoctorCheck,
  DriverContext,
  MountDriver,
  MountOptions,
  MountResult,
  MountUse,
  Progress,
  ScanOptions,
  ScanResult,
  UnmountOptions,
  UnmountResult,
} from '../port/mount-driver.js';
import { readHostState, removeHostState, workspaceDirs, writeHostState, type WorkspaceHostState } from '../port/workspace-state.js';
import { mountPathOf } from '../port/mount-path.js';
import { NOT_IN_USE } from '../port/mount-use.js';
import { bindMountNoSuid } from './bind-mount.js';
import { recordStats, reuseByStat } from './copy-stat-cache.js';
import { restoreLeftOut } from './restore-left-out.js';
import { undoMountRecord } from '../port/undo-mount-record.js';

/**
 * The copy driver: materialising, mounting and releasing a workspace
 * (docs/explanation/security.md, "Setuid bits and device nodes from snapshots").
 *
 * As root, the snapshot is written in full (setuid bits, device nodes and all) into the
 * workspace's private directory `<home>/host/workspaces/<id>/tree`, under the 0700 home,
 * and shown at the target through a `nosuid,nodev` bind mount (bindMountNoSuid): nothing
 * there is ever usable without those flags. Where no such mount can be made (not root, or
 * mount(2) refused), the snapshot is written at the target itself without setuid/setgid
 * bits and without device nodes, and the mount says what it left out; a scan of such a
 * workspace puts the left-out entries back as they were (restoreLeftOut), so leaving them
 * out is never taken for a change.
 */

/** Where and how a copy-driver workspace was materialised. */
interface CopyMaterialised {
  /** The private tree behind the bind mount; undefined when written at the target itself. */
  tree?: string;
  leftOut: { path: string; reason: string }[];
}

/**
 * Materialises `root` for workspace `wsId` at `target` (an empty directory).
 * @throws what exportDir throws
 */
async function materialiseCopy(
  reader: ContentReader,
  root: Digest,
  workspacesDir: string,
  wsId: string,
  target: string,
  onProgress?: Progress,
): Promise<CopyMaterialised> {
  const dirs = workspaceDirs(workspacesDir, wsId);
  if (process.getuid?.() === 0) {
    // written whole where only root reaches it, then bound at the target: the target shows
    // nothing before the mount exists, and the mount has the flags before it shows anything
    await mkdirPrivate(dirs.dir);
    await removeTree(dirs.tree);
    try {
      await exportDir(reader, root, dirs.tree, { onProgress });
      await bindMountNoSuid(dirs.tree, target);
      return { tree: dirs.tree, leftOut: [] };
    } catch (err) {
      await removeTree(dirs.tree).catch(() => undefined);
      // no such mount can be made here: fall back to a materialisation without privileges
      if (!(err instanceof AwcError && err.code === 'E_MOUNT_FAILED')) throw err;
    }
  }
  const r = await exportDir(reader, root, target, { onProgress, unprivileged: true });
  return { leftOut: r.leftOut };
}

/** The directory a copy-driver workspace's files are read from (the private tree, else the target). */
function copyTreeOf(state: WorkspaceHostState): string {
  return state.tree ?? state.target;
}

/**
 * Binds a copy workspace's private tree at its target again when the bind mount is gone
 * (after a reboot); `prepareTarget` checks the target is an empty directory first.
 * Returns false when there is nothing to rebind (no private tree, or still mounted).
 * @throws E_TARGET_BUSY (target not empty), E_MOUNT_FAILED
 */
async function rebindCopy(state: WorkspaceHostState, prepareTarget: (target: string) => Promise<void>): Promise<boolean> {
  if (state.tree === undefined || isMounted(state.target)) return false;
  if (!(await lstat(state.tree).catch(() => undefined))?.isDirectory()) return false;
  await prepareTarget(state.target);
  await bindMountNoSuid(state.tree, state.target);
  return true;
}

/**
 * Takes a copy-driver workspace off its target: the bind mount is removed (lazily with
 * `force`) and the private tree deleted; without a bind mount, the files at the target
 * are deleted. The target stays as an empty directory.
 * @throws E_TARGET_BUSY (the bind mount is in use; pass force)
 */
async function releaseCopy(state: WorkspaceHostState, force: boolean): Promise<void> {
  if (state.tree !== undefined) {
    if (isMounted(state.target)) await unmount(state.target, force);
    await removeTree(state.tree);
    return;
  }
  await removeTree(state.target);
  await mkdir(state.target, { recursive: true });
}

/**
 * The copy mount driver (see the module comment): needs nothing of the host, runs in the
 * calling process. Uncheckpointed changes are never kept across an unmount (E_IN_USE
 * without discard); a scan walks the materialised tree with a stat cache, then hashes.
 */
export class CopyMountDriver implements MountDriver {
  readonly name = 'copy' as const;

  constructor(private readonly ctx: DriverContext) {}

  doctor(): DoctorCheck[] {
    return [];
  }

  /**
   * Takes the lease with the mount record (one transaction), then materialises the workspace's
   * head (materialiseCopy) and records the stat cache and the host state; on failure nothing
   * stays mounted or recorded (a lease this mount took is released again).
   * @throws E_IN_USE (uncheckpointed changes from an earlier mount), E_LEASED, E_DAEMON_UNAVAILABLE, what materialiseCopy throws
   */
  async mount(ws: WorkspaceRow, target: string, pending: WorkspaceHostState | undefined, opts: MountOptions = {}): Promise<MountResult> {
    const { ctx } = this;
    // (mounted on another host: mountLeased refuses with E_LEASED, or lets a steal of an expired lease go on)
    if (ws.mountState === 'mounted' && ws.mountHost === ctx.config.host)
      throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} is already mounted at ${ws.mountPath}`);
    if (pending)
      throw new AwcError('E_IN_USE', `workspace ${ws.id} has uncheckpointed changes in ${pending.target}`, {
        hint: `Checkpoint them from there after remounting is not possible with the copy driver; discard with \`awc unmount ${ws.id} --discard\`.`,
      });
    await ctx.ensureHostSession();
    const head = await ctx.catalog.getSnapshot(ctx.config.namespace, ws.headSnapshotId);
    // the lease, the mount record and the copy's snapshot first, in one transaction: a host that loses the
    // race never shows a file, and gc keeps what the copy is made of before it is materialised
    const { taken } = await ctx.catalog.mountLeased(
      ws.id,
      { path: target, driver: 'copy', host: ctx.config.host },
      { steal: opts.steal, expectHeadId: head.id, layerSnapshotId: head.id },
    );
    let m: CopyMaterialised;
    const state: WorkspaceHostState = {
      v: 1,
      workspaceId: ws.id,
      namespace: ctx.config.namespace,
      driver: 'copy',
      target,
      layerSnapshotId: head.id,
      layerRoot: head.root,
    };
    try {
      m = await materialiseCopy(ctx.reader(), head.root, ctx.paths.workspaces, ws.id, target, opts.onProgress);
      if (m.tree !== undefined) state.tree = m.tree;
      if (m.leftOut.length > 0) state.leftOut = m.leftOut;
      state.statCache = recordStats(copyTreeOf(state));
      await writeHostState(ctx.paths.workspaces, state);
    } catch (err) {
      await releaseCopy(state, true).catch(() => undefined);
      await removeHostState(ctx.paths.workspaces, ws.id).catch(() => undefined);
      await undoMountRecord(ctx.catalog, ws.id, ctx.config.host, taken);
      throw err;
    }
    const r: MountResult = { workspace: ws.id, path: target, driver: 'copy', resumed: false };
    if (m.tree === undefined) r.leftOut = m.leftOut;
    return r;
  }

  /** Binds the private tree at the target again when the bind mount is gone (a reboot). @throws E_TARGET_BUSY, E_MOUNT_FAILED */
  async resume(ws: WorkspaceRow): Promise<MountResult | undefined> {
    const state = await readHostState(this.ctx.paths.workspaces, ws.id);
    if (!state || !(await rebindCopy(state, (t) => prepareMountTarget(t, this.ctx.config.home)))) return undefined;
    return { workspace: ws.id, path: state.target, driver: 'copy', resumed: true };
  }

  /**
   * Removes the bind mount (lazily with `force`) and the materialised tree, the host state
   * and the catalog record. @throws E_IN_USE (changes not checkpointed, without discard), E_TARGET_BUSY
   */
  async unmount(ws: WorkspaceRow, state: WorkspaceHostState | undefined, opts: UnmountOptions): Promise<UnmountResult> {
    const { ctx } = this;
    const path = mountPathOf(ws);
    const dirty = state !== undefined && !opts.discard && (await opts.changed()); // discarding needs no scan
    const head = await ctx.catalog.getSnapshot(ctx.config.namespace, ws.headSnapshotId);
    if (dirty)
      throw new AwcError('E_IN_USE', `workspace ${ws.id} has changes that are not checkpointed`, {
        hint: `Run \`awc checkpoint ${ws.id}\` first, or pass --discard to drop them.`,
      });
    await releaseCopy(
      state ?? {
        v: 1,
        workspaceId: ws.id,
        namespace: ctx.config.namespace,
        driver: 'copy',
        target: path,
        layerSnapshotId: head.id,
        layerRoot: head.root,
      },
      opts.force,
    );
    await removeHostState(ctx.paths.workspaces, ws.id);
    await ctx.catalog.setMount(ws.id, null);
    // nothing private of the workspace is left on this host
    await ctx.catalog.releaseLease(ws.id, ctx.config.host);
    return { workspace: ws.id, path, pending: false };
  }

  /**
   * Walks the materialised tree (importDir) with the stat cache: a file or symlink whose
   * stat is as materialised is its base entry; what was left out is put back. `committed`
   * refreshes the stat cache and the host state against the new head.
   */
  async scan(state: WorkspaceHostState, writer: ContentWriter, opts: ScanOptions = {}): Promise<ScanResult> {
    const { ctx } = this;
    const base = new Map<string, Entry>();
    for await (const { path, entry } of walkTree(ctx.reader(), state.layerRoot)) base.set(path, entry);
    const r = await importDir(copyTreeOf(state), writer, {
      reuse: reuseByStat(state.statCache ?? {}, base),
      allowChanging: opts.allowChanging,
      filter: opts.filter,
    });
    const root = await restoreLeftOut(ctx.reader(writer.sessionBlob.bind(writer)), writer, r.root, base, state.leftOut);
    return {
      root,
      filesRead: writer.stats.files,
      skipped: r.skipped,
      changing: r.changing,
      committed: async (snap) => {
        // the materialised directory now equals the new head: refresh the stat cache against it
        const statCache = recordStats(copyTreeOf(state), r.changing);
        await writeHostState(ctx.paths.workspaces, { ...state, layerSnapshotId: snap.id, layerRoot: snap.root, statCache });
        await ctx.catalog.setLayerSnapshot(state.workspaceId, snap.id);
      },
    };
  }

  /** Never in use: a copy has no mount that outlives its unmount. */
  async inUse(): Promise<MountUse> {
    return NOT_IN_USE;
  }

  materialised(state: WorkspaceHostState): string {
    return copyTreeOf(state);
  }

  /** Removes the stale copy (its bind mount lazily, the private tree or the files at the target) and the host state. */
  async dropStale(state: WorkspaceHostState): Promise<void> {
    await releaseCopy(state, true);
    await removeHostState(this.ctx.paths.workspaces, state.workspaceId);
  }
}
