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
import { type RunAs } from './claude-work.js';
import { projectRepo, registerWorktree, undoWorktree, type RegisteredWorktree } from './claude-worktree.js';
import { envStaleLine, type EnvKeyOf, type EnvKeyFacts } from './claude-session.js';

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
  /** The shell command that runs this AWC (the hook's own absolute invocation), for the lines it suggests; default `awc`. */
  awc?: string;
  /** The environment key of a directory (src/service/attach/env-key.ts, given by the CLI); absent: keys are not compared. */
  envKey?: EnvKeyOf;
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
 * `<project>/.claude/worktrees/<name>` (missing parents created 0700), and, when the project
 * is a git checkout, makes it a worktree of the project's repository on branch
 * `worktree-<name>` (made at the project's HEAD of this moment, or checked out as it is when
 * it exists) whose tracked files are that commit's, writing only what differs from the
 * snapshot (claude-worktree.ts registerWorktree; git runs as the calling user). When the
 * commit's lockfiles give another environment key than the snapshot's, the worktree still
 * comes up and `onLog` gets one line on how to refresh (the workspace is labelled
 * `awc.claude.env-stale`, which SessionStart tells the agent about). The workspace is
 * labelled (`awc.claude.*`: project, session, name, transcript, path, uid; branch and gitdir
 * once registered) for WorktreeRemove and `awc prune`. Nothing is left behind on failure: a
 * workspace that cannot be mounted or registered is unregistered, unmounted and removed again.
 * @throws E_NOT_PREPARED (no prepared snapshot: at once, before anything is made), E_TARGET_BUSY
 *   (the path exists and is not an empty directory, or is a symlink), E_BRANCH_FAILED (git
 *   refused the worktree or the branch), what fork and mount throw
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
  const repo = await projectRepo(project, opts.runAs, names.branch);
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
  let reg: RegisteredWorktree | undefined;
  try {
    // made here, by the caller: an ordinary user's workspace is mounted only on a directory they own
    if (!st) await mkdir(target, { mode: 0o700 });
    const m = await awc.mount(ws!.id, target);
    mounted = true;
    opts.onLog?.(`mounted ${ws!.id} at ${m.path} (${m.driver})`);
    if (repo) {
      const before = await envKeyOf(target, opts);
      reg = await registerWorktree(project, repo, target, names.branch, {
        runAs: opts.runAs,
        copy: m.driver === 'copy',
        onLog: opts.onLog,
      });
      const stale = await staleEnv(before, target, project, opts);
      await awc.setLabels(ws!.id, {
        [CLAUDE_LABELS.branch]: reg.branch,
        [CLAUDE_LABELS.gitdir]: reg.admin,
        ...(stale === undefined ? {} : { [CLAUDE_LABELS.envStale]: stale }),
      });
    } else opts.onLog?.(`${project} is not the top of a git checkout with a commit: no worktree registered, no branch made`);
    return { workspace: ws!.id, snapshot: snapshot.id, path: await realpath(target), branch: reg?.branch ?? null, driver: m.driver };
  } catch (err) {
    // leave nothing: the workspace holds no work yet
    if (reg) await undoWorktree(project, reg.admin, reg.madeBranch ? reg.branch : null, opts.runAs);
    if (mounted) await awc.unmount(ws!.id, { discard: true }).catch(() => undefined);
    await awc.rm(ws!.id, { force: true }).catch(() => undefined);
    if (!st) await rmdir(target).catch(() => undefined);
    throw err;
  }
}

/** The environment key of the files at `dir` (opts.envKey), or undefined when it cannot be taken (or no envKey was given). */
async function envKeyOf(dir: string, opts: ClaudeCreateOptions): Promise<EnvKeyFacts | undefined> {
  return opts.envKey?.(dir).catch(() => undefined);
}

/**
 * Compares the environment key of the snapshot's files (`before`) with the worktree's now:
 * when they differ (a lockfile changed since the snapshot was prepared), logs the one line
 * that says how to refresh, and returns the snapshot's key (the `awc.claude.env-stale` label).
 */
async function staleEnv(
  before: EnvKeyFacts | undefined,
  target: string,
  project: string,
  opts: ClaudeCreateOptions,
): Promise<string | undefined> {
  const after = await envKeyOf(target, opts);
  if (before === undefined || after === undefined || before.key === after.key) return undefined;
  opts.onLog?.(envStaleLine(after, project, opts.awc ?? 'awc'));
  return before.key;
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
