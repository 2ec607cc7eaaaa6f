import { existsSync } from 'node:fs';
import { toAwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ClaudeAwc } from './claude-port.js';
import { CLAUDE_LABELS, releaseClaudeWorkspace, type ReleaseResult } from './claude-release.js';

/** Why `awc prune` releases a hook workspace. */
export type PruneReason = 'directory-gone' | 'session-gone';

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
 * its directory is gone (the path it was mounted at no longer exists), or its session is
 * gone (the transcript file Claude Code named in the create payload no longer exists:
 * Claude Code deletes transcripts of old sessions, `cleanupPeriodDays`). A workspace whose
 * payload named no transcript is judged by its directory only.
 */
export function staleReason(ws: WorkspaceRow): PruneReason | undefined {
  const path = ws.mountPath ?? ws.labels[CLAUDE_LABELS.path];
  if (path !== undefined && path !== null && !existsSync(path)) return 'directory-gone';
  const transcript = ws.labels[CLAUDE_LABELS.transcript];
  if (transcript !== undefined && !existsSync(transcript)) return 'session-gone';
  return undefined;
}

/**
 * `awc prune [--dry-run]`: finds the workspaces the Claude Code hook made (labelled
 * `awc.claude.session` or `awc.claude.path`) on this host whose directory or session is
 * gone (see staleReason), and releases each the safe way WorktreeRemove does
 * (releaseClaudeWorkspace: checkpoint, unmount, remove the directory, rm). A failure is
 * reported on its entry and the workspace kept; the others go on. `dryRun` changes nothing.
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
    try {
      const r = await releaseClaudeWorkspace(awc, ws, { message: `claude worktree ${entry.name ?? ws.id}: pruned (${reason})`, dryRun });
      if (!dryRun) entry.released = r;
    } catch (err) {
      const e = toAwcError(err);
      entry.error = { code: e.code, message: e.message };
    }
    report.pruned.push(entry);
  }
  return report;
}
