/**
 * Idle release (docs/explanation/lifecycle.md#idle-release): a workspace idle beyond its TTL
 * is checkpointed, unmounted and its host state dropped, and recorded as released in its
 * labels (IDLE_LABELS); `awc mount` brings it back from its head. Released workspaces older
 * than the retention are removed once nothing of theirs is left uncheckpointed.
 */
import { rmdir, stat } from 'node:fs/promises';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { readHostState } from '../../drivers/port/workspace-state.js';
import type { MountHolder } from '../../host/mount/mount-holders.js';
import { CLAUDE_LABELS } from '../claude/claude-release.js';
import { userGit, type RunAs } from '../claude/claude-work.js';
import { unregisterWorktree } from '../claude/claude-worktree.js';
import type { Awc } from '../workspace/awc.js';
import { IDLE_LABELS, LOCK_REASON, idleDecision, idleTtlOf, probeActivity, unlockReleased, type IdleVerdict } from '../workspace/idle.js';

/** What releasing one workspace did. JSON. */
export interface IdleReleaseResult {
  workspace: string;
  /** The directory it was mounted at. */
  path: string;
  /** The snapshot holding its work: a new checkpoint, or its head when nothing changed since. */
  snapshot: string;
  /** True when a new checkpoint was made. */
  checkpointed: boolean;
  /** Changes written after the checkpoint (or secret files) are kept on this host; the next mount resumes them. */
  pending: boolean;
  /** The Claude Code worktree registration it has was locked (`git worktree lock`) so git does not prune it. */
  locked: boolean;
}

/**
 * Releases `ws`, mounted on this host: checkpoints it (a failed checkpoint stops here and
 * leaves it mounted: work is never lost), unmounts it (never forced: a process that opened
 * something since makes it E_TARGET_BUSY and it stays mounted, checkpointed), records the
 * release in its labels, and locks its git worktree registration (a Claude Code hook
 * worktree: `git worktree lock`, as its user) so `git worktree prune` keeps it.
 * @throws E_NOT_MOUNTED (not mounted on this host), what checkpoint / unmount throw (E_CHANGED_DURING_READ, E_TARGET_BUSY, E_LEASE_LOST…)
 */
