import { existsSync } from 'node:fs';
import { lstat, mkdir, realpath, rmdir } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { mkdirPrivate } from '../../core/private-fs.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ClaudeAwc } from './claude-port.js';
import { worktreeNames, type WorktreeCreatePayload, type WorktreeRemovePayload } from './claude-payload.js';
import { checkHookOwns, nearestProject } from './claude-owner.js';
import { CLAUDE_LABELS, releaseClaudeWorkspace, type ReleaseResult } from './claude-release.js';
import { makeBranch, type RunAs } from './claude-work.js';

export type { RunAs } from './claude-work.js';

/** What WorktreeCreate made. `path` is what the hook prints: absolute, normalised, symlink-free. */
export interface ClaudeCreateResult {
  workspace: string;
  snapshot: string;
  path: string;
  /** The branch checked out in the workspace, or null when the project is not a git checkout. */
  branch: string | null;
  driver: string;
}

/** Options of {@link claudeWorktreeCreate}. */
export interface ClaudeCreateOptions {
  /** The project directory (Claude Code's `CLAUDE_PROJECT_DIR`); default the payload's `cwd`. */
  projectDir?: string;
  /** Run git as this user (the hook's caller, through the daemon); default this process's user. */
  runAs?: RunAs;
  /** A line for the hook's log (stderr). */
  onLog?: (line: string) => void;
}

/**
 * The prepared snapshot of the project that `dir` is in: the newest snapshot labelled
 * `awc.claude.project=<dir or its nearest ancestor>` (realpaths).
 * @throws E_NOT_PREPARED (with the hint to run `awc init claude`)
 */
export async function findPreparedSnapshot(awc: ClaudeAwc, dir: string): Promise<{ project: string; snapshot: SnapshotRow }> {
  const byProject = new Map<string, SnapshotRow>();
  // newest first: the first one seen for a project is its current prepared snapshot
  for (const s of await awc.listSnapshots()) {
    const p = s.labels[CLAUDE_LABELS.project];
    if (p !== undefined && !byProject.has(p)) byProject.set(p, s);
  }
  const { start, project } = await nearestProject(dir, (d) => byProject.has(d));
  if (project !== null) return { project, snapshot: byProject.get(project)! };
  throw new AwcError('E_NOT_PREPARED', `no prepared snapshot for ${start} (nor any directory above it)`, {
    hint: `Run \`awc init claude ${start}\` once (outside Claude Code): it imports the project with its dependencies.`,
    details: { project: start },
  });
}

/**
 * Claude Code's WorktreeCreate (docs/how-to/claude-code.md): forks the project's prepared
 * snapshot, mounts the workspace at the path the payload names or Claude Code's usual
 * `<project>/.claude/worktrees/<name>` (missing parents created 0700), and, in a git
 * checkout, creates and checks out branch `worktree-<name>` there as the calling user. The
 * workspace is labelled (`awc.claude.*`: project, session, name, transcript, path; and `refs`,
 * the digest of its git refs once the branch is made, which tells WorktreeRemove whether
 * commits were made in it) for WorktreeRemove and `awc prune`. Nothing is left behind on failure: a workspace that cannot
 * be mounted or branched is unmounted and removed again.
 * @throws E_NOT_PREPARED (no prepared snapshot: at once, before anything is made), E_TARGET_BUSY
 *   (the path exists and is not an empty directory, or is a symlink), E_BRANCH_FAILED (git
 *   refused the branch), what fork and mount throw
 */
