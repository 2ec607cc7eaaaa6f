import { lstat, realpath } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import { diffSnapshots } from '../diff/diff.js';
import { GIT_COMMIT_LABEL, GIT_ORIGIN_LABEL } from './git-import.js';
import { GitFailure, isRemoteRepo, openLocalRepo, runGit, summarise, withPrivateTemp, type LocalRepo } from './git-run.js';
import { TreeLookup, planGitExport, type GitExportReader, type LeftOut, type TrackedEntry } from './git-export-plan.js';
import { gitIgnored } from './git-ignore-check.js';
import { fastImportCommit, identities } from './git-fast-import.js';
import type { ResolvedRef } from '../refs/resolve-ref.js';
import { nameFromBytes } from '../../core/raw-name.js';

/** Options of {@link exportGit} (JSON-able). */
export interface GitExportOptions {
  /** Path of the local repository (a checkout or a bare repository) the branch is written in. */
  repo: string;
  /** Branch name (without `refs/heads/`). */
  branch: string;
  /** Commit message (default: generated, naming the workspace and the snapshot). */
  message?: string;
  /** Move an existing branch whose tip is not the parent commit. */
  force?: boolean;
}

/** The result of an export to git (JSON-able). */
export interface GitExportResult {
  /** The repository's real path. */
  repo: string;
  branch: string;
  /** The branch's tip now: the new commit, or the parent when nothing git tracks changed (`created` false). */
  commit: string;
  /** The base commit: the parent of the new commit. */
  parent: string;
  created: boolean;
  /** The branch's tip before (null: a new branch). */
  previous: string | null;
  /** The exported snapshot, the base snapshot it is compared with, and the workspace (when a workspace was named). */
  snapshot: string;
  base: string;
  workspace: string | null;
  /** Paths the commit changes against its parent: `A` added, `M` modified (content, mode or type), `D` deleted. */
  changes: { path: string; status: 'A' | 'M' | 'D' }[];
  /** Changed paths left as in the parent (secrets, submodules, special files…). */
  leftOut: LeftOut[];
  /** Changed paths not exported because git ignores them there, and changed paths under `.git` (counts). */
  ignored: number;
  gitDir: number;
}

/** What exportGit needs of the service (implemented by `Awc`). */
export interface GitExportDeps {
  paths: { hostDir: string };
  resolve(ref: string): Promise<ResolvedRef>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  reader(): GitExportReader;
}

/**
 * `awc export <ref> --git <repo> --branch B`: writes the snapshot's (a workspace's: its
 * head's) changes against its base as one commit on branch B, whose parent is the base
 * commit: the `awc.git.commit` label of the nearest snapshot among the exported one and its
 * ancestors (for a workspace, else of its fork base). The tree is the parent's plus the
 * changes git would track there (docs/explanation/git.md): nothing under `.git`, nothing git
 * ignores (the snapshot's `.gitignore` files, the repository's excludes), no secret. Written
 * by `git fast-import`; no index or work tree of the repository is touched.
 * @throws E_USAGE (a bad branch name, a remote repository), E_GIT_NOT_A_REPO, E_GIT_NO_BASE (no base commit, or
 *   it is not in the repository), E_GIT_BRANCH_EXISTS (B's tip is not the parent; `force` moves it),
 *   E_GIT_BRANCH_CHECKED_OUT (B is checked out in a work tree of the repository), E_GIT_FAILED, E_NOT_FOUND, E_CONFIG
 */
