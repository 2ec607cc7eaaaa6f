import { readFile } from 'node:fs/promises';
import { removeTree } from '../../core/remove-tree.js';
import { mkdirPrivate, replaceFilePrivate } from '../../core/private-fs.js';
import { join } from 'node:path';
import type { Digest } from '../../core/digest.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';

/**
 * Host-local state of a workspace that has (or had) a mount on this host, kept in
 * `<workspaces>/<id>/state.json`. It says which snapshot the private changes sit on
 * (`layerSnapshotId`): a checkpoint does not remount, so the upper keeps growing on the
 * same layer until the workspace is unmounted clean.
 */
export interface WorkspaceHostState {
  v: 1;
  workspaceId: string;
  namespace: string;
  driver: MountDriverName;
  /** Absolute mount target. */
  target: string;
  /**
   * Copy driver: the private directory the snapshot is materialised in (`<workspace dir>/tree`,
   * bind-mounted at `target` with nosuid,nodev). Absent: materialised at `target` itself,
   * without setuid/setgid bits or device nodes (no bind mount could be made; see `leftOut`).
   */
  tree?: string;
  /** Copy driver without a bind mount: what was not materialised (relative path, reason). */
  leftOut?: { path: string; reason: string }[];
  layerSnapshotId: string;
  layerRoot: Digest;
  /**
   * Overlay driver: the overlay's mount id and device (`major:minor`) as /proc/self/mountinfo
   * showed them right after mounting. A lazily detached overlay keeps its mount id: the holder
   * scan (upper-use.ts) finds the processes that keep it alive by it.
   */
  mount?: { id: number; dev: string };
  /**
   * The ordinary user who mounted it through the root daemon (docs/explanation/security.md
   * "Per-user sockets"): its layer is theirs (`<userLayers>/<uid>`), and only they (and root)
   * may unmount, checkpoint or remove it. Absent: mounted by root.
   */
  owner?: { uid: number; gid: number };
  /** Copy driver: the stat of every materialised path (relative) when it was written, to skip unchanged files. */
  statCache?: Record<string, [string, string, string, string]>;
}

/** Directory layout of one workspace on this host (`tree`: the copy driver's materialised snapshot). */
export function workspaceDirs(
  workspacesDir: string,
  id: string,
): { dir: string; upper: string; work: string; tree: string; state: string } {
  const dir = join(workspacesDir, id);
  return { dir, upper: join(dir, 'upper'), work: join(dir, 'work'), tree: join(dir, 'tree'), state: join(dir, 'state.json') };
}

/** Reads the state, or undefined when the workspace has none on this host. */
export async function readHostState(workspacesDir: string, id: string): Promise<WorkspaceHostState | undefined> {
  try {
    return JSON.parse(await readFile(workspaceDirs(workspacesDir, id).state, 'utf8')) as WorkspaceHostState;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Writes the state atomically (temp file + rename; directory 0700, file 0600). */
export async function writeHostState(workspacesDir: string, s: WorkspaceHostState): Promise<void> {
  const d = workspaceDirs(workspacesDir, s.workspaceId);
  await mkdirPrivate(d.dir);
  await replaceFilePrivate(d.state, JSON.stringify(s));
}

/** Removes all host state of a workspace (upper, work dir, state file). */
export async function removeHostState(workspacesDir: string, id: string): Promise<void> {
  await removeTree(workspaceDirs(workspacesDir, id).dir);
}
