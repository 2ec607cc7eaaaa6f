import type { Selectable } from 'kysely';
import type { CatalogContent, CatalogIdentity, CatalogIdentityPort } from '../port/identity.js';
import type { CatalogIdentityTable } from './schema.js';
import { nowIso, toNum } from './rows.js';
import type { SqlContext } from './sql-context.js';

/** The one row's key. */
const ROW = 'home';

function toIdentity(r: Selectable<CatalogIdentityTable>): CatalogIdentity {
  return {
    catalogId: r.catalog_id,
    storeId: r.store_id,
    state: r.state === 'bound' ? 'bound' : 'pending',
    createdAt: r.created_at,
    boundAt: r.bound_at,
  };
}

/** `CatalogIdentityPort` over the `catalog_identity` table (migration 0005), for every SQL dialect. */
export class IdentityQueries implements CatalogIdentityPort {
  constructor(private readonly ctx: SqlContext) {}

  /** See CatalogIdentityPort.read. */
  async read(): Promise<CatalogIdentity | undefined> {
    const r = await this.ctx.read(() => this.ctx.db.selectFrom('catalog_identity').selectAll().where('name', '=', ROW).executeTakeFirst());
    return r && toIdentity(r);
  }

  /** See CatalogIdentityPort.propose: `INSERT … ON CONFLICT DO NOTHING`, then the stored row. */
  async propose(p: { catalogId: string; storeId: string }): Promise<CatalogIdentity> {
    await this.ctx.tx((trx) =>
      trx
        .insertInto('catalog_identity')
        .values({ name: ROW, catalog_id: p.catalogId, store_id: p.storeId, state: 'pending', created_at: nowIso(), bound_at: null })
        .onConflict((oc) => oc.column('name').doNothing())
        .execute(),
    );
    return this.mustRead();
  }

  /** See CatalogIdentityPort.takeOver: one `UPDATE … WHERE` the row still names the stale ids and is pending. */
  async takeOver(stale: { catalogId: string; storeId: string }, next: { catalogId: string; storeId: string }): Promise<CatalogIdentity> {
    await this.ctx.tx((trx) =>
      trx
        .updateTable('catalog_identity')
        .set({ catalog_id: next.catalogId, store_id: next.storeId, created_at: nowIso(), bound_at: null })
        .where('name', '=', ROW)
        .where('catalog_id', '=', stale.catalogId)
        .where('store_id', '=', stale.storeId)
        .where('state', '=', 'pending')
        .execute(),
    );
    return this.mustRead();
  }

  /** See CatalogIdentityPort.confirm. */
  async confirm(catalogId: string): Promise<CatalogIdentity> {
    await this.ctx.tx((trx) =>
      trx
        .updateTable('catalog_identity')
        .set({ state: 'bound', bound_at: nowIso() })
        .where('name', '=', ROW)
        .where('catalog_id', '=', catalogId)
        .where('state', '=', 'pending')
        .execute(),
    );
    return this.mustRead();
  }

  /** See CatalogIdentityPort.replace. */
  async replace(p: { catalogId: string; storeId: string }): Promise<CatalogIdentity> {
    const now = nowIso();
    await this.ctx.tx(async (trx) => {
      await trx.deleteFrom('catalog_identity').where('name', '=', ROW).execute();
      await trx
        .insertInto('catalog_identity')
        .values({ name: ROW, catalog_id: p.catalogId, store_id: p.storeId, state: 'bound', created_at: now, bound_at: now })
        .execute();
    });
    return this.mustRead();
  }

  /** See CatalogIdentityPort.content. */
  async content(): Promise<CatalogContent> {
    const db = this.ctx.db;
    return this.ctx.read(async () => {
      const count = async (q: Promise<{ n: unknown } | undefined>) => toNum(((await q)?.n ?? 0) as number | string);
      return {
        namespaces: await count(
          db
            .selectFrom('namespaces')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirst(),
        ),
        snapshots: await count(
          db
            .selectFrom('snapshots')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirst(),
        ),
        packs: await count(
          db
            .selectFrom('packs')
            .select((eb) => eb.fn.countAll().as('n'))
            .where('state', '!=', 'deleted')
            .executeTakeFirst(),
        ),
      };
    });
  }

  private async mustRead(): Promise<CatalogIdentity> {
    const r = await this.read();
    if (!r) throw new Error('catalog_identity: the row just written is not there');
    return r;
  }
}
