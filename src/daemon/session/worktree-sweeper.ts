import { PeriodicSweep, type SweeperDeps } from './periodic-sweep.js';
import { pathsOf } from '../../config/config.js';
import type { LogEvents, Logger } from '../../core/log.js';
import { Awc } from '../../service/workspace/awc.js';
import { localClaudeAwc } from '../../service/claude/claude-port.js';
import { pruneClaude, type PruneReport } from '../../service/claude/claude-prune.js';
import { attachNamespaces, pruneAttached, type AttachPruneReport } from '../../service/attach/attach-prune.js';

/** Events of a {@link WorktreeSweeper}: log lines for the daemon's log. */
export type WorktreeSweeperEvents = LogEvents;

/** What one sweep did in one namespace: the `awc prune` report there. JSON. */
export interface WorktreeSweepReport {
  namespace: string;
  claude: PruneReport;
  attached: AttachPruneReport;
}

/** What the sweeper needs of the host daemon. */
export type WorktreeSweeperDeps = SweeperDeps;

/**
 * The host daemon's periodic worktree sweep (docs/explanation/attach.md#when-the-tool-removes-the-worktree):
 * every `intervalMs` (config `pruneIntervalMs`; 0: never) it does what `awc prune` does, as
 * root, in every namespace with workspaces mounted on this host or attach records in the
 * home (and the home's own): Claude Code hook worktrees whose directory, mount, git
 * registration or session is gone, and attached worktrees a tool removed, are released
 * after their work is checkpointed; busy ones are left (and logged with their holders). One
 * run at a time; a run that finds nothing logs nothing.
 */
export class WorktreeSweeper extends PeriodicSweep<WorktreeSweepReport[]> {
  constructor(
    private readonly deps: WorktreeSweeperDeps,
    intervalMs: number,
  ) {
    super(intervalMs);
  }

  protected async sweep(): Promise<WorktreeSweepReport[]> {
    const { config, catalog, store, port, logger } = this.deps;
    const mounted = await catalog.listMountedOnHost(config.host);
    const namespaces = new Set([config.namespace, ...mounted.map((w) => w.namespace)]);
    for (const ns of await attachNamespaces({ paths: pathsOf(config) })) namespaces.add(ns);
    const out: WorktreeSweepReport[] = [];
    for (const namespace of [...namespaces].sort()) {
      const awc = Awc.over({ ...config, namespace }, catalog, store, port);
      try {
        const claude = await pruneClaude(localClaudeAwc(awc), { uid: 0 });
        const attached = await pruneAttached(awc);
        out.push({ namespace, claude, attached });
        logRun(logger, namespace, claude, attached);
      } catch (err) {
        logger({ level: 'error', msg: 'worktree sweep failed', namespace, err: String(err) });
      }
    }
    return out;
  }
}

/** Logs what a run found in one namespace (nothing when it found nothing). */
function logRun(log: Logger, namespace: string, claude: PruneReport, attached: AttachPruneReport): void {
  for (const e of claude.pruned)
    log({
      level: e.error ? 'warn' : 'info',
      msg: e.busy ? 'worktree sweep: in use, left alone' : e.error ? 'worktree sweep: release failed' : 'worktree sweep: released',
      namespace,
      workspace: e.workspace,
      path: e.path,
      reason: e.reason,
      ...(e.busy ? { holders: e.busy.map((h) => `${h.pid} ${h.command}`).join(', ') } : {}),
      ...(e.error ? { err: `${e.error.code}: ${e.error.message}` } : {}),
      ...(e.released ? { snapshot: e.released.snapshot, checkpointed: e.released.checkpointed } : {}),
    });
  for (const e of attached.orphaned)
    log({
      level: e.status === 'failed' ? 'warn' : 'info',
      msg: `worktree sweep: attached worktree ${e.status}`,
      namespace,
      workspace: e.workspace,
      path: e.dir,
      reason: e.reason,
      ...(e.holders ? { holders: e.holders.map((h) => `${h.pid} ${h.command}`).join(', ') } : {}),
      ...(e.checkpoint ? { snapshot: e.checkpoint } : {}),
      ...(e.error ? { err: `${e.error.code}: ${e.error.message}` } : {}),
    });
}
