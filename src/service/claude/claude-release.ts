import { lstat, rmdir } from 'node:fs/promises';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import { mountPoints } from '../../host/mount/mount-table.js';
import type { ClaudeAwc } from './claude-port.js';
import type { KeptFile } from '../kept/kept-files.js';
import { checkWork, checkWorktree, type RunAs, type WorkCheck } from './claude-work.js';
import { unregisterWorktree } from './claude-worktree.js';

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
  /** On a hook workspace made before worktrees were registered: the digest of its refs when its branch was made (claude-work.ts refsDigest). */
  refs: 'awc.claude.refs',
  /** On a hook workspace registered as a worktree of the project: its branch (`worktree-<name>`). */
  branch: 'awc.claude.branch',
  /** On a hook workspace registered as a worktree of the project: its administrative directory (`<project>/.git/worktrees/<id>`). */
  gitdir: 'awc.claude.gitdir',
  /** On a hook workspace whose lockfiles differ from the prepared snapshot's: the snapshot's environment key. */
  envStale: 'awc.claude.env-stale',
  /** On the checkpoint a release makes: the project of the workspace (not `project`: that marks the prepared snapshot). */
  checkpointOf: 'awc.claude.checkpoint-of',
} as const;

/** What releasing one hook workspace did (WorktreeRemove, `awc prune`). */
export interface ReleaseResult {
  workspace: string;
  /** The directory it was mounted at (null when unknown). */
  path: string | null;
  /** The snapshot holding its work: a new checkpoint, or its head when nothing changed since (or nothing was kept). */
  snapshot: string;
  /** True when a new checkpoint was made. */
  checkpointed: boolean;
  /**
   * Whether it held work to keep, and why (`work` false: nothing uncommitted and no new
   * commits, so no checkpoint was made; null: git could not tell, so it was checkpointed as
   * any workspace is).
   */
  work: WorkCheck;
  unmounted: boolean;
  /** The branch of a workspace registered as a worktree of the project: kept in the project's repository (null: none). */
  branch: string | null;
  /** The project (the `awc.claude.project` label; null: none). */
  project: string | null;
  /** Secret files that existed nowhere else, kept on this host by the remove (`awc kept`; absent when none). */
  kept?: KeptFile[];
}

/**
 * Releases a workspace the Claude Code hook created, the safe way `rm` does it. First, does
 * it hold work (checkWork: in a git checkout, uncommitted changes, i.e. tracked changes or
 * untracked files git does not ignore, or commits and refs made in it)? When git says it
 * holds none, no checkpoint is made and its changes (ignored, reconstructible files such as
 * `node_modules`, git's own bookkeeping) are dropped. Otherwise (or when git cannot tell) its
 * durable work is checkpointed (the new snapshot gets the workspace's `awc.claude.name` and
 * `awc.claude.session` labels, and `awc.claude.checkpoint-of=<project>`, so
 * `awc snapshot ls --label awc.claude.name=<name>` finds it). Either way secret files, never
 * stored, are kept on the host by the remove and listed in `kept`. Then it is unmounted, its
 * (then empty) directory removed, no mount may be left at or below it, and the workspace row
 * is removed. Any failure stops there and keeps the workspace: a failed checkpoint keeps it
 * mounted; a busy unmount (E_TARGET_BUSY naming the processes, with a hint to end them) keeps
 * it mounted and checkpointed; a directory that is not empty after the unmount keeps the
 * (checkpointed, unmounted) row. With `dryRun`, nothing is done and the result says what would be.
 * @throws E_LEASED (mounted on another host), what checkpoint / unmount / rm throw
 *   (E_CHANGED_DURING_READ, E_TARGET_BUSY, E_IN_USE, E_LEASE_LOST…), E_TARGET_BUSY (the
 *   directory is not empty after the unmount), E_STILL_MOUNTED (a mount is left below it)
 */
