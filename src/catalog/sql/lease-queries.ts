import { sql, type RawBuilder, type Transaction } from 'kysely';
import { AwcError } from '../../core/errors.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { HostRegistration, HostRow, HostSession, LeaseRow, WorkspaceRow } from '../port/catalog.js';
import type { Database } from './schema.js';
import { leasedError, leaseLostError } from '../port/lease-errors.js';
import { toNum } from './rows.js';
import type { Db, SqlContext } from './sql-context.js';
import type { WorkspaceQueries } from './workspace-queries.js';

/** A `leases` row joined with its holder's session, as `#leaseSelect` reads it. */
interface LeaseJoined {
  workspace_id: string;
  host: string | null;
  session: number | string | null;
  epoch: number | string;
  acquired_at_ms: number | string;
  taken_from: string | null;
  taken_at_ms: number | string | null;
  host_session: number | string | null;
  host_expires_at_ms: number | string | null;
  now_ms: number | string;
}

/** The port's `LeaseRow` of a joined lease row: live when its session is the host's current one and unexpired. */
function toLeaseRow(r: LeaseJoined): LeaseRow {
  const sameSession = r.host !== null && r.session !== null && r.host_session !== null && toNum(r.host_session) === toNum(r.session);
  const nowMs = toNum(r.now_ms);
  const expiresAtMs = sameSession ? toNum(r.host_expires_at_ms) : null;
  return {
    workspaceId: r.workspace_id,
    host: r.host,
    epoch: toNum(r.epoch),
    state: r.host === null ? 'released' : expiresAtMs !== null && expiresAtMs > nowMs ? 'live' : 'expired',
    expiresAtMs,
    acquiredAtMs: toNum(r.acquired_at_ms),
    takenFrom: r.taken_from,
    takenAtMs: r.taken_at_ms === null ? null : toNum(r.taken_at_ms),
    nowMs,
  };
}

/**
 * The `hosts` and `leases` queries of the catalog (dialect-neutral; docs/explanation/leases.md).
 * Every time is the database's (`SqlDialect.nowMs()` inside the statements), never a host's.
 * Check-and-set is a conditional UPDATE on the lease row (`WHERE epoch = <read>`), whose row
 * lock also orders a take against a checkpoint's fence under PostgreSQL's READ COMMITTED; the
 * primary key guards the first take. A lease is live while its `(host, session)` is the host's
 * current, unexpired session: one heartbeat per host renews every lease of the host (the
 * session design of JuiceFS), and a session once expired never comes back.
 */
export class LeaseQueries {
  constructor(
    private readonly ctx: SqlContext,
    private readonly workspaces: WorkspaceQueries,
  ) {
    workspaces.leaseOf = (trx, id) => this.#lease(trx, id);
  }