export async function exportGit(deps: GitExportDeps, ref: string, opts: GitExportOptions): Promise<GitExportResult> {
  const fullRef = await checkBranch(opts.branch);
  const repo = await localRepo(opts.repo);
  const at = { gitDir: repo.gitDir };
  const r = await deps.resolve(ref);
  const ws = r.kind === 'workspace' ? r.workspace : null;
  const snap = r.kind === 'snapshot' ? r.snapshot : await deps.getSnapshot(r.workspace.headSnapshotId);
  const base = await baseSnapshot(deps, snap, ws);
  const { parentId, previous } = await branchStart(repo, base, fullRef, opts);
  const reader = deps.reader();
  const tracked = await trackedPaths(parentId, at);
  const targetRoot = await reader.readRoot(snap.root);
  const target = new TreeLookup(reader, targetRoot.tree);
  const plan = await planGitExport(await diffSnapshots(reader, base.root, snap.root), target, tracked);
  return withPrivateTemp(join(deps.paths.hostDir, 'git-tmp'), async (tmp) => {
    const untracked = plan.writes.filter((w) => !w.tracked).map((w) => w.path);
    const ignored = await gitIgnored(repo.gitDir, join(tmp, 'wt'), target, [...untracked, ...plan.scratchDeletes]).catch(gitFailed);
    const writes = plan.writes.filter((w) => w.tracked || !ignored.has(w.path));
    const deletes = [...plan.deletes, ...plan.scratchDeletes.filter((p) => !ignored.has(p))];
    const leftOut = [
      ...plan.leftOut,
      ...plan.scratchDeletes.filter((p) => ignored.has(p)).map((path) => ({ path, reason: 'scratch' as const })),
    ];
    const changes = [
      ...deletes.map((path) => ({ path, status: 'D' as const })),
      ...writes.map((w) => ({ path: w.path, status: w.tracked ? ('M' as const) : ('A' as const) })),
    ].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    const result = {
      repo: repo.path,
      branch: opts.branch,
      parent: parentId,
      previous,
      snapshot: snap.id,
      base: base.id,
      workspace: ws?.id ?? null,
      changes,
      leftOut: leftOut.sort((a, b) => (a.path < b.path ? -1 : 1)),
      ignored: untracked.filter((p) => ignored.has(p)).length,
      gitDir: plan.gitDirPaths,
    };
    if (changes.length === 0) {
      // nothing git tracks changed: the branch is the parent (an empty commit says nothing)
      if (previous !== parentId) await runGit(['update-ref', fullRef, parentId, previous ?? ''], at).catch(gitFailed);
      return { ...result, commit: parentId, created: false };
    }
    const { author, committer } = await identities(repo.gitDir);
    let commit: string;
    try {
      commit = await fastImportCommit(repo.gitDir, tmp, reader, {
        ref: fullRef,
        parent: parentId,
        message: opts.message ?? defaultMessage(snap, ws),
        author,
        committer,
        timeS: Math.floor(Date.now() / 1000),
        deletes,
        writes,
        force: opts.force === true,
      });
    } catch (err) {
      if (err instanceof GitFailure && /not updating/i.test(err.stderr))
        throw new AwcError('E_GIT_BRANCH_EXISTS', `branch ${opts.branch} of ${repo.path} moved while exporting: ${summarise(err.stderr)}`, {
          hint: 'Run the export again, or pass --force to move the branch anyway.',
          details: { branch: opts.branch },
        });
      throw gitFailed(err);
    }
    return { ...result, commit, created: true };
  });
}

/**
 * The parent of the export's commit (the base snapshot's `awc.git.commit`, which must be in the
 * repository) and the branch's current tip (null: no such branch), which must be that parent
 * unless `force`; the branch must not be checked out.
 * @throws E_GIT_NO_BASE, E_GIT_BRANCH_EXISTS, E_GIT_BRANCH_CHECKED_OUT, E_GIT_FAILED
 */
async function branchStart(
  repo: LocalRepo,
  base: SnapshotRow,
  fullRef: string,
  opts: GitExportOptions,
): Promise<{ parentId: string; previous: string | null }> {
  const at = { gitDir: repo.gitDir };
  const parent = base.labels[GIT_COMMIT_LABEL]!;
  const parentId = await revParse(`${parent}^{commit}`, at);
  if (parentId === null)
    throw new AwcError('E_GIT_NO_BASE', `the base commit ${parent} (of snapshot ${base.id}) is not in ${repo.path}`, {
      hint: 'Export into the repository the snapshot was imported from, or fetch that commit into this one first.',
      details: { repo: repo.path, commit: parent, snapshot: base.id },
    });
  const previous = await revParse(`${fullRef}^{commit}`, at);
  await refuseCheckedOut(repo.path, repo.gitDir, fullRef);
  if (previous !== null && previous !== parentId && !opts.force)
    throw new AwcError(
      'E_GIT_BRANCH_EXISTS',
      `branch ${opts.branch} of ${repo.path} exists at ${previous.slice(0, 12)}, not at the base ${parent.slice(0, 12)}`,
      {
        hint: 'Pass --force to move it to the new commit (its current commits stay reachable only through the reflog), or choose another --branch.',
        details: { branch: opts.branch, tip: previous, parent: parentId },
      },
    );
  return { parentId, previous };
}

/**
 * The snapshot the export compares with: the nearest of `snap` and its ancestors carrying
 * `awc.git.commit`, else (a workspace) its fork base when that carries it.
 * @throws E_GIT_NO_BASE
 */
