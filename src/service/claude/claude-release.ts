import { lstat, rmdir } from 'node:fs/promises';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import { mountPoints } from '../../host/mount/mount-table.js';
import type { ClaudeAwc } from './claude-port.js';
import type { KeptFile } from '../kept/kept-files.js';

/** Labels AWC puts on what the Claude Code hooks make (docs/explanation/claude-code.md#labels). */
export const CLAUDE_LABELS = {
  /** On the prepared snapshot and on each hook workspace: the project's real path. */
  project: 'awc.claude.project',
  /** On a hook workspace: Claude Code's session id. */
  session: 'awc.claude.session',
  /** On a hook workspace: the worktree name Claude Code asked for. */
  name: 'awc.claude.name',
  /** On a hook workspace: the session's transcript file (prune's "session gone" test). */
  transcript: 'awc.claude.transcript',
  /** On a hook workspace: the directory it was mounted at (realpath). */
  path: 'awc.claude.path',
  /** On a hook workspace: the uid of the user whose hook made it (`awc prune` of an ordinary user releases only theirs). */
  uid: 'awc.claude.uid',
  /** On the checkpoint a release makes: the project of the workspace (not `project`: that marks the prepared snapshot). */
  checkpointOf: 'awc.claude.checkpoint-of',
} as const;

/** What releasing one hook workspace did (WorktreeRemove, `awc prune`). */
export interface ReleaseResult {
  workspace: string;
  /** The directory it was mounted at (null when unknown). */
  path: string | null;
  /** The snapshot holding its work: a new checkpoint, or its head when nothing changed since. */
  snapshot: string;
  /** True when a new checkpoint was made. */
  checkpointed: boolean;
  unmounted: boolean;
  /** Secret files that existed nowhere else, kept on this host by the remove (`awc kept`; absent when none). */
  kept?: KeptFile[];
}

/**
 * Releases a workspace the Claude Code hook created, the safe way `rm` does it: checkpoint
 * its durable work first (secret files, never stored, are kept on the host by the remove and listed in `kept`) (the new snapshot gets the workspace's `awc.claude.name` and
 * `awc.claude.session` labels, and `awc.claude.checkpoint-of=<project>`, so
 * `awc snapshot ls --label awc.claude.name=<name>` finds it), then unmount it, remove its
 * (then empty) directory, check no mount is left at or below it, and remove the workspace
 * row. Any failure stops there and keeps the workspace: a failed checkpoint keeps it
 * mounted; a directory that is not empty after the unmount keeps the (checkpointed,
 * unmounted) row. With `dryRun`, nothing is done and the result says what would be.
 * @throws E_LEASED (mounted on another host), what checkpoint / unmount / rm throw
 *   (E_CHANGED_DURING_READ, E_TARGET_BUSY, E_IN_USE, E_LEASE_LOST…), E_TARGET_BUSY (the
 *   directory is not empty after the unmount), E_STILL_MOUNTED (a mount is left below it)
 */
export async function releaseClaudeWorkspace(
  awc: ClaudeAwc,
  ws: WorkspaceRow,
  opts: { message: string; dryRun?: boolean },
): Promise<ReleaseResult> {
  const path = ws.mountPath ?? ws.labels[CLAUDE_LABELS.path] ?? null;
  if (ws.mountState === 'mounted' && ws.mountHost !== awc.host) {
    throw new AwcError('E_LEASED', `workspace ${ws.id} is mounted on host ${ws.mountHost}`, {
      hint: `Release it on ${ws.mountHost} (run \`awc prune\` there).`,
      details: { workspace: ws.id, host: ws.mountHost },
    });
  }
  const mounted = ws.mountState === 'mounted';
  if (opts.dryRun) return { workspace: ws.id, path, snapshot: ws.headSnapshotId, checkpointed: false, unmounted: mounted };
  const cp = await awc.checkpoint(ws.id, { message: opts.message });
  if (cp.changed) {
    // never awc.claude.project: that label marks the prepared snapshot the hook forks
    const keep: Record<string, string> = Object.fromEntries(
      [CLAUDE_LABELS.session, CLAUDE_LABELS.name].filter((k) => ws.labels[k] !== undefined).map((k) => [k, ws.labels[k]!]),
    );
    if (ws.labels[CLAUDE_LABELS.project] !== undefined) keep[CLAUDE_LABELS.checkpointOf] = ws.labels[CLAUDE_LABELS.project]!;
    await awc.setLabels(cp.id, keep);
  }
  if (mounted) await awc.unmount(ws.id, {});
  if (path !== null) await removeEmptyDir(path);
  // changes kept on this host (the upper an unmount keeps for its secrets) are in the checkpoint now but the
  // secrets: rm keeps those and drops the rest; anything written after the checkpoint makes it refuse (E_IN_USE)
  const { kept } = await awc.rm(ws.id);
  return { workspace: ws.id, path, snapshot: cp.id, checkpointed: cp.changed, unmounted: mounted, ...(kept?.length ? { kept } : {}) };
}

/**
 * Removes the directory a workspace was mounted at once it is unmounted: it must be empty
 * (what a mount target was) and no mount may be left at or below it; a path that is gone
 * already is fine; a symlink there is left alone (refused).
 * @throws E_STILL_MOUNTED, E_TARGET_BUSY (not empty, not a directory)
 */
async function removeEmptyDir(path: string): Promise<void> {
  const left = [...mountPoints()].filter((m) => m === path || m.startsWith(path + '/'));
  if (left.length > 0)
    throw new AwcError('E_STILL_MOUNTED', `${path} still has a mount at ${left[0]}`, {
      hint: 'Unmount what is mounted there (`awc unmount <path>`), then run the remove again.',
      details: { path, mounts: left },
    });
  const st = await lstat(path).catch(() => undefined);
  if (st === undefined) return;
  if (!st.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${path} is not a directory; left alone`, { details: { path } });
  try {
    await rmdir(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code === 'ENOTEMPTY' || code === 'EEXIST')
      throw new AwcError('E_TARGET_BUSY', `${path} is not empty after the unmount; left alone (the workspace is checkpointed and kept)`, {
        hint: `Something wrote into the directory under the mount; move what is there away, then run \`awc prune\`.`,
        details: { path },
      });
    throw toAwcError(err);
  }
}
