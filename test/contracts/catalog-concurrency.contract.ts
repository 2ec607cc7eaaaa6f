import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { sha256 } from '../../src/core/digest.js';
import type { AwcError, ErrorCode } from '../../src/core/errors.js';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import type { WrittenPack } from '../../src/store/pack/pack-types.js';
import type { CatalogFactory } from './catalog.contract.js';
import { mkPack, snap } from '../helpers/catalog-fixtures.js';

/** Separate connections racing in each test. */
const WRITERS = 20;
/** Rounds of the two-writer races (delete against fork, delete against mount). */
const ROUNDS = 10;

type Settled<T> = PromiseSettledResult<T>[];

/** The fulfilled values and the rejection codes of `results`. */
function split<T>(results: Settled<T>): { won: T[]; codes: ErrorCode[] } {
  const won = results.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<T>).value);
  const codes = results.filter((r) => r.status === 'rejected').map((r) => ((r as PromiseRejectedResult).reason as AwcError).code);
  return { won, codes };
}

/** `pack` with its blobs in reverse order (another writer's insertion order). */
function reversed(pack: WrittenPack): WrittenPack {
  return { ...pack, blobs: [...pack.blobs].reverse() };
}

/**
 * Part of the catalog contract (catalog.contract.ts runs it for every adapter that can open
 * more connections): many writers on separate connections (PostgreSQL: separate pools;
 * SQLite: separate handles in worker threads, as separate processes would be) racing on
 * one row, one name, one digest. Each write path of the SQL catalog is correct under
 * PostgreSQL's READ COMMITTED (docs/explanation/catalog-concurrency.md): exactly one winner,
 * every loser gets its code and wrote nothing, and no race ends in a deadlock or a raw
 * driver error. Each test works in a namespace (and on hosts and paths) of its own.
 */
