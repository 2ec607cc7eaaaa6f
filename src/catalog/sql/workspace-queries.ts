import { AwcError } from '../../core/errors.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { Transaction } from 'kysely';
import type { LeaseRow, ListFilter, WorkspaceRow } from '../port/catalog.js';
import { labelsToText, matchesLabels, type Labels } from '../port/labels.js';
import { newIds } from '../port/ids.js';
import { checkName } from '../port/names.js';
import type { Database, NewWorkspaceRecord, WorkspaceRecord } from './schema.js';
import { leasedError } from '../port/lease-errors.js';
import { LOOKUP_BATCH } from './blob-queries.js';
import { resolveRef, snapshotNotFound, workspaceNotFound } from './refs.js';
import { chunks, nowIso, toWorkspaceRow } from './rows.js';
import type { Db, SqlContext } from './sql-context.js';
import { addUsage } from './usage-counter.js';
import type { QuotaQueries } from './quota-queries.js';

type WorkspaceWithNs = WorkspaceRecord & { namespace_name: string };

/**
 * The `workspaces` queries of the catalog (dialect-neutral): fork, lookups and mount
 * state. Names and mount targets are guarded by unique indexes (the pre-checks only give
 * better messages), so two writers racing on one name or target get one row and one error.
 */
export class WorkspaceQueries {
  /** The lease of a workspace inside a transaction (set by LeaseQueries), checked before a workspace row is deleted. */
  leaseOf?: (trx: Transaction<Database>, workspaceId: string) => Promise<LeaseRow | undefined>;

  constructor(
    private readonly ctx: SqlContext,
    private readonly quotas?: QuotaQueries,
  ) {}