async function baseSnapshot(deps: GitExportDeps, snap: SnapshotRow, ws: WorkspaceRow | null): Promise<SnapshotRow> {
  const seen = new Set<string>();
  for (let s: SnapshotRow | null = snap; s !== null && !seen.has(s.id); s = s.parentId ? await deps.getSnapshot(s.parentId) : null) {
    if (s.labels[GIT_COMMIT_LABEL] !== undefined) return s;
    seen.add(s.id);
  }
  if (ws) {
    const forked = await deps.getSnapshot(ws.baseSnapshotId);
    if (forked.labels[GIT_COMMIT_LABEL] !== undefined) return forked;
  }
  throw new AwcError(
    'E_GIT_NO_BASE',
    `snapshot ${snap.id} has no base commit: neither it nor an ancestor carries the label ${GIT_COMMIT_LABEL}`,
    {
      hint: `Fork from a snapshot made by \`awc snapshot import --git <repo>\`, or name the commit the snapshot's files started from: \`awc label <snapshot> ${GIT_COMMIT_LABEL}=<commit>\`.`,
      details: { snapshot: snap.id },
    },
  );
}

/** The local repository an export writes in. @throws E_USAGE (a URL), E_GIT_NOT_A_REPO */
function localRepo(repo: string): ReturnType<typeof openLocalRepo> {
  if (isRemoteRepo(repo))
    throw new AwcError('E_USAGE', `export --git writes into a local repository, not ${JSON.stringify(repo)}`, {
      hint: 'Export into a local clone (`git clone <url> dir`), then `git push` the branch from there.',
    });
  return openLocalRepo(repo);
}

/** `refs/heads/<branch>` after git's own check of the name. @throws E_USAGE */
async function checkBranch(branch: string): Promise<string> {
  const bad = () =>
    new AwcError('E_USAGE', `${JSON.stringify(branch)} is not a valid branch name`, {
      hint: 'Pass --branch with a name git accepts (`git check-ref-format --branch <name>`), e.g. awc/agent-1.',
    });
  if (branch === '' || branch.startsWith('-') || branch === 'HEAD') throw bad();
  try {
    await runGit(['check-ref-format', `refs/heads/${branch}`]);
  } catch (err) {
    if (err instanceof GitFailure) throw bad();
    throw err;
  }
  return `refs/heads/${branch}`;
}

/** The object id `rev` names, or null when there is none. */
async function revParse(rev: string, at: { gitDir: string }): Promise<string | null> {
  try {
    return (await runGit(['rev-parse', '--verify', '--quiet', '--end-of-options', rev], at)).stdout.trim();
  } catch (err) {
    if (err instanceof GitFailure) return null;
    throw err;
  }
}

/** @throws E_GIT_BRANCH_CHECKED_OUT when a work tree of the repository has `ref` checked out (moving it would leave that checkout behind) */
async function refuseCheckedOut(path: string, gitDir: string, ref: string): Promise<void> {
  const { stdout } = await runGit(['worktree', 'list', '--porcelain'], { gitDir }).catch(gitFailed);
  const blocks = stdout.split('\n\n');
  const holder = blocks.find((b) => b.split('\n').includes(`branch ${ref}`));
  if (holder === undefined) return;
  const where = holder.split('\n')[0]!.replace(/^worktree /, '');
  throw new AwcError('E_GIT_BRANCH_CHECKED_OUT', `branch ${ref.slice('refs/heads/'.length)} is checked out in ${where}`, {
    hint: 'Choose another --branch (AWC never moves a branch under a checkout: its index and files would no longer match).',
    details: { repo: path, worktree: where },
  });
}

/**
 * Every path the commit tracks, with its mode and object id (`git ls-tree -r`: gitlinks are
 * not entered). Paths are git's bytes, as tree names hold them (src/core/raw-name.ts).
 */
async function trackedPaths(commit: string, at: { gitDir: string }): Promise<Map<string, TrackedEntry>> {
  const { stdout } = await runGit(['ls-tree', '-r', '-z', '--full-tree', commit], { ...at, encoding: 'latin1' }).catch(gitFailed);
  const out = new Map<string, TrackedEntry>();
  for (const rec of stdout.split('\0')) {
    const tab = rec.indexOf('\t');
    if (tab < 0) continue;
    const [mode, , oid] = rec.slice(0, tab).split(' ');
    out.set(nameFromBytes(Buffer.from(rec.slice(tab + 1), 'latin1')), { mode: mode!, oid: oid! });
  }
  return out;
}