  /** The database's now in ms, as an SQL expression. */
  #now(): RawBuilder<number> {
    return this.ctx.dialect.nowMs() as RawBuilder<number>;
  }

  /** Leases joined with their holder's host row, with the database's now. */
  #leaseSelect(db: Db) {
    return db
      .selectFrom('leases as l')
      .leftJoin('hosts as h', 'h.id', 'l.host')
      .select([
        'l.workspace_id',
        'l.host',
        'l.session',
        'l.epoch',
        'l.acquired_at_ms',
        'l.taken_from',
        'l.taken_at_ms',
        'h.session as host_session',
        'h.expires_at_ms as host_expires_at_ms',
      ])
      .select(this.#now().as('now_ms'));
  }

  async #lease(db: Db, workspaceId: string): Promise<LeaseRow | undefined> {
    const r = await this.#leaseSelect(db).where('l.workspace_id', '=', workspaceId).executeTakeFirst();
    return r ? toLeaseRow(r as LeaseJoined) : undefined;
  }

  /** See `Catalog.registerHost`. @throws E_USAGE (ttlMs not a positive whole number) */
  async registerHost(h: HostRegistration): Promise<HostSession> {
    if (!Number.isSafeInteger(h.ttlMs) || h.ttlMs <= 0)
      throw new AwcError('E_USAGE', `a lease TTL must be a positive whole number of ms, got ${h.ttlMs}`);
    const now = () => this.#now();
    const info = { address: h.address ?? null, pid: h.pid ?? null, daemon_version: h.daemonVersion ?? null, ttl_ms: h.ttlMs };
    return this.ctx.tx(async (trx) => {
      const renew = { ...info, started_at_ms: now(), heartbeat_at_ms: now(), expires_at_ms: this.#plus(h.ttlMs) };
      const cont = await trx.updateTable('hosts').set(renew).where('id', '=', h.id).where('expires_at_ms', '>', now()).executeTakeFirst();
      const continued = Number(cont.numUpdatedRows) === 1;
      if (!continued) {
        await trx
          .insertInto('hosts')
          .values({ id: h.id, session: 1, ...renew })
          .onConflict((oc) => oc.column('id').doUpdateSet({ ...renew, session: sql<number>`${sql.ref('hosts.session')} + 1` }))
          .execute();
      }
      const row = await trx.selectFrom('hosts').select(['session', 'expires_at_ms']).where('id', '=', h.id).executeTakeFirstOrThrow();
      const session = toNum(row.session);
      let reclaimed = 0;
      if (!continued && h.reclaim) {
        // the leases no other host took since this host's last session: re-taken, epoch raised
        const r = await trx
          .updateTable('leases')
          .set({ session, epoch: sql<number>`${sql.ref('epoch')} + 1`, acquired_at_ms: now() })
          .where('host', '=', h.id)
          .where((eb) => eb.or([eb('session', 'is', null), eb('session', '!=', session)]))
          .executeTakeFirst();
        reclaimed = Number(r.numUpdatedRows);
      }
      return { host: h.id, session, continued, reclaimed, expiresAtMs: toNum(row.expires_at_ms) };
    });
  }

  /** `now + ms` as an SQL expression. */
  #plus(ms: number): RawBuilder<number> {
    return sql<number>`(${this.ctx.dialect.nowMs()} + ${ms})`;
  }

  /** See `Catalog.heartbeat`: one UPDATE of one row, whatever the number of leases. */
  async heartbeat(host: string, session: number): Promise<boolean> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const r = await ctx.db
        .updateTable('hosts')
        .set({ heartbeat_at_ms: this.#now(), expires_at_ms: sql<number>`(${this.#now()} + ${sql.ref('ttl_ms')})` })
        .where('id', '=', host)
        .where('session', '=', session)
        .where('expires_at_ms', '>', this.#now())
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    });
  }

  /** See `Catalog.getHost`. */
  async getHost(id: string): Promise<HostRow | undefined> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const r = await ctx.db.selectFrom('hosts').selectAll().select(this.#now().as('now_ms')).where('id', '=', id).executeTakeFirst();
      if (!r) return undefined;
      return {
        id: r.id,
        session: toNum(r.session),
        address: r.address,
        pid: r.pid,
        daemonVersion: r.daemon_version,
        ttlMs: toNum(r.ttl_ms),
        startedAtMs: toNum(r.started_at_ms),
        heartbeatAtMs: toNum(r.heartbeat_at_ms),
        expiresAtMs: toNum(r.expires_at_ms),
        live: toNum(r.expires_at_ms) > toNum(r.now_ms),
      };
    });
  }

  /** See `Catalog.getLease`. */
  getLease(workspaceId: string): Promise<LeaseRow | undefined> {
    return this.ctx.read(() => this.#lease(this.ctx.db, workspaceId));
  }

  /** See `Catalog.listLeases`. */
  async listLeases(namespace: string): Promise<LeaseRow[]> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return [];
      const rows = await this.#leaseSelect(ctx.db)
        .innerJoin('workspaces as w', 'w.id', 'l.workspace_id')
        .where('w.namespace', '=', nsId)
        .orderBy('l.workspace_id')
        .execute();
      return rows.map((r) => toLeaseRow(r as LeaseJoined));
    });
  }

  /**
   * See `Catalog.mountLeased`: the lease take (or keep) and the mount record in one transaction.
   * @throws E_LEASED, E_LEASE_LOST, E_DAEMON_UNAVAILABLE, E_CHANGED_DURING_READ, E_NOT_FOUND, what setMount throws
   */
  async mountLeased(
    workspaceId: string,
    m: { path: string; driver: MountDriverName; host: string },
    opts: { steal?: boolean; keepsPrivate?: boolean; expectHeadId?: string; layerSnapshotId?: string } = {},
  ): Promise<{ workspace: WorkspaceRow; lease: LeaseRow; taken: boolean }> {
    return this.ctx.tx(async (trx) => {
      const me = await trx
        .selectFrom('hosts')
        .select(['session', 'expires_at_ms'])
        .select(this.#now().as('now_ms'))
        .where('id', '=', m.host)
        .executeTakeFirst();
      if (!me || toNum(me.expires_at_ms) <= toNum(me.now_ms)) {
        throw new AwcError('E_DAEMON_UNAVAILABLE', `host ${m.host} has no live session in the catalog (its daemon is not running)`, {
          hint: 'Start the host daemon (`awc daemon start`): it holds and renews the leases of every workspace mounted on this host.',
        });
      }
      const ws = await trx.selectFrom('workspaces').select(['id', 'head_snapshot_id']).where('id', '=', workspaceId).executeTakeFirst();
      if (!ws) throw new AwcError('E_NOT_FOUND', `no workspace with id ${workspaceId}`, { hint: 'List workspaces with `awc ls`.' });
      const { overrideHost, taken } = await this.#take(trx, workspaceId, m.host, toNum(me.session), opts);
      if (opts.expectHeadId !== undefined && ws.head_snapshot_id !== opts.expectHeadId) {
        throw new AwcError(
          'E_CHANGED_DURING_READ',
          `workspace ${workspaceId}: its head moved to ${ws.head_snapshot_id} while it was mounted`,
          {
            hint: 'Mount it again (it is built from the new head).',
          },
        );
      }
      const workspace = await this.workspaces.setMountIn(trx, workspaceId, m, { overrideHost, layerSnapshotId: opts.layerSnapshotId });
      const lease = await this.#lease(trx, workspaceId);
      if (!lease) throw new AwcError('E_INTERNAL', `workspace ${workspaceId}: no lease row after taking it`);
      return { workspace, lease, taken };
    });
  }

  /** Takes or keeps the lease (see mountLeased): whether it was taken (not kept), and the expired holder whose mount record a steal replaces. */
  async #take(
    trx: Transaction<Database>,
    workspaceId: string,
    host: string,
    session: number,
    opts: { steal?: boolean; keepsPrivate?: boolean },
  ): Promise<{ overrideHost?: string; taken: boolean }> {
    const cur = await this.#lease(trx, workspaceId);
    const raced = async () => leasedError(workspaceId, (await this.#lease(trx, workspaceId))!);
    if (!cur) {
      try {
        await trx
          .insertInto('leases')
          .values({ workspace_id: workspaceId, host, session, epoch: 1, acquired_at_ms: this.#now(), taken_from: null, taken_at_ms: null })
          .execute();
      } catch (err) {
        if (this.ctx.errors.isUniqueViolation(err)) throw await raced();
        throw err;
      }
      return { taken: true };
    }
    if (cur.state === 'live' && cur.host === host) return { taken: false }; // kept (same epoch)
    if (cur.state === 'live') throw leasedError(workspaceId, cur);
    if (opts.keepsPrivate && cur.host !== host) {
      throw leaseLostError(
        workspaceId,
        `the private changes kept on host ${host} are stale: the workspace was ${cur.host === null ? 'released' : `taken over by ${cur.host}`} since (epoch ${cur.epoch})`,
        cur,
      );
    }
    if (cur.state === 'expired' && !opts.steal) throw leasedError(workspaceId, cur);
    const takenFrom = cur.state === 'expired' && cur.host !== host ? cur.host : null;
    const r = await trx
      .updateTable('leases')
      .set({
        host,
        session,
        epoch: sql<number>`${sql.ref('epoch')} + 1`,
        acquired_at_ms: this.#now(),
        taken_from: takenFrom,
        taken_at_ms: takenFrom === null ? null : this.#now(),
      })
      .where('workspace_id', '=', workspaceId)
      .where('epoch', '=', cur.epoch)
      .where((eb) =>
        cur.host === null
          ? eb('host', 'is', null)
          : eb.and([
              eb('host', '=', cur.host),
              eb.not(
                eb.exists(
                  eb
                    .selectFrom('hosts as h')
                    .select('h.id')
                    .whereRef('h.id', '=', 'leases.host')
                    .whereRef('h.session', '=', 'leases.session')
                    .where('h.expires_at_ms', '>', this.#now()),
                ),
              ),
            ]),
      )
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) !== 1) throw await raced();
    return { overrideHost: takenFrom ?? undefined, taken: true };
  }

  /** See `Catalog.releaseLease`: only while the workspace is not mounted on `host`. */
  async releaseLease(workspaceId: string, host: string): Promise<boolean> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const r = await ctx.db
        .updateTable('leases')
        .set({ host: null, session: null })
        .where('workspace_id', '=', workspaceId)
        .where('host', '=', host)
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('workspaces as w')
                .select('w.id')
                .whereRef('w.id', '=', 'leases.workspace_id')
                .where('w.mount_state', '=', 'mounted')
                .where('w.mount_host', '=', host),
            ),
          ),
        )
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    });
  }

  /**
   * The fence of a checkpoint commit, inside its transaction: the lease row is updated (a
   * no-op write that takes its row lock) only while `lease` is still the workspace's live lease
   * by the database clock; without `lease`, the workspace must have no holder.
   * @throws E_LEASE_LOST (the epoch moved, the lease expired or was released, or no lease was given for a held one)
   */
  async fence(trx: Transaction<Database>, workspaceId: string, lease: { host: string; epoch: number } | undefined): Promise<void> {
    if (!lease) {
      const cur = await this.#lease(trx, workspaceId);
      if (cur && cur.host !== null)
        throw leaseLostError(workspaceId, `it is leased by host ${cur.host}, and the commit carries no lease`, cur);
      return;
    }
    const r = await trx
      .updateTable('leases')
      .set({ epoch: sql<number>`${sql.ref('epoch')}` })
      .where('workspace_id', '=', workspaceId)
      .where('host', '=', lease.host)
      .where('epoch', '=', lease.epoch)
      .where('session', '=', (eb) =>
        eb.selectFrom('hosts').select('hosts.session').where('hosts.id', '=', lease.host).where('hosts.expires_at_ms', '>', this.#now()),
      )
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) === 1) return;
    const now = await this.#lease(trx, workspaceId);
    const why =
      now?.host === lease.host && now.epoch === lease.epoch
        ? `the lease of host ${lease.host} (epoch ${lease.epoch}) expired before the commit`
        : `the checkpoint was taken under epoch ${lease.epoch} of host ${lease.host}, but the lease is now ${now?.host === null || !now ? 'released' : `host ${now.host}'s`} (epoch ${now?.epoch ?? '-'})`;
    throw leaseLostError(workspaceId, `${why}; the commit is refused`, now);
  }
}
