import { sql, type Transaction } from 'kysely';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { GcCatalog, GcPack, GcSnapshot, PackReindex, PackState, RepackCommit } from '../port/gc-catalog.js';
import type { BlobLocation } from '../../store/pack/pack-types.js';
import type { Database } from './schema.js';
import { BLOB_LOCATION_COLUMNS, BlobQueries, LOOKUP_BATCH, locationOfRow, rowOfLocation, toExcludedLocation } from './blob-queries.js';
import { commitRepackInTx } from './pack-guard.js';
import { adoptPacksInTx, type StoredPack } from './pack-adoption.js';
import { snapshotNotFound } from './refs.js';
import { chunks, toNum } from './rows.js';
import type { SqlContext } from './sql-context.js';
import { addPackBytes } from './usage-counter.js';

/** The one lock name gc uses in `gc_lock`. */
const GC_LOCK = 'gc';

/** The database's clock as an expression typed for `bigint` columns. */
function clock(ctx: SqlContext) {
  return sql<number>`${ctx.dialect.nowMs()}`;
}

/**
 * The catalog queries of `rm` and `gc` (dialect-neutral; docs/explanation/gc.md): the gc lock,
 * the listings a mark starts from, the guarded removal of snapshot rows, the pack state
 * transitions, and the commit-time guard of the
 * packs a snapshot relies on. Every transition is a conditional `UPDATE`/`DELETE` whose
 * condition is the guard, so it holds under PostgreSQL's READ COMMITTED (row locks order
 * two writers of one pack row) as under SQLite's single writer.
 */
export class GcQueries implements GcCatalog {
  readonly #blobs: BlobQueries;

  constructor(private readonly ctx: SqlContext) {
    this.#blobs = new BlobQueries(ctx);
  }