function defaultMessage(snap: SnapshotRow, ws: WorkspaceRow | null): string {
  const who = ws ? `workspace ${ws.name ?? ws.id} at snapshot ${snap.id}` : `snapshot ${snap.name ?? snap.id}`;
  const body = snap.message ? `\n\n${snap.message}` : '';
  return `AWC: ${who}${body}\n\nAWC-Snapshot: ${snap.id}${ws ? `\nAWC-Workspace: ${ws.id}` : ''}\n`;
}

/** Options of {@link checkpointGit} (JSON-able): `repo` defaults to the recorded origin when it is a local path. */
export interface CheckpointGitOptions {
  branch: string;
  repo?: string;
  message?: string;
  force?: boolean;
  allowChanging?: boolean;
}

/**
 * `awc checkpoint <ws> --git-branch B [--git <repo>]`: checks the branch and the repository
 * first, then checkpoints the workspace and exports its new head (exportGit). The repository
 * defaults to the `awc.git.origin` label of the base snapshot when that is a local path owned
 * by the caller (ownRepo): a label is data, and git runs with the target repository's configuration.
 * @throws E_USAGE (no repository to default to: the origin is a URL or not recorded), E_PERMISSION (the
 *   origin is not the caller's own repository), what checkpoint and exportGit throw
 */
export async function checkpointGit<C>(
  deps: GitExportDeps & {
    getWorkspace(ref: string): Promise<WorkspaceRow>;
    checkpoint(ws: string, o: { message?: string; allowChanging?: boolean }): Promise<C>;
  },
  wsRef: string,
  opts: CheckpointGitOptions,
): Promise<{ checkpoint: C; git: GitExportResult }> {
  await checkBranch(opts.branch);
  const ws = await deps.getWorkspace(wsRef);
  let repo = opts.repo;
  if (repo === undefined) {
    const head = await deps.getSnapshot(ws.headSnapshotId);
    const origin = (await baseSnapshot(deps, head, ws)).labels[GIT_ORIGIN_LABEL];
    if (origin === undefined || isRemoteRepo(origin))
      throw new AwcError(
        'E_USAGE',
        `workspace ${ws.id}: no local repository to export to (${origin === undefined ? 'no origin recorded' : `the origin is ${origin}`})`,
        {
          hint: 'Name the repository: awc checkpoint <workspace> --git-branch <B> --git <repo> (a local clone).',
          details: { workspace: ws.id },
        },
      );
    repo = (await ownRepo(origin, ws.id)).path;
  } else await localRepo(repo);
  const checkpoint = await deps.checkpoint(ws.id, { message: opts.message, allowChanging: opts.allowChanging });
  const git = await exportGit(deps, ws.id, { repo, branch: opts.branch, message: opts.message, force: opts.force });
  return { checkpoint, git };
}

/**
 * The repository a label names, opened only when it is the caller's own: its real path and every
 * directory above it owned by the caller or root (checked before git runs there), and its git
 * directory owned by the caller. git then runs in it with the caller's trust, never forced safe.
 * @throws E_PERMISSION (owned by another user), E_GIT_NOT_A_REPO
 */
async function ownRepo(origin: string, ws: string): Promise<LocalRepo> {
  const me = process.geteuid?.() ?? 0;
  const refuse = (what: string, uid: number) =>
    new AwcError('E_PERMISSION', `workspace ${ws}: the recorded origin ${origin} is not your repository (${what} is owned by uid ${uid})`, {
      hint: 'Name the repository yourself: awc checkpoint <workspace> --git-branch <B> --git <repo> (a clone you own).',
      details: { workspace: ws, repo: origin },
    });
  let real: string;
  try {
    real = await realpath(origin);
  } catch {
    return localRepo(origin); // E_GIT_NOT_A_REPO, as for --git
  }
  for (let d = real; ; d = dirname(d)) {
    const { uid } = await lstat(d);
    if (d === real ? uid !== me : uid !== me && uid !== 0) throw refuse(d, uid);
    if (dirname(d) === d) break;
  }
  const repo = await localRepo(real);
  const { uid } = await lstat(repo.gitDir);
  if (uid !== me) throw refuse(repo.gitDir, uid);
  return repo;
}

/** A git failure as E_GIT_FAILED (git's message summarised); anything else unchanged. */
function gitFailed(err: unknown): never {
  if (err instanceof GitFailure) throw new AwcError('E_GIT_FAILED', `${err.message}`);
  throw err;
}