export async function releaseClaudeWorkspace(
  awc: ClaudeAwc,
  ws: WorkspaceRow,
  opts: { message: string; dryRun?: boolean; runAs?: RunAs },
): Promise<ReleaseResult> {
  const path = ws.mountPath ?? ws.labels[CLAUDE_LABELS.path] ?? null;
  if (ws.mountState === 'mounted' && ws.mountHost !== awc.host) {
    throw new AwcError('E_LEASED', `workspace ${ws.id} is mounted on host ${ws.mountHost}`, {
      hint: `Release it on ${ws.mountHost} (run \`awc prune\` there).`,
      details: { workspace: ws.id, host: ws.mountHost },
    });
  }
  const mounted = ws.mountState === 'mounted';
  const work = await workOf(ws, opts.runAs);
  const git = { branch: ws.labels[CLAUDE_LABELS.branch] ?? null, project: ws.labels[CLAUDE_LABELS.project] ?? null };
  if (opts.dryRun) return { workspace: ws.id, path, snapshot: ws.headSnapshotId, checkpointed: false, work, unmounted: mounted, ...git };
  let snapshot = ws.headSnapshotId;
  let checkpointed = false;
  if (work.work !== false) {
    const cp = await awc.checkpoint(ws.id, { message: opts.message });
    ({ id: snapshot, changed: checkpointed } = cp);
    if (cp.changed) await labelCheckpoint(awc, ws, cp.id);
  }
  let kept: KeptFile[] | undefined;
  // nothing to keep: its changes are dropped (secrets are kept on the host by the unmount)
  if (mounted) kept = (await unmountOrNameHolders(awc, ws, path, snapshot, { discard: work.work === false })).kept;
  if (path !== null) await removeEmptyDir(path);
  // the registration goes once the directory is gone (the branch stays in the project's repository)
  const admin = ws.labels[CLAUDE_LABELS.gitdir];
  if (admin !== undefined && path !== null) await unregisterWorktree(admin, path);
  // changes kept on this host (the upper an unmount keeps for its secrets) are in the checkpoint now but the
  // secrets: rm keeps those and drops the rest; anything written after the checkpoint makes it refuse (E_IN_USE)
  const removed = await awc.rm(ws.id);
  const all = [...(kept ?? []), ...(removed.kept ?? [])];
  return { workspace: ws.id, path, snapshot, checkpointed, work, unmounted: mounted, ...git, ...(all.length ? { kept: all } : {}) };
}

/**
 * Whether the mounted hook workspace `ws` holds work (WorkCheck): a registered worktree of the
 * project (label `awc.claude.gitdir`) by checkWorktree, one with the snapshot's own `.git` by
 * checkWork; git failing, or an unmounted workspace, cannot tell (null: it is checkpointed).
 */
async function workOf(ws: WorkspaceRow, runAs?: RunAs): Promise<WorkCheck> {
  if (ws.mountState !== 'mounted' || !ws.mountPath) return { work: null, why: 'not mounted: git cannot look' };
  const registered = ws.labels[CLAUDE_LABELS.gitdir] !== undefined;
  const check = registered ? checkWorktree(ws.mountPath, runAs) : checkWork(ws.mountPath, ws.labels[CLAUDE_LABELS.refs], runAs);
  return check.catch((err: unknown): WorkCheck => ({
    work: null,
    why: `git could not tell: ${err instanceof Error ? err.message : String(err)}`,
  }));
}

/** Labels a release's checkpoint (never awc.claude.project: that label marks the prepared snapshot the hook forks). */
async function labelCheckpoint(awc: ClaudeAwc, ws: WorkspaceRow, id: string): Promise<void> {
  const keep: Record<string, string> = Object.fromEntries(
    [CLAUDE_LABELS.session, CLAUDE_LABELS.name].filter((k) => ws.labels[k] !== undefined).map((k) => [k, ws.labels[k]!]),
  );
  if (ws.labels[CLAUDE_LABELS.project] !== undefined) keep[CLAUDE_LABELS.checkpointOf] = ws.labels[CLAUDE_LABELS.project]!;
  await awc.setLabels(id, keep);
}

/**
 * Unmounts a hook workspace; a busy mount (E_TARGET_BUSY, naming the processes) gets a hint
 * a hook's user can follow: which processes to end, and that the work is safe meanwhile.
 * @throws E_TARGET_BUSY, what unmount throws
 */
async function unmountOrNameHolders(
  awc: ClaudeAwc,
  ws: WorkspaceRow,
  path: string | null,
  snapshot: string,
  opts: { discard: boolean },
): Promise<{ kept?: KeptFile[] }> {
  try {
    return await awc.unmount(ws.id, opts);
  } catch (err) {
    if (!(err instanceof AwcError && err.code === 'E_TARGET_BUSY')) throw err;
    const holders = (err.details?.holders as { pid: number }[] | undefined) ?? [];
    const pids = [...new Set(holders.map((h) => h.pid))].join(' ');
    throw new AwcError('E_TARGET_BUSY', err.message, {
      hint: `${pids ? `End those processes (\`kill ${pids}\`) or move their shells out of ${path ?? 'the worktree'}` : `Close the shells and programs using ${path ?? 'the worktree'}`}, then remove the worktree again (or run \`awc prune\`). The workspace stays mounted meanwhile${opts.discard ? '; it holds no uncommitted work' : `; its work is checkpointed in ${snapshot}`}.`,
      details: { ...err.details, workspace: ws.id, snapshot },
      cause: err,
    });
  }
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