  /**
   * Creates one workspace per entry of `names` (null = unnamed), base and head =
   * `snapshotId` (an exact snapshot id), in one transaction with multi-row INSERTs (one
   * statement for up to ~2700 workspaces). Returned rows follow the order of `names`, and
   * their ids increase in that order.
   * `opts.labels` go on every new workspace.
   * @throws E_NOT_FOUND (snapshot), E_NAME_TAKEN (a name exists or repeats; nothing created), E_USAGE (bad name or labels),
   *   E_QUOTA (over the namespace's workspace quota, checked in the same transaction; nothing created)
   */
  async forkWorkspaces(
    namespace: string,
    snapshotId: string,
    names: readonly (string | null)[],
    opts: { labels?: Labels } = {},
  ): Promise<WorkspaceRow[]> {
    const ctx = this.ctx;
    const labels = labelsToText(opts.labels);
    const seen = new Set<string>();
    for (const n of names) {
      checkName(n, 'workspace');
      if (n !== null) {
        if (seen.has(n)) throw new AwcError('E_NAME_TAKEN', `the workspace name "${n}" is given twice`, { details: { name: n } });
        seen.add(n);
      }
    }
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) throw snapshotNotFound(namespace, snapshotId);
    const now = nowIso();
    const ids = newIds('ws', names.length);
    const records: NewWorkspaceRecord[] = names.map((name, i) => ({
      id: ids[i]!,
      namespace: nsId,
      name,
      base_snapshot_id: snapshotId,
      head_snapshot_id: snapshotId,
      mount_state: 'unmounted',
      mount_path: null,
      mount_driver: null,
      mount_host: null,
      created_at: now,
      updated_at: now,
      labels,
    }));
    await ctx.tx(async (trx) => {
      const quota = await this.quotas?.lockQuota(trx, nsId); // forks of a namespace with a quota queue here
      const snap = await trx
        .selectFrom('snapshots')
        .select('id')
        .where('id', '=', snapshotId)
        .where('namespace', '=', nsId)
        .$if(ctx.rowLocks, (q) => q.forKeyShare()) // a concurrent deleteSnapshot waits, or has won
        .executeTakeFirst();
      if (!snap) throw snapshotNotFound(namespace, snapshotId);
      if (quota) await this.quotas?.checkFork(trx, nsId, namespace, quota, records.length);
      const named = [...seen];
      for (const group of chunks(named, LOOKUP_BATCH)) {
        const taken = await trx
          .selectFrom('workspaces')
          .select('name')
          .where('namespace', '=', nsId)
          .where('name', 'in', group)
          .limit(5)
          .execute();
        if (taken.length > 0) {
          const list = taken.map((t) => t.name!);
          throw new AwcError('E_NAME_TAKEN', `workspace name(s) already used in namespace "${namespace}": ${list.join(', ')}`, {
            details: { names: list },
          });
        }
      }
      try {
        for (const group of chunks(records, ctx.rowsPerInsert(12))) {
          await trx.insertInto('workspaces').values(group).execute();
        }
      } catch (err) {
        if (ctx.errors.isUniqueViolation(err)) {
          throw new AwcError('E_NAME_TAKEN', `a workspace name is already used in namespace "${namespace}"`, { cause: err });
        }
        throw err;
      }
      await addUsage(trx, nsId, { workspaces: records.length }); // last (see addUsage)
    });
    return records.map((r) => toWorkspaceRow(r as WorkspaceRecord, namespace));
  }

  /**
   * Resolves a workspace by exact id, exact name, or unique id prefix (≥ 4 characters after
   * the optional `ws_`). @throws E_NOT_FOUND, E_AMBIGUOUS (details.candidates lists ids)
   */
  async getWorkspace(namespace: string, ref: string): Promise<WorkspaceRow> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) throw workspaceNotFound(namespace, ref);
      const id = await resolveRef(ctx.db, 'workspaces', 'ws', nsId, namespace, ref);
      const r = await ctx.db.selectFrom('workspaces').selectAll().where('id', '=', id).executeTakeFirst();
      if (!r) throw workspaceNotFound(namespace, ref);
      return toWorkspaceRow(r, namespace);
    });
  }

  /** Workspaces of `namespace`, oldest first (created_at, then id, ascending); only those with every label of `filter.labels`. */
  async listWorkspaces(namespace: string, filter?: ListFilter): Promise<WorkspaceRow[]> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return [];
      const rows = await ctx.db
        .selectFrom('workspaces')
        .selectAll()
        .where('namespace', '=', nsId)
        .orderBy('created_at', 'asc')
        .orderBy('id', 'asc')
        .execute();
      return rows.map((r) => toWorkspaceRow(r, namespace)).filter((r) => matchesLabels(r.labels, filter?.labels));
    });
  }

  /** `workspaces` joined with its namespace name, for queries across namespaces. */
  #withNs(db: Db) {
    return db
      .selectFrom('workspaces as w')
      .innerJoin('namespaces as n', 'n.id', 'w.namespace')
      .selectAll('w')
      .select('n.name as namespace_name');
  }

  /**
   * The workspace mounted at `path` (absolute), in any namespace and on any host; when
   * workspaces on several hosts use the same path, the most recently updated one.
   */
  async findWorkspaceByMountPath(path: string): Promise<WorkspaceRow | undefined> {
    return this.ctx.read(async () => {
      const r = (await this.#withNs(this.ctx.db)
        .where('w.mount_path', '=', path)
        .where('w.mount_state', '=', 'mounted')
        .orderBy('w.updated_at', 'desc')
        .executeTakeFirst()) as WorkspaceWithNs | undefined;
      return r ? toWorkspaceRow(r, r.namespace_name) : undefined;
    });
  }

  /** Workspaces mounted on `host`, in any namespace, oldest first. */
  async listMountedOnHost(host: string): Promise<WorkspaceRow[]> {
    return this.ctx.read(async () => {
      const rows = (await this.#withNs(this.ctx.db)
        .where('w.mount_host', '=', host)
        .where('w.mount_state', '=', 'mounted')
        .orderBy('w.created_at', 'asc')
        .orderBy('w.id', 'asc')
        .execute()) as WorkspaceWithNs[];
      return rows.map((r) => toWorkspaceRow(r, r.namespace_name));
    });
  }

  /**
   * Records a mount (state 'mounted' with absolute `path`, `driver`, `host`) or, with null,
   * an unmount (state 'unmounted', all mount fields null; idempotent). Recording the same
   * path and host again is idempotent (the driver is updated).
   * @throws E_NOT_FOUND (workspace id), E_ALREADY_MOUNTED (mounted at another path or host),
   *   E_TARGET_BUSY (another workspace is mounted at that path on that host), E_USAGE (relative path)
   */
  async setMount(workspaceId: string, m: { path: string; driver: MountDriverName; host: string } | null): Promise<WorkspaceRow> {
    return this.ctx.tx((trx) => this.setMountIn(trx, workspaceId, m));
  }

  /**
   * `setMount` inside transaction `trx`. `overrideHost`: a mount record of that host (whose
   * expired lease this mount took over) is replaced instead of refused. `layerSnapshotId`:
   * also records the snapshot the host state is built from (see `setLayerSnapshot`), in the same row write.
   */
  async setMountIn(
    trx: Transaction<Database>,
    workspaceId: string,
    m: { path: string; driver: MountDriverName; host: string } | null,
    opts: { overrideHost?: string; layerSnapshotId?: string } = {},
  ): Promise<WorkspaceRow> {
    const ctx = this.ctx;
    if (m && !m.path.startsWith('/')) throw new AwcError('E_USAGE', `a mount path must be absolute: ${JSON.stringify(m.path)}`);
    const now = nowIso();
    {
      // the row is locked while its state decides the write: two hosts mounting one workspace queue here
      const ws = (await this.#withNs(trx)
        .where('w.id', '=', workspaceId)
        .$if(ctx.rowLocks, (q) => q.forNoKeyUpdate('w'))
        .executeTakeFirst()) as WorkspaceWithNs | undefined;
      if (!ws) {
        throw new AwcError('E_NOT_FOUND', `no workspace with id ${workspaceId}`, {
          hint: 'List workspaces with `awc ls`.',
          details: { ref: workspaceId },
        });
      }
      if (m) {
        const replaced = opts.overrideHost !== undefined && ws.mount_host === opts.overrideHost;
        if (ws.mount_state === 'mounted' && (ws.mount_path !== m.path || ws.mount_host !== m.host) && !replaced) {
          throw new AwcError(
            'E_ALREADY_MOUNTED',
            `workspace ${ws.name ?? ws.id} is already mounted at ${ws.mount_path} on ${ws.mount_host}`,
            {
              details: { path: ws.mount_path, host: ws.mount_host },
            },
          );
        }
        const other = await trx
          .selectFrom('workspaces')
          .select(['id', 'name'])
          .where('mount_path', '=', m.path)
          .where('mount_host', '=', m.host)
          .where('id', '!=', workspaceId)
          .executeTakeFirst();
        if (other) {
          throw new AwcError('E_TARGET_BUSY', `workspace ${other.name ?? other.id} is already mounted at ${m.path} on ${m.host}`, {
            hint: 'Unmount it first, or pick another directory.',
            details: { workspaceId: other.id },
          });
        }
      }
      const set = m
        ? { mount_state: 'mounted', mount_path: m.path, mount_driver: m.driver, mount_host: m.host, updated_at: now }
        : { mount_state: 'unmounted', mount_path: null, mount_driver: null, mount_host: null, updated_at: now };
      const layer = opts.layerSnapshotId === undefined ? {} : { layer_snapshot_id: opts.layerSnapshotId };
      try {
        await trx
          .updateTable('workspaces')
          .set({ ...set, ...layer })
          .where('id', '=', workspaceId)
          .execute();
      } catch (err) {
        if (ctx.errors.isUniqueViolation(err))
          throw new AwcError('E_TARGET_BUSY', `another workspace is mounted at ${m?.path} on ${m?.host}`, { cause: err });
        throw err;
      }
      return toWorkspaceRow({ ...ws, ...set, ...layer }, ws.namespace_name);
    }
  }

  /**
   * Deletes the workspace row `id` (exact id). Its snapshots stay.
   * @throws E_NOT_FOUND, E_ALREADY_MOUNTED (unmount it first)
   */
  async deleteWorkspace(namespace: string, id: string): Promise<void> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) throw workspaceNotFound(namespace, id);
    await ctx.tx(async (trx) => {
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'name', 'mount_state', 'mount_path', 'mount_host'])
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .$if(ctx.rowLocks, (q) => q.forUpdate()) // a concurrent setMount commits first, or waits and finds it gone
        .executeTakeFirst();
      if (!ws) throw workspaceNotFound(namespace, id);
      if (ws.mount_state === 'mounted') {
        throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.name ?? ws.id} is mounted at ${ws.mount_path} on ${ws.mount_host}`, {
          details: { path: ws.mount_path, host: ws.mount_host },
        });
      }
      // a lease row goes with its workspace, unless a host still holds private state of it (a live lease)
      const lease = await this.leaseOf?.(trx, id);
      if (lease?.state === 'live') throw leasedError(id, lease);
      await trx.deleteFrom('leases').where('workspace_id', '=', id).execute();
      await trx.deleteFrom('workspaces').where('id', '=', id).execute();
      await addUsage(trx, nsId, { workspaces: -1 }); // last (see addUsage)
    });
  }
}
