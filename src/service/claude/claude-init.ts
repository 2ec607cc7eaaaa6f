import { lstat, mkdir, mkdtemp, readdir, realpath, rmdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { Progress } from '../../drivers/port/mount-driver.js';
import type { ClaudeAwc } from './claude-port.js';
import { CLAUDE_LABELS } from './claude-release.js';
import { planClaudeSettings, writeClaudeSettings } from './claude-settings.js';
import { excludeFromGit } from '../git/git-exclude.js';

/** What `awc init claude` did. */
export interface ClaudeInitResult {
  /** The project's real path (the value of `awc.claude.project`). */
  project: string;
  /** The prepared snapshot. */
  snapshot: string;
  /** True when this run imported it (first run, or `update`). */
  imported: boolean;
  /** With `update`: files read, and files taken unread from the stat cache of the last import (`miss`: why none). */
  statCache?: { reused: number; read: number; miss?: string };
  files: number;
  bytes: number;
  /** True when this run mounted the new snapshot once so its first WorktreeCreate does not build the host's layer (overlay driver). */
  warmed: boolean;
  /** With `update`: the earlier prepared snapshot, unlabelled (and removed when nothing uses it). */
  replaced?: { id: string; removed: boolean };
  /**
   * The hooks' settings: `.claude/settings.local.json` (machine-local; kept out of git by
   * `excludedIn`, the repository's info/exclude, null when the project is no git checkout).
   * `migrated`: the committed `.claude/settings.json` AWC's hooks were taken out of (an
   * earlier init wrote them there), else null.
   */
  settings: { path: string; created: boolean; changed: boolean; command: string; migrated: string | null; excludedIn: string | null };
}

/** The path an import of the project leaves out: the workspaces the hook mounts inside it. */
const WORKTREES = '.claude/worktrees';

/** What of the project's `.git` directory the prepared snapshot keeps: what a worktree starts from (see gitLeftOut). */
const GIT_KEPT = new Set(['index', 'config']);

/**
 * The entries of the project's `.git` directory the import leaves out (`.git/<name>`): all
 * but its index (the worktree's index starts as it, with the stat data the mount shows) and
 * its config (the object format the index is read with). A worktree's git data is the
 * project's repository (claude-worktree.ts); a copy of the objects, refs and hooks in the
 * snapshot would only be read by nobody and deleted, entry by entry through the mount, by
 * every WorktreeCreate (docs/explanation/claude-code.md#what-the-prepared-snapshot-holds).
 * None when `.git` is no directory (a file naming a repository elsewhere, or none).
 */
async function gitLeftOut(project: string): Promise<string[]> {
  const git = join(project, '.git');
  if (!(await lstat(git).catch(() => undefined))?.isDirectory()) return [];
  return (await readdir(git)).filter((n) => !GIT_KEPT.has(n)).map((n) => `.git/${n}`);
}

/**
 * `awc init claude [dir]` (docs/how-to/claude-code.md): imports the project (its git
 * checkout with the installed dependencies, `.claude/worktrees/` left out) as its prepared
 * snapshot, labelled `awc.claude.project=<realpath>`, once: a project that has one keeps it
 * unless `update` (which imports again and moves the label, removing the old snapshot when
 * no workspace uses it). Then merges the hooks running `hookCommand` into
 * `.claude/settings.local.json`, kept out of git through the repository's info/exclude, and
 * takes AWC's hooks out of the committed `.claude/settings.json` where an earlier init put
 * them (see planClaudeSettings). The settings files are checked before the
 * import, so a malformed one refuses at once and nothing is imported. With the overlay
 * driver, a new snapshot is mounted once (and released) here, outside any hook, so that the
 * host's layer of it is built before the first WorktreeCreate needs it.
 * @throws E_SOURCE_NOT_FOUND (no such directory), E_CLAUDE_SETTINGS, what importSnapshot throws
 */
export async function initClaude(
  awc: ClaudeAwc,
  dir: string,
  opts: { hookCommand: string; update?: boolean; onProgress?: Progress },
): Promise<ClaudeInitResult> {
  const project = await realpath(dir).catch(() => undefined);
  if (project === undefined || !(await stat(project)).isDirectory())
    throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`, { details: { path: dir } });
  const plan = await planClaudeSettings(project, opts.hookCommand);
  const [existing] = await awc.listSnapshots({ labels: { [CLAUDE_LABELS.project]: project } });
  let result: Omit<ClaudeInitResult, 'settings'>;
  if (existing && !opts.update) {
    result = { project, snapshot: existing.id, imported: false, files: existing.fileCount, bytes: existing.byteCount, warmed: false };
  } else {
    // every import keeps a stat cache; `update` reads only the files changed since the last one (incremental-prepare.md)
    const r = await awc.importSnapshot(project, {
      message: `awc init claude ${project}`,
      labels: { [CLAUDE_LABELS.project]: project },
      onProgress: opts.onProgress,
      leaveOut: [WORKTREES, ...(await gitLeftOut(project))],
      statCache: true,
      ...(existing && { parent: existing.id }),
    });
    const warmed = (await awc.doctor()).driver === 'overlay';
    result = {
      project,
      snapshot: r.id,
      imported: true,
      files: r.files,
      bytes: r.bytes,
      warmed,
      ...(existing && r.statCache && { statCache: r.statCache }),
    };
    if (result.warmed) await warmLayer(awc, r.id);
    if (existing) {
      await awc.setLabels(existing.id, { [CLAUDE_LABELS.project]: null });
      // the base of live workspaces stays (rm refuses it); otherwise gc may take its bytes
      const removed = await awc.rm(existing.id).then(
        () => true,
        () => false,
      );
      result.replaced = { id: existing.id, removed };
    }
  }
  await writeClaudeSettings(plan);
  const excludedIn = await excludeFromGit(project, '/.claude/settings.local.json');
  return {
    ...result,
    settings: {
      path: plan.path,
      created: plan.create,
      changed: plan.changed,
      command: plan.command,
      migrated: plan.legacy?.path ?? null,
      excludedIn,
    },
  };
}

/**
 * Mounts a throw-away workspace of `snapshotId` in a private temporary directory and
 * releases it again: the host daemon builds (and keeps) its layer of the snapshot, which a
 * first mount otherwise pays for (seconds for a tree with its node_modules).
 * @throws what fork and mount throw (the workspace and directory are removed either way)
 */
async function warmLayer(awc: ClaudeAwc, snapshotId: string): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'awc-warm-'));
  const [ws] = await awc.fork(snapshotId);
  try {
    // made by the caller (an ordinary user mounts only on a directory they own)
    await mkdir(join(dir, 'mnt'), { mode: 0o700 });
    await awc.mount(ws!.id, join(dir, 'mnt'));
    await awc.unmount(ws!.id, { discard: true });
  } finally {
    await awc.rm(ws!.id, { force: true }).catch(() => undefined);
    // empty directories only: never a recursive delete where a mount may be left
    await rmdir(join(dir, 'mnt')).catch(() => undefined);
    await rmdir(dir).catch(() => undefined);
  }
}
