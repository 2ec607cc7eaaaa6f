import { AwcError } from '../../core/errors.js';
import type { AwcConfig } from '../../config/config.js';
import type { HostStatusOptions, HostStatusReport } from '../../service/workspace/host-status.js';
import type { FleetStatusReport } from '../../service/workspace/fleet-status.js';
import type { OpenedAwc } from '../remote/through-daemon.js';
import type { CliCommand } from './command.js';

/** `awc status --watch` without a value refreshes every 2 s; a value is 0.5–3600 seconds. */
const DEFAULT_WATCH_SECONDS = 2;

/**
 * `awc status [--watch [seconds]]`: this host's workspaces (owner, mount, age, idle time, upper
 * bytes, lease, last checkpoint) and its read path (src/service/workspace/host-status.ts; JSON:
 * HostStatusReport). An ordinary user's CLI asks the root daemon, which answers with their
 * workspaces only. `--watch` refreshes it in place on a terminal (E_USAGE when stdout is not
 * one, or with --json); q or Ctrl-C quits. `--fleet`: the namespace across hosts from the
 * catalog (src/service/workspace/fleet-status.ts; JSON: FleetStatusReport), for root or the
 * home's owner (E_USAGE through the daemon).
 */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('status')
      .description("this host's workspaces (owner, mount, age, idle, upper bytes, lease, last checkpoint) and its read path")
      .option('--watch [seconds]', `refresh in place on a terminal every SECONDS (default ${DEFAULT_WATCH_SECONDS}); q or Ctrl-C quits`)
      .option('--fleet', 'every host of the namespace, from the catalog: their sessions, and the workspaces with their host and lease')
      .action((opts: { watch?: string | true; fleet?: boolean }) =>
        ctx.withAwc(async (awc, o) => {
          const { formatHostStatus, formatFleetStatus } = await import('../output/status-view.js');
          const once = async (): Promise<[unknown, () => string]> => {
            if (opts.fleet) {
              const f = await fleetOf(awc);
              return [f, () => formatFleetStatus(f)];
            }
            const r = await statusOf(awc);
            return [r, () => formatHostStatus(r, Date.now())];
          };
          if (opts.watch === undefined) return void o.result(...(await once()));
          const seconds = watchSeconds(opts.watch);
          if (o.json)
            throw new AwcError('E_USAGE', '--watch draws on a terminal; --json prints one document', { hint: 'Use one of them.' });
          const { watchScreen } = await import('../output/watch-screen.js');
          const title = opts.fleet ? 'awc status --fleet' : 'awc status';
          await watchScreen(title, seconds * 1000, async () => (await once())[1]());
        }),
      );
  },
};

/** The seconds of `--watch [seconds]`. @throws E_USAGE unless a number from 0.5 to 3600 */
function watchSeconds(v: string | true): number {
  if (v === true) return DEFAULT_WATCH_SECONDS;
  const n = Number(v);
  if (!/^\d+(\.\d+)?$/.test(v) || n < 0.5 || n > 3600)
    throw new AwcError('E_USAGE', `--watch takes seconds from 0.5 to 3600, got ${JSON.stringify(v)}`);
  return n;
}

/** The fleet report, from the catalog of the home. @throws E_USAGE through the root daemon (the catalog is the home's) */
async function fleetOf(awc: OpenedAwc): Promise<FleetStatusReport> {
  const { inProcess } = await import('../remote/through-daemon.js');
  const { computeFleetStatus } = await import('../../service/workspace/fleet-status.js');
  return computeFleetStatus(inProcess(awc, 'the catalog across hosts'));
}

/**
 * The report: through the root daemon for an ordinary user (their workspaces; the MCP scopes
 * of their own home added here), else made in process with the host daemon's figures when it runs.
 */
async function statusOf(awc: OpenedAwc): Promise<HostStatusReport> {
  const { throughDaemon } = await import('../remote/through-daemon.js');
  const { scopesByWorkspace } = await import('../../service/workspace/scope-registry.js');
  if (throughDaemon(awc)) {
    const { defaultHome } = await import('../../config/config.js');
    const r = await awc.status();
    const scopes = await scopesByWorkspace(defaultHome());
    for (const w of r.workspaces) {
      w.owner.scopes = [...new Set([...w.owner.scopes, ...(scopes.get(w.id) ?? [])])];
      if (w.owner.tool === null && w.owner.scopes.length > 0) w.owner.tool = 'mcp';
    }
    return r;
  }
  const { computeHostStatus } = await import('../../service/workspace/host-status.js');
  return computeHostStatus(awc, await daemonFigures(awc.config));
}

/** Whether the home's daemon runs (never starts it) and, when it does, its pid, start time and read-path figures. */
async function daemonFigures(config: AwcConfig): Promise<Pick<HostStatusOptions, 'daemon' | 'figures'>> {
  const [{ DaemonClient }, { flattenMetrics }, { hostFiguresOf }] = await Promise.all([
    import('../../daemon/supervisor/client.js'),
    import('../../daemon/metrics/metrics.js'),
    import('../../service/workspace/host-status.js'),
  ]);
  const client = new DaemonClient(config);
  const call = (path: string) => client.call('GET', path, undefined, { start: false, timeoutMs: 5000 });
  try {
    const s = (await call('/v1/status')) as { pid: number; startedAt: string };
    const json = (await call('/v1/metrics.json')) as Parameters<typeof flattenMetrics>[0];
    return { daemon: { running: true, pid: s.pid, startedAt: s.startedAt }, figures: hostFiguresOf(flattenMetrics(json)) };
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_DAEMON_UNAVAILABLE') return { daemon: { running: false, pid: null, startedAt: null } };
    throw err;
  }
}
