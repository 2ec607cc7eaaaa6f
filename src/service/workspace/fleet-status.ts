import type { Awc } from './awc.js';
import { rowBasics, type WorkspaceBasics } from './host-status.js';

/**
 * `awc status --fleet` (docs/reference/cli.md#awc-status): the namespace across hosts, from the
 * catalog alone (no host's files: upper bytes, idle time and owners are host-local, in each
 * host's own `awc status`). JSON shape (times ISO 8601 by the catalog's clock, durations ms):
 *
 *     {
 *       kind: 'fleet', at: string, namespace: string, host: string,   // host: the one that asked
 *       hosts: FleetHost[],          // by id: every host a workspace is mounted on or leased to, and this one
 *       workspaces: WorkspaceBasics[]   // oldest first
 *     }
 */
export interface FleetStatusReport {
  kind: 'fleet';
  at: string;
  namespace: string;
  /** The host that made the report (config `host`). */
  host: string;
  hosts: FleetHost[];
  workspaces: WorkspaceBasics[];
}

/**
 * One host of a {@link FleetStatusReport}: its session in the catalog (`registered` false when
 * it never registered one), whether it is live by the catalog's clock, its daemon's pid and
 * version, when its session started, its last heartbeat and when it expires, and how many of
 * the namespace's workspaces are mounted on it.
 */
export interface FleetHost {
  id: string;
  registered: boolean;
  live: boolean;
  pid: number | null;
  daemonVersion: string | null;
  startedAt: string | null;
  heartbeatAt: string | null;
  expiresAt: string | null;
  mounted: number;
}

const iso = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString());

/**
 * The fleet status of the service's namespace (shape: {@link FleetStatusReport}): its
 * workspaces with their mounts, leases and last checkpoints, and the hosts they are on with
 * their sessions. Reads the catalog only: workspaces, snapshots, leases, one host row per host.
 * @throws what the catalog throws (E_CATALOG_UNAVAILABLE…)
 */
export async function computeFleetStatus(awc: Awc): Promise<FleetStatusReport> {
  const [rows, snapshots, nowMs] = await Promise.all([awc.listWorkspaces(), awc.listSnapshots(), awc.catalog.nowMs()]);
  const heads = new Map(snapshots.map((s) => [s.id, s]));
  const workspaces = (await awc.leases.list(rows)).map((w) => rowBasics(w, heads.get(w.headSnapshotId), nowMs));
  const ids = new Set<string>([awc.config.host]);
  for (const w of workspaces) {
    if (w.mountHost !== null) ids.add(w.mountHost);
    if (w.lease.holder !== null) ids.add(w.lease.holder);
  }
  const hosts: FleetHost[] = [];
  for (const id of [...ids].sort()) {
    const h = await awc.catalog.getHost(id);
    hosts.push({
      id,
      registered: h !== undefined,
      live: h?.live === true,
      pid: h?.pid ?? null,
      daemonVersion: h?.daemonVersion ?? null,
      startedAt: iso(h?.startedAtMs),
      heartbeatAt: iso(h?.heartbeatAtMs),
      expiresAt: iso(h?.expiresAtMs),
      mounted: workspaces.filter((w) => w.state === 'mounted' && w.mountHost === id).length,
    });
  }
  return { kind: 'fleet', at: new Date(nowMs).toISOString(), namespace: awc.namespace, host: awc.config.host, hosts, workspaces };
}