export async function claudeWorktreeCreate(
  awc: ClaudeAwc,
  p: WorktreeCreatePayload,
  opts: ClaudeCreateOptions = {},
): Promise<ClaudeCreateResult> {
  const { project, snapshot } = await findPreparedSnapshot(awc, opts.projectDir ?? p.cwd);
  const names = worktreeNames(p.name);
  const wanted = p.path ?? join(project, '.claude', 'worktrees', names.dir);
  await mkdirPrivate(dirname(wanted));
  // a symlink-free target: the parent's real path, and no symlink at the last step
  const target = join(await realpath(dirname(wanted)), basename(wanted));
  const st = await lstat(target).catch(() => undefined);
  if (st?.isSymbolicLink())
    throw new AwcError('E_TARGET_BUSY', `${target} is a symbolic link; refusing to mount there`, { details: { path: target } });
  const labels: Record<string, string> = {
    [CLAUDE_LABELS.project]: project,
    [CLAUDE_LABELS.name]: p.name,
    [CLAUDE_LABELS.path]: target,
    [CLAUDE_LABELS.uid]: String(process.getuid?.() ?? 0),
    ...(p.sessionId === null ? {} : { [CLAUDE_LABELS.session]: p.sessionId }),
    ...(p.transcriptPath === null ? {} : { [CLAUDE_LABELS.transcript]: p.transcriptPath }),
  };
  const [ws] = await awc.fork(snapshot.id, { labels });
  opts.onLog?.(`forked ${ws!.id} from ${snapshot.id} (${project})`);
  let mounted = false;
  try {
    // made here, by the caller: an ordinary user's workspace is mounted only on a directory they own
    if (!st) await mkdir(target, { mode: 0o700 });
    const m = await awc.mount(ws!.id, target);
    mounted = true;
    opts.onLog?.(`mounted ${ws!.id} at ${m.path} (${m.driver})`);
    let branch: string | null = null;
    const dotGit = await lstat(join(target, '.git')).catch(() => undefined);
    if (dotGit?.isDirectory()) {
      // the refs digest: what WorktreeRemove compares against (a commit or ref made in the worktree is work to keep)
      const refs = await makeBranch(target, names.branch, opts.runAs, opts.onLog);
      branch = names.branch;
      if (refs !== undefined) await awc.setLabels(ws!.id, { [CLAUDE_LABELS.refs]: refs });
      opts.onLog?.(`on new branch ${branch}`);
    } else if (dotGit) opts.onLog?.(`${project}'s .git is not a directory (a linked worktree or submodule): no branch made`);
    else opts.onLog?.(`${project} is not a git checkout: no branch made`);
    return { workspace: ws!.id, snapshot: snapshot.id, path: await realpath(target), branch, driver: m.driver };
  } catch (err) {
    // leave nothing: the workspace holds no work yet
    if (mounted) await awc.unmount(ws!.id, { discard: true }).catch(() => undefined);
    await awc.rm(ws!.id, { force: true }).catch(() => undefined);
    if (!st) await rmdir(target).catch(() => undefined);
    throw err;
  }
}

/** What WorktreeRemove did; `workspace` null: the path held no workspace and is gone already. */
export type ClaudeRemoveResult = (ReleaseResult & { removed: true }) | { workspace: null; path: string; removed: true };

/**
 * Claude Code's WorktreeRemove: finds the workspace mounted at the payload's path (or
 * labelled with it) and releases it (see releaseClaudeWorkspace: checkpoint, unmount,
 * remove the directory, rm); returns only once the directory is gone and no mount is left.
 * A path that is gone and names no workspace is done already. Only a workspace this project's
 * hooks made is released (checkHookOwns; `projectDir`: Claude Code's `CLAUDE_PROJECT_DIR`; the
 * payload's `cwd` is never trusted, so without it every workspace is refused); any other is
 * refused before anything is done to it.
 * @throws E_NOT_FOUND (the path exists but is no AWC workspace), E_PERMISSION (a workspace
 *   another project's hooks, another user's or `awc fork` made), what releaseClaudeWorkspace throws
 */
export async function claudeWorktreeRemove(
  awc: ClaudeAwc,
  p: WorktreeRemovePayload,
  opts: { projectDir?: string } = {},
): Promise<ClaudeRemoveResult> {
  const ws = await workspaceAt(awc, p.path);
  if (!ws) {
    if (!existsSync(p.path)) return { workspace: null, path: p.path, removed: true };
    throw new AwcError('E_NOT_FOUND', `${p.path} is not an AWC workspace`, {
      hint: 'It was not made by `awc hook claude`; remove it as it was made (e.g. `git worktree remove`).',
      details: { path: p.path },
    });
  }
  await checkHookOwns(awc, ws, p.path, opts.projectDir);
  const name = ws.labels[CLAUDE_LABELS.name] ?? ws.id;
  return { ...(await releaseClaudeWorkspace(awc, ws, { message: `claude worktree ${name}: removed` })), removed: true };
}

/**
 * The workspace of the namespace mounted at `path` (as given or its real path; one mounted on
 * this host first), else one labelled with it as its hook path.
 */
async function workspaceAt(awc: ClaudeAwc, path: string): Promise<WorkspaceRow | undefined> {
  const paths = new Set([resolve(path), await realpath(path).catch(() => path)]);
  const mounted = (await awc.listWorkspaces()).filter((w) => w.mountState === 'mounted' && paths.has(w.mountPath ?? ''));
  const ws = mounted.find((w) => w.mountHost === awc.host) ?? mounted[0];
  if (ws) return ws;
  for (const p of paths) {
    const [labelled] = await awc.listWorkspaces({ labels: { [CLAUDE_LABELS.path]: p } });
    if (labelled) return labelled;
  }
  return undefined;
}
