import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { sha256 } from '../../src/core/digest.js';
import type { AwcError } from '../../src/core/errors.js';
import type { Catalog, SnapshotRow } from '../../src/catalog/port/catalog.js';
import type { AdapterFactory } from './adapter-factory.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { mkPack, NS, snap } from '../helpers/catalog-fixtures.js';
import { MIGRATIONS } from '../../src/catalog/sql/migrations.js';
import { catalogConcurrencyContract } from './catalog-concurrency.contract.js';
import { catalogLeaseContract } from './catalog-leases.contract.js';
import { catalogLabelContract } from './catalog-labels.contract.js';
import { catalogIdentityContract } from './catalog-identity.contract.js';
import { catalogImageContract } from './catalog-images.contract.js';
import { catalogBuildLeaseContract } from './catalog-build-leases.contract.js';
import { catalogQuotaContract } from './catalog-quotas.contract.js';

/** A factory of catalogs under test; `connect`, when given, opens a second connection to the same database. */
export interface CatalogFactory extends AdapterFactory<Catalog> {
  /**
   * Another connection to `cat`'s database, as another process (or another pool) would
   * open it; the suite closes it. Where a driver blocks its thread while it waits for a
   * lock (better-sqlite3), open it in a worker thread (test/helpers/remote-catalog.ts).
   * With it, the suite also runs the many-writer races (catalog-concurrency.contract.ts).
   */
  connect?(cat: Catalog): Promise<Catalog>;
}

/**
 * The contract every `Catalog` adapter passes (src/catalog/port/catalog.ts): every method, every
 * error code the port documents (E_NOT_FOUND, E_AMBIGUOUS, E_NAME_TAKEN, E_CHANGED_DURING_READ,
 * E_IN_USE, E_ALREADY_MOUNTED, E_TARGET_BUSY, E_USAGE), that a refused write writes nothing,
 * namespaces as boundaries, bigint sizes, and two writers racing on one name, workspace row,
 * mount target or digest (one wins, the other gets its code and wrote nothing).
 *
 * Usage, in the adapter's test file: `catalogContract('SqliteCatalog', { create, cleanup })`.
 */
