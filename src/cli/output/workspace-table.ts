import { basename } from 'node:path';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { LeaseView } from '../../service/workspace/lease-guard.js';
import { textTable } from '../../core/text-table.js';

/** A workspace as `awc ls` lists it: its row and its lease. */
export type ListedWorkspace = WorkspaceRow & { lease: LeaseView };

/**
 * `awc ls` for people: a table with a header (ID, NAME, STATE, PATH, OWNER, LEASE, AGE,
 * LABELS), or one sentence when there is nothing to list (`filtered`: a label filter was
 * given). A workspace without a name is named by what made it (`claude:<name>` for a
 * Claude Code worktree, `attach:<dir>` for an attached worktree), else `-`. OWNER is the agent
 * session or tool that made it; LABELS lists the user's own labels (AWC's `awc.*` labels are
 * in `awc show`). STATE is `released` for a workspace the idle release unmounted (PATH: where
 * it was; `awc mount <id> <path>` resumes it). `nowMs` is the clock (ms since the epoch) the ages are counted from.
 */
export function formatWorkspaceTable(rows: readonly ListedWorkspace[], nowMs: number, filtered: boolean): string {
  if (rows.length === 0)
    return filtered
      ? 'no workspace has these labels'
      : 'no workspaces yet: fork one from a snapshot with `awc fork <snapshot> --name <name>` (`awc snapshot ls` lists them)';
  return textTable(
    ['ID', 'NAME', 'STATE', 'PATH', 'OWNER', 'LEASE', 'AGE', 'LABELS'],
    rows.map((w) => [
      w.id,
      displayName(w),
      w.mountState === 'mounted'
        ? `mounted (${w.mountDriver ?? '?'})`
        : w.labels['awc.released-at'] !== undefined
          ? 'released'
          : 'unmounted',
      w.mountState === 'mounted'
        ? `${w.mountPath ?? '?'}${w.lease.here === 'elsewhere' ? ` on ${w.mountHost ?? '?'}` : ''}`
        : (w.labels['awc.released-path'] ?? '-'),
      owner(w),
      leaseCell(w.lease),
      age(nowMs - Date.parse(w.createdAt)),
      userLabels(w),
    ]),
  );
}

function displayName(w: WorkspaceRow): string {
  if (w.name !== null) return w.name;
  const claude = w.labels['awc.claude.name'];
  if (claude !== undefined) return `claude:${claude}`;
  const dir = w.labels['awc.attach.dir'];
  if (dir !== undefined) return `attach:${basename(dir)}`;
  return '-';
}

function owner(w: WorkspaceRow): string {
  const session = w.labels['awc.claude.session'];
  if (session !== undefined) return `claude session ${session.slice(0, 8)}`;
  if (w.labels['awc.attach.dir'] !== undefined) return 'awc attach';
  return '-';
}

function leaseCell(l: LeaseView): string {
  if (l.state === 'none') return '-';
  if (l.here === 'held') return 'here';
  if (l.here === 'lost') return 'LOST';
  if (l.here === 'elsewhere') return `${l.holder ?? '?'} (${l.state})`;
  return 'free';
}

/** A duration (ms) as its largest unit: `45s`, `12m`, `5h`, `3d` (under 2 of the next unit stays in the smaller one). */
export function age(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

function userLabels(w: WorkspaceRow): string {
  const own = Object.entries(w.labels).filter(([k]) => !k.startsWith('awc.'));
  return own.length === 0 ? '-' : own.map(([k, v]) => `${k}=${v}`).join(',');
}
