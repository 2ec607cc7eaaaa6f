import { lstat, mkdir, rm } from 'node:fs/promises';
import type { Digest } from '../core/digest.js';
import { AwcError } from '../core/errors.js';
import { mkdirPrivate } from '../core/private-fs.js';
import type { Entry } from '../core/tree.js';
import type { ContentReader } from '../store/content-reader.js';
import type { ContentWriter } from '../store/content-writer.js';
import { isMounted } from '../host/mount-table.js';
import { bindMountNoSuid, unmount } from '../host/mount-commands.js';
import { removeHostState, workspaceDirs, writeHostState, type WorkspaceHostState } from '../host/workspace-state.js';
import { recordStats } from '../host/copy-stat-cache.js';
import type { WorkspaceRow } from '../catalog/catalog.js';
import type { Awc, MountResult } from './awc.js';
import { exportDir, LEFT_OUT_DEVICE, LEFT_OUT_SETID } from './export-dir.js';

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
export interface CopyMaterialised {
  /** The private tree behind the bind mount; undefined when written at the target itself. */
  tree?: string;
  leftOut: { path: string; reason: string }[];
}

/**
 * Materialises `root` for workspace `wsId` at `target` (an empty directory).
 * @throws what exportDir throws
 */
export async function materialiseCopy(
  reader: ContentReader,
  root: Digest,
  workspacesDir: string,
  wsId: string,
  target: string,
  onProgress?: (p: { files: number; bytes: number }) => void,
): Promise<CopyMaterialised> {
  const dirs = workspaceDirs(workspacesDir, wsId);
  if (process.getuid?.() === 0) {
    // written whole where only root reaches it, then bound at the target: the target shows
    // nothing before the mount exists, and the mount has the flags before it shows anything
    await mkdirPrivate(dirs.dir);
    await rm(dirs.tree, { recursive: true, force: true });
    try {
      await exportDir(reader, root, dirs.tree, { onProgress });
      await bindMountNoSuid(dirs.tree, target);
      return { tree: dirs.tree, leftOut: [] };
    } catch (err) {
      await rm(dirs.tree, { recursive: true, force: true }).catch(() => undefined);
      // no such mount can be made here: fall back to a materialisation without privileges
      if (!(err instanceof AwcError && err.code === 'E_MOUNT_FAILED')) throw err;
    }
  }
  const r = await exportDir(reader, root, target, { onProgress, unprivileged: true });
  return { leftOut: r.leftOut };
}

/**
 * Mounts a workspace with the copy driver at `target` (an empty directory, checked by the
 * caller): materialises its head (materialiseCopy), records the stat cache and the host
 * state, then the mount in the catalog; on failure nothing stays mounted or recorded.
 * @throws E_IN_USE (uncheckpointed changes from an earlier mount), what materialiseCopy throws
 */
export async function mountCopy(
  awc: Awc,
  ws: WorkspaceRow,
  target: string,
  pending: WorkspaceHostState | undefined,
  onProgress?: (p: { files: number; bytes: number }) => void,
): Promise<MountResult> {
  if (pending)
    throw new AwcError('E_IN_USE', `workspace ${ws.id} has uncheckpointed changes in ${pending.target}`, {
      hint: `Checkpoint them from there after remounting is not possible with the copy driver; discard with \`awc unmount ${ws.id} --discard\`.`,
    });
  const head = await awc.getSnapshot(ws.headSnapshotId);
  const m = await materialiseCopy(awc.reader(), head.root, awc.paths.workspaces, ws.id, target, onProgress);
  const state: WorkspaceHostState = {
    v: 1,
    workspaceId: ws.id,
    namespace: awc.namespace,
    driver: 'copy',
    target,
    layerSnapshotId: head.id,
    layerRoot: head.root,
  };
  if (m.tree !== undefined) state.tree = m.tree;
  if (m.leftOut.length > 0) state.leftOut = m.leftOut;
  try {
    state.statCache = recordStats(copyTreeOf(state));
    await writeHostState(awc.paths.workspaces, state);
    await awc.catalog.setMount(ws.id, { path: target, driver: 'copy', host: awc.config.host });
  } catch (err) {
    await releaseCopy(state, true).catch(() => undefined);
    await removeHostState(awc.paths.workspaces, ws.id).catch(() => undefined);
    throw err;
  }
  const r: MountResult = { workspace: ws.id, path: target, driver: 'copy', resumed: false };
  if (m.tree === undefined) r.leftOut = m.leftOut;
  return r;
}