export function catalogContract(name: string, factory: CatalogFactory): void {
  /** Runs `fn` with a fresh catalog and, if the factory can, a second connection to it (else the same one). */
  async function withTwo(fn: (a: Catalog, b: Catalog) => Promise<void>): Promise<void> {
    const cat = await factory.create();
    const other = factory.connect ? await factory.connect(cat) : cat;
    try {
      await fn(cat, other);
    } finally {
      if (other !== cat) await other.close();
      await factory.cleanup(cat);
    }
  }

  describe(`Catalog contract: ${name}`, () => {
    it('reports its schema: every known migration applied, in order, and the newest', async () => {
      const cat = await factory.create();
      try {
        const known = Object.keys(MIGRATIONS).sort();
        assert.ok(known.length > 0);
        assert.deepEqual(await cat.schema(), { applied: known, latest: known.at(-1) });
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('creates a snapshot and gets it by id, name and id prefix', async () => {
      const cat = await factory.create();
      try {
        const s = await cat.createSnapshot(snap({ name: 'base', message: 'hello', packs: [mkPack('packs/p1', 3, 'a')] }));
        assert.match(s.id, /^sn_/);
        assert.equal(s.namespace, NS);
        assert.equal(s.name, 'base');
        assert.equal(s.message, 'hello');
        assert.equal(s.parentId, null);
        assert.equal(s.fileCount, 3);
        assert.equal(s.byteCount, 6_000_000_000);
        assert.deepEqual(await cat.getSnapshot(NS, s.id), s);
        assert.deepEqual(await cat.getSnapshot(NS, 'base'), s);
        assert.deepEqual(await cat.getSnapshot(NS, s.id.slice(0, 12)), s);
        assert.deepEqual(await cat.getSnapshot(NS, s.id.slice(3, 12)), s, 'prefix without sn_');
        assert.deepEqual(await cat.getSnapshot(NS, s.id.slice(0, 12).toUpperCase()), s, 'case-insensitive prefix');
        assert.equal(typeof (await cat.listSnapshots(NS))[0]!.byteCount, 'number');

        const child = await cat.createSnapshot(snap({ parentId: s.id }));
        assert.equal(child.parentId, s.id);
        const list = await cat.listSnapshots(NS);
        assert.deepEqual(
          list.map((x) => x.id),
          [child.id, s.id],
          'newest first',
        );
        await rejectsWith(cat.createSnapshot(snap({ parentId: 'sn_nope' })), 'E_NOT_FOUND');
        await rejectsWith(cat.createSnapshot(snap({ name: '' })), 'E_USAGE');
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('reports not-found (with a hint) and ambiguous refs by code', async () => {
      const cat = await factory.create();
      try {
        const made = [];
        for (let i = 0; i < 5; i++) made.push(await cat.createSnapshot(snap()));
        const e1 = await rejectsWith(cat.getSnapshot(NS, 'nope'), 'E_NOT_FOUND');
        assert.match(e1.hint, /awc snapshot ls/);
        await rejectsWith(cat.getSnapshot(NS, 'zzzzzzzzzz'), 'E_NOT_FOUND');
        await rejectsWith(cat.getSnapshot('other-ns', made[0]!.id), 'E_NOT_FOUND');
        await rejectsWith(cat.getSnapshot(NS, made[0]!.id.slice(0, 6)), 'E_NOT_FOUND'); // < 4 chars after sn_
        // Ids made within a few ms share their time prefix.
        const amb = await rejectsWith(cat.getSnapshot(NS, made[0]!.id.slice(0, 10)), 'E_AMBIGUOUS');
        assert.ok(Array.isArray(amb.details?.candidates));
        assert.equal(amb.exitCode, 2);
        await rejectsWith(cat.getSnapshot(NS, 'sn_%'), 'E_NOT_FOUND');
        await rejectsWith(cat.getSnapshot(NS, 'sn______'), 'E_NOT_FOUND'); // LIKE wildcards are not wildcards

        const ws = await cat.forkWorkspaces(NS, made[0]!.id, [null, null, 'w']);
        await rejectsWith(cat.getWorkspace(NS, ws[0]!.id.slice(0, 10)), 'E_AMBIGUOUS');
        const e2 = await rejectsWith(cat.getWorkspace(NS, 'nope'), 'E_NOT_FOUND');
        assert.match(e2.hint, /awc ls/);
        assert.equal((await cat.getWorkspace(NS, 'w')).id, ws[2]!.id);
        assert.equal((await cat.getWorkspace(NS, ws[1]!.id)).id, ws[1]!.id);
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('records mount state, finds by path and host, and clears it', async () => {
      const cat = await factory.create();
      try {
        const s = await cat.createSnapshot(snap());
        const [a, b] = await cat.forkWorkspaces(NS, s.id, ['a', 'b']);
        const m = await cat.setMount(a!.id, { path: '/mnt/a', driver: 'overlay', host: 'h1' });
        assert.equal(m.mountState, 'mounted');
        assert.equal(m.mountPath, '/mnt/a');
        assert.equal(m.mountDriver, 'overlay');
        assert.equal(m.mountHost, 'h1');
        assert.deepEqual(await cat.getWorkspace(NS, 'a'), m);
        assert.deepEqual(await cat.findWorkspaceByMountPath('/mnt/a'), m);
        assert.equal(await cat.findWorkspaceByMountPath('/mnt/none'), undefined);
        assert.deepEqual(
          (await cat.listMountedOnHost('h1')).map((w) => w.id),
          [a!.id],
        );
        assert.deepEqual(await cat.listMountedOnHost('h2'), []);
        // Re-recording the same mount is idempotent; another target is refused.
        await cat.setMount(a!.id, { path: '/mnt/a', driver: 'overlay', host: 'h1' });
        await rejectsWith(cat.setMount(a!.id, { path: '/mnt/elsewhere', driver: 'copy', host: 'h1' }), 'E_ALREADY_MOUNTED');
        await rejectsWith(cat.setMount(b!.id, { path: '/mnt/a', driver: 'copy', host: 'h1' }), 'E_TARGET_BUSY');
        await rejectsWith(cat.setMount(b!.id, { path: 'relative', driver: 'copy', host: 'h1' }), 'E_USAGE');
        await rejectsWith(cat.setMount('ws_nope', null), 'E_NOT_FOUND');
        // Same path on another host is another target.
        await cat.setMount(b!.id, { path: '/mnt/a', driver: 'copy', host: 'h2' });
        assert.deepEqual(
          (await cat.listMountedOnHost('h2')).map((w) => w.id),
          [b!.id],
        );
        // Mounted workspaces cannot be deleted.
        await rejectsWith(cat.deleteWorkspace(NS, a!.id), 'E_ALREADY_MOUNTED');

        const u = await cat.setMount(a!.id, null);
        assert.equal(u.mountState, 'unmounted');
        assert.equal(u.mountPath, null);
        assert.equal(u.mountDriver, null);
        assert.equal(u.mountHost, null);
        assert.deepEqual(await cat.getWorkspace(NS, 'a'), u);
        assert.deepEqual(await cat.listMountedOnHost('h1'), []);
        assert.equal((await cat.findWorkspaceByMountPath('/mnt/a'))?.id, b!.id);
        await cat.setMount(a!.id, null); // idempotent
        await cat.deleteWorkspace(NS, a!.id);
        await rejectsWith(cat.getWorkspace(NS, a!.id), 'E_NOT_FOUND');
        await rejectsWith(cat.deleteWorkspace(NS, a!.id), 'E_NOT_FOUND');
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('refuses to delete a snapshot in use and deletes an unused one', async () => {
      const cat = await factory.create();
      try {
        const base = await cat.createSnapshot(snap({ name: 'base' }));
        const [w] = await cat.forkWorkspaces(NS, base.id, ['w']);
        const e = await rejectsWith(cat.deleteSnapshot(NS, base.id), 'E_IN_USE');
        assert.deepEqual(e.details?.workspaces, [w!.id]);
        const c1 = await cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: base.id, snapshot: snap() });
        await cat.deleteWorkspace(NS, w!.id);
        // base is still c1's parent.
        const e2 = await rejectsWith(cat.deleteSnapshot(NS, base.id), 'E_IN_USE');
        assert.deepEqual(e2.details?.snapshots, [c1.id]);
        await cat.deleteSnapshot(NS, c1.id);
        await cat.deleteSnapshot(NS, base.id);
        assert.deepEqual(await cat.listSnapshots(NS), []);
        await rejectsWith(cat.deleteSnapshot(NS, base.id), 'E_NOT_FOUND');
        await rejectsWith(cat.deleteSnapshot('nobody', base.id), 'E_NOT_FOUND');
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('createSnapshot: a taken name is E_NAME_TAKEN and writes nothing of that snapshot; names are per namespace', async () => {
      const cat = await factory.create();
      try {
        const first = await cat.createSnapshot(snap({ name: 'v1', packs: [mkPack('packs/a', 10, 'a')] }));
        const before = await cat.packStats(NS);
        const e = await rejectsWith(cat.createSnapshot(snap({ name: 'v1', packs: [mkPack('packs/b', 10, 'b')] })), 'E_NAME_TAKEN');
        assert.equal(e.retryable, false);
        assert.deepEqual(await cat.packStats(NS), before);
        assert.equal((await cat.blobIndex(NS).lookup([sha256('b/0'), sha256('b/9')])).size, 0);
        assert.deepEqual(
          (await cat.listSnapshots(NS)).map((s) => s.id),
          [first.id],
        );
        const other = await cat.createSnapshot(snap({ namespace: 'team-b', name: 'v1' }));
        assert.equal(other.namespace, 'team-b');
        assert.deepEqual(await cat.getSnapshot('team-b', 'v1'), other);
        assert.equal((await cat.getSnapshot(NS, 'v1')).id, first.id);
        await cat.createSnapshot(snap());
        await cat.createSnapshot(snap()); // unnamed snapshots never clash
        assert.equal((await cat.listSnapshots(NS)).length, 3);
        assert.equal((await cat.listSnapshots('team-b')).length, 1);
        await rejectsWith(cat.createSnapshot(snap({ name: 'sn_0123456789abcdefghjk' })), 'E_USAGE');
        await rejectsWith(cat.getSnapshot('team-b', first.id), 'E_NOT_FOUND');
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('forkWorkspaces: rows in the order of the names, base = head = the snapshot; a refused fork creates none', async () => {
      const cat = await factory.create();
      try {
        const s = await cat.createSnapshot(snap({ name: 'base' }));
        const ws = await cat.forkWorkspaces(NS, s.id, ['a', null, 'b']);
        assert.deepEqual(
          ws.map((w) => w.name),
          ['a', null, 'b'],
        );
        for (const w of ws) {
          assert.match(w.id, /^ws_/);
          assert.equal(w.namespace, NS);
          assert.equal(w.baseSnapshotId, s.id);
          assert.equal(w.headSnapshotId, s.id);
          assert.equal(w.mountState, 'unmounted');
          assert.deepEqual([w.mountPath, w.mountDriver, w.mountHost], [null, null, null]);
          assert.equal(typeof w.createdAt, 'string');
        }
        assert.deepEqual(await cat.listWorkspaces(NS), ws, 'oldest first, in fork order');
        assert.deepEqual(await cat.getWorkspace(NS, 'b'), ws[2]);
        assert.deepEqual(await cat.forkWorkspaces(NS, s.id, []), []);
        await rejectsWith(cat.forkWorkspaces(NS, 'sn_unknown', [null]), 'E_NOT_FOUND');
        await rejectsWith(cat.forkWorkspaces('nobody', s.id, [null]), 'E_NOT_FOUND');
        const e = await rejectsWith(cat.forkWorkspaces(NS, s.id, ['new1', 'a']), 'E_NAME_TAKEN');
        assert.deepEqual(e.details?.names, ['a']);
        await rejectsWith(cat.forkWorkspaces(NS, s.id, ['x', null, 'x']), 'E_NAME_TAKEN');
        await rejectsWith(cat.forkWorkspaces(NS, s.id, ['ok', '']), 'E_USAGE');
        assert.equal((await cat.listWorkspaces(NS)).length, 3, 'refused forks created nothing');
        const o = await cat.createSnapshot(snap({ namespace: 'team-b' }));
        await rejectsWith(cat.forkWorkspaces(NS, o.id, [null]), 'E_NOT_FOUND'); // a snapshot of another namespace
        assert.equal((await cat.forkWorkspaces('team-b', o.id, ['a']))[0]!.namespace, 'team-b'); // names are per namespace
        assert.deepEqual(await cat.listWorkspaces('nobody'), []);
        await rejectsWith(cat.deleteWorkspace('team-b', ws[0]!.id), 'E_NOT_FOUND'); // a workspace of another namespace
        await rejectsWith(cat.deleteSnapshot(NS, 'base'), 'E_NOT_FOUND'); // delete takes an exact id, not a ref
        await rejectsWith(cat.getWorkspace('team-b', ws[0]!.id), 'E_NOT_FOUND');
        assert.equal((await cat.listWorkspaces(NS)).length, 3);
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('commitCheckpoint: moves the head, parent = old head, indexes packs (a blob keeps its first location); refusals write nothing', async () => {
      const cat = await factory.create();
      try {
        const base = await cat.createSnapshot(snap({ packs: [mkPack('packs/base', 5, 'x')] }));
        const [w] = await cat.forkWorkspaces(NS, base.id, ['w']);
        const c1 = await cat.commitCheckpoint({
          workspaceId: w!.id,
          expectedHeadId: base.id,
          snapshot: snap({ name: 'cp1', message: 'm', parentId: 'ignored', packs: [mkPack('packs/cp1', 8, 'x')] }),
        });
        assert.equal(c1.parentId, base.id);
        assert.deepEqual([c1.name, c1.message, c1.namespace], ['cp1', 'm', NS]);
        assert.deepEqual(await cat.getSnapshot(NS, c1.id), c1);
        const after1 = await cat.getWorkspace(NS, w!.id);
        assert.deepEqual([after1.headSnapshotId, after1.baseSnapshotId], [c1.id, base.id]);
        const loc = await cat.blobIndex(NS).lookup([sha256('x/0'), sha256('x/7')]);
        assert.equal(loc.get(sha256('x/0'))!.pack, 'packs/base');
        assert.equal(loc.get(sha256('x/7'))!.pack, 'packs/cp1');
        assert.deepEqual(await cat.packStats(NS), { packs: 2, bytes: 10_000_001_300, blobs: 13 });

        const before = { snaps: (await cat.listSnapshots(NS)).length, stats: await cat.packStats(NS) };
        const stale = await rejectsWith(
          cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: base.id, snapshot: snap({ packs: [mkPack('packs/stale', 3, 's')] }) }),
          'E_CHANGED_DURING_READ',
        );
        assert.equal(stale.retryable, true);
        await rejectsWith(
          cat.commitCheckpoint({
            workspaceId: w!.id,
            expectedHeadId: c1.id,
            snapshot: snap({ name: 'cp1', packs: [mkPack('packs/n', 3, 'n')] }),
          }),
          'E_NAME_TAKEN',
        );
        await rejectsWith(cat.commitCheckpoint({ workspaceId: 'ws_nope', expectedHeadId: c1.id, snapshot: snap() }), 'E_NOT_FOUND');
        await rejectsWith(
          cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: c1.id, snapshot: snap({ namespace: 'team-b' }) }),
          'E_NOT_FOUND',
        );
        await rejectsWith(cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: c1.id, snapshot: snap({ name: '' }) }), 'E_USAGE');
        assert.equal((await cat.listSnapshots(NS)).length, before.snaps);
        assert.deepEqual(await cat.packStats(NS), before.stats);
        assert.equal((await cat.blobIndex(NS).lookup([sha256('s/0'), sha256('n/0')])).size, 0);
        assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, c1.id);
      } finally {
        await factory.cleanup(cat);
      }
    });

    it('blobIndex and packStats: exact locations past 2^32, per namespace; unknown namespaces are empty; close twice', async () => {
      const cat = await factory.create();
      try {
        for (const ns of ['none', NS]) {
          assert.deepEqual(await cat.listSnapshots(ns), []);
          assert.deepEqual(await cat.listWorkspaces(ns), []);
          assert.deepEqual(await cat.packStats(ns), { packs: 0, bytes: 0, blobs: 0 });
          assert.equal((await cat.blobIndex(ns).lookup([sha256('p/0')])).size, 0);
        }
        assert.equal(await cat.findWorkspaceByMountPath('/nowhere'), undefined);
        assert.deepEqual(await cat.listMountedOnHost('h'), []);
        const p = mkPack('packs/p', 3, 'p');
        await cat.createSnapshot(snap({ packs: [p] }));
        await cat.createSnapshot(snap({ packs: [p] })); // the same pack again: recorded once
        assert.deepEqual(await cat.packStats(NS), { packs: 1, bytes: 5_000_000_300, blobs: 3 });
        const found = await cat.blobIndex(NS).lookup([sha256('p/2'), sha256('p/2'), sha256('q/0')]);
        assert.deepEqual([...found.entries()], [[sha256('p/2'), p.blobs[2]]]);
        assert.equal(typeof found.get(sha256('p/2'))!.offset, 'number');
        assert.equal((await cat.blobIndex('team-b').lookup([sha256('p/2')])).size, 0, 'dedup stops at the namespace');
        assert.deepEqual(await cat.packStats('team-b'), { packs: 0, bytes: 0, blobs: 0 });
        assert.equal((await cat.blobIndex(NS).lookup([])).size, 0);
      } finally {
        await cat.close();
        await cat.close(); // idempotent
        await factory.cleanup(cat);
      }
    });

    it('two checkpoint commits racing on one workspace row: exactly one wins, the other is E_CHANGED_DURING_READ and wrote nothing', async () => {
      await withTwo(async (a, b) => {
        const base = await a.createSnapshot(snap());
        const [w] = await a.forkWorkspaces(NS, base.id, ['w']);
        for (const [i, [x, y]] of [
          [a, a],
          [a, b],
          [b, a],
        ].entries()) {
          const head = (await a.getWorkspace(NS, w!.id)).headSnapshotId;
          const count = (await a.listSnapshots(NS)).length;
          const commit = (c: Catalog, tag: string) =>
            c.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: head, snapshot: snap({ packs: [mkPack(`packs/${tag}`, 20, tag)] }) });
          const results = await Promise.allSettled([commit(x!, `r${i}x`), commit(y!, `r${i}y`)]);
          const won = results.filter((r) => r.status === 'fulfilled') as PromiseFulfilledResult<SnapshotRow>[];
          const lost = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
          assert.equal(won.length, 1, `round ${i}: exactly one commit wins`);
          assert.equal((lost[0]!.reason as AwcError).code, 'E_CHANGED_DURING_READ');
          assert.equal(won[0]!.value.parentId, head);
          assert.equal((await b.getWorkspace(NS, w!.id)).headSnapshotId, won[0]!.value.id);
          assert.equal((await a.listSnapshots(NS)).length, count + 1);
          const loserTag = results[0]!.status === 'rejected' ? `r${i}x` : `r${i}y`;
          assert.equal((await a.blobIndex(NS).lookup([sha256(`${loserTag}/0`)])).size, 0, 'the loser indexed nothing');
        }
      });
    });

    it('two forks (and two snapshots) racing for one name: one row, the other E_NAME_TAKEN', async () => {
      await withTwo(async (a, b) => {
        const s = await a.createSnapshot(snap());
        const forks = await Promise.allSettled([a.forkWorkspaces(NS, s.id, ['dup', 'a1']), b.forkWorkspaces(NS, s.id, ['b1', 'dup'])]);
        assert.equal(forks.filter((r) => r.status === 'fulfilled').length, 1);
        assert.equal(((forks.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason as AwcError).code, 'E_NAME_TAKEN');
        assert.equal((await b.listWorkspaces(NS)).length, 2, 'the loser created none of its workspaces');
        const snaps = await Promise.allSettled([a.createSnapshot(snap({ name: 'same' })), b.createSnapshot(snap({ name: 'same' }))]);
        assert.equal(snaps.filter((r) => r.status === 'fulfilled').length, 1);
        assert.equal(((snaps.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason as AwcError).code, 'E_NAME_TAKEN');
        assert.equal((await a.listSnapshots(NS)).filter((x) => x.name === 'same').length, 1);
      });
    });

    it('two mounts racing for one target: one is recorded, the other is E_TARGET_BUSY', async () => {
      await withTwo(async (a, b) => {
        const s = await a.createSnapshot(snap());
        const [x, y] = await a.forkWorkspaces(NS, s.id, ['x', 'y']);
        const target = { path: '/mnt/race', driver: 'copy' as const, host: 'h1' };
        const results = await Promise.allSettled([a.setMount(x!.id, target), b.setMount(y!.id, target)]);
        const won = results.filter((r) => r.status === 'fulfilled') as PromiseFulfilledResult<{ id: string }>[];
        assert.equal(won.length, 1);
        assert.equal(((results.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason as AwcError).code, 'E_TARGET_BUSY');
        assert.equal((await b.findWorkspaceByMountPath('/mnt/race'))?.id, won[0]!.value.id);
        assert.deepEqual(
          (await a.listMountedOnHost('h1')).map((w) => w.id),
          [won[0]!.value.id],
        );
      });
    });

    it('two writers indexing one digest at once: the digest has one location, the same on every lookup', async () => {
      await withTwo(async (a, b) => {
        const pa = mkPack('packs/one', 50, 'shared');
        const pb = mkPack('packs/two', 50, 'shared');
        await Promise.all([a.createSnapshot(snap({ packs: [pa] })), b.createSnapshot(snap({ packs: [pb] }))]);
        const digests = pa.blobs.map((x) => x.digest);
        const first = await a.blobIndex(NS).lookup(digests);
        assert.equal(first.size, 50);
        for (const d of digests) assert.ok(['packs/one', 'packs/two'].includes(first.get(d)!.pack));
        assert.deepEqual(await b.blobIndex(NS).lookup(digests), first);
        assert.deepEqual(await a.packStats(NS), { packs: 2, bytes: 2 * pa.size, blobs: 100 });
      });
    });
  });
  if (factory.connect) catalogConcurrencyContract(name, factory as Required<CatalogFactory>);
  catalogLeaseContract(name, factory);
  catalogLabelContract(name, factory);
  catalogIdentityContract(name, factory);
  catalogImageContract(name, factory);
  catalogBuildLeaseContract(name, factory);
  catalogQuotaContract(name, factory);
}
