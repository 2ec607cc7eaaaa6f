import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { withAdapter, type AdapterFactory } from './adapter-factory.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { mkPack, NS, snap } from '../helpers/catalog-fixtures.js';

/**
 * The contract of the catalog's rm / gc side (src/catalog/port/gc-catalog.ts and the Catalog
 * methods nowMs, dedupIndex, setLayerSnapshot, removeSnapshot; docs/explanation/gc.md) that
 * every Catalog adapter passes: the gc lock (E_GC_RUNNING, expiry by the database clock,
 * E_GC_LOCK_LOST fencing every write), the pack state transitions and their guards, the
 * dedup index, the commit-time guard (E_PACK_CONDEMNED, writing nothing; the same pack key
 * uploaded again), and the guarded removal of snapshot rows.
 *
 * Usage, in the adapter's test file: `gcCatalogContract('SqliteCatalog', { create, cleanup })`.
 */
export function gcCatalogContract(name: string, factory: AdapterFactory<Catalog>): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);
  const OWNER = 'test-host:1:abcd';
  const TTL = 60_000;

  describe(`${name}: gc contract`, () => {
    it('nowMs is the database clock in ms', () =>
      withCat(async (cat) => {
        const t = await cat.nowMs();
        assert.ok(Math.abs(t - Date.now()) < 60_000, `${t} vs ${Date.now()}`);
      }));

    it('the gc lock: one owner; E_GC_RUNNING for another; an expired lock is taken over; a lost lock fences every write', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        const l = await gc.acquireLock(OWNER, TTL);
        assert.ok(l.expiresAtMs - l.takenAtMs >= TTL - 1);
        await gc.acquireLock(OWNER, TTL); // the same owner again: extended
        const e = await rejectsWith(gc.acquireLock('other:2:x', TTL), 'E_GC_RUNNING');
        assert.equal(e.details?.owner, OWNER);
        assert.equal(e.retryable, true);
        await gc.renewLock(OWNER, TTL);
        await gc.releaseLock(OWNER);
        await gc.releaseLock(OWNER); // idempotent
        await gc.acquireLock('dead:3:x', 0); // expires at once
        await gc.acquireLock(OWNER, TTL); // taken over
        await rejectsWith(gc.renewLock('dead:3:x', TTL), 'E_GC_LOCK_LOST');
        await cat.createSnapshot(snap({ packs: [mkPack('packs/aa/l1', 2, 'l1')] }));
        await rejectsWith(gc.condemnPacks('dead:3:x', TTL, ['packs/aa/l1']), 'E_GC_LOCK_LOST');
        assert.equal((await gc.listPacks())[0]!.state, 'live', 'a fenced write wrote nothing');
      }));

    it('pack states: condemn, un-condemn, delete only past the grace; deleting drops the blob rows; the dedup index skips non-live packs', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const p = mkPack('packs/bb/p1', 3, 'p1');
        await cat.createSnapshot(snap({ packs: [p] }));
        const digests = p.blobs.map((b) => b.digest);
        assert.equal((await cat.dedupIndex(NS).lookup(digests)).size, 3);
        assert.equal(await gc.condemnPacks(OWNER, TTL, [p.key, 'packs/none']), 1);
        assert.equal(await gc.condemnPacks(OWNER, TTL, [p.key]), 0, 'already condemned');
        assert.equal((await cat.dedupIndex(NS).lookup(digests)).size, 0, 'condemned blobs are never offered for dedup');
        assert.equal((await cat.blobIndex(NS).lookup(digests)).size, 3, 'but stay readable');
        const row = (await gc.listPacks())[0]!;
        assert.equal(row.state, 'condemned');
        assert.ok(row.condemnedAtMs !== null && Math.abs(row.condemnedAtMs - (await cat.nowMs())) < 60_000);
        assert.equal(await gc.beginDelete(OWNER, TTL, p.key, 3_600_000), false, 'within the grace period');
        assert.equal(await gc.uncondemnPacks(OWNER, TTL, [p.key]), 1);
        assert.equal(await gc.beginDelete(OWNER, TTL, p.key, 0), false, 'live packs are never deleted');
        await gc.condemnPacks(OWNER, TTL, [p.key]);
        assert.equal(await gc.beginDelete(OWNER, TTL, p.key, 0), true);
        assert.equal((await cat.blobIndex(NS).lookup(digests)).size, 0, 'its blob rows are gone');
        assert.equal(await gc.uncondemnPacks(OWNER, TTL, [p.key]), 0, 'deleting is not undone');
        await gc.finishDelete(OWNER, TTL, p.key);
        const done = (await gc.listPacks())[0]!;
        assert.equal(done.state, 'deleted');
        assert.ok(done.deletedAtMs !== null);
      }));

    it('the commit guard: a reused pack that is not live refuses the commit (E_PACK_CONDEMNED, nothing written)', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const p = mkPack('packs/cc/r1', 2, 'r1');
        await cat.createSnapshot(snap({ packs: [p] }));
        await cat.createSnapshot(snap({ reusedPacks: [p.key] })); // live: fine
        await gc.condemnPacks(OWNER, TTL, [p.key]);
        const before = (await cat.listSnapshots(NS)).length;
        const e = await rejectsWith(
          cat.createSnapshot(snap({ reusedPacks: [p.key], packs: [mkPack('packs/cc/r2', 1, 'r2')] })),
          'E_PACK_CONDEMNED',
        );
        assert.equal(e.retryable, true);
        assert.deepEqual(e.details?.packs, [p.key]);
        assert.equal((await cat.listSnapshots(NS)).length, before);
        assert.ok(!(await gc.listPacks()).some((x) => x.key === 'packs/cc/r2'), 'no pack row written');
        const [ws] = await cat.forkWorkspaces(NS, (await cat.listSnapshots(NS))[0]!.id, [null]);
        await rejectsWith(
          cat.commitCheckpoint({ workspaceId: ws!.id, expectedHeadId: ws!.headSnapshotId, snapshot: snap({ reusedPacks: [p.key] }) }),
          'E_PACK_CONDEMNED',
        );
        assert.equal((await cat.getWorkspace(NS, ws!.id)).headSnapshotId, ws!.headSnapshotId, 'the head did not move');
        await rejectsWith(cat.createSnapshot(snap({ reusedPacks: ['packs/cc/unknown'] })), 'E_PACK_CONDEMNED');
      }));

    it('a blob indexed in a condemned pack moves to the new pack that holds it again', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const p = mkPack('packs/dd/m1', 2, 'm1');
        await cat.createSnapshot(snap({ packs: [p] }));
        const q = mkPack('packs/dd/m2', 2, 'm1'); // the same digests in another pack
        const live = mkPack('packs/dd/m3', 1, 'm3');
        await cat.createSnapshot(snap({ packs: [live] }));
        await gc.condemnPacks(OWNER, TTL, [p.key]);
        await cat.createSnapshot(snap({ packs: [q, { ...mkPack('packs/dd/m4', 1, 'm3') }] }));
        const found = await cat.blobIndex(NS).lookup([...q.blobs.map((b) => b.digest), live.blobs[0]!.digest]);
        for (const b of q.blobs) assert.equal(found.get(b.digest)?.pack, q.key);
        assert.equal(found.get(live.blobs[0]!.digest)?.pack, live.key, 'a blob of a live pack keeps its location');
      }));

    it('adopting packs without a row: condemned rows for unknown keys, tombstones back to condemned, other rows untouched; a writer un-condemns', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const live = mkPack('packs/dd/live', 1, 'dl');
        const tomb = mkPack('packs/dd/tomb', 1, 'dt');
        await cat.createSnapshot(snap({ packs: [live, tomb] }));
        await gc.condemnPacks(OWNER, TTL, [tomb.key]);
        await gc.beginDelete(OWNER, TTL, tomb.key, 0);
        await gc.finishDelete(OWNER, TTL, tomb.key);
        await rejectsWith(gc.adoptPacks('dead:3:x', TTL, [{ key: 'packs/dd/o1', size: 7 }]), 'E_GC_LOCK_LOST');
        const objects = [
          { key: 'packs/dd/o1', size: 7 },
          { key: 'packs/dd/o1', size: 7 }, // listed twice: one row
          { key: live.key, size: 1 },
          { key: tomb.key, size: 1 },
        ];
        assert.equal(await gc.adoptPacks(OWNER, TTL, objects), 2);
        const rows = new Map((await gc.listPacks()).map((r) => [r.key, r]));
        assert.equal(rows.get('packs/dd/o1')?.state, 'condemned');
        assert.equal(rows.get('packs/dd/o1')?.size, 7);
        assert.ok(rows.get('packs/dd/o1')?.condemnedAtMs !== null);
        assert.equal(rows.get(tomb.key)?.state, 'condemned', 'a tombstone whose object is back');
        assert.equal(rows.get(tomb.key)?.deletedAtMs, null);
        assert.equal(rows.get(live.key)?.state, 'live', 'a live row is left alone');
        assert.equal(await gc.adoptPacks(OWNER, TTL, objects), 0, 'adopting again changes nothing');
        // a writer that uploaded the adopted pack commits it: un-condemned, its blobs indexed
        const o1 = mkPack('packs/dd/o1', 2, 'do');
        await cat.createSnapshot(snap({ packs: [o1], startedAtMs: await cat.nowMs() }));
        assert.equal((await gc.listPacks()).find((r) => r.key === o1.key)?.state, 'live');
        assert.equal((await cat.dedupIndex(NS).lookup(o1.blobs.map((b) => b.digest))).size, 2);
      }));

    it('the same pack key uploaded again: condemned → live; deleting → refused; deleted → back only when deleted before the writer started', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const p = mkPack('packs/ee/s1', 2, 's1');
        await cat.createSnapshot(snap({ packs: [p] }));
        await gc.condemnPacks(OWNER, TTL, [p.key]);
        await cat.createSnapshot(snap({ packs: [p] }));
        assert.equal((await gc.listPacks())[0]!.state, 'live', 'un-condemned by the commit that uploaded it again');
        await gc.condemnPacks(OWNER, TTL, [p.key]);
        await gc.beginDelete(OWNER, TTL, p.key, 0);
        await rejectsWith(cat.createSnapshot(snap({ packs: [p], startedAtMs: (await cat.nowMs()) + 1 })), 'E_PACK_CONDEMNED');
        const startedEarly = await cat.nowMs();
        await gc.finishDelete(OWNER, TTL, p.key);
        await rejectsWith(cat.createSnapshot(snap({ packs: [p], startedAtMs: startedEarly - 1 })), 'E_PACK_CONDEMNED');
        await rejectsWith(cat.createSnapshot(snap({ packs: [p] })), 'E_PACK_CONDEMNED');
        const deletedAt = (await gc.listPacks())[0]!.deletedAtMs!;
        await cat.createSnapshot(snap({ packs: [p], startedAtMs: deletedAt + 1 }));
        const row = (await gc.listPacks())[0]!;
        assert.deepEqual([row.state, row.condemnedAtMs, row.deletedAtMs], ['live', null, null]);
        assert.equal((await cat.blobIndex(NS).lookup(p.blobs.map((b) => b.digest))).size, 2, 'its blob rows are back');
      }));

    it('removeGarbageSnapshot removes only unnamed, old, unheld rows, re-parenting children; setLayerSnapshot holds', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const future = new Date(Date.now() + 60_000).toISOString();
        const a = await cat.createSnapshot(snap());
        const b = await cat.createSnapshot(snap({ parentId: a.id }));
        const named = await cat.createSnapshot(snap({ name: 'kept', parentId: b.id }));
        const held = await cat.createSnapshot(snap());
        const layer = await cat.createSnapshot(snap());
        const [ws] = await cat.forkWorkspaces(NS, held.id, [null]);
        await cat.setLayerSnapshot(ws!.id, layer.id);
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, a.id, a.createdAt), false, 'not older than the cutoff');
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, named.id, future), false, 'named');
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, held.id, future), false, 'a workspace head and base');
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, layer.id, future), false, 'a layer snapshot');
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, b.id, future), true);
        assert.equal((await cat.getSnapshot(NS, named.id)).parentId, a.id, 're-parented to the nearest surviving ancestor');
        const holds = await gc.listHolds();
        assert.deepEqual(
          holds.map((h) => [h.base, h.head, h.layer]),
          [[held.id, held.id, layer.id]],
        );
        await cat.setLayerSnapshot(ws!.id, null);
        assert.equal(await gc.removeGarbageSnapshot(OWNER, TTL, NS, layer.id, future), true);
        await rejectsWith(cat.setLayerSnapshot('ws_nope', null), 'E_NOT_FOUND');
      }));

    it('commitRepack: condemns the old packs, inserts the copies and moves the blob rows, in one transaction; refuses a pack not live', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        await gc.acquireLock(OWNER, TTL);
        const old = mkPack('packs/cc/old', 4, 'r1');
        await cat.createSnapshot(snap({ packs: [old] }));
        const liveBlobs = old.blobs.slice(0, 1);
        const copy = { key: 'packs/cc/copy', size: 300, blobs: liveBlobs.map((b, i) => ({ ...b, pack: 'packs/cc/copy', offset: i * 90 })) };
        const startedAtMs = await cat.nowMs();
        await rejectsWith(
          gc.commitRepack('dead:3:x', TTL, { namespace: NS, from: [old.key], packs: [copy], startedAtMs }),
          'E_GC_LOCK_LOST',
        );
        assert.deepEqual(
          (await gc.listPacks()).map((p) => [p.key, p.state]),
          [[old.key, 'live']],
          'a fenced repack wrote nothing',
        );
        assert.equal(await gc.commitRepack(OWNER, TTL, { namespace: NS, from: [old.key], packs: [copy], startedAtMs }), true);
        const states = new Map((await gc.listPacks()).map((p) => [p.key, p.state]));
        assert.equal(states.get(old.key), 'condemned');
        assert.equal(states.get(copy.key), 'live');
        const locs = await cat.blobIndex(NS).lookup(old.blobs.map((b) => b.digest));
        assert.equal(locs.get(liveBlobs[0]!.digest)?.pack, copy.key, 'the copied blob row moved');
        assert.equal(locs.get(liveBlobs[0]!.digest)?.offset, 0);
        assert.equal(locs.get(old.blobs[1]!.digest)?.pack, old.key, 'the others stay with the old pack');
        const again = { ...copy, key: 'packs/cc/copy2', blobs: copy.blobs.map((b) => ({ ...b, pack: 'packs/cc/copy2' })) };
        assert.equal(
          await gc.commitRepack(OWNER, TTL, { namespace: NS, from: [old.key], packs: [again], startedAtMs }),
          false,
          'the old pack is not live any more',
        );
        assert.equal(
          (await gc.listPacks()).find((p) => p.key === again.key),
          undefined,
          'a refused repack wrote nothing',
        );
        // a reader's commit that deduplicated against the old pack is refused from now on
        await rejectsWith(cat.createSnapshot(snap({ reusedPacks: [old.key] })), 'E_PACK_CONDEMNED');
        await cat.createSnapshot(snap({ reusedPacks: [copy.key] }));
      }));
    it('fsck: listPackBlobs lists the rows naming a pack; reindexPack corrects and moves rows from a pack index; dropLostPack; all fenced', () =>
      withCat(async (cat) => {
        const gc = cat.gc();
        const p1 = mkPack('packs/cc/f1', 3, 'f1');
        const p2 = { ...mkPack('packs/cc/f2', 2, 'f2') };
        const shared = { ...p1.blobs[0]!, pack: p2.key, offset: 7 }; // p2 holds a copy of p1's first blob too
        p2.blobs = [shared, ...p2.blobs];
        await cat.createSnapshot(snap({ packs: [p1] }));
        await cat.createSnapshot(snap({ packs: [p2] })); // a later commit that uploaded the blob again
        const d = shared.digest;
        assert.deepEqual(
          (await gc.listPackBlobs(p2.key)).map((b) => b.digest),
          p2.blobs.slice(1).map((b) => b.digest),
          'a blob keeps its first location: the copy in p2 has no row',
        );
        await rejectsWith(
          gc.reindexPack(OWNER, TTL, { namespace: NS, key: p2.key, entries: p2.blobs, replace: new Set([d]) }),
          'E_GC_LOCK_LOST',
        );
        await gc.acquireLock(OWNER, TTL);
        // rows that agree stay; a row naming another pack stays unless its digest is to be replaced
        assert.equal(await gc.reindexPack(OWNER, TTL, { namespace: NS, key: p2.key, entries: p2.blobs, replace: new Set() }), 0);
        assert.equal((await cat.blobIndex(NS).lookup([d])).get(d)?.pack, p1.key);
        assert.equal(await gc.reindexPack(OWNER, TTL, { namespace: NS, key: p2.key, entries: p2.blobs, replace: new Set([d]) }), 1);
        assert.deepEqual((await cat.blobIndex(NS).lookup([d])).get(d), shared);
        // a row that disagrees with its own pack's index is corrected from it
        const moved = p1.blobs.map((b, i) => (i === 1 ? { ...b, offset: b.offset + 1, storedLength: 89 } : b));
        assert.equal(await gc.reindexPack(OWNER, TTL, { namespace: NS, key: p1.key, entries: moved, replace: new Set() }), 1);
        assert.deepEqual((await cat.blobIndex(NS).lookup([moved[1]!.digest])).get(moved[1]!.digest), moved[1]);
        // a lost pack: its rows go, its row becomes deleted; once only
        assert.equal(await gc.dropLostPack(OWNER, TTL, p1.key), 2);
        assert.deepEqual(await gc.listPackBlobs(p1.key), []);
        assert.equal((await gc.listPacks()).find((p) => p.key === p1.key)?.state, 'deleted');
        assert.equal(await gc.dropLostPack(OWNER, TTL, p1.key), -1);
        assert.equal(
          await gc.reindexPack(OWNER, TTL, { namespace: NS, key: p1.key, entries: p1.blobs, replace: new Set() }),
          0,
          'not for a deleted pack',
        );
        assert.equal((await cat.blobIndex(NS).lookup([d])).get(d)?.pack, p2.key, "the copy's row was not touched");
        await gc.releaseLock(OWNER);
        await rejectsWith(gc.dropLostPack(OWNER, TTL, p2.key), 'E_GC_LOCK_LOST');
      }));
  });
}