export async function releaseWorkspace(awc: Awc, ref: string, opts: { message?: string } = {}): Promise<IdleReleaseResult> {
  const ws = await awc.getWorkspace(ref);
  if (ws.mountState !== 'mounted' || ws.mountHost !== awc.config.host || !ws.mountPath)
    throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is not mounted on this host`, { details: { workspace: ws.id } });
  const path = ws.mountPath;
  const cp = await awc.checkpoint(ws.id, { message: opts.message ?? 'released by awc' });
  const un = await awc.unmount(ws.id);
  await awc.setLabels(ws.id, {
    [IDLE_LABELS.releasedAt]: new Date().toISOString(),
    [IDLE_LABELS.releasedSnapshot]: cp.id,
    [IDLE_LABELS.releasedPath]: path,
  });
  const locked = await lockWorktree(ws, path);
  return { workspace: ws.id, path, snapshot: cp.id, checkpointed: cp.changed, pending: un.pending, locked };
}

/** Whether `ws` is recorded as released (and not mounted since). */
export function isReleased(ws: Pick<WorkspaceRow, 'labels' | 'mountState'>): boolean {
  return ws.mountState !== 'mounted' && ws.labels[IDLE_LABELS.releasedAt] !== undefined;
}

/**
 * `git worktree lock --reason "released by awc" <path>` in the project of a
 * Claude Code hook workspace registered as its worktree, as the user whose hook made it;
 * false when it is none or git failed (never throws: the release is done either way).
 */
async function lockWorktree(ws: WorkspaceRow, path: string): Promise<boolean> {
  const project = ws.labels[CLAUDE_LABELS.project];
  if (project === undefined || ws.labels[CLAUDE_LABELS.gitdir] === undefined) return false;
  const runAs = await ownerOf(ws);
  return userGit(project, ['worktree', 'lock', '--reason', LOCK_REASON, path], 'E_GIT_FAILED', runAs).then(
    () => true,
    () => false,
  );
}

/** The user whose hook made `ws` (label `awc.claude.uid`, group of its worktree registration), undefined for this process's. */
async function ownerOf(ws: WorkspaceRow): Promise<RunAs | undefined> {
  const uid = Number(ws.labels[CLAUDE_LABELS.uid]);
  if (!Number.isSafeInteger(uid) || uid === process.getuid?.()) return undefined;
  const st = await stat(ws.labels[CLAUDE_LABELS.gitdir]!).catch(() => undefined);
  return { uid, gid: st?.gid ?? uid };
}

/** One workspace an idle sweep looked at. JSON. */
export interface IdleSweepEntry {
  workspace: string;
  name: string | null;
  /** `released` now, `kept` (not idle: why in `verdict`), `failed` (release or removal failed: `error`), `removed` (retention over). */
  status: 'released' | 'kept' | 'failed' | 'removed';
  verdict?: IdleVerdict;
  released?: IdleReleaseResult;
  error?: { code: string; message: string };
}

/** What an idle sweep of one namespace did. JSON. */
export interface IdleSweepReport {
  namespace: string;
  entries: IdleSweepEntry[];
}

/**
 * One idle sweep of the namespace of `awc` on this host: each workspace mounted here (but
 * attached worktrees', whose bind mounts `awc detach` and `awc prune` release) is probed
 * (probeActivity) and released when idle (idleDecision with its TTL: label `awc.idle-ttl`,
 * else config `idleReleaseMs`); each released workspace older than `releasedRetentionMs`
 * (0: kept forever) with nothing uncheckpointed left on this host is removed (`rm`). A
 * failure is reported in its entry and the sweep goes on. `nowMs`: the clock (tests).
 */
export async function sweepIdle(awc: Awc, opts: { nowMs?: number; dryRun?: boolean } = {}): Promise<IdleSweepReport> {
  const nowMs = opts.nowMs ?? Date.now();
  const entries: IdleSweepEntry[] = [];
  for (const ws of await awc.listWorkspaces()) {
    const entry = isReleased(ws)
      ? await retire(awc, ws, nowMs, opts.dryRun === true)
      : ws.mountState === 'mounted' && ws.mountHost === awc.config.host && ws.labels['awc.attach.dir'] === undefined
        ? await sweepOne(awc, ws, nowMs, opts.dryRun === true)
        : undefined;
    if (entry) entries.push(entry);
  }
  return { namespace: awc.namespace, entries };
}

/** Probes one mounted workspace and releases it when idle. */
async function sweepOne(awc: Awc, ws: WorkspaceRow, nowMs: number, dryRun: boolean): Promise<IdleSweepEntry> {
  const base = { workspace: ws.id, name: ws.name };
  try {
    const state = await readHostState(awc.paths.workspaces, ws.id);
    const probe = await probeActivity(ws, state, awc.paths.workspaces);
    const verdict = idleDecision({ ...probe, ttlMs: idleTtlOf(ws, awc.config.idleReleaseMs), nowMs });
    if (!verdict.idle || dryRun) return { ...base, status: verdict.idle ? 'released' : 'kept', verdict };
    const released = await releaseWorkspace(awc, ws.id, { message: `idle for ${Math.round(verdict.idleForMs / 1000)} s: released by awc` });
    return { ...base, status: 'released', verdict, released };
  } catch (err) {
    const e = toAwcError(err);
    return { ...base, status: 'failed', error: { code: e.code, message: e.message } };
  }
}

/**
 * Removes a released workspace whose retention is over (`rm`, which refuses while changes
 * are left uncheckpointed on this host); its Claude Code worktree registration is unlocked
 * and unregistered and its (empty) directory removed. Undefined when its time has not come.
 */
async function retire(awc: Awc, ws: WorkspaceRow, nowMs: number, dryRun: boolean): Promise<IdleSweepEntry | undefined> {
  const retention = awc.config.releasedRetentionMs;
  const at = Date.parse(ws.labels[IDLE_LABELS.releasedAt]!);
  if (retention <= 0 || !(nowMs - at >= retention)) return undefined;
  const base = { workspace: ws.id, name: ws.name };
  if (dryRun) return { ...base, status: 'removed' };
  try {
    const path = ws.labels[IDLE_LABELS.releasedPath];
    await awc.rm(ws.id);
    const admin = ws.labels[CLAUDE_LABELS.gitdir];
    // a Claude Code worktree's registration and its (empty) directory go with it, as when its hook releases it
    if (path !== undefined && admin !== undefined) {
      await unlockReleased(ws);
      await unregisterWorktree(admin, path).catch(() => false);
      await rmdir(path).catch(() => undefined);
    }
    return { ...base, status: 'removed' };
  } catch (err) {
    const e = toAwcError(err);
    return { ...base, status: 'failed', error: { code: e.code, message: e.message } };
  }
}

/** The holders of a `kept` entry, for log lines: `123 bash, 456 vim`. */
export function holdersText(holders: readonly MountHolder[] | undefined): string {
  return (holders ?? []).map((h) => `${h.pid} ${h.command}`).join(', ');
}
