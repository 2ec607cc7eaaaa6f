import { sql, type Selectable } from 'kysely';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { checkNewLayerImage, type LayerImageRecord, type NewLayerImage } from '../port/layer-images.js';
import type { LayerImagesTable } from './schema.js';
import { toNum } from './rows.js';
import type { Db, SqlContext } from './sql-context.js';

/** Times `recordLayerImage` inserts again when the row it lost to was deleted before it could read it. */
const RECORD_ATTEMPTS = 3;

/** A `layer_images` row as the port's record. */
function toRecord(r: Selectable<LayerImagesTable>): LayerImageRecord {
  return {
    root: r.root as Digest,
    image: r.image as Digest,
    imageBytes: toNum(r.image_bytes),
    index: r.index_digest as Digest,
    indexBytes: toNum(r.index_bytes),
    builtBy: r.built_by,
    createdAt: toNum(r.created_at),
  };
}

/**
 * The `layer_images` queries of the catalog (dialect-neutral; migration 0007_layer_images): the
 * record of a snapshot root's shared EROFS image and content index
 * (docs/explanation/layer-images.md#sharing-images). One row per (namespace, root),
 * the primary key; the first recorded wins, so hosts that built the same root at once agree on
 * one image without a lock.
 */
export class LayerImageQueries {
  constructor(private readonly ctx: SqlContext) {}

  /** The record of `root` in `namespace`, or undefined (none, or an unknown namespace). */
  async layerImage(namespace: string, root: Digest): Promise<LayerImageRecord | undefined> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      return nsId === undefined ? undefined : this.#select(ctx.db, nsId, root);
    });
  }

  /**
   * `INSERT … ON CONFLICT (namespace, root) DO NOTHING` stamped with the database's now, then
   * the stored row read back in the same transaction: ours, or the one another host recorded
   * first. Should that row be deleted between the two statements (a gc under PostgreSQL's READ
   * COMMITTED), the insert runs again. @throws E_USAGE (a malformed field), E_CHANGED_DURING_READ
   * (the row vanished every time: retryable)
   */
  async recordLayerImage(namespace: string, rec: NewLayerImage): Promise<LayerImageRecord> {
    checkNewLayerImage(rec);
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.ensureNs(namespace));
    for (let attempt = 0; attempt < RECORD_ATTEMPTS; attempt++) {
      const stored = await ctx.tx(async (trx) => {
        await trx
          .insertInto('layer_images')
          .values({
            namespace: nsId,
            root: rec.root,
            image: rec.image,
            image_bytes: rec.imageBytes,
            index_digest: rec.index,
            index_bytes: rec.indexBytes,
            built_by: rec.builtBy,
            created_at: sql<number>`${ctx.dialect.nowMs()}`,
          })
          .onConflict((oc) => oc.columns(['namespace', 'root']).doNothing())
          .execute();
        return this.#select(trx, nsId, rec.root);
      });
      if (stored) return stored;
    }
    throw new AwcError('E_CHANGED_DURING_READ', `the layer image record of ${rec.root} was deleted as it was recorded`, {
      hint: 'Record it again.',
      details: { namespace, root: rec.root },
    });
  }

  /** Records of `namespace` whose root is the root of none of its snapshots, by root (`NOT EXISTS` on snapshots_namespace_root_idx). */
  async layerImagesWithoutSnapshot(namespace: string): Promise<LayerImageRecord[]> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (nsId === undefined) return [];
      const rows = await ctx.db
        .selectFrom('layer_images as li')
        .selectAll('li')
        .where('li.namespace', '=', nsId)
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('snapshots as s').select('s.id').whereRef('s.namespace', '=', 'li.namespace').whereRef('s.root', '=', 'li.root'),
            ),
          ),
        )
        .orderBy('li.root')
        .execute();
      return rows.map(toRecord);
    });
  }

  /** Every record of every namespace, with its namespace's name, by namespace and root (gc: src/service/gc/gc-images.ts). */
  async listLayerImages(): Promise<(LayerImageRecord & { namespace: string })[]> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const rows = await ctx.db
        .selectFrom('layer_images as li')
        .innerJoin('namespaces as n', 'n.id', 'li.namespace')
        .selectAll('li')
        .select('n.name as ns_name')
        .orderBy('n.name')
        .orderBy('li.root')
        .execute();
      return rows.map((r) => ({ ...toRecord(r), namespace: r.ns_name }));
    });
  }

  /** Deletes the record of `root` in `namespace`; nothing when there is none. */
  async deleteLayerImage(namespace: string, root: Digest): Promise<void> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (nsId === undefined) return;
    await ctx.tx((trx) => trx.deleteFrom('layer_images').where('namespace', '=', nsId).where('root', '=', root).execute());
  }

  async #select(db: Db, nsId: string, root: Digest): Promise<LayerImageRecord | undefined> {
    const r = await db.selectFrom('layer_images').selectAll().where('namespace', '=', nsId).where('root', '=', root).executeTakeFirst();
    return r && toRecord(r);
  }
}
