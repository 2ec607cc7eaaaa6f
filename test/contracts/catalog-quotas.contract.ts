import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { sql, type Kysely } from 'kysely';
import type { AwcError } from '../../src/core/errors.js';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { QUOTA_DAY_MS } from '../../src/catalog/port/quotas.js';
import { migrateToLatest } from '../../src/catalog/sql/migrations.js';
import type { Database } from '../../src/catalog/sql/schema.js';
import type { WrittenPack } from '../../src/store/pack/pack-types.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { mkPack, NS, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/** A pack of `size` bytes with 2 blobs whose digests derive from `key`. */
function pack(key: string, size: number): WrittenPack {
  return { ...mkPack(key, 2, key), size };
}

/** The catalog's database (every adapter is a KyselyCatalog): the tests age pack rows in it. */
function dbOf(cat: Catalog): Kysely<Database> {
  return (cat as unknown as { db: Kysely<Database> }).db;
}

/** Moves every pack commit of `cat` `ms` into the past (the daily window is judged by the database's clock). */
async function agePacks(cat: Catalog, ms: number): Promise<void> {
  await sql`update packs set committed_at_ms = committed_at_ms - ${ms} where committed_at_ms is not null`.execute(dbOf(cat));
}

/** Row counts of the tables a commit writes. */
async function counts(cat: Catalog, ns: string): Promise<{ snapshots: number; workspaces: number; packs: number }> {
  const st = await cat.packStats(ns);
  return { snapshots: (await cat.listSnapshots(ns)).length, workspaces: (await cat.listWorkspaces(ns)).length, packs: st.packs };
}

/**
 * The quota part of the catalog contract (0009_namespace_quotas, src/catalog/port/quotas.ts,
 * docs/reference/quotas.md): limits read back as set, usage as counted, each limit refusing
 * its commit (import snapshot, checkpoint, fork) with E_QUOTA and nothing written, the daily
 * limit retryable and freed by time, and, with a second connection, concurrent commits that each
 * fit alone but not together: exactly one wins. Run by `catalogContract` for every adapter.
 */