  /** The database's clock, ms since the epoch. */
  async nowMs(): Promise<number> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const r = await sql<{ now: number | string }>`SELECT ${ctx.dialect.nowMs()} AS now`.execute(ctx.db);
      return toNum(r.rows[0]!.now);
    });
  }

  /** Records the snapshot a workspace's host state was built from (null: it has none). @throws E_NOT_FOUND */
  async setLayerSnapshot(workspaceId: string, snapshotId: string | null): Promise<void> {
    const res = await this.ctx.tx((trx) =>
      trx.updateTable('workspaces').set({ layer_snapshot_id: snapshotId }).where('id', '=', workspaceId).executeTakeFirst(),
    );
    if (Number(res.numUpdatedRows) !== 1) throw new AwcError('E_NOT_FOUND', `no workspace with id ${workspaceId}`);
  }

  /**
   * `awc rm <snapshot>`: removes snapshot `id` (exact id) of `namespace`, re-parenting its
   * children to its parent, in one transaction. Refused (E_IN_USE, naming the holders in
   * details) when it is a workspace's head or layer snapshot; also, unless `force`, when it is
   * a workspace's base or the parent of named snapshots. With `force`, the workspaces whose
   * base it is get its parent as their base (their head when it has none).
   * @returns the re-parented child ids and the re-based workspace ids. @throws E_NOT_FOUND, E_IN_USE
   */
  async removeSnapshot(
    namespace: string,
    id: string,
    opts: { force?: boolean } = {},
  ): Promise<{ reparented: string[]; rebased: string[] }> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) throw snapshotNotFound(namespace, id);
    return ctx.tx(async (trx) => {
      const snap = await trx
        .selectFrom('snapshots')
        .select(['id', 'parent_id'])
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .executeTakeFirst();
      if (!snap) throw snapshotNotFound(namespace, id);
      const holders = await trx
        .selectFrom('workspaces')
        .select(['id', 'name', 'base_snapshot_id', 'head_snapshot_id', 'layer_snapshot_id'])
        .where((eb) => eb.or([eb('base_snapshot_id', '=', id), eb('head_snapshot_id', '=', id), eb('layer_snapshot_id', '=', id)]))
        .execute();
      const label = (w: { id: string; name: string | null }) => w.name ?? w.id;
      const hard = holders.filter((w) => w.head_snapshot_id === id || w.layer_snapshot_id === id);
      if (hard.length > 0) {
        throw new AwcError(
          'E_IN_USE',
          `snapshot ${id} is the head or the layer of workspace(s) ${hard.slice(0, 5).map(label).join(', ')}`,
          {
            hint: 'Remove those workspaces first (`awc rm <workspace>`); --force does not remove a head or a layer.',
            details: { workspaces: hard.map((w) => w.id), holds: 'head' },
          },
        );
      }
      const named = await trx
        .selectFrom('snapshots')
        .select(['id', 'name'])
        .where('parent_id', '=', id)
        .where('name', 'is not', null)
        .limit(5)
        .execute();
      if (!opts.force && holders.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the base of workspace(s) ${holders.slice(0, 5).map(label).join(', ')}`, {
          hint: 'Remove those workspaces first, or pass --force to make its parent their base.',
          details: { workspaces: holders.map((w) => w.id), holds: 'base' },
        });
      }
      if (!opts.force && named.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the parent of named snapshot(s) ${named.map((s) => s.name).join(', ')}`, {
          hint: 'Pass --force to remove it anyway (its children get its parent as their parent).',
          details: { snapshots: named.map((s) => s.id), holds: 'parent' },
        });
      }
      const rebased: string[] = [];
      for (const w of holders) {
        await trx
          .updateTable('workspaces')
          .set({ base_snapshot_id: snap.parent_id ?? w.head_snapshot_id })
          .where('id', '=', w.id)
          .execute();
        rebased.push(w.id);
      }
      const reparented = await this.#unlink(trx, id, snap.parent_id);
      return { reparented, rebased };
    });
  }

  /** Re-parents the children of `id` to `parentId` and deletes row `id`; returns the children's ids. */
  async #unlink(trx: Transaction<Database>, id: string, parentId: string | null): Promise<string[]> {
    const children = await trx.selectFrom('snapshots').select('id').where('parent_id', '=', id).execute();
    if (children.length > 0) await trx.updateTable('snapshots').set({ parent_id: parentId }).where('parent_id', '=', id).execute();
    await trx.deleteFrom('snapshots').where('id', '=', id).execute();
    return children.map((c) => c.id);
  }

  // --- the gc lock -------------------------------------------------------------------------

  /** Extends the lock inside `trx` while `owner` holds it. @throws E_GC_LOCK_LOST */
  async #hold(trx: Transaction<Database>, owner: string, ttlMs: number): Promise<void> {
    const now = clock(this.ctx);
    const res = await trx
      .updateTable('gc_lock')
      .set({ expires_at: sql<number>`${now} + ${Math.floor(ttlMs)}` })
      .where('name', '=', GC_LOCK)
      .where('owner', '=', owner)
      .where('expires_at', '>', now)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) {
      throw new AwcError('E_GC_LOCK_LOST', `this gc (${owner}) no longer holds the gc lock: it expired and may have been taken`, {
        details: { owner },
      });
    }
  }

  /** See GcCatalog.acquireLock. @throws E_GC_RUNNING */
  async acquireLock(owner: string, ttlMs: number): Promise<{ owner: string; takenAtMs: number; expiresAtMs: number }> {
    const now = clock(this.ctx);
    const row = await this.ctx.tx(async (trx) => {
      await trx.deleteFrom('gc_lock').where('name', '=', GC_LOCK).where('expires_at', '<=', now).execute();
      await trx
        .insertInto('gc_lock')
        .values({ name: GC_LOCK, owner, taken_at: now, expires_at: sql<number>`${now} + ${Math.floor(ttlMs)}` })
        .onConflict((oc) => oc.column('name').doNothing())
        .execute();
      const r = await trx.selectFrom('gc_lock').selectAll().where('name', '=', GC_LOCK).executeTakeFirstOrThrow();
      if (r.owner !== owner) return r;
      // ours (just taken, or taken before by this owner): expires ttlMs from now
      await trx
        .updateTable('gc_lock')
        .set({ expires_at: sql<number>`${now} + ${Math.floor(ttlMs)}` })
        .where('name', '=', GC_LOCK)
        .where('owner', '=', owner)
        .execute();
      return trx.selectFrom('gc_lock').selectAll().where('name', '=', GC_LOCK).executeTakeFirstOrThrow();
    });
    const expiresAtMs = toNum(row.expires_at);
    if (row.owner !== owner) {
      const expiresAt = new Date(expiresAtMs).toISOString();
      throw new AwcError('E_GC_RUNNING', `another gc holds the gc lock: ${row.owner}, until ${expiresAt} unless it renews it`, {
        details: { owner: row.owner, expiresAt, takenAt: new Date(toNum(row.taken_at)).toISOString() },
      });
    }
    return { owner, takenAtMs: toNum(row.taken_at), expiresAtMs };
  }

  /** See GcCatalog.renewLock. @throws E_GC_LOCK_LOST */
  renewLock(owner: string, ttlMs: number): Promise<void> {
    return this.ctx.tx((trx) => this.#hold(trx, owner, ttlMs));
  }

  /** See GcCatalog.releaseLock. */
  async releaseLock(owner: string): Promise<void> {
    await this.ctx.tx((trx) => trx.deleteFrom('gc_lock').where('name', '=', GC_LOCK).where('owner', '=', owner).execute());
  }

  // --- listings ------------------------------------------------------------------------------

  /** See GcCatalog.listSnapshots. */
  listSnapshots(): Promise<GcSnapshot[]> {
    return this.ctx.read(async () => {
      const rows = await this.ctx.db
        .selectFrom('snapshots as s')
        .innerJoin('namespaces as n', 'n.id', 's.namespace')
        .select(['n.name as ns', 's.id', 's.name', 's.root', 's.parent_id', 's.created_at'])
        .orderBy('s.created_at')
        .orderBy('s.id')
        .execute();
      return rows.map((r) => ({
        namespace: r.ns,
        id: r.id,
        name: r.name,
        root: r.root as Digest,
        parentId: r.parent_id,
        createdAt: r.created_at,
      }));
    });
  }

  /** See GcCatalog.listHolds. */
  listHolds(): Promise<{ namespace: string; workspaceId: string; base: string; head: string; layer: string | null }[]> {
    return this.ctx.read(async () => {
      const rows = await this.ctx.db
        .selectFrom('workspaces as w')
        .innerJoin('namespaces as n', 'n.id', 'w.namespace')
        .select(['n.name as ns', 'w.id', 'w.base_snapshot_id', 'w.head_snapshot_id', 'w.layer_snapshot_id'])
        .execute();
      return rows.map((r) => ({
        namespace: r.ns,
        workspaceId: r.id,
        base: r.base_snapshot_id,
        head: r.head_snapshot_id,
        layer: r.layer_snapshot_id,
      }));
    });
  }

  /** See GcCatalog.listPacks. */
  listPacks(): Promise<GcPack[]> {
    return this.ctx.read(async () => {
      const rows = await this.ctx.db
        .selectFrom('packs as p')
        .innerJoin('namespaces as n', 'n.id', 'p.namespace')
        .select(['n.name as ns', 'p.key', 'p.size', 'p.state', 'p.condemned_at', 'p.deleted_at'])
        .orderBy('p.key')
        .execute();
      return rows.map((r) => ({
        namespace: r.ns,
        key: r.key,
        size: toNum(r.size),
        state: r.state as PackState,
        condemnedAtMs: r.condemned_at === null ? null : toNum(r.condemned_at),
        deletedAtMs: r.deleted_at === null ? null : toNum(r.deleted_at),
      }));
    });
  }

  // --- guarded transitions -------------------------------------------------------------------

  /** See GcCatalog.removeGarbageSnapshot. @throws E_GC_LOCK_LOST */
  async removeGarbageSnapshot(owner: string, ttlMs: number, namespace: string, id: string, createdBefore: string): Promise<boolean> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) return false;
    return ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      const snap = await trx
        .selectFrom('snapshots as s')
        .select(['s.id', 's.parent_id'])
        .where('s.id', '=', id)
        .where('s.namespace', '=', nsId)
        .where('s.name', 'is', null)
        .where('s.created_at', '<', createdBefore)
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('workspaces as w')
                .select('w.id')
                .where((eb) =>
                  eb.or([eb('w.base_snapshot_id', '=', id), eb('w.head_snapshot_id', '=', id), eb('w.layer_snapshot_id', '=', id)]),
                ),
            ),
          ),
        )
        .executeTakeFirst();
      if (!snap) return false;
      await this.#unlink(trx, id, snap.parent_id);
      return true;
    });
  }

  /** Moves the packs of `keys` in state `from` to `to` (setting condemned_at as given); returns how many moved. */
  async #move(owner: string, ttlMs: number, keys: readonly string[], from: PackState, to: PackState): Promise<number> {
    if (keys.length === 0) return 0;
    const now = clock(this.ctx);
    return this.ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      let n = 0;
      for (const group of chunks([...new Set(keys)], LOOKUP_BATCH)) {
        const res = await trx
          .updateTable('packs')
          .set(to === 'condemned' ? { state: to, condemned_at: now } : { state: to, condemned_at: null })
          .where('key', 'in', group)
          .where('state', '=', from)
          .executeTakeFirst();
        n += Number(res.numUpdatedRows);
      }
      return n;
    });
  }

  /** See GcCatalog.condemnPacks. @throws E_GC_LOCK_LOST */
  condemnPacks(owner: string, ttlMs: number, keys: readonly string[]): Promise<number> {
    return this.#move(owner, ttlMs, keys, 'live', 'condemned');
  }

  /** See GcCatalog.uncondemnPacks. @throws E_GC_LOCK_LOST */
  uncondemnPacks(owner: string, ttlMs: number, keys: readonly string[]): Promise<number> {
    return this.#move(owner, ttlMs, keys, 'condemned', 'live');
  }

  /** See GcCatalog.adoptPacks. @throws E_GC_LOCK_LOST */
  adoptPacks(owner: string, ttlMs: number, objects: readonly StoredPack[]): Promise<number> {
    return this.ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      return adoptPacksInTx(this.ctx, trx, objects);
    });
  }

  /** See GcCatalog.beginDelete. @throws E_GC_LOCK_LOST */
  async beginDelete(owner: string, ttlMs: number, key: string, graceMs: number): Promise<boolean> {
    const now = clock(this.ctx);
    return this.ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      const res = await trx
        .updateTable('packs')
        .set({ state: 'deleting' })
        .where('key', '=', key)
        .where('state', '=', 'condemned')
        .where('condemned_at', '<=', sql<number>`${now} - ${Math.floor(graceMs)}`)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) return false;
      await trx.deleteFrom('blobs').where('pack', '=', key).execute();
      return true;
    });
  }

  /** See GcCatalog.finishDelete. @throws E_GC_LOCK_LOST */
  async finishDelete(owner: string, ttlMs: number, key: string): Promise<void> {
    const now = clock(this.ctx);
    await this.ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      const gone = await trx
        .updateTable('packs')
        .set({ state: 'deleted', deleted_at: now })
        .where('key', '=', key)
        .where('state', '=', 'deleting')
        .returning(['namespace', 'size'])
        .execute();
      await addPackBytes(trx, gone, -1);
    });
  }

  /** See GcCatalog.commitRepack. @throws E_GC_LOCK_LOST, E_PACK_CONDEMNED */
  async commitRepack(owner: string, ttlMs: number, r: RepackCommit): Promise<boolean> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(r.namespace));
    if (!nsId) return false;
    return ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      return commitRepackInTx(ctx, this.#blobs, trx, nsId, r);
    });
  }
  /** See GcCatalog.listPackBlobs. */
  listPackBlobs(key: string): Promise<BlobLocation[]> {
    return this.ctx.read(async () => {
      const rows = await this.ctx.db.selectFrom('blobs').select(BLOB_LOCATION_COLUMNS).where('pack', '=', key).orderBy('offset').execute();
      return rows.map(locationOfRow);
    });
  }

  /** See GcCatalog.reindexPack. @throws E_GC_LOCK_LOST */
  async reindexPack(owner: string, ttlMs: number, r: PackReindex): Promise<number> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(r.namespace));
    if (!nsId || r.entries.length === 0) return 0;
    const replace = [...r.replace];
    return ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      const pack = await trx
        .selectFrom('packs')
        .select('state')
        .where('key', '=', r.key)
        .where('namespace', '=', nsId)
        .$if(ctx.rowLocks, (q) => q.forUpdate())
        .executeTakeFirst();
      if (pack?.state !== 'live' && pack?.state !== 'condemned') return 0;
      const seen = new Set<string>(); // a pack lists a digest once; a damaged one may not: keep its first entry
      const rows = r.entries
        .filter((e) => !seen.has(e.digest) && seen.add(e.digest))
        .sort((a, b) => (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0))
        .map((e) => rowOfLocation(nsId, r.key, e));
      let n = 0;
      for (const group of chunks(rows, ctx.rowsPerInsert(8))) {
        const res = await trx
          .insertInto('blobs')
          .values(group)
          .onConflict((oc) =>
            oc
              .columns(['namespace', 'digest'])
              .doUpdateSet(toExcludedLocation)
              .where((eb) =>
                eb.or([
                  eb.and([
                    eb('blobs.pack', '=', r.key),
                    eb.or([
                      eb('blobs.offset', '!=', eb.ref('excluded.offset')),
                      eb('blobs.stored_length', '!=', eb.ref('excluded.stored_length')),
                      eb('blobs.raw_length', '!=', eb.ref('excluded.raw_length')),
                      eb('blobs.codec', '!=', eb.ref('excluded.codec')),
                      eb('blobs.kind', '!=', eb.ref('excluded.kind')),
                    ]),
                  ]),
                  ...(replace.length > 0 ? [eb.and([eb('blobs.pack', '!=', r.key), eb('blobs.digest', 'in', replace)])] : []),
                ]),
              ),
          )
          .executeTakeFirst();
        n += Number(res.numInsertedOrUpdatedRows ?? 0);
      }
      return n;
    });
  }
  /** See GcCatalog.dropLostPack. @throws E_GC_LOCK_LOST */
  async dropLostPack(owner: string, ttlMs: number, key: string): Promise<number> {
    const now = clock(this.ctx);
    return this.ctx.tx(async (trx) => {
      await this.#hold(trx, owner, ttlMs);
      const lost = await trx
        .updateTable('packs')
        .set({ state: 'deleted', deleted_at: now })
        .where('key', '=', key)
        .where('state', 'in', ['live', 'condemned'])
        .returning(['namespace', 'size'])
        .execute();
      if (lost.length !== 1) return -1;
      const gone = await trx.deleteFrom('blobs').where('pack', '=', key).executeTakeFirst();
      await addPackBytes(trx, lost, -1);
      return Number(gone.numDeletedRows);
    });
  }
}
