import type { Transaction } from 'kysely';
import { killPoint } from '../../core/kill-point.js';
import { AwcError } from '../../core/errors.js';
import type { CheckpointCommit, ListFilter, NewSnapshot, SnapshotClassCounts, SnapshotRow } from '../port/catalog.js';
import { labelsToText, matchesLabels } from '../port/labels.js';
import { newId } from '../port/ids.js';
import { checkName } from '../port/names.js';
import type { Database, SnapshotRecord } from './schema.js';
import type { BlobQueries } from './blob-queries.js';
import { guardSnapshotPacks } from './pack-guard.js';
import type { LeaseQueries } from './lease-queries.js';
import type { QuotaQueries } from './quota-queries.js';
import { resolveRef, snapshotNotFound, workspaceNotFound } from './refs.js';
import { nowIso, toSnapshotRow } from './rows.js';
import type { Db, SqlContext } from './sql-context.js';

/** A snapshot record ready to insert (byte_count as a number). */
type SnapshotInsert = SnapshotRecord & { byte_count: number };

/**
 * The `snapshots` queries of the catalog (dialect-neutral), checkpoint commit included.
 * Check-and-set is a conditional `UPDATE … WHERE head_snapshot_id = ?` and names are
 * guarded by unique indexes, so they stay correct under PostgreSQL's READ COMMITTED too;
 * the pre-checks only give better messages.
 */
export class SnapshotQueries {
  constructor(
    private readonly ctx: SqlContext,
    private readonly blobs: BlobQueries,
    private readonly leases: LeaseQueries,
    private readonly quotas: QuotaQueries,
  ) {}

