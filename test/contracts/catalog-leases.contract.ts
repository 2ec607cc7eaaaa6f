import { strict as assert } from 'node:assert';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { NS, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/** A short lease TTL (ms) so that expiry can be waited for. */
const TTL = 400;

/** Waits until the database's clock says host `id`'s session expired (polls; the TTL is short). */
async function waitExpired(cat: Catalog, id: string): Promise<void> {
  const deadline = Date.now() + 20 * TTL + 5_000;
  while (Date.now() < deadline) {
    const h = await cat.getHost(id);
    if (!h || !h.live) return;
    await sleep(50);
  }
  assert.fail(`host ${id}'s session did not expire`);
}

/** A workspace forked from a fresh snapshot; returns its id and the snapshot's. */
async function workspace(cat: Catalog): Promise<{ ws: string; base: string }> {
  const s = await cat.createSnapshot(snap());
  const [w] = await cat.forkWorkspaces(NS, s.id, [null]);
  return { ws: w!.id, base: s.id };
}

const at = (host: string, path = `/mnt/${host}`) => ({ path, driver: 'copy' as const, host });

/**
 * The lease part of the Catalog contract (src/catalog/port/catalog.ts; the protocol in
 * docs/explanation/leases.md): host sessions and their one-statement heartbeat, taking a lease
 * with the mount record, refusal while the holder is live, take-over after expiry raising the
 * epoch, the fence of a checkpoint commit (a stale epoch is refused), the release rules, and the
 * reclaim of a restarted host. Run by `catalogContract` for every adapter.
 */
export function catalogLeaseContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog lease contract: ${name}`, () => {
    it('a host session is continued while live, renewed by a heartbeat, and replaced by the next one after expiry', async () => {
      await withCat(async (cat) => {
        const a = await cat.registerHost({ id: 'A', address: 'a.local', pid: 1, daemonVersion: 't', ttlMs: TTL });
        assert.deepEqual([a.session, a.continued], [1, false]);
        const again = await cat.registerHost({ id: 'A', ttlMs: TTL });
        assert.deepEqual([again.session, again.continued], [1, true], 'a live session is continued');
        assert.equal(await cat.heartbeat('A', 1), true);
        assert.equal(await cat.heartbeat('A', 2), false, 'not the current session');
        const h = await cat.getHost('A');
        assert.equal(h?.live, true);
        assert.ok(h!.expiresAtMs > h!.heartbeatAtMs && h!.expiresAtMs - h!.heartbeatAtMs <= TTL);
        await waitExpired(cat, 'A');
        assert.equal(await cat.heartbeat('A', 1), false, 'an expired session is never renewed');
        const next = await cat.registerHost({ id: 'A', ttlMs: TTL });
        assert.deepEqual([next.session, next.continued], [2, false]);
        await rejectsWith(cat.registerHost({ id: 'A', ttlMs: 0 }), 'E_USAGE');
      });
    });

    it('mount records the layer snapshot in the same transaction (gc holds it); a refused mount records none', async () => {
      await withCat(async (cat) => {
        const { ws, base } = await workspace(cat);
        const other = await workspace(cat);
        await cat.registerHost({ id: 'A', ttlMs: 60_000 });
        await cat.registerHost({ id: 'B', ttlMs: 60_000 });
        const holds = async () => new Map((await cat.gc().listHolds()).map((h) => [h.workspaceId, h.layer]));
        assert.equal((await holds()).get(ws), null, 'a fresh fork has no layer snapshot');
        const r = await cat.mountLeased(ws, at('A'), { layerSnapshotId: base });
        assert.equal(r.workspace.mountHost, 'A');
        assert.equal((await holds()).get(ws), base, 'recorded with the mount');
        await cat.mountLeased(other.ws, at('A', '/mnt/other'));
        await rejectsWith(cat.mountLeased(other.ws, at('B', '/mnt/b'), { layerSnapshotId: other.base }), 'E_LEASED');
        assert.equal((await holds()).get(other.ws), null, 'the refused mount recorded no layer snapshot');
      });
    });

    it('mount takes the lease with the mount record; a live holder is refused with E_LEASED naming it, --steal too', async () => {
      await withCat(async (cat) => {
        const { ws } = await workspace(cat);
        await rejectsWith(cat.mountLeased(ws, at('A')), 'E_DAEMON_UNAVAILABLE');
        assert.equal(await cat.getLease(ws), undefined, 'nothing taken without a live session');
        await cat.registerHost({ id: 'A', ttlMs: 60_000 });
        await cat.registerHost({ id: 'B', ttlMs: 60_000 });
        const r = await cat.mountLeased(ws, at('A'));
        assert.equal(r.workspace.mountHost, 'A');
        assert.deepEqual([r.lease.host, r.lease.epoch, r.lease.state], ['A', 1, 'live']);
        const { nowMs: _n, ...read } = (await cat.getLease(ws))!;
        const { nowMs: _m, ...taken } = r.lease;
        assert.deepEqual(read, taken);
        for (const steal of [false, true]) {
          const e = await rejectsWith(cat.mountLeased(ws, at('B'), { steal }), 'E_LEASED');
          assert.match(e.message, /leased by host A/);
          assert.equal(e.details?.holder, 'A');
          assert.equal(typeof e.details?.expiresAtMs, 'number');
        }
        assert.equal((await cat.getWorkspace(NS, ws)).mountHost, 'A', 'the refused mount wrote nothing');
        const again = await cat.mountLeased(ws, at('A'));
        assert.equal(again.lease.epoch, 1, 'the holder mounting again keeps its epoch');
        assert.deepEqual(
          (await cat.listLeases(NS)).map((l) => [l.workspaceId, l.host]),
          [[ws, 'A']],
        );
      });
    });

    it('one heartbeat of the host renews every lease of its session; without it they all expire', async () => {
      await withCat(async (cat) => {
        const s = await cat.registerHost({ id: 'A', ttlMs: TTL });
        const ids: string[] = [];
        for (let i = 0; i < 3; i++) {
          const { ws } = await workspace(cat);
          await cat.mountLeased(ws, at('A', `/mnt/a${i}`));
          ids.push(ws);
        }
        const until = Date.now() + 3 * TTL;
        while (Date.now() < until) {
          assert.equal(await cat.heartbeat('A', s.session), true);
          await sleep(TTL / 4);
        }
        for (const id of ids) assert.equal((await cat.getLease(id))?.state, 'live', 'renewed past several TTLs');
        await waitExpired(cat, 'A');
        for (const id of ids) assert.equal((await cat.getLease(id))?.state, 'expired');
      });
    });

    it('an expired lease is taken only with steal, which raises the epoch and moves the mount record', async () => {
      await withCat(async (cat) => {
        const { ws } = await workspace(cat);
        await cat.registerHost({ id: 'A', ttlMs: TTL });
        await cat.registerHost({ id: 'B', ttlMs: 60_000 });
        await cat.mountLeased(ws, at('A'));
        await waitExpired(cat, 'A');
        const e = await rejectsWith(cat.mountLeased(ws, at('B')), 'E_LEASED');
        assert.match(e.message, /expired/);
        assert.equal(e.details?.state, 'expired');
        const r = await cat.mountLeased(ws, at('B'), { steal: true });
        assert.deepEqual([r.lease.host, r.lease.epoch, r.lease.state, r.lease.takenFrom], ['B', 2, 'live', 'A']);
        assert.equal(typeof r.lease.takenAtMs, 'number');
        assert.deepEqual([r.workspace.mountHost, r.workspace.mountPath], ['B', '/mnt/B']);
        // A comes back with a new session: its old lease stays lost, and B's is live
        await cat.registerHost({ id: 'A', ttlMs: TTL, reclaim: true });
        assert.deepEqual([(await cat.getLease(ws))?.host, (await cat.getLease(ws))?.epoch], ['B', 2], 'a taken lease is not reclaimed');
        await rejectsWith(cat.mountLeased(ws, at('A'), { steal: true }), 'E_LEASED');
      });
    });

    it('a checkpoint commit under a stale or expired epoch, or without a lease, is refused with E_LEASE_LOST and writes nothing', async () => {
      await withCat(async (cat) => {
        const { ws, base } = await workspace(cat);
        await cat.registerHost({ id: 'A', ttlMs: TTL });
        await cat.registerHost({ id: 'B', ttlMs: 60_000 });
        const a = await cat.mountLeased(ws, at('A'));
        const c1 = await cat.commitCheckpoint({ workspaceId: ws, expectedHeadId: base, snapshot: snap(), lease: { host: 'A', epoch: 1 } });
        assert.equal((await cat.getWorkspace(NS, ws)).headSnapshotId, c1.id);
        await rejectsWith(cat.commitCheckpoint({ workspaceId: ws, expectedHeadId: c1.id, snapshot: snap() }), 'E_LEASE_LOST');
        await rejectsWith(
          cat.commitCheckpoint({ workspaceId: ws, expectedHeadId: c1.id, snapshot: snap(), lease: { host: 'B', epoch: 1 } }),
          'E_LEASE_LOST',
        );
        await waitExpired(cat, 'A');
        const snaps = (await cat.listSnapshots(NS)).length;
        const expired = await rejectsWith(
          cat.commitCheckpoint({ workspaceId: ws, expectedHeadId: c1.id, snapshot: snap(), lease: { host: 'A', epoch: a.lease.epoch } }),
          'E_LEASE_LOST',
        );
        assert.match(expired.message, /expired/);
        const b = await cat.mountLeased(ws, at('B'), { steal: true });
        const stale = await rejectsWith(
          cat.commitCheckpoint({ workspaceId: ws, expectedHeadId: c1.id, snapshot: snap(), lease: { host: 'A', epoch: 1 } }),
          'E_LEASE_LOST',
        );
        assert.equal(stale.details?.holder, 'B');
        assert.equal((await cat.listSnapshots(NS)).length, snaps, 'no snapshot row from a refused commit');
        assert.equal((await cat.getWorkspace(NS, ws)).headSnapshotId, c1.id, 'the head stays');
        const c2 = await cat.commitCheckpoint({
          workspaceId: ws,
          expectedHeadId: c1.id,
          snapshot: snap(),
          lease: { host: 'B', epoch: b.lease.epoch },
        });
        assert.equal(c2.parentId, c1.id, 'the new holder continues from the last checkpoint');
      });
    });

    it('a lease is released only by its holder once unmounted; the epoch stays, and kept private state is then stale', async () => {
      await withCat(async (cat) => {
        const { ws } = await workspace(cat);
        await cat.registerHost({ id: 'A', ttlMs: 60_000 });
        await cat.registerHost({ id: 'B', ttlMs: 60_000 });
        await cat.mountLeased(ws, at('A'));
        assert.equal(await cat.releaseLease(ws, 'A'), false, 'not while mounted on A');
        await cat.setMount(ws, null);
        assert.equal(await cat.releaseLease(ws, 'B'), false, 'not by another host');
        assert.equal((await cat.getLease(ws))?.state, 'live', 'an unmount alone keeps the lease');
        assert.equal(await cat.releaseLease(ws, 'A'), true);
        const released = await cat.getLease(ws);
        assert.deepEqual([released?.state, released?.host, released?.epoch], ['released', null, 1]);
        await rejectsWith(cat.mountLeased(ws, at('A'), { keepsPrivate: true }), 'E_LEASE_LOST');
        const b = await cat.mountLeased(ws, at('B'));
        assert.deepEqual([b.lease.epoch, b.lease.takenFrom], [2, null], 'a released lease is taken without steal, epoch raised');
        await rejectsWith(cat.deleteWorkspace(NS, ws), 'E_ALREADY_MOUNTED');
        await cat.setMount(ws, null);
        await rejectsWith(cat.deleteWorkspace(NS, ws), 'E_LEASED');
        await cat.releaseLease(ws, 'B');
        await cat.deleteWorkspace(NS, ws);
        assert.equal(await cat.getLease(ws), undefined, 'the lease row goes with its workspace');
      });
    });

    it('a restarted host reclaims (epoch + 1) the leases no other host took, keeping its private state valid', async () => {
      await withCat(async (cat) => {
        const { ws } = await workspace(cat);
        await cat.registerHost({ id: 'A', ttlMs: TTL });
        await cat.mountLeased(ws, at('A'));
        await waitExpired(cat, 'A');
        const s = await cat.registerHost({ id: 'A', ttlMs: 60_000 });
        assert.deepEqual([s.session, s.reclaimed], [2, 0], 'a re-registration without reclaim leaves them lost');
        assert.equal((await cat.getLease(ws))?.state, 'expired');
        await cat.registerHost({ id: 'A', ttlMs: TTL });
        await waitExpired(cat, 'A');
        const r = await cat.registerHost({ id: 'A', ttlMs: 60_000, reclaim: true });
        assert.equal(r.reclaimed, 1);
        const l = await cat.getLease(ws);
        assert.deepEqual([l?.host, l?.state, l?.epoch], ['A', 'live', 2]);
        await cat.setMount(ws, null);
        const m = await cat.mountLeased(ws, at('A'), { keepsPrivate: true });
        assert.equal(m.lease.epoch, 2, 'kept private state resumes under the reclaimed lease');
      });
    });
  });
}
