import type { Awc } from '../workspace/awc.js';
import type { ImportOptions } from '../import/import-snapshot.js';
import type { RemoteMethod } from '../workspace/remote-methods.js';
import type { AwcApi } from '../workspace/awc-api.js';

/**
 * The Awc methods the Claude Code commands call (`awc hook claude`, `awc init claude`,
 * `awc prune`): each one an ordinary user may call through the root daemon (the allow-list
 * src/service/workspace/remote-methods.ts, namespace-checked by the daemon) or `importSnapshot` (the
 * user's own tar-stream import), so the same service code runs in process as root and in an
 * ordinary user's CLI (docs/explanation/claude-code.md#ordinary-users). The `satisfies`
 * makes a method that is not allow-listed a compile error here.
 */
export const CLAUDE_METHODS = [
  'listSnapshots',
  'listWorkspaces',
  'fork',
  'mount',
  'unmount',
  'checkpoint',
  'rm',
  'setLabels',
  'doctor',
] as const satisfies readonly RemoteMethod[];

/** One of {@link CLAUDE_METHODS}. */
type ClaudeMethod = (typeof CLAUDE_METHODS)[number];

/** What `awc init claude` imports with: data only (it crosses to the daemon as a tar for a user). */
export interface ClaudeImportOptions extends Pick<ImportOptions, 'message' | 'labels' | 'onProgress' | 'parent' | 'statCache'> {
  /** Directories left out of the import, relative to its root with `/` (e.g. `.claude/worktrees`): not read at all. */
  leaveOut: readonly string[];
}

/**
 * The service as the Claude Code commands see it: an {@link Awc} in process (root, or a
 * user's own home) or an ordinary user's client of the root daemon (src/cli/remote/remote-awc.ts).
 * The steps that need no privilege run in the caller's process, as the caller: the
 * directories, git, `.claude/settings.local.json`, reading the project for the import.
 */
export type ClaudeAwc = Pick<AwcApi, ClaudeMethod | 'namespace'> & {
  /** This host's name in the catalog (the root daemon's, for a user): what `mountHost` of a workspace mounted here says. */
  readonly host: string;
  /** Imports the project as a new snapshot (Awc.importSnapshot; for a user, a tar the CLI makes as them). */
  importSnapshot(source: string, opts: ClaudeImportOptions): ReturnType<Awc['importSnapshot']>;
};

/**
 * A ClaudeAwc over `awc` (an Awc, or the client of the root daemon): its methods
 * of {@link CLAUDE_METHODS} bound to it, `host` as given, and `importSnapshot` as `importer`
 * (the two differ in how they leave directories out).
 */
export function claudeAwc(awc: Pick<AwcApi, ClaudeMethod | 'namespace'>, host: string, importer: ClaudeAwc['importSnapshot']): ClaudeAwc {
  const out: Record<string, unknown> = { namespace: awc.namespace, host, importSnapshot: importer };
  for (const m of CLAUDE_METHODS) out[m] = (awc[m] as (...a: unknown[]) => unknown).bind(awc);
  return out as ClaudeAwc;
}

/** The ClaudeAwc of an Awc in process: this host is `config.host`; `leaveOut` becomes the import's `skip`. */
export function localClaudeAwc(awc: Awc): ClaudeAwc {
  return claudeAwc(awc, awc.config.host, (source, opts) =>
    awc.importSnapshot(source, {
      message: opts.message,
      labels: opts.labels,
      onProgress: opts.onProgress,
      parent: opts.parent,
      statCache: opts.statCache,
      skip: (rel) => opts.leaveOut.includes(rel),
    }),
  );
}
