import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/catalog.js';
import { newIdentityId } from '../../src/catalog/store-binding.js';
import { mkPack, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/**
 * The identity part of the catalog contract (0005_identity, src/catalog/identity.ts, used by
 * src/catalog/store-binding.ts): no row on a new catalog, insert-if-absent that many writers
 * race on (one row wins, every writer reads it back), pending → bound, the operator's replace,
 * and the content counts that tell an empty catalog.
 */
export function catalogIdentityContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog contract (identity): ${name}`, () => {
    it('a new catalog has no identity and holds nothing', () =>
      withCat(async (cat) => {
        assert.equal(await cat.identity().read(), undefined);
        assert.deepEqual(await cat.identity().content(), { namespaces: 0, snapshots: 0, packs: 0 });
      }));

    it('propose inserts a pending row once; a later proposal gets the first row back', () =>
      withCat(async (cat) => {
        const first = { catalogId: newIdentityId('cat'), storeId: newIdentityId('st') };
        const a = await cat.identity().propose(first);
        assert.deepEqual([a.catalogId, a.storeId, a.state, a.boundAt], [first.catalogId, first.storeId, 'pending', null]);
        const b = await cat.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        assert.deepEqual(b, a);
        assert.deepEqual(await cat.identity().read(), a);
      }));

    it('many proposals at once, over two connections: one row wins and every proposer reads it back', async () => {
      const cat = await factory.create();
      const other = factory.connect ? await factory.connect(cat) : cat;
      try {
        const got = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            (i % 2 ? other : cat).identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') }),
          ),
        );
        for (const g of got) assert.deepEqual([g.catalogId, g.storeId], [got[0]!.catalogId, got[0]!.storeId]);
      } finally {
        if (other !== cat) await other.close();
        await factory.cleanup(cat);
      }
    });

    it('confirm makes the row bound (idempotent), and only for its own catalog id', () =>
      withCat(async (cat) => {
        const p = await cat.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        const wrong = await cat.identity().confirm(newIdentityId('cat'));
        assert.equal(wrong.state, 'pending');
        const c = await cat.identity().confirm(p.catalogId);
        assert.equal(c.state, 'bound');
        assert.ok(c.boundAt);
        assert.deepEqual(await cat.identity().confirm(p.catalogId), c);
      }));

    it('replace writes a bound row in place of any other', () =>
      withCat(async (cat) => {
        await cat.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        const next = { catalogId: newIdentityId('cat'), storeId: newIdentityId('st') };
        const r = await cat.identity().replace(next);
        assert.deepEqual([r.catalogId, r.storeId, r.state], [next.catalogId, next.storeId, 'bound']);
        assert.deepEqual(await cat.identity().read(), r);
      }));

    it('content counts namespaces, snapshots and packs', () =>
      withCat(async (cat) => {
        await cat.createSnapshot(snap({ packs: [mkPack('packs/id1', 2, 'a')] }));
        assert.deepEqual(await cat.identity().content(), { namespaces: 1, snapshots: 1, packs: 1 });
      }));
  });
}
