import type { Catalog, LeaseRow, SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import { leasedError, leaseLostError } from '../../catalog/port/lease-errors.js';
import { AwcError } from '../../core/errors.js';
import type { AwcConfig } from '../../config/config.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';
import { readHostState } from '../../drivers/port/workspace-state.js';
import { readdir } from 'node:fs/promises';

/**
 * What `awc ls` and `awc show` say of a workspace's lease, from this host's point of view.
 * `here`: `held` (this host holds it live), `lost` (this host held it, or keeps private state
 * of it, but the lease expired or another host took it: its checkpoints are refused),
 * `elsewhere` (another host holds it, live or expired), `free` (released or never leased).
 * Times are ISO-8601 by the catalog's clock.
 */
export interface LeaseView {
  here: 'held' | 'lost' | 'elsewhere' | 'free';
  holder: string | null;
  epoch: number | null;
  state: LeaseRow['state'] | 'none';
  expiresAt: string | null;
  /** The host whose expired lease the holder took over, and when. */
  takenFrom: string | null;
  takenAt: string | null;
  /** In words: what this state means, and what was lost. */
  note: string | null;
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/**
 * The service's side of the lease protocol (docs/explanation/leases.md): makes sure this
 * host has a live session before a mount or a checkpoint (the host daemon holds it and
 * renews every lease of the host, whatever the driver; without a daemon port, as a library,
 * the session is registered here before each operation and nothing renews it in between),
 * gives the lease a checkpoint commits under (the fencing token), and describes leases for
 * `ls` and `show`.
 */
export class LeaseGuard {
  constructor(
    private readonly catalog: Catalog,
    private readonly config: AwcConfig,
    private readonly daemon: HostDaemonPort | undefined,
    private readonly workspacesDir: string,
  ) {}

  /** `rows` with their lease views (`awc ls`): one catalog query and one directory listing. */
  async list(rows: readonly WorkspaceRow[]): Promise<(WorkspaceRow & { lease: LeaseView })[]> {
    const local = new Set(await readdir(this.workspacesDir).catch(() => [] as string[]));
    const views = await this.views(this.config.namespace, rows, local);
    return rows.map((w) => ({ ...w, lease: views.get(w.id)! }));
  }

  /**
   * What `awc show` says of a workspace: its row, its head's checkpoint time, and its lease
   * (after a take-over: from which host, and that what it had not checkpointed is lost).
   */
  async show(ws: WorkspaceRow): Promise<WorkspaceRow & { kind: 'workspace'; lastCheckpointAt: string; lease: LeaseView }> {
    const head = await this.catalog.getSnapshot(ws.namespace, ws.headSnapshotId);
    const hasLocal = (await readHostState(this.workspacesDir, ws.id)) !== undefined;
    const lease = this.view(ws, await this.catalog.getLease(ws.id), hasLocal, head);
    return { kind: 'workspace', ...ws, lastCheckpointAt: head.createdAt, lease };
  }

  /** Makes sure this host has a live session (starts the daemon when there is one to start). @throws E_DAEMON_UNAVAILABLE */
  async ensureSession(): Promise<void> {
    if (this.daemon) {
      await this.daemon.ensureRunning();
      return;
    }
    await this.catalog.registerHost({ id: this.config.host, pid: process.pid, ttlMs: this.config.leaseTtlMs, reclaim: true });
  }

  /**
   * The lease a checkpoint of `ws` commits under: this host's live lease (undefined for a
   * workspace never leased, mounted before leases existed). A host whose lease expired or was
   * taken treats it as lost. @throws E_LEASE_LOST
   */
  async commitLease(ws: WorkspaceRow): Promise<{ host: string; epoch: number } | undefined> {
    if (!this.daemon) await this.ensureSession(); // no daemon renews it: the library registers before each use
    const lease = await this.catalog.getLease(ws.id);
    if (!lease) return undefined;
    const me = this.config.host;
    if (lease.host === me && lease.state === 'live') return { host: me, epoch: lease.epoch };
    const why =
      lease.host === me
        ? `this host's lease (epoch ${lease.epoch}) expired: its daemon did not renew it in time (stopped, paused or cut off), so its changes may not be committed (a daemon started again re-takes the leases no other host took)`
        : lease.host === null
          ? 'this host holds no lease on it (it was released)'
          : `its lease was taken over by host ${lease.host} (epoch ${lease.epoch})`;
    throw leaseLostError(ws.id, `${why}; the checkpoint is refused`, lease);
  }

  /**
   * Refuses to mount `ws`, recorded as mounted on another host, unless `steal` may take it
   * over (then the catalog decides, in the mount's transaction).
   * @throws E_LEASED (the holder's lease is live, or expired without steal), E_ALREADY_MOUNTED
   */
  async checkMountedElsewhere(ws: WorkspaceRow, steal: boolean): Promise<void> {
    const lease = await this.catalog.getLease(ws.id);
    if (lease && lease.host !== null && lease.host === ws.mountHost && (lease.state === 'live' || !steal)) throw leasedError(ws.id, lease);
    if (!steal || !lease || lease.host !== ws.mountHost)
      throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} is already mounted at ${ws.mountPath} on ${ws.mountHost}`);
  }

  /** The lease views of `rows` (one catalog query). `local`: the ids with private state on this host. */
  async views(namespace: string, rows: readonly WorkspaceRow[], local: ReadonlySet<string>): Promise<Map<string, LeaseView>> {
    const leases = new Map((await this.catalog.listLeases(namespace)).map((l) => [l.workspaceId, l]));
    return new Map(rows.map((w) => [w.id, this.view(w, leases.get(w.id), local.has(w.id))]));
  }

  /**
   * One workspace's lease view. `head`: its head snapshot, for what a take-over lost.
   * `hasLocal`: this host keeps private state of it.
   */
  view(ws: WorkspaceRow, lease: LeaseRow | undefined, hasLocal: boolean, head?: SnapshotRow): LeaseView {
    const me = this.config.host;
    const base = {
      holder: lease?.host ?? null,
      epoch: lease?.epoch ?? null,
      state: lease?.state ?? ('none' as const),
      expiresAt: iso(lease?.expiresAtMs ?? null),
      takenFrom: lease?.takenFrom ?? null,
      takenAt: iso(lease?.takenAtMs ?? null),
    };
    const since = head ? ` after its last checkpoint ${head.id} (${head.createdAt})` : '';
    const discard = `\`awc unmount ${ws.id} --discard\` drops the stale changes kept here`;
    if (lease?.host === me && lease.state === 'live') {
      const took = lease.takenFrom
        ? `taken over from host ${lease.takenFrom} at ${base.takenAt}: what ${lease.takenFrom} had not checkpointed${since} is lost`
        : null;
      return { here: 'held', ...base, note: took };
    }
    if (lease?.host === me)
      return {
        here: 'lost',
        ...base,
        note: `this host's lease expired (its daemon did not renew it in time): checkpoints here are refused, and another host may take the workspace over at its last checkpoint; ${discard}`,
      };
    if (hasLocal && lease !== undefined)
      return {
        here: 'lost',
        ...base,
        note:
          lease.host === null
            ? `the lease was released since this host's changes were made: they are stale; ${discard}`
            : `taken over by host ${lease.host} (epoch ${lease.epoch}${lease.takenAtMs ? ` at ${base.takenAt}` : ''}): the changes kept here are stale and are never committed; ${discard}`,
      };
    if (lease?.host) {
      const note =
        lease.state === 'expired'
          ? `the lease of host ${lease.host} expired: \`awc mount ${ws.id} <dir> --steal\` takes it over at its last checkpoint${since}; what ${lease.host} did not checkpoint is lost`
          : lease.takenFrom
            ? `taken over from host ${lease.takenFrom} at ${base.takenAt}`
            : null;
      return { here: 'elsewhere', ...base, note };
    }
    return { here: 'free', ...base, note: null };
  }
}