  /** Throws E_NAME_TAKEN when a snapshot named `name` exists in the namespace. */
  async #checkName(trx: Db, nsId: string, namespace: string, name: string | null | undefined): Promise<void> {
    if (name === null || name === undefined) return;
    const taken = await trx.selectFrom('snapshots').select('id').where('namespace', '=', nsId).where('name', '=', name).executeTakeFirst();
    if (taken) {
      throw new AwcError('E_NAME_TAKEN', `a snapshot named "${name}" already exists in namespace "${namespace}" (${taken.id})`, {
        details: { name, id: taken.id },
      });
    }
  }

  /** Inserts the snapshot row; maps a unique violation on its name to E_NAME_TAKEN. */
  async #insert(trx: Transaction<Database>, row: SnapshotInsert, namespace: string): Promise<void> {
    try {
      await trx.insertInto('snapshots').values(row).execute();
    } catch (err) {
      if (this.ctx.errors.isUniqueViolation(err) && row.name !== null) {
        throw new AwcError('E_NAME_TAKEN', `a snapshot named "${row.name}" already exists in namespace "${namespace}"`, {
          details: { name: row.name },
          cause: err,
        });
      }
      throw err;
    }
  }

  #record(nsId: string, s: NewSnapshot, parentId: string | null, now: string): SnapshotInsert {
    return {
      id: newId('sn'),
      namespace: nsId,
      name: s.name ?? null,
      root: s.root,
      parent_id: parentId,
      message: s.message ?? null,
      created_at: now,
      file_count: s.fileCount,
      byte_count: s.byteCount,
      labels: labelsToText(s.labels),
      classes: null,
    };
  }

  /**
   * Inserts the packs, blobs and the snapshot in one transaction (creates the namespace on
   * first use). Blob rows already indexed in the namespace are kept as they are.
   * The namespace's quota (QuotaQueries) is checked in the same transaction.
   * @throws E_NAME_TAKEN (name used in the namespace), E_NOT_FOUND (parentId not in the namespace), E_USAGE (bad name),
   *   E_QUOTA (over a quota of the namespace)
   */
  async createSnapshot(s: NewSnapshot): Promise<SnapshotRow> {
    const ctx = this.ctx;
    checkName(s.name, 'snapshot');
    const nsId = await ctx.read(() => ctx.ensureNs(s.namespace));
    const now = nowIso();
    const rec = this.#record(nsId, s, s.parentId ?? null, now);
    await ctx.tx(async (trx) => {
      const quota = await this.quotas.lockQuota(trx, nsId); // first: commits of a namespace with a quota queue here
      if (rec.parent_id !== null) {
        const parent = await trx
          .selectFrom('snapshots')
          .select('id')
          .where('id', '=', rec.parent_id)
          .where('namespace', '=', nsId)
          .$if(ctx.rowLocks, (q) => q.forKeyShare()) // a concurrent deleteSnapshot waits, or has won
          .executeTakeFirst();
        if (!parent) {
          throw new AwcError('E_NOT_FOUND', `parent snapshot ${rec.parent_id} does not exist in namespace "${s.namespace}"`, {
            hint: 'List snapshots with `awc snapshot ls`.',
          });
        }
      }
      await this.#checkName(trx, nsId, s.namespace, rec.name);
      const revived = await guardSnapshotPacks(ctx, trx, s);
      if (quota) await this.quotas.checkCommit(trx, nsId, s.namespace, quota, s.packs);
      await this.blobs.insertPacks(trx, nsId, s.packs, now, { committed: true, revived });
      await this.#insert(trx, rec, s.namespace);
      killPoint('catalog.snapshot.inside'); // every row written, the transaction not yet committed
    });
    return toSnapshotRow(rec, s.namespace);
  }

  /**
   * Checkpoint commit in one transaction: packs, blobs, the snapshot (parent = the
   * workspace's head, `snapshot.parentId` is ignored), then
   * `UPDATE workspaces SET head = new WHERE id = ? AND head = expectedHeadId`; when that
   * updates no row, everything is rolled back. The lease fence (`LeaseQueries.fence`: the
   * lease is still `c.lease`, live by the database clock) runs first in the same transaction.
   * @throws E_LEASE_LOST (the fence), E_NOT_FOUND (no such workspace in `snapshot.namespace`), E_CHANGED_DURING_READ
   *   (the head is no longer `expectedHeadId`: retryable, nothing written), E_NAME_TAKEN, E_QUOTA (over a quota
   *   of the namespace, checked in the same transaction: nothing written)
   */
  async commitCheckpoint(c: CheckpointCommit): Promise<SnapshotRow> {
    const ctx = this.ctx;
    const s = c.snapshot;
    checkName(s.name, 'snapshot');
    const nsId = await ctx.read(() => ctx.findNs(s.namespace));
    if (!nsId) throw workspaceNotFound(s.namespace, c.workspaceId);
    const now = nowIso();
    const rec = this.#record(nsId, s, c.expectedHeadId, now);
    const moved = (head: string | undefined) =>
      new AwcError(
        'E_CHANGED_DURING_READ',
        `workspace ${c.workspaceId}: its head moved from ${c.expectedHeadId} to ${head ?? 'another snapshot'} during the checkpoint`,
        {
          hint: "The workspace's head moved; run checkpoint again.",
          details: { workspaceId: c.workspaceId, expectedHeadId: c.expectedHeadId, headSnapshotId: head ?? null },
        },
      );
    await ctx.tx(async (trx) => {
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'head_snapshot_id'])
        .where('id', '=', c.workspaceId)
        .where('namespace', '=', nsId)
        // concurrent commits of one workspace queue here; the loser then sees the moved head
        .$if(ctx.rowLocks, (q) => q.forNoKeyUpdate())
        .executeTakeFirst();
      if (!ws) throw workspaceNotFound(s.namespace, c.workspaceId);
      await this.leases.fence(trx, c.workspaceId, c.lease);
      if (ws.head_snapshot_id !== c.expectedHeadId) throw moved(ws.head_snapshot_id);
      const quota = await this.quotas.lockQuota(trx, nsId); // after the workspace row: one lock order
      await this.#checkName(trx, nsId, s.namespace, rec.name);
      const revived = await guardSnapshotPacks(ctx, trx, s);
      if (quota) await this.quotas.checkCommit(trx, nsId, s.namespace, quota, s.packs);
      await this.blobs.insertPacks(trx, nsId, s.packs, now, { committed: true, revived });
      await this.#insert(trx, rec, s.namespace);
      const res = await trx
        .updateTable('workspaces')
        .set({ head_snapshot_id: rec.id, updated_at: now })
        .where('id', '=', c.workspaceId)
        .where('head_snapshot_id', '=', c.expectedHeadId)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) throw moved(undefined);
      killPoint('catalog.commit.inside'); // every row written, the transaction not yet committed
    });
    return toSnapshotRow(rec, s.namespace);
  }

  /**
   * Resolves a snapshot by exact id, exact name, or unique id prefix (≥ 4 characters after
   * the optional `sn_`). @throws E_NOT_FOUND, E_AMBIGUOUS (details.candidates lists ids)
   */
  async getSnapshot(namespace: string, ref: string): Promise<SnapshotRow> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) throw snapshotNotFound(namespace, ref);
      const id = await resolveRef(ctx.db, 'snapshots', 'sn', nsId, namespace, ref);
      const r = await ctx.db.selectFrom('snapshots').selectAll().where('id', '=', id).executeTakeFirst();
      if (!r) throw snapshotNotFound(namespace, ref);
      return toSnapshotRow(r, namespace);
    });
  }

  /** The class counts recorded with snapshot `id` of `namespace`, or undefined (none, unreadable, or no such snapshot). */
  async snapshotClasses(namespace: string, id: string): Promise<SnapshotClassCounts | undefined> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return undefined;
      const r = await ctx.db
        .selectFrom('snapshots')
        .select('classes')
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .executeTakeFirst();
      return r?.classes ? parseClassCounts(r.classes) : undefined;
    });
  }

  /** Records the class counts of snapshot `id` of `namespace` (one UPDATE; nothing when it is gone). */
  async setSnapshotClasses(namespace: string, id: string, classes: SnapshotClassCounts): Promise<void> {
    const ctx = this.ctx;
    await ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return;
      await ctx.db
        .updateTable('snapshots')
        .set({ classes: JSON.stringify(classes) })
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .execute();
    });
  }

  /** Snapshots of `namespace`, newest first (created_at, then id, descending); only those with every label of `filter.labels`. */
  async listSnapshots(namespace: string, filter?: ListFilter): Promise<SnapshotRow[]> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return [];
      const rows = await ctx.db
        .selectFrom('snapshots')
        .selectAll()
        .where('namespace', '=', nsId)
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .execute();
      return rows.map((r) => toSnapshotRow(r, namespace)).filter((r) => matchesLabels(r.labels, filter?.labels));
    });
  }

  /**
   * Deletes the snapshot row `id` (exact id). Its packs and blobs stay (GC collects them).
   * @throws E_NOT_FOUND, E_IN_USE (a workspace's base or head, or another snapshot's parent;
   *   details lists up to 5 of them)
   */
  async deleteSnapshot(namespace: string, id: string): Promise<void> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) throw snapshotNotFound(namespace, id);
    await ctx.tx(async (trx) => {
      // locked first: a fork or a child snapshot taking it as base (FOR KEY SHARE) commits
      // before the checks below read, or waits and then finds it gone
      const snap = await trx
        .selectFrom('snapshots')
        .select('id')
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .$if(ctx.rowLocks, (q) => q.forUpdate())
        .executeTakeFirst();
      if (!snap) throw snapshotNotFound(namespace, id);
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'name'])
        .where((eb) => eb.or([eb('base_snapshot_id', '=', id), eb('head_snapshot_id', '=', id)]))
        .limit(5)
        .execute();
      if (ws.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the base or head of workspace(s) ${ws.map((w) => w.name ?? w.id).join(', ')}`, {
          hint: 'It cannot be deleted while those workspaces exist.',
          details: { workspaces: ws.map((w) => w.id) },
        });
      }
      const children = await trx.selectFrom('snapshots').select('id').where('parent_id', '=', id).limit(5).execute();
      if (children.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the parent of snapshot(s) ${children.map((c) => c.id).join(', ')}`, {
          hint: 'Remove the snapshots made from it first.',
          details: { snapshots: children.map((c) => c.id) },
        });
      }
      await trx.deleteFrom('snapshots').where('id', '=', id).execute();
    });
  }
}

/** A `classes` column's JSON as SnapshotClassCounts, or undefined when it is not of that shape. */
function parseClassCounts(text: string): SnapshotClassCounts | undefined {
  try {
    const v = JSON.parse(text) as SnapshotClassCounts;
    const ok = (c: unknown) =>
      typeof c === 'object' &&
      c !== null &&
      Number.isFinite((c as { files: unknown }).files) &&
      Number.isFinite((c as { bytes: unknown }).bytes);
    return typeof v.key === 'string' && ok(v.durable) && ok(v.reconstructible) && ok(v.ignored) ? v : undefined;
  } catch {
    return undefined;
  }
}
