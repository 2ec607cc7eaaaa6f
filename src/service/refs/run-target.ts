import { statSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import { checkLabel, type Labels } from '../../catalog/port/labels.js';

/**
 * The label a directory import records its source's absolute path in (and a local `--git`
 * import its repository's): the stable path `awc run` mounts a workspace at by default, so a
 * build in every workspace sees the paths the base was built with (docs/explanation/stable-paths.md).
 */
export const SOURCE_PATH_LABEL = 'awc.path';

/** `labels` with {@link SOURCE_PATH_LABEL} set to `path` (when given, not already set, and a valid label value). */
export function withSourcePath(labels: Labels | undefined, path: string | undefined): Record<string, string> | undefined {
  if (path === undefined || labels?.[SOURCE_PATH_LABEL] !== undefined) return labels as Record<string, string> | undefined;
  try {
    checkLabel(SOURCE_PATH_LABEL, path);
  } catch {
    return labels as Record<string, string> | undefined; // a path no label can hold (too long, control characters): none recorded
  }
  return { ...labels, [SOURCE_PATH_LABEL]: path };
}

/** Most snapshots walked from a workspace's head back to one carrying {@link SOURCE_PATH_LABEL}. */
const MAX_WALK = 10_000;

/** Where `awc run` runs: the workspace, the directory it is mounted at on this host, and the stable path. */
export interface RunTarget {
  workspace: WorkspaceRow;
  /** The workspace's mount path on this host (absolute). */
  source: string;
  /** The stable path the command sees the workspace at (absolute, an existing directory). */
  at: string;
}

/** What runTarget reads: the service's lookups (in process, or through the daemon). */
export interface RunTargetDeps {
  getWorkspace(ref: string): Promise<WorkspaceRow>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  catalog: { findWorkspaceByMountPath(path: string): Promise<WorkspaceRow | undefined> };
}

/**
 * Resolves `awc run <ref> [--at at]`: `ref` is a workspace's id, name or mount path (a path
 * holds `/` or is `.`, made absolute against `cwd`); the workspace must be mounted on `host`; the stable path
 * is `at` (made absolute against `cwd`) or else the {@link SOURCE_PATH_LABEL} of the newest
 * snapshot from the workspace's head back through its parents that carries one (the path the
 * base was imported from). It must be an existing directory (unless `checkAt` is false: the
 * root daemon leaves an ordinary user's to the stage, which checks it as far as they may search).
 * @throws E_NOT_FOUND, E_AMBIGUOUS (the ref), E_NOT_MOUNTED (not mounted on this host),
 *   E_USAGE (no stable path recorded and none given; the path is not a directory)
 */
export async function runTarget(
  deps: RunTargetDeps,
  host: string,
  ref: string,
  at: string | undefined,
  cwd: string,
  opts: { checkAt?: boolean } = {},
): Promise<RunTarget> {
  const byPath = ref.includes('/') || ref === '.' ? await deps.catalog.findWorkspaceByMountPath(resolve(cwd, ref)) : undefined;
  const workspace = byPath ?? (await deps.getWorkspace(ref));
  if (workspace.mountState !== 'mounted' || !workspace.mountPath || workspace.mountHost !== host) {
    throw new AwcError(
      'E_NOT_MOUNTED',
      `workspace ${workspace.name ?? workspace.id} is not mounted on this host${workspace.mountHost && workspace.mountHost !== host ? ` (it is mounted on ${workspace.mountHost})` : ''}`,
      {
        hint: `Mount it first: \`awc mount ${workspace.name ?? workspace.id} <dir>\`; \`awc run\` then shows that mount at the stable path.`,
      },
    );
  }
  const path = at !== undefined ? resolve(cwd, at) : await recordedPath(deps, workspace);
  // an ordinary user's stable path is looked at by the stage, as far as they may search (src/host/mount/namespace-bind.ts)
  if (opts.checkAt === false) return { workspace, source: workspace.mountPath, at: path };
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path, { throwIfNoEntry: false });
  } catch {
    st = undefined; // ENOTDIR, ELOOP, EACCES on the way: not a directory one can run at
  }
  if (!st?.isDirectory()) {
    throw new AwcError('E_USAGE', `the stable path ${path} is ${st ? 'not a directory' : 'missing on this host'}`, {
      hint: `Create it (\`mkdir -p ${path}\`), or pass another directory with --at.`,
      details: { path },
    });
  }
  return { workspace, source: workspace.mountPath, at: path };
}

async function recordedPath(deps: RunTargetDeps, ws: WorkspaceRow): Promise<string> {
  let id: string | null = ws.headSnapshotId;
  for (let i = 0; id !== null && i < MAX_WALK; i++) {
    const s = await deps.getSnapshot(id);
    const p = s.labels[SOURCE_PATH_LABEL];
    if (p !== undefined && isAbsolute(p)) return p;
    id = s.parentId;
  }
  throw new AwcError('E_USAGE', `no snapshot of workspace ${ws.name ?? ws.id} records the path it was imported from`, {
    hint: 'Pass the path to run at: `awc run <workspace> --at <dir> -- <command>`.',
  });
}

/**
 * Where a command started in `cwd` runs in the namespace: the same place under `at` when `cwd`
 * is inside the workspace's mount `source`, else `at` itself.
 */
export function cwdInNamespace(target: Pick<RunTarget, 'source' | 'at'>, cwd: string): string {
  const rel = relative(target.source, cwd);
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel) || rel.split(sep).includes('..')) return target.at;
  return resolve(target.at, rel);
}