export function catalogConcurrencyContract(name: string, factory: Required<CatalogFactory>): void {
  describe(`Catalog contract, ${WRITERS} concurrent writers: ${name}`, () => {
    let cat: Catalog;
    const conns: Catalog[] = [];
    let n = 0;
    const fresh = () => `conc-${n++}`;

    before(async () => {
      cat = await factory.create();
      conns.push(...(await Promise.all(Array.from({ length: WRITERS }, () => factory.connect(cat)))));
    });
    after(async () => {
      await Promise.all(conns.map((c) => c.close()));
      await factory.cleanup(cat);
    });

    it(`${WRITERS} checkpoint commits from one head: exactly one wins, the others are E_CHANGED_DURING_READ and indexed nothing`, async () => {
      const ns = fresh();
      const base = await cat.createSnapshot(snap({ namespace: ns }));
      const [w] = await cat.forkWorkspaces(ns, base.id, ['w']);
      const results = await Promise.allSettled(
        conns.map((c, i) =>
          c.commitCheckpoint({
            workspaceId: w!.id,
            expectedHeadId: base.id,
            snapshot: snap({ namespace: ns, packs: [mkPack(`packs/${ns}-${i}`, 20, `${ns}-${i}`)] }),
          }),
        ),
      );
      const { won, codes } = split(results);
      assert.equal(won.length, 1, `exactly one commit wins (refusals: ${codes.join(', ')})`);
      assert.deepEqual(new Set(codes), new Set(['E_CHANGED_DURING_READ']));
      assert.equal((await cat.getWorkspace(ns, w!.id)).headSnapshotId, won[0]!.id);
      assert.equal(won[0]!.parentId, base.id);
      assert.equal((await cat.listSnapshots(ns)).length, 2);
      assert.deepEqual(await cat.packStats(ns), { packs: 1, bytes: 5_000_002_000, blobs: 20 }, "only the winner's pack is indexed");
    });

    it(`${WRITERS} forks taking one name: exactly one creates its workspaces, the others are E_NAME_TAKEN and created none`, async () => {
      const ns = fresh();
      const s = await cat.createSnapshot(snap({ namespace: ns }));
      const results = await Promise.allSettled(conns.map((c, i) => c.forkWorkspaces(ns, s.id, [`own-${i}`, 'same'])));
      const { won, codes } = split(results);
      assert.equal(won.length, 1, `exactly one fork wins (refusals: ${codes.join(', ')})`);
      assert.deepEqual(new Set(codes), new Set(['E_NAME_TAKEN']));
      const listed = await cat.listWorkspaces(ns);
      assert.deepEqual(
        listed.map((x) => x.id),
        won[0]!.map((x) => x.id),
      );
    });

    it(`${WRITERS} hosts mounting one workspace: exactly one mount is recorded, the others are E_ALREADY_MOUNTED`, async () => {
      const ns = fresh();
      const s = await cat.createSnapshot(snap({ namespace: ns }));
      const [w] = await cat.forkWorkspaces(ns, s.id, ['w']);
      const results = await Promise.allSettled(
        conns.map((c, i) => c.setMount(w!.id, { path: `/mnt/${ns}`, driver: 'copy', host: `${ns}-host-${i}` })),
      );
      const { won, codes } = split(results);
      assert.equal(won.length, 1, `exactly one mount wins (refusals: ${codes.join(', ')})`);
      assert.deepEqual(new Set(codes), new Set(['E_ALREADY_MOUNTED']));
      const row = await cat.getWorkspace(ns, w!.id);
      assert.equal(row.mountHost, won[0]!.mountHost);
      let mountedOn = 0;
      for (let i = 0; i < WRITERS; i++) mountedOn += (await cat.listMountedOnHost(`${ns}-host-${i}`)).length;
      assert.equal(mountedOn, 1);
    });

    it(`${WRITERS} checkpoints of different workspaces indexing the same new blobs: all commit, each digest has one location`, async () => {
      const ns = fresh();
      const base = await cat.createSnapshot(snap({ namespace: ns }));
      const ws = await cat.forkWorkspaces(
        ns,
        base.id,
        conns.map(() => null),
      );
      const results = await Promise.allSettled(
        conns.map((c, i) => {
          const shared = mkPack(`packs/${ns}-${i}`, 2000, `${ns}-shared`);
          return c.commitCheckpoint({
            workspaceId: ws[i]!.id,
            expectedHeadId: base.id,
            // half the writers list the blobs in the other order
            snapshot: snap({ namespace: ns, packs: [i % 2 === 0 ? shared : reversed(shared)] }),
          });
        }),
      );
      const { won, codes } = split(results);
      assert.deepEqual(codes, [], 'no commit is refused (no deadlock, no duplicate-key error)');
      assert.equal(won.length, WRITERS);
      const digests = Array.from({ length: 2000 }, (_, j) => sha256(`${ns}-shared/${j}`));
      const found = await cat.blobIndex(ns).lookup(digests);
      assert.equal(found.size, 2000);
      const packs = new Set(Array.from({ length: WRITERS }, (_, i) => `packs/${ns}-${i}`));
      for (const d of digests) assert.ok(packs.has(found.get(d)!.pack));
      assert.deepEqual(await conns[7]!.blobIndex(ns).lookup(digests), found, 'every connection sees the same locations');
      for (let i = 0; i < WRITERS; i++) assert.equal((await cat.getWorkspace(ns, ws[i]!.id)).headSnapshotId, won[i]!.id);
    });

    it(`a snapshot deleted while it is forked (${ROUNDS} rounds): the fork is E_NOT_FOUND or the delete is E_IN_USE, never both done`, async () => {
      const ns = fresh();
      for (let r = 0; r < ROUNDS; r++) {
        const s = await cat.createSnapshot(snap({ namespace: ns }));
        const [x, y] = [conns[r % WRITERS]!, conns[(r + 1) % WRITERS]!];
        const ops = [x.deleteSnapshot(ns, s.id), y.forkWorkspaces(ns, s.id, [null])] as const;
        const [del, fork] = await Promise.allSettled(ops);
        const codes = split([del, fork] as Settled<unknown>).codes;
        assert.equal(codes.length, 1, `round ${r}: exactly one of delete and fork succeeds (${codes.join(', ')})`);
        if (fork.status === 'fulfilled') {
          assert.equal(codes[0], 'E_IN_USE');
          assert.equal((await cat.getSnapshot(ns, s.id)).id, s.id);
          assert.equal((await cat.getWorkspace(ns, fork.value[0]!.id)).baseSnapshotId, s.id);
        } else {
          assert.equal(codes[0], 'E_NOT_FOUND');
          assert.deepEqual(
            (await cat.listSnapshots(ns)).filter((z) => z.id === s.id),
            [],
          );
        }
      }
    });

    it(`a workspace deleted while it is mounted (${ROUNDS} rounds): the mount is E_NOT_FOUND or the delete is E_ALREADY_MOUNTED`, async () => {
      const ns = fresh();
      const s = await cat.createSnapshot(snap({ namespace: ns }));
      for (let r = 0; r < ROUNDS; r++) {
        const [w] = await cat.forkWorkspaces(ns, s.id, [null]);
        const [x, y] = [conns[r % WRITERS]!, conns[(r + 1) % WRITERS]!];
        const [del, mount] = await Promise.allSettled([
          x.deleteWorkspace(ns, w!.id),
          y.setMount(w!.id, { path: `/mnt/${ns}-${r}`, driver: 'copy', host: `${ns}-h` }),
        ]);
        const codes = split([del, mount] as Settled<unknown>).codes;
        assert.equal(codes.length, 1, `round ${r}: exactly one of delete and mount succeeds (${codes.join(', ')})`);
        if (mount.status === 'fulfilled') {
          assert.equal(codes[0], 'E_ALREADY_MOUNTED');
          assert.equal((await cat.getWorkspace(ns, w!.id)).mountState, 'mounted');
          await cat.setMount(w!.id, null);
        } else {
          assert.equal(codes[0], 'E_NOT_FOUND');
          assert.equal(await cat.findWorkspaceByMountPath(`/mnt/${ns}-${r}`), undefined);
        }
      }
    });
  });
}