/** The directory a copy-driver workspace's files are read from (the private tree, else the target). */
export function copyTreeOf(state: WorkspaceHostState): string {
  return state.tree ?? state.target;
}

/**
 * Binds a copy workspace's private tree at its target again when the bind mount is gone
 * (after a reboot); `prepareTarget` checks the target is an empty directory first.
 * Returns false when there is nothing to rebind (no private tree, or still mounted).
 * @throws E_TARGET_BUSY (target not empty), E_MOUNT_FAILED
 */
export async function rebindCopy(state: WorkspaceHostState, prepareTarget: (target: string) => Promise<void>): Promise<boolean> {
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
export async function releaseCopy(state: WorkspaceHostState, force: boolean): Promise<void> {
  if (state.tree !== undefined) {
    if (isMounted(state.target)) await unmount(state.target, force);
    await rm(state.tree, { recursive: true, force: true });
    return;
  }
  await rm(state.target, { recursive: true, force: true });
  await mkdir(state.target, { recursive: true });
}

/**
 * Puts entries a copy materialisation left out back into a scanned root: a device node
 * whose name is still free in its (still existing) directory, and the setuid/setgid bits
 * of a file whose content and other mode bits are unchanged (as the kernel clears them on
 * a write). Returns `scanned` itself when there is nothing to put back.
 */
export async function restoreLeftOut(
  src: ContentReader,
  writer: ContentWriter,
  scanned: Digest,
  base: Map<string, Entry>,
  leftOut: { path: string; reason: string }[] | undefined,
): Promise<Digest> {
  const wanted = new Map<string, Entry>();
  for (const l of leftOut ?? []) {
    const e = base.get(l.path);
    if (e && (l.reason === LEFT_OUT_DEVICE || l.reason === LEFT_OUT_SETID)) wanted.set(l.path, e);
  }
  if (wanted.size === 0) return scanned;
  const patch = async (tree: Digest, rel: string): Promise<Digest> => {
    const t = await src.readTree(tree);
    const entries = [...t.entries];
    let changed = false;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      const p = rel === '' ? e.name : `${rel}/${e.name}`;
      const b = wanted.get(p);
      if (e.type === 'dir' && [...wanted.keys()].some((k) => k.startsWith(`${p}/`))) {
        const inner = await patch(e.tree, p);
        if (inner !== e.tree) entries[i] = { ...e, tree: inner };
        changed ||= inner !== e.tree;
      } else if (
        b?.type === 'file' &&
        e.type === 'file' &&
        e.digest === b.digest &&
        (e.mode & ~0o6000) === (b.mode & ~0o6000) &&
        e.mode !== b.mode
      ) {
        entries[i] = { ...e, mode: b.mode };
        changed = true;
      }
    }
    for (const [p, b] of wanted) {
      const slash = p.lastIndexOf('/');
      if ((slash < 0 ? '' : p.slice(0, slash)) !== rel || (b.type !== 'chardev' && b.type !== 'blockdev')) continue;
      if (entries.some((e) => e.name === b.name)) continue;
      entries.push(b);
      changed = true;
    }
    return changed ? writer.writeTree(entries) : tree;
  };
  const root = await src.readRoot(scanned);
  const tree = await patch(root.tree, '');
  if (tree === root.tree) return scanned;
  const { v: _v, type: _t, chunker: _c, ...attrs } = root;
  return writer.writeRoot({ ...attrs, tree });
}
