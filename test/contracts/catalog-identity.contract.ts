import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import {
  bindCatalogToStore,
  newIdentityId,
  readStoreIdentity,
  STORE_IDENTITY_KEY,
  type BindOptions,
} from '../../src/catalog/open/store-binding.js';
import { AwcError } from '../../src/core/errors.js';
import { FsObjectStore } from '../../src/store/fs/fs-object-store.js';
import { makeTempDir, removeTempDir } from '../helpers/temp-dir.js';
import { mkPack, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/**
 * The identity part of the catalog contract (0005_identity, src/catalog/port/identity.ts, used by
 * src/catalog/open/store-binding.ts): no row on a new catalog, insert-if-absent that many writers
 * race on (one row wins, every writer reads it back), pending → bound, the operator's replace,
 * and the content counts that tell an empty catalog.
 */
export function catalogIdentityContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);
  /** A fresh catalog and a second connection to it (another host), and two directory stores (two homes' stores). */
  const withTwoHosts = async (fn: (a: Catalog, b: Catalog, stores: [FsObjectStore, FsObjectStore]) => Promise<void>): Promise<void> => {
    const cat = await factory.create();
    const other = factory.connect ? await factory.connect(cat) : cat;
    const dir = await makeTempDir('awc-bind-');
    try {
      await fn(cat, other, [new FsObjectStore(`${dir}/a`), new FsObjectStore(`${dir}/b`)]);
    } finally {
      if (other !== cat) await other.close();
      await factory.cleanup(cat);
      await removeTempDir(dir);
    }
  };
  const where = { catalog: 'catalog', store: 'store' };
  /** Binds at once: binder i runs over connection i % 2 with store `storeOf[i]`; returns each outcome (a store index won, or the error). */
  const race = async (conns: Catalog[], stores: FsObjectStore[], storeOf: number[], opts: BindOptions = {}) =>
    Promise.allSettled(storeOf.map((s, i) => bindCatalogToStore(conns[i % conns.length]!, stores[s]!, where, { pollMs: 5, ...opts })));
  /** Exactly one store won: every binder with it succeeded, every other got E_STORE_MISMATCH; the row and the winner's object agree. */
  const oneStoreWon = async (cat: Catalog, stores: FsObjectStore[], storeOf: number[], got: PromiseSettledResult<unknown>[]) => {
    const row = await cat.identity().read();
    assert.equal(row?.state, 'bound');
    const objs = await Promise.all(stores.map((s) => readStoreIdentity(s)));
    const winners = objs.flatMap((o, i) => (o && o.catalogId === row!.catalogId && o.storeId === row!.storeId ? [i] : []));
    assert.equal(winners.length, 1, `exactly one store names the row: ${JSON.stringify(objs)}`);
    const w = winners[0]!;
    got.forEach((g, i) => {
      if (storeOf[i] === w)
        assert.equal(g.status, 'fulfilled', `binder ${i} on the winning store: ${g.status === 'rejected' ? String(g.reason) : ''}`);
      else {
        assert.equal(g.status, 'rejected', `binder ${i} on the losing store must be refused`);
        const e = (g as PromiseRejectedResult).reason as AwcError;
        assert.ok(e instanceof AwcError && e.code === 'E_STORE_MISMATCH', String(e));
        assert.ok(e.hint && /AWC_OBJECT_STORE/.test(e.hint), e.hint);
      }
    });
    objs.forEach((o, i) => i !== w && assert.equal(o, undefined, `the losing store ${i} holds no identity`));
  };

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

    it('takeOver replaces a pending row only while it names the stale ids, never a bound one; racing takers: one wins', async () => {
      const cat = await factory.create();
      const other = factory.connect ? await factory.connect(cat) : cat;
      try {
        const first = await cat.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        const wrong = await cat
          .identity()
          .takeOver(
            { catalogId: newIdentityId('cat'), storeId: first.storeId },
            { catalogId: newIdentityId('cat'), storeId: newIdentityId('st') },
          );
        assert.deepEqual(wrong, first, 'a stale pair that is not the row changes nothing');
        const tries = Array.from({ length: 6 }, () => ({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') }));
        const got = await Promise.all(tries.map((n, i) => (i % 2 ? other : cat).identity().takeOver(first, n)));
        for (const g of got) assert.deepEqual([g.catalogId, g.storeId, g.state], [got[0]!.catalogId, got[0]!.storeId, 'pending']);
        assert.equal(tries.filter((n) => n.catalogId === got[0]!.catalogId && n.storeId === got[0]!.storeId).length, 1, 'one taker won');
        const bound = await cat.identity().confirm(got[0]!.catalogId);
        const after = await other.identity().takeOver(bound, { catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        assert.deepEqual(after, bound, 'a bound row is never taken over');
      } finally {
        if (other !== cat) await other.close();
        await factory.cleanup(cat);
      }
    });

    it('two hosts with different stores bind one new catalog at once, over two connections: one store wins, the other gets E_STORE_MISMATCH', () =>
      withTwoHosts(async (cat, other, stores) => {
        const storeOf = [0, 1, 0, 1];
        await oneStoreWon(cat, stores, storeOf, await race([cat, other], stores, storeOf));
      }));

    it('a pending row whose proposer died is taken over (new ids) by one of two hosts with different stores; the other is refused', () =>
      withTwoHosts(async (cat, other, stores) => {
        const dead = await cat.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
        const storeOf = [0, 1];
        const got = await race([cat, other], stores, storeOf, { pendingWaitMs: 100 });
        await oneStoreWon(cat, stores, storeOf, got);
        const row = await cat.identity().read();
        assert.notEqual(row!.catalogId, dead.catalogId, "the dead proposer's ids are never bound (it may still write them to its store)");
        assert.notEqual(row!.storeId, dead.storeId);
      }));

    it('a host taken over while it writes its store object (judged dead, only stalled) takes the object back and is refused', () =>
      withTwoHosts(async (cat, other) => {
        const dir = await makeTempDir('awc-bind-stall-');
        try {
          // the store of the stalled host: right after its identity object is written, the other host takes the row over
          const stalled = new (class extends FsObjectStore {
            override async put(key: string, body: Uint8Array): Promise<void> {
              await super.put(key, body);
              if (key !== STORE_IDENTITY_KEY) return;
              const row = (await other.identity().read())!;
              await other.identity().takeOver(row, { catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
            }
          })(`${dir}/stalled`);
          await assert.rejects(bindCatalogToStore(cat, stalled, where, { pollMs: 5 }), (e: unknown) => {
            assert.ok(e instanceof AwcError && e.code === 'E_STORE_MISMATCH', String(e));
            return true;
          });
          assert.equal(await readStoreIdentity(stalled), undefined, 'the stalled host took its object back');
          assert.equal((await cat.identity().read())?.state, 'pending', "the other host's row stands");
        } finally {
          await removeTempDir(dir);
        }
      }));

    it('content counts namespaces, snapshots and packs', () =>
      withCat(async (cat) => {
        await cat.createSnapshot(snap({ packs: [mkPack('packs/id1', 2, 'a')] }));
        assert.deepEqual(await cat.identity().content(), { namespaces: 1, snapshots: 1, packs: 1 });
      }));
  });
}
