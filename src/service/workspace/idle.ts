/**
 * Idle release, the decision and the probe (docs/explanation/lifecycle.md#idle-release): a
 * workspace mounted on this host is idle when no process holds its mount (an open file, a
 * working directory or root, a mapping inside it: mountHolders) and nothing was written in
 * it for its TTL. The last write is the newest mtime or ctime in its upper (what the
 * overlay's writes change: only changed files are there, so the walk is O(changes)), or the
 * time of its mount or last checkpoint when later.
 */
import { lstat, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { LabelPatch } from '../../catalog/port/labels.js';
import { parseDuration } from '../../core/duration.js';
import { mountHolders, type MountHolder } from '../../host/mount/mount-holders.js';
import { workspaceDirs, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import { pointWorktreeRegistration, writeWorktreeGitFile } from '../git/worktree-link.js';

/** Labels of idle release (docs/reference/labels.md). */
export const IDLE_LABELS = {
  /** On a workspace: its own idle TTL (a duration such as `6h`, `3d`; `0` or `never`: never released when idle). */
  ttl: 'awc.idle-ttl',
  /** On a released workspace: when it was released (ISO 8601). */
  releasedAt: 'awc.released-at',
  /** On a released workspace: the snapshot holding its work when it was released (its head then). */
  releasedSnapshot: 'awc.released-snapshot',
  /** On a released workspace: the directory it was mounted at (the resume command mounts it there again). */
  releasedPath: 'awc.released-path',
} as const;

/** What the idle decision looks at. Times in ms since the epoch. */
export interface IdleInputs {
  /** The last activity: the newest write in the workspace, its mount or its last checkpoint. */
  lastActivityMs: number;
  /** Processes holding its mount (any one keeps it). */
  holders: readonly MountHolder[];
  /** Its TTL in ms (0: never released when idle). */
  ttlMs: number;
  nowMs: number;
}

/** The idle decision: `idle` with how long, or why not (`held`: a process holds it; `recent`: active within the TTL; `never`: TTL 0). */
export type IdleVerdict =
  { idle: true; idleForMs: number } | { idle: false; reason: 'held' | 'recent' | 'never'; idleForMs: number; holders?: MountHolder[] };

/**
 * Whether a workspace is idle (pure): never when its TTL is 0 or a process holds it,
 * otherwise when its last activity is at least `ttlMs` ago (a clock that went backwards
 * counts as activity now).
 */
export function idleDecision(i: IdleInputs): IdleVerdict {
  const idleForMs = Math.max(0, i.nowMs - i.lastActivityMs);
  if (i.ttlMs <= 0) return { idle: false, reason: 'never', idleForMs };
  if (i.holders.length > 0) return { idle: false, reason: 'held', idleForMs, holders: [...i.holders] };
  if (idleForMs < i.ttlMs) return { idle: false, reason: 'recent', idleForMs };
  return { idle: true, idleForMs };
}

/**
 * The idle TTL of `ws` (ms): its `awc.idle-ttl` label (a duration; `never`: 0) or `defaultMs`
 * (config `idleReleaseMs`). A label that is not a duration is ignored (the default applies).
 */
export function idleTtlOf(ws: Pick<WorkspaceRow, 'labels'>, defaultMs: number): number {
  const v = ws.labels[IDLE_LABELS.ttl];
  if (v === undefined) return defaultMs;
  if (v.trim() === 'never') return 0;
  try {
    return parseDuration(v, IDLE_LABELS.ttl);
  } catch {
    return defaultMs;
  }
}

/**
 * The newest mtime or ctime (ms) of `dir` and everything below it (lstat, never following
 * a link), or undefined when `dir` is missing. Entries that vanish during the walk are skipped.
 */
export async function newestChangeMs(dir: string): Promise<number | undefined> {
  const top = await lstat(dir).catch(() => undefined);
  if (!top) return undefined;
  let newest = Math.max(top.mtimeMs, top.ctimeMs);
  const stack = top.isDirectory() ? [dir] : [];
  while (stack.length > 0) {
    const d = stack.pop()!;
    for (const name of await readdir(d).catch(() => [] as string[])) {
      const p = join(d, name);
      const st = await lstat(p).catch(() => undefined);
      if (!st) continue;
      newest = Math.max(newest, st.mtimeMs, st.ctimeMs);
      if (st.isDirectory()) stack.push(p);
    }
  }
  return newest;
}

/** What {@link probeActivity} found: the holders of the mount and the last activity (ms since the epoch). */
export interface ActivityProbe {
  holders: MountHolder[];
  lastActivityMs: number;
}

/**
 * The activity of a workspace mounted on this host at `ws.mountPath`: the processes holding
 * its mount (mountHolders, /proc only) and its last activity ({@link lastActivityMs}).
 */
export async function probeActivity(
  ws: WorkspaceRow,
  state: WorkspaceHostState | undefined,
  workspacesDir: string,
): Promise<ActivityProbe> {
  const holders = ws.mountPath ? mountHolders(ws.mountPath) : [];
  return { holders, lastActivityMs: await lastActivityMs(ws, state, workspacesDir) };
}

/**
 * The last activity of a workspace on this host (ms since the epoch): the latest of the row's
 * last change (mount, checkpoint: `updatedAt`), its host state file and the newest change in
 * its upper (overlay) or materialised tree (copy driver: O(tree)). Reads with lstat only.
 */
export async function lastActivityMs(ws: WorkspaceRow, state: WorkspaceHostState | undefined, workspacesDir: string): Promise<number> {
  const dirs = workspaceDirs(workspacesDir, ws.id);
  const times = [Date.parse(ws.updatedAt)];
  const stateFile = await lstat(dirs.state).catch(() => undefined);
  if (stateFile) times.push(stateFile.mtimeMs);
  if (state) {
    const written = await newestChangeMs(state.driver === 'overlay' ? dirs.upper : (state.tree ?? state.target));
    if (written !== undefined) times.push(written);
  }
  return Math.max(...times.filter((t) => Number.isFinite(t)));
}

/** The reason the idle release gives `git worktree lock` (service/idle/idle-release.ts); only a lock with it is ever removed by AWC. */
export const LOCK_REASON = 'released by awc';

/** The label of a Claude Code hook workspace registered as a worktree: its administrative directory (CLAUDE_LABELS.gitdir). */
const GITDIR_LABEL = 'awc.claude.gitdir';

/**
 * Unlocks the git worktree registration of `ws` (label `awc.claude.gitdir`) that its release
 * locked: removes `<gitdir>/locked` (what `git worktree unlock` removes) when it holds
 * LOCK_REASON, so a lock of the user's own stays. False when there was none of ours. Never throws.
 */
export async function unlockReleased(ws: Pick<WorkspaceRow, 'labels'>): Promise<boolean> {
  const admin = ws.labels[GITDIR_LABEL];
  if (admin === undefined) return false;
  const lock = join(admin, 'locked');
  const reason = await readFile(lock, 'utf8').catch(() => undefined);
  if (reason?.trim() !== LOCK_REASON) return false;
  return rm(lock).then(
    () => true,
    () => false,
  );
}

/**
 * Links a released Claude Code hook worktree, mounted again at `path`, back to its git
 * worktree registration (label `awc.claude.gitdir`): a checkpoint keeps the worktree's `.git`
 * file out (capture-policy.ts), so the workspace mounted from its release checkpoint shows the
 * prepared snapshot's `.git` there; it becomes the `gitdir:` file again and the registration
 * names `path` (git/worktree-link.ts). Run by the workspace's own user (Awc.mount in process,
 * or an ordinary user's client after the daemon mounted it): the label and both paths are
 * theirs, so nothing is written with more rights than theirs. Only a registration that is one
 * (`<gitdir>/commondir` exists); false when there is none. `ws`: the row as it was before the mount.
 * @throws what writing the link throws
 */
export async function relinkReleasedWorktree(ws: Pick<WorkspaceRow, 'labels'>, path: string): Promise<boolean> {
  const admin = ws.labels[GITDIR_LABEL];
  if (admin === undefined || ws.labels[IDLE_LABELS.releasedAt] === undefined) return false;
  if (!(await stat(join(admin, 'commondir')).catch(() => undefined))?.isFile()) return false;
  await writeWorktreeGitFile(path, admin);
  await pointWorktreeRegistration(admin, path);
  return true;
}

/**
 * Clears the release of `ws` once it is mounted again (Awc.mount): its release labels go
 * (through `setLabels`) and its git worktree registration is unlocked (unlockReleased).
 * Does nothing for a workspace never released.
 */
export async function clearRelease(ws: WorkspaceRow, setLabels: (id: string, patch: LabelPatch) => Promise<unknown>): Promise<void> {
  if (ws.labels[IDLE_LABELS.releasedAt] === undefined) return;
  await setLabels(ws.id, { [IDLE_LABELS.releasedAt]: null, [IDLE_LABELS.releasedSnapshot]: null, [IDLE_LABELS.releasedPath]: null });
  await unlockReleased(ws);
}
