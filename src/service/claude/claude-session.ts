import { realpath } from 'node:fs/promises';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ClaudeAwc } from './claude-port.js';
import { SOURCE_PATH_LABEL } from '../refs/run-target.js';
import { CLAUDE_LABELS } from './claude-release.js';

/** What the hooks read of an environment key (src/service/attach/env-key.ts EnvKeyResult). */
export interface EnvKeyFacts {
  /** The key: equal keys can share one installed dependency tree. */
  key: string;
  /** The install to run for each lockfile. */
  installs: string[];
}

/** Takes the environment key of a directory (the CLI passes src/service/attach/env-key.ts envKey: service/claude may not import service/attach). */
export type EnvKeyOf = (dir: string) => Promise<EnvKeyFacts>;

/**
 * The one line telling the agent (or its user) how to refresh the dependencies of a worktree
 * whose lockfiles differ from the prepared snapshot's: the install to run in it (`after`: the
 * worktree's environment key) and the `init claude --update` (run as `awc`) that refreshes
 * the prepared snapshot for the next worktrees.
 */
export function envStaleLine(after: Pick<EnvKeyFacts, 'installs'>, project: string, awc: string): string {
  const install = after.installs.length ? `install them here (\`${after.installs.join(' && ')}\`) and ` : '';
  return `The prepared dependencies are from other lockfiles than this worktree's: ${install}refresh the prepared snapshot for the next worktrees with \`${awc} init claude --update ${sh(project)}\`.`;
}

/** What a session started in an AWC workspace is told (Claude Code's SessionStart `additionalContext`). */
export interface SessionContext {
  workspace: string;
  /** The workspace's mount path on this host (absolute). */
  mountPath: string;
  /** The stable path its builds were made at (the `awc.path` label), or null when none is recorded. */
  stablePath: string | null;
  /** The text for the agent. */
  text: string;
}

/** True when `path` is `dir` or inside it. */
function within(dir: string, path: string): boolean {
  const rel = relative(dir, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel) && !rel.split(sep).includes('..'));
}

/** The newest {@link SOURCE_PATH_LABEL} from `head` back through its parents, or null. */
function stablePathOf(head: string | null, byId: Map<string, SnapshotRow>): string | null {
  for (let id = head, i = 0; id !== null && i < 10_000; i++) {
    const s = byId.get(id);
    if (!s) return null;
    const p = s.labels[SOURCE_PATH_LABEL];
    if (p !== undefined && isAbsolute(p)) return p;
    id = s.parentId;
  }
  return null;
}

/** `s` quoted for a POSIX shell when it needs it. */
function sh(s: string): string {
  return /^[A-Za-z0-9_./:@%+=-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * Claude Code's SessionStart in an AWC workspace (docs/how-to/claude-code.md "Builds at the
 * stable path"): when `cwd` is inside a workspace mounted on this host whose snapshots
 * record the path they were imported from, the agent is told to run builds through
 * `awc run <mount> -- <command>`, which shows this workspace at that path in a private mount
 * namespace, so the build reuses the base's outputs (docs/explanation/stable-paths.md). A
 * workspace without a recorded path gets a line saying what it is; a directory that is no
 * workspace gets nothing (null). `opts.awc` is the shell command the text names AWC by
 * (default `awc`): the hook passes its own absolute invocation, so the command works from the
 * agent's shell whatever its PATH. A worktree labelled `awc.claude.env-stale` (its lockfiles
 * differ from the prepared snapshot's) gets envStaleLine as well (`opts.envKey` names the
 * install). Reads the workspace and snapshot lists only; changes nothing.
 */
export async function claudeSessionContext(
  awc: ClaudeAwc,
  cwd: string,
  opts: { awc?: string; envKey?: EnvKeyOf } = {},
): Promise<SessionContext | null> {
  const here = await realpath(cwd).catch(() => resolve(cwd));
  const mounted = (await awc.listWorkspaces()).filter(
    (w): w is WorkspaceRow & { mountPath: string } => w.mountState === 'mounted' && w.mountHost === awc.host && w.mountPath !== null,
  );
  // the innermost mount holding the directory
  const ws = mounted.filter((w) => within(w.mountPath, here)).sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  if (!ws) return null;
  const snapshots = await awc.listSnapshots();
  const byId = new Map(snapshots.map((s) => [s.id, s]));
  const head = ws.headSnapshotId ? byId.get(ws.headSnapshotId) : undefined;
  const name = ws.name ? `\`${ws.name}\` (${ws.id})` : ws.id;
  const from = head ? ` at snapshot ${head.name ? `\`${head.name}\` (${head.id})` : head.id}` : '';
  const stablePath = stablePathOf(ws.headSnapshotId, byId);
  const run = `${opts.awc ?? 'awc'} run ${sh(ws.mountPath)} --`;
  const intro = `This directory is AWC workspace ${name}${from}, mounted at ${ws.mountPath}: edit files and run commands here as usual.`;
  const text =
    stablePath === null
      ? intro
      : `${intro} Its base was built at ${stablePath}. To build with the base's outputs instead of from scratch, run builds and tests through \`${run} <command>\` (for example \`${run} npm run build\`): the command sees this same workspace at ${stablePath} in a private mount namespace, so an incremental build rewrites only what changed here; a build run directly here may instead follow the absolute paths its build files name into ${stablePath} itself. Paths it prints under ${stablePath} are files of this workspace, at the same place under ${ws.mountPath}; edit them there, never under ${stablePath} itself.`;
  const project = ws.labels[CLAUDE_LABELS.project];
  const stale =
    ws.labels[CLAUDE_LABELS.envStale] !== undefined && project !== undefined
      ? ` ${envStaleLine((await opts.envKey?.(ws.mountPath).catch(() => undefined)) ?? { installs: [] }, project, opts.awc ?? 'awc')}`
      : '';
  return { workspace: ws.id, mountPath: ws.mountPath, stablePath, text: text + stale };
}
