import { existsSync } from 'node:fs';
import { toAwcError } from '../../core/errors.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { mountHolders, type MountHolder } from '../../host/mount/mount-holders.js';
import { readGitLink, registrationExists } from '../git/worktree-git.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ClaudeAwc } from './claude-port.js';
import { CLAUDE_LABELS, releaseClaudeWorkspace, type ReleaseResult } from './claude-release.js';

/**
 * Why `awc prune` releases a hook workspace: its directory is gone (`directory-gone`); it is
 * recorded as mounted here but nothing is mounted at its path any more (`not-mounted`: the
 * mount was detached, or the directory was deleted and made again); its `.git` is gone
 * (`not-a-worktree`: git's removal deletes it first); it is a linked git worktree of the
 * project whose registration is gone (`unregistered`: `git worktree prune` / `remove` ran);
 * its session is gone (`session-gone`).
 */
export type PruneReason = 'directory-gone' | 'not-mounted' | 'not-a-worktree' | 'unregistered' | 'session-gone';

/** One workspace `awc prune` looked at and released (or would, with `dryRun`), or failed to. */
export interface PruneEntry {
  workspace: string;
  name: string | null;
  path: string | null;
  reason: PruneReason;
  /** What the release did (absent with `dryRun` or when it failed). */
  released?: ReleaseResult;
  /** Why the release failed (the workspace is kept). */
  error?: { code: string; message: string };
  /** The processes using its mount: it is in use, so it is left alone (nothing checkpointed or unmounted). */
  busy?: MountHolder[];
  /** It was released meanwhile by another prune (or a WorktreeRemove): nothing left to do. */
  gone?: boolean;
}

/** The report of `awc prune`. */
export interface PruneReport {
  dryRun: boolean;
  /** Hook workspaces released (or that would be), with why. */
  pruned: PruneEntry[];
  /** Hook workspaces kept: their directory and session are there (or they live on another host). */
  kept: number;
  /** Hook workspaces of other users of the namespace, left alone (an ordinary user's prune; always 0 for root). */
  others: number;
}

/**
 * Why a hook workspace is stale, if it is (docs/explanation/claude-code.md#prune):
 * its directory is gone (the path it was mounted at no longer exists); mounted here, it is
 * no longer a mount, or no longer the git worktree it was (mountedWorktreeGone); or its session is
 * gone (the transcript file Claude Code named in the create payload no longer exists:
 * Claude Code deletes transcripts of old sessions, `cleanupPeriodDays`). A workspace whose
 * payload named no transcript is judged by its directory only.
 */
export function staleReason(ws: WorkspaceRow): PruneReason | undefined {
  const path = ws.mountPath ?? ws.labels[CLAUDE_LABELS.path];
  if (path !== undefined && path !== null && !existsSync(path)) return 'directory-gone';
  if (ws.mountState === 'mounted' && ws.mountPath) {
    const gone = mountedWorktreeGone(ws, ws.mountPath);
    if (gone) return gone;
  }
  const transcript = ws.labels[CLAUDE_LABELS.transcript];
  if (transcript !== undefined && !existsSync(transcript)) return 'session-gone';
  return undefined;
}

/**
 * The git side of a workspace mounted at `path` (on this host): `not-mounted` when nothing is
 * mounted there; `unregistered` when its `.git` is a `gitdir:` file whose registration in the
 * project is gone; `not-a-worktree` when its `.git` is gone and it was made in a git checkout
 * (the hook recorded its refs, `awc.claude.refs`). Works whether `.git` is a directory (a
 * private repository) or a file (a registered worktree of the project).
 */
function mountedWorktreeGone(ws: WorkspaceRow, path: string): PruneReason | undefined {
  if (!isMounted(path)) return 'not-mounted';
  const link = readGitLink(path);
  if (link.kind === 'file' && !registrationExists(link.gitdir)) return 'unregistered';
  if (link.kind === 'missing' && ws.labels[CLAUDE_LABELS.refs] !== undefined) return 'not-a-worktree';
  return undefined;
}

/**
 * `awc prune [--dry-run]`: finds the workspaces the Claude Code hook made (labelled
 * `awc.claude.session` or `awc.claude.path`) on this host whose directory or session is
 * gone (see staleReason), and releases each the safe way WorktreeRemove does
 * (releaseClaudeWorkspace: checkpoint, unmount, remove the directory, rm). A failure is
 * reported on its entry and the workspace kept; the others go on. A workspace whose mount
 * some process uses is in use: left alone, its entry naming them (`busy`). One released
 * meanwhile by another prune is `gone`. `dryRun` changes nothing.
 * Workspaces mounted on another host are that host's to prune. An ordinary user (`uid` not
 * 0; default this process's) prunes only the workspaces their own hook made (label
 * `awc.claude.uid`): another user's directory may merely be unreadable to them, and the
 * root daemon refuses them another user's mounted workspace anyway.
 */
export async function pruneClaude(awc: ClaudeAwc, opts: { dryRun?: boolean; uid?: number } = {}): Promise<PruneReport> {
  const dryRun = opts.dryRun === true;
  const uid = opts.uid ?? process.getuid?.() ?? 0;
  const report: PruneReport = { dryRun, pruned: [], kept: 0, others: 0 };
  for (const ws of await awc.listWorkspaces()) {
    if (ws.labels[CLAUDE_LABELS.path] === undefined && ws.labels[CLAUDE_LABELS.session] === undefined) continue;
    if (uid !== 0 && ws.labels[CLAUDE_LABELS.uid] !== String(uid)) {
      report.others++;
      continue;
    }
    const reason = ws.mountState === 'mounted' && ws.mountHost !== awc.host ? undefined : staleReason(ws);
    if (reason === undefined) {
      report.kept++;
      continue;
    }
    const entry: PruneEntry = {
      workspace: ws.id,
      name: ws.labels[CLAUDE_LABELS.name] ?? ws.name,
      path: ws.mountPath ?? ws.labels[CLAUDE_LABELS.path] ?? null,
      reason,
    };
    const holders = ws.mountState === 'mounted' && ws.mountPath && isMounted(ws.mountPath) ? mountHolders(ws.mountPath) : [];
    if (holders.length > 0) {
      entry.busy = holders;
      report.pruned.push(entry);
      continue;
    }
    try {
      const r = await releaseClaudeWorkspace(awc, ws, { message: `claude worktree ${entry.name ?? ws.id}: pruned (${reason})`, dryRun });
      if (!dryRun) entry.released = r;
    } catch (err) {
      const e = toAwcError(err);
      // released meanwhile (two prunes at once, a WorktreeRemove): nothing left to do
      if (e.code === 'E_NOT_FOUND' && !(await stillThere(awc, ws.id))) entry.gone = true;
      else entry.error = { code: e.code, message: e.message };
    }
    report.pruned.push(entry);
  }
  return report;
}

/** Whether workspace `id` still exists. */
async function stillThere(awc: ClaudeAwc, id: string): Promise<boolean> {
  return (await awc.listWorkspaces()).some((w) => w.id === id);
}
