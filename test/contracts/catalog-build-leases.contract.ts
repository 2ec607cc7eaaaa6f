import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { NS } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The build-lease part of the catalog contract (0008_build_leases, src/catalog/port/build-leases.ts):
 * one holder per (namespace, key) by the database's clock, renewal and release by epoch, a
 * release's result read by waiters, an expired lease taken over (epoch + 1, the old holder
 * can renew or release no more), exactly one winner of concurrent takes (two connections
 * when the factory can), namespaces as boundaries, and the checks that write nothing.
 */
export function catalogBuildLeaseContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog contract (build leases): ${name}`, () => {
    it('one holder at a time; a release records the result; the next acquisition raises the epoch', () =>
      withCat(async (cat) => {
        assert.equal(await cat.getBuildLease(NS, 'k'), undefined);
        const a = await cat.acquireBuildLease(NS, 'k', 'host-a:1', 60_000);
        assert.equal(a.acquired, true);
        assert.equal(a.lease.holder, 'host-a:1');
        assert.equal(a.lease.state, 'live');
        assert.equal(a.lease.result, null);
        assert.ok(a.lease.expiresAtMs >= a.lease.nowMs + 59_000);
        const b = await cat.acquireBuildLease(NS, 'k', 'host-b:2', 60_000);
        assert.equal(b.acquired, false);
        assert.equal(b.lease.holder, 'host-a:1');
        assert.equal(b.lease.epoch, a.lease.epoch);
        assert.equal(await cat.renewBuildLease(NS, 'k', a.lease.epoch, 60_000), true);
        assert.equal(await cat.releaseBuildLease(NS, 'k', a.lease.epoch, 'sn_result'), true);
        assert.equal(await cat.releaseBuildLease(NS, 'k', a.lease.epoch, 'sn_again'), false, 'released once');
        assert.equal(await cat.renewBuildLease(NS, 'k', a.lease.epoch, 60_000), false, 'a released lease is not renewed');
        const seen = await cat.getBuildLease(NS, 'k');
        assert.equal(seen?.state, 'released');
        assert.equal(seen?.result, 'sn_result');
        assert.equal(seen?.holder, null);
        const c = await cat.acquireBuildLease(NS, 'k', 'host-b:2', 60_000);
        assert.equal(c.acquired, true);
        assert.equal(c.lease.epoch, a.lease.epoch + 1);
        assert.equal(c.lease.result, null, 'a new build clears the last result');
        assert.equal((await cat.acquireBuildLease(NS, 'other-key', 'host-a:1', 60_000)).acquired, true, 'keys are independent');
        assert.equal((await cat.acquireBuildLease('other-ns', 'k', 'host-a:1', 60_000)).acquired, true, 'namespaces are boundaries');
      }));

    it("an expired lease (its holder stopped renewing) is taken over; the old holder's epoch no longer renews or releases", () =>
      withCat(async (cat) => {
        const a = await cat.acquireBuildLease(NS, 'k', 'crashed:1', 300);
        await sleep(450);
        assert.equal((await cat.getBuildLease(NS, 'k'))?.state, 'expired');
        const b = await cat.acquireBuildLease(NS, 'k', 'next:2', 60_000);
        assert.equal(b.acquired, true);
        assert.equal(b.lease.epoch, a.lease.epoch + 1);
        assert.equal(await cat.renewBuildLease(NS, 'k', a.lease.epoch, 60_000), false);
        assert.equal(await cat.releaseBuildLease(NS, 'k', a.lease.epoch, 'sn_late'), false);
        assert.equal((await cat.getBuildLease(NS, 'k'))?.holder, 'next:2');
      }));

    it('concurrent takes: exactly one acquires', async () => {
      const cat = await factory.create();
      const other = factory.connect ? await factory.connect(cat) : cat;
      try {
        const takes = await Promise.all(
          Array.from({ length: 8 }, (_, i) => (i % 2 ? other : cat).acquireBuildLease(NS, 'race', `h${i}:1`, 60_000)),
        );
        assert.equal(takes.filter((t) => t.acquired).length, 1);
        const winner = takes.find((t) => t.acquired)!.lease;
        for (const t of takes) assert.equal(t.lease.holder, winner.holder);
        // and again over an expired lease
        await cat.releaseBuildLease(NS, 'race', winner.epoch, null);
        const again = await Promise.all(
          Array.from({ length: 8 }, (_, i) => (i % 2 ? other : cat).acquireBuildLease(NS, 'race', `g${i}:1`, 60_000)),
        );
        assert.equal(again.filter((t) => t.acquired).length, 1);
      } finally {
        if (other !== cat) await other.close();
        await factory.cleanup(cat);
      }
    });

    it('refuses a bad TTL, key or holder, writing nothing', () =>
      withCat(async (cat) => {
        await rejectsWith(cat.acquireBuildLease(NS, 'k', 'h', 0), 'E_USAGE');
        await rejectsWith(cat.acquireBuildLease(NS, 'k', 'h', 1.5), 'E_USAGE');
        await rejectsWith(cat.acquireBuildLease(NS, '', 'h', 1000), 'E_USAGE');
        await rejectsWith(cat.acquireBuildLease(NS, 'k', '', 1000), 'E_USAGE');
        assert.equal(await cat.getBuildLease(NS, 'k'), undefined);
      }));
  });
}