export function catalogQuotaContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog contract (quotas): ${name}`, () => {
    it('limits read back as set; a patch keeps what it does not name; null removes one; clear removes all', () =>
      withCat(async (cat) => {
        assert.equal(await cat.quota(NS), undefined);
        assert.deepEqual(
          { ...(await cat.quotaUsage('never-used')), nowMs: 0 },
          { storedBytes: 0, dailyNewBytes: 0, workspaces: 0, nowMs: 0 },
        );
        assert.deepEqual(await cat.setQuota(NS, { storedBytes: 6_000_000_000 }), {
          storedBytes: 6_000_000_000,
          dailyNewBytes: null,
          workspaces: null,
        });
        assert.deepEqual(await cat.setQuota(NS, { workspaces: 3, dailyNewBytes: 10 }), {
          storedBytes: 6_000_000_000,
          dailyNewBytes: 10,
          workspaces: 3,
        });
        assert.deepEqual(await cat.setQuota(NS, { dailyNewBytes: null }), {
          storedBytes: 6_000_000_000,
          dailyNewBytes: null,
          workspaces: 3,
        });
        assert.deepEqual(await cat.quota(NS), { storedBytes: 6_000_000_000, dailyNewBytes: null, workspaces: 3 });
        await rejectsWith(cat.setQuota(NS, { workspaces: -1 }), 'E_USAGE');
        await rejectsWith(cat.setQuota(NS, { storedBytes: 1.5 }), 'E_USAGE');
        assert.equal(await cat.clearQuota(NS), true);
        assert.equal(await cat.clearQuota(NS), false);
        assert.equal(await cat.quota(NS), undefined);
      }));

    it('usage counts stored pack bytes, the last 24 h of commits and workspaces', () =>
      withCat(async (cat) => {
        const s = await cat.createSnapshot(snap({ packs: [pack('p/u1', 1000), pack('p/u2', 500)] }));
        await cat.forkWorkspaces(NS, s.id, [null, null]);
        const u = await cat.quotaUsage(NS);
        assert.deepEqual({ ...u, nowMs: 0 }, { storedBytes: 1500, dailyNewBytes: 1500, workspaces: 2, nowMs: 0 });
        assert.ok(Math.abs(u.nowMs - (await cat.nowMs())) < 60_000);
        await agePacks(cat, QUOTA_DAY_MS + 1000);
        assert.equal((await cat.quotaUsage(NS)).dailyNewBytes, 0, 'older than a day');
        assert.equal((await cat.quotaUsage(NS)).storedBytes, 1500);
      }));

    it('stored bytes: an import commit over the limit is E_QUOTA (not retryable) and writes nothing; under it passes', () =>
      withCat(async (cat) => {
        await cat.createSnapshot(snap({ packs: [pack('p/s1', 1000)] }));
        await cat.setQuota(NS, { storedBytes: 1500 });
        const before = await counts(cat, NS);
        const e = await rejectsWith(cat.createSnapshot(snap({ name: 'big', packs: [pack('p/s2', 600)] })), 'E_QUOTA');
        assert.equal(e.retryable, false);
        assert.equal(e.exitCode, 4);
        assert.deepEqual(e.details, { namespace: NS, limit: 'storedBytes', quota: 1500, used: 1000, adding: 600 });
        assert.match(e.message, /quota/);
        assert.match(e.hint, /awc gc/);
        assert.deepEqual(await counts(cat, NS), before, 'nothing committed');
        assert.deepEqual((await cat.blobIndex(NS).lookup(pack('p/s2', 600).blobs.map((b) => b.digest))).size, 0, 'no blob rows');
        await cat.createSnapshot(snap({ name: 'fits', packs: [pack('p/s3', 500)] }));
        await cat.createSnapshot(snap({ name: 'no-new-bytes', packs: [pack('p/s1', 1000)] })); // a pack already recorded adds nothing
        await cat.createSnapshot(snap({ name: 'no-packs' }));
        assert.equal((await cat.packStats(NS)).bytes, 1500);
      }));

    it('a checkpoint over the stored limit is E_QUOTA and leaves the head where it was', () =>
      withCat(async (cat) => {
        const base = await cat.createSnapshot(snap({ packs: [pack('p/c1', 1000)] }));
        const [w] = await cat.forkWorkspaces(NS, base.id, ['w']);
        await cat.setQuota(NS, { storedBytes: 1200 });
        const commit = (key: string, size: number, head: string) =>
          cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: head, snapshot: snap({ packs: [pack(key, size)] }) });
        await rejectsWith(commit('p/c2', 201, base.id), 'E_QUOTA');
        assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, base.id);
        assert.equal((await cat.listSnapshots(NS)).length, 1);
        const ok = await commit('p/c3', 200, base.id);
        assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, ok.id);
      }));

    it('daily bytes: refused retryably with when it frees; passes once the window moved; stored bytes do not count', () =>
      withCat(async (cat) => {
        await cat.setQuota(NS, { dailyNewBytes: 1000 });
        await cat.createSnapshot(snap({ packs: [pack('p/d1', 700)] }));
        const at = await cat.nowMs();
        const e = await rejectsWith(cat.createSnapshot(snap({ packs: [pack('p/d2', 400)] })), 'E_QUOTA');
        assert.equal(e.retryable, true);
        assert.equal(e.details?.limit, 'dailyNewBytes');
        const retryAt = e.details?.retryAtMs as number;
        assert.ok(retryAt >= at + QUOTA_DAY_MS - 60_000 && retryAt <= at + QUOTA_DAY_MS + 60_000, `${retryAt} ≈ ${at} + a day`);
        assert.match(e.hint, new RegExp(new Date(retryAt).toISOString().slice(0, 13)));
        const tooBig = await rejectsWith(cat.createSnapshot(snap({ packs: [pack('p/d3', 1001)] })), 'E_QUOTA');
        assert.equal(tooBig.retryable, false, 'time never frees a commit larger than the limit');
        await agePacks(cat, QUOTA_DAY_MS);
        await cat.createSnapshot(snap({ packs: [pack('p/d2', 400)] }));
        assert.equal((await cat.quotaUsage(NS)).dailyNewBytes, 400);
        assert.equal((await cat.quotaUsage(NS)).storedBytes, 1100);
      }));

    it('workspaces: a fork past the limit is E_QUOTA and creates none of its workspaces', () =>
      withCat(async (cat) => {
        const base = await cat.createSnapshot(snap());
        await cat.setQuota(NS, { workspaces: 3 });
        await cat.forkWorkspaces(NS, base.id, ['a', 'b']);
        const e = await rejectsWith(cat.forkWorkspaces(NS, base.id, ['c', 'd']), 'E_QUOTA');
        assert.deepEqual(e.details, { namespace: NS, limit: 'workspaces', quota: 3, used: 2, adding: 2 });
        assert.equal(e.retryable, false);
        assert.equal((await cat.listWorkspaces(NS)).length, 2);
        await cat.forkWorkspaces(NS, base.id, ['c']);
        await rejectsWith(cat.forkWorkspaces(NS, base.id, [null]), 'E_QUOTA');
        await cat.deleteWorkspace(NS, (await cat.getWorkspace(NS, 'a')).id);
        await cat.forkWorkspaces(NS, base.id, [null]);
      }));

    it('the running totals (0010_namespace_usage) follow every pack and workspace change and equal the rows', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        const OWNER = 'test-host:1:usage';
        const TTL = 60_000;
        const same = async (why: string) => {
          const u = await cat.quotaUsage(NS);
          const truth = { stored: (await cat.packStats(NS)).bytes, workspaces: (await cat.listWorkspaces(NS)).length };
          assert.deepEqual({ stored: u.storedBytes, workspaces: u.workspaces }, truth, why);
          return u;
        };
        await gc.acquireLock(OWNER, TTL);
        const a = pack('p/t-a', 1000);
        const b = pack('p/t-b', 300);
        const base = await cat.createSnapshot(snap({ packs: [a, b] }));
        await cat.createSnapshot(snap({ packs: [a] })); // already recorded: adds nothing
        assert.equal((await same('two commits')).storedBytes, 1300);
        const [w1, w2] = await cat.forkWorkspaces(NS, base.id, ['t1', null]);
        await cat.deleteWorkspace(NS, w2!.id);
        assert.equal((await same('fork 2, rm 1')).workspaces, 1);
        await gc.condemnPacks(OWNER, TTL, [b.key]);
        assert.equal((await same('condemned still counts')).storedBytes, 1300);
        await gc.beginDelete(OWNER, TTL, b.key, 0);
        await gc.finishDelete(OWNER, TTL, b.key);
        assert.equal((await same('deleted')).storedBytes, 1000);
        assert.equal(
          await gc.adoptPacks(OWNER, TTL, [
            { key: 'p/t-o', size: 70 },
            { key: b.key, size: 300 },
          ]),
          2,
        );
        assert.equal((await same('adopted: a new row and a tombstone back')).storedBytes, 1370);
        assert.equal(await gc.dropLostPack(OWNER, TTL, 'p/t-o'), 0);
        await gc.beginDelete(OWNER, TTL, b.key, 0);
        await gc.finishDelete(OWNER, TTL, b.key);
        assert.equal((await same('a lost pack dropped, the tombstone deleted again')).storedBytes, 1000);
        const deletedAt = (await gc.listPacks()).find((r) => r.key === b.key)!.deletedAtMs!;
        await cat.commitCheckpoint({
          workspaceId: w1!.id,
          expectedHeadId: base.id,
          snapshot: snap({ packs: [b], startedAtMs: deletedAt + 1 }),
        });
        assert.equal((await same('a checkpoint brings a deleted pack back')).storedBytes, 1300);
        const copy = { namespace: NS, from: [a.key], packs: [pack('p/t-copy', 900)], startedAtMs: await cat.nowMs() };
        assert.equal(await gc.commitRepack(OWNER, TTL, copy), true);
        assert.equal((await same('a repack adds its copy; the condemned original counts until deleted')).storedBytes, 2200);
        await gc.releaseLock(OWNER);
      }));

    it('0010_namespace_usage fills the running totals from the rows already there', () =>
      withCat(async (cat) => {
        const base = await cat.createSnapshot(snap({ packs: [pack('p/m1', 800), pack('p/m2', 200)] }));
        await cat.forkWorkspaces(NS, base.id, [null, null, null]);
        await cat.createSnapshot(snap({ namespace: 'other', packs: [pack('p/m3', 50)] }));
        const db = dbOf(cat);
        await db.schema.dropTable('namespace_usage').execute();
        await sql`delete from awc_migration where name = '0010_namespace_usage'`.execute(db);
        assert.deepEqual(await migrateToLatest(db), ['0010_namespace_usage']);
        const u = await cat.quotaUsage(NS);
        assert.deepEqual([u.storedBytes, u.workspaces], [1000, 3]);
        assert.equal((await cat.quotaUsage('other')).storedBytes, 50);
      }));

    it('quotas are per namespace', () =>
      withCat(async (cat) => {
        await cat.setQuota('tight', { storedBytes: 10, workspaces: 0 });
        const s = await cat.createSnapshot(snap({ packs: [pack('p/n1', 1000)] }));
        await cat.forkWorkspaces(NS, s.id, [null]);
        await rejectsWith(cat.createSnapshot(snap({ namespace: 'tight', packs: [pack('p/n2', 11)] })), 'E_QUOTA');
      }));

    if (factory.connect) concurrentQuotaCases(name, factory as Required<CatalogFactory>);
  });
}

/** Concurrent commits on separate connections that each fit alone but not together: exactly one wins. */
function concurrentQuotaCases(name: string, factory: Required<CatalogFactory>): void {
  const WRITERS = 4;
  const race = async (limit: 'storedBytes' | 'dailyNewBytes') => {
    const cat = await factory.create();
    const conns = await Promise.all(Array.from({ length: WRITERS }, () => factory.connect(cat)));
    try {
      const base = await cat.createSnapshot(snap({ packs: [pack('p/r0', 1000)] }));
      const ws = await cat.forkWorkspaces(
        NS,
        base.id,
        Array.from({ length: WRITERS }, () => null),
      );
      await cat.setQuota(NS, { [limit]: 1000 + 600 });
      const results = await Promise.allSettled(
        conns.map((c, i) =>
          c.commitCheckpoint({ workspaceId: ws[i]!.id, expectedHeadId: base.id, snapshot: snap({ packs: [pack(`p/r${i + 1}`, 500)] }) }),
        ),
      );
      const won = results.filter((r) => r.status === 'fulfilled');
      const codes = results.filter((r) => r.status === 'rejected').map((r) => ((r as PromiseRejectedResult).reason as AwcError).code);
      assert.equal(won.length, 1, `exactly one commit wins (${name}): ${codes.join(', ')}`);
      assert.deepEqual(
        codes,
        Array.from({ length: WRITERS - 1 }, () => 'E_QUOTA'),
      );
      assert.equal((await cat.packStats(NS)).bytes, 1500, 'one commit of 500 bytes');
      const heads = await Promise.all(ws.map(async (w) => (await cat.getWorkspace(NS, w.id)).headSnapshotId));
      assert.equal(heads.filter((h) => h !== base.id).length, 1);
    } finally {
      await Promise.all(conns.map((c) => c.close()));
      await factory.cleanup(cat);
    }
  };
  it(`${WRITERS} concurrent checkpoints, each within the stored limit alone but not together: exactly one wins (${name})`, () =>
    race('storedBytes'));
  it(`${WRITERS} concurrent checkpoints against the daily limit: exactly one wins (${name})`, () => race('dailyNewBytes'));
}
