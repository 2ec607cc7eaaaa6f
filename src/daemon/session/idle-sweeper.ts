import { PeriodicSweep, type SweeperDeps } from './periodic-sweep.js';
import type { Logger } from '../../core/log.js';
import { Awc } from '../../service/workspace/awc.js';
import { holdersText, sweepIdle, type IdleSweepReport } from '../../service/idle/idle-release.js';

/** What the idle sweeper needs of the host daemon. */
export type IdleSweeperDeps = SweeperDeps;

/**
 * The host daemon's periodic idle sweep (docs/explanation/lifecycle.md#idle-release): every
 * `intervalMs` (config `idleSweepIntervalMs`; 0: never, only `awc release --idle`) it does what
 * `awc release --idle` does, as root, in the home's namespace and every namespace with a
 * workspace mounted on this host: idle workspaces are checkpointed, unmounted and recorded as
 * released, released ones beyond the retention removed. One run at a time; releases, removals
 * and failures are logged (workspaces left alone are not).
 */
export class IdleSweeper extends PeriodicSweep<IdleSweepReport[]> {
  constructor(
    private readonly deps: IdleSweeperDeps,
    intervalMs: number,
  ) {
    super(intervalMs);
  }

  protected async sweep(): Promise<IdleSweepReport[]> {
    const { config, catalog, store, port, logger } = this.deps;
    const mounted = await catalog.listMountedOnHost(config.host);
    const namespaces = new Set([config.namespace, ...mounted.map((w) => w.namespace)]);
    const out: IdleSweepReport[] = [];
    for (const namespace of [...namespaces].sort()) {
      try {
        const r = await sweepIdle(Awc.over({ ...config, namespace }, catalog, store, port));
        out.push(r);
        logRun(logger, r);
      } catch (err) {
        logger({ level: 'error', msg: 'idle sweep failed', namespace, err: String(err) });
      }
    }
    return out;
  }
}

/** Logs the releases, removals and failures of one namespace's sweep. */
function logRun(log: Logger, r: IdleSweepReport): void {
  for (const e of r.entries) {
    if (e.status === 'kept') continue;
    log({
      level: e.status === 'failed' ? 'warn' : 'info',
      msg: `idle sweep: ${e.status}`,
      namespace: r.namespace,
      workspace: e.workspace,
      ...(e.released ? { path: e.released.path, snapshot: e.released.snapshot, checkpointed: e.released.checkpointed } : {}),
      ...(e.verdict ? { idleForMs: e.verdict.idleForMs } : {}),
      ...(e.verdict && !e.verdict.idle && e.verdict.holders ? { holders: holdersText(e.verdict.holders) } : {}),
      ...(e.error ? { err: `${e.error.code}: ${e.error.message}` } : {}),
    });
  }
}
