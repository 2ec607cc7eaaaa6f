import { realpath } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ClaudeAwc } from './claude-port.js';
import { CLAUDE_LABELS } from './claude-release.js';

/**
 * The project a hook runs for: the nearest of `dir` (its real path, or its absolute path when
 * it is gone) and the directories above it that `isProject` accepts (`awc.claude.project`
 * labels of prepared snapshots, and of the workspace at hand), or null when none is; `start`
 * is the real path the walk began at.
 */
export async function nearestProject(dir: string, isProject: (d: string) => boolean): Promise<{ start: string; project: string | null }> {
  const start = await realpath(dir).catch(() => resolve(dir));
  for (let d = start; ; d = dirname(d)) {
    if (isProject(d)) return { start, project: d };
    if (dirname(d) === d) return { start, project: null };
  }
}

/** The project a hook runs for among `known` (nearestProject). */
async function hookProject(dir: string, known: ReadonlySet<string>): Promise<string | null> {
  return (await nearestProject(dir, (d) => known.has(d))).project;
}

/**
 * Refuses a workspace that the hooks of this project did not make (docs/reference/claude-code.md,
 * docs/explanation/security.md "Hooks act on their own workspaces"): WorktreeRemove acts only on a
 * workspace labelled `awc.claude.project=<P>` where P is the project the hook runs for (the
 * nearest directory at or above `projectDir`, Claude Code's `CLAUDE_PROJECT_DIR`, that is a
 * project: a nested project with its own prepared snapshot is another project), whose
 * `awc.claude.path` (where WorktreeCreate mounted it) is `path` and lies under
 * `<P>/.claude/worktrees`, and, for a caller other than root, labelled `awc.claude.uid=<uid>`.
 * The payload's `cwd` is never used: it is the untrusted input this check defends against, so
 * without `projectDir` (undefined or empty) every workspace is refused. A workspace made by
 * `awc fork`, by another project's hooks or by another user's is refused before anything is done
 * to it. Reads the snapshot list only; changes nothing.
 * @throws E_PERMISSION (details: path, workspace, project: the workspace's label or null, hookProject)
 */
export async function checkHookOwns(
  awc: Pick<ClaudeAwc, 'listSnapshots'>,
  ws: WorkspaceRow,
  path: string,
  projectDir: string | undefined,
  uid: number = process.getuid?.() ?? 0,
): Promise<void> {
  const label = ws.labels[CLAUDE_LABELS.project];
  const known = new Set<string>();
  for (const s of await awc.listSnapshots()) {
    const p = s.labels[CLAUDE_LABELS.project];
    if (p !== undefined) known.add(p);
  }
  if (label !== undefined) known.add(label);
  const mine = projectDir ? await hookProject(projectDir, known) : null;
  const sameProject = label !== undefined && mine === label;
  const made = ws.labels[CLAUDE_LABELS.path];
  const samePath = made !== undefined && mine !== null && (await madeAt(made, path, mine));
  const sameUser = uid === 0 || ws.labels[CLAUDE_LABELS.uid] === String(uid);
  if (sameProject && samePath && sameUser) return;
  const name = ws.name ?? ws.id;
  const why =
    label === undefined
      ? 'was not made by `awc hook claude`'
      : !projectDir
        ? 'cannot be checked: CLAUDE_PROJECT_DIR is not set (the payload does not name the project)'
        : !sameProject
          ? `was made by the hooks of project ${label}, not of ${mine ?? projectDir}`
          : !samePath
            ? `was not made by the hook at ${path} under ${join(mine!, '.claude', 'worktrees')} (made at ${made ?? '(unknown)'})`
            : `was made by the hook of uid ${ws.labels[CLAUDE_LABELS.uid] ?? '(unknown)'}, not of uid ${uid}`;
  throw new AwcError('E_PERMISSION', `workspace ${name} at ${path} ${why}; WorktreeRemove left it alone`, {
    hint: `A hook removes only the workspaces its own project's hooks made. Release this one where it was made, or by hand: \`awc unmount ${ws.id}\` and \`awc rm ${ws.id}\` (checkpoint first to keep its work).`,
    details: { path, workspace: ws.id, project: label ?? null, hookProject: mine },
  });
}

/**
 * Whether `path` (the payload's `worktree_path`, as given or its real path) is `made` (the
 * workspace's `awc.claude.path` label) and `made` lies under `<project>/.claude/worktrees`.
 */
async function madeAt(made: string, path: string, project: string): Promise<boolean> {
  const paths = new Set([resolve(path), await realpath(path).catch(() => resolve(path))]);
  return paths.has(made) && made.startsWith(join(project, '.claude', 'worktrees') + sep);
}
