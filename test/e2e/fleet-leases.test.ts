/**
 * Leases with fencing across two hosts (issue 9 items 4 and 5; docs/explanation/leases.md):
 * two homes on this machine with two host ids share one SQLite catalog and one object store,
 * with real daemons and real mounts. The race of 20 mount attempts from both hosts, the take-over
 * after a host's daemon is killed (at its last checkpoint; `show` says what was lost; the lost
 * host neither commits nor resurrects nor silently deletes its stale changes), and a host cut off
 * (its daemon stopped past expiry, then resumed) that cannot commit and shows its lease as lost.
 */
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathsOf } from '../../src/config/config.js';
import { workspaceDirs } from '../../src/drivers/port/workspace-state.js';
import { errorOf, type CliResult } from '../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../helpers/temp-dir.js';
import { mountsUnder, signal, twoHosts, waitFor, type TestHost } from '../helpers/two-hosts.js';
import type { SqliteCatalog } from '../../src/catalog/sqlite/sqlite-catalog.js';
import { Awc } from '../../src/service/workspace/awc.js';
import { rejectsWith } from '../helpers/assert-errors.js';

const overlay = process.getuid?.() === 0;
const TTL = 3000;

let dir: string;
let a: TestHost;
let b: TestHost;
let catalog: SqliteCatalog;
let cleanup: () => Promise<void>;

/** The JSON of a command that must succeed. */
function ok(r: CliResult, what: string): any {
  assert.equal(r.code, 0, `${what}: ${r.stderr}`);
  return r.json;
}

/** The error code of a command that must fail. */
function code(r: CliResult): string {
  assert.notEqual(r.code, 0, `expected a failure, got ${r.stdout}`);
  return errorOf(r).code;
}

describe('leases across two hosts sharing one catalog', { skip: overlay ? false : 'needs root (overlay, bind mounts)' }, () => {
  before(async () => {
    dir = await makeTempDir('awc-fleet-');
    ({ a, b, catalog, cleanup } = await twoHosts(dir, TTL));
    const src = join(dir, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'base.txt'), 'base\n');
    ok(a.run(['snapshot', 'import', src, '--name', 'base']), 'import');
    ok(a.run(['daemon', 'start']), 'daemon A');
    ok(b.run(['daemon', 'start']), 'daemon B');
  });
  after(async () => {
    await cleanup();
    await removeTempDir(dir);
  });

  test('20 concurrent mounts of one workspace from two hosts: exactly one holder at any moment, in the catalog and in the mount table', async () => {
    const ws = ok(a.run(['fork', 'base', '--name', 'race']), 'fork').workspaces[0].id as string;
    const violations: string[] = [];
    let samples = 0;
    let running = true;
    const monitor = (async () => {
      while (running) {
        const onA = mountsUnder(a.mnt);
        const onB = mountsUnder(b.mnt);
        // read in the order things happen (the lease and the record in one transaction, then the mount)
        const row = await catalog.getWorkspace('default', ws);
        const lease = await catalog.getLease(ws);
        samples++;
        if (onA.length + onB.length > 1) violations.push(`mounted ${[...onA, ...onB].join(', ')}`);
        const shown = onA.length > 0 ? a.id : onB.length > 0 ? b.id : undefined;
        // the lease is taken (with the mount record) before anything shows at a target, and nobody releases it here
        if (shown && lease?.host !== shown) violations.push(`mounted on ${shown} while the lease names ${lease?.host}`);
        if (lease?.host && lease.state !== 'live') violations.push(`lease of ${lease.host} not live`);
        if (row.mountState === 'mounted' && row.mountHost !== lease?.host)
          violations.push(`record on ${row.mountHost}, lease ${lease?.host}`);
        await new Promise((r) => setImmediate(r));
      }
    })();
    const attempts = [a, b].flatMap((h) =>
      Array.from({ length: 10 }, (_, i) => ({ h, p: h.spawn(['mount', ws, join(h.mnt, `race-${i}`)]) })),
    );
    const results = await Promise.all(attempts.map(async ({ h, p }) => ({ h, r: await p })));
    running = false;
    await monitor;
    const won = results.filter((x) => x.r.code === 0);
    assert.equal(won.length, 1, `exactly one mount wins: ${results.map((x) => x.r.stderr.trim().split('\n').pop()).join(' | ')}`);
    for (const x of results.filter((y) => y.r.code !== 0)) {
      const c = code(x.r);
      // the other host is refused by the lease; the winner's own host by its mount record or its private state
      const expected = x.h === won[0]!.h ? ['E_ALREADY_MOUNTED', 'E_STILL_MOUNTED', 'E_CATALOG_BUSY'] : ['E_LEASED', 'E_CATALOG_BUSY'];
      assert.ok(expected.includes(c), `a loser on ${x.h.id} fails with ${expected.join(' or ')}, got ${c}: ${x.r.stderr}`);
    }
    assert.ok(samples > 20, `the monitor sampled the run (${samples})`);
    assert.deepEqual(violations, [], 'one holder at every sample');
    const holder = won[0]!.h;
    assert.equal((await catalog.getLease(ws))?.host, holder.id);
    assert.deepEqual(mountsUnder(holder.mnt), [won[0]!.r.json.path]);
    assert.equal(readFileSync(join(won[0]!.r.json.path, 'base.txt'), 'utf8'), 'base\n');
    // unmounted clean, the lease is released: the other host may mount it without --steal
    ok(holder.run(['unmount', ws]), 'unmount');
    assert.equal((await catalog.getLease(ws))?.state, 'released');
    const other = holder === a ? b : a;
    ok(other.run(['mount', ws, join(other.mnt, 'race-after')]), 'mount after release');
    assert.equal((await catalog.getLease(ws))?.epoch, 2, 'the epoch rose');
    ok(other.run(['unmount', ws]), 'unmount');
  });

  test("take-over after host A's daemon is killed: B mounts at A's last checkpoint, show says what was lost, A cannot commit and keeps its stale changes until --discard", async () => {
    const ws = ok(a.run(['fork', 'base', '--name', 'takeover']), 'fork').workspaces[0].id as string;
    const mntA = join(a.mnt, 'takeover');
    const mntB = join(b.mnt, 'takeover');
    ok(a.run(['mount', ws, mntA]), 'mount on A');
    writeFileSync(join(mntA, 'checkpointed.txt'), 'kept\n');
    const c1 = ok(a.run(['checkpoint', ws]), 'checkpoint on A');
    writeFileSync(join(mntA, 'lost.txt'), 'never checkpointed\n');
    assert.deepEqual(ok(a.run(['show', ws]), 'show').lease.here, 'held');

    // while A lives: refused, with or without --steal, naming the holder and the expiry
    for (const steal of [[], ['--steal']]) {
      const r = b.run(['mount', ws, mntB, ...steal]);
      assert.equal(code(r), 'E_LEASED');
      assert.match(errorOf(r).message, /leased by host host-a .* until/);
    }
    const { daemon, supervisor } = a.pids();
    assert.ok(daemon && supervisor);
    signal(supervisor, 'SIGKILL');
    signal(daemon, 'SIGKILL');
    await waitFor("A's lease to expire", async () => (await catalog.getLease(ws))?.state === 'expired');
    const noSteal = b.run(['mount', ws, mntB]);
    assert.equal(code(noSteal), 'E_LEASED');
    assert.match(errorOf(noSteal).message, /expired/);
    const m = ok(b.run(['mount', ws, mntB, '--steal']), 'steal on B');
    assert.equal(m.path, mntB);
    assert.equal(readFileSync(join(mntB, 'checkpointed.txt'), 'utf8'), 'kept\n', "A's last checkpoint");
    assert.equal(existsSync(join(mntB, 'lost.txt')), false, 'what A did not checkpoint is gone');
    const shown = ok(b.run(['show', ws]), 'show on B');
    assert.equal(shown.headSnapshotId, c1.id);
    assert.equal(typeof shown.lastCheckpointAt, 'string');
    assert.deepEqual([shown.lease.here, shown.lease.holder, shown.lease.epoch, shown.lease.takenFrom], ['held', 'host-b', 2, 'host-a']);
    assert.match(shown.lease.note, new RegExp(`what host-a had not checkpointed after its last checkpoint ${c1.id}.* is lost`));

    // A comes back: it cannot commit, shows the lease as lost, and keeps its stale upper until --discard
    const upper = workspaceDirs(pathsOf({ home: a.home }).workspaces, ws).upper;
    assert.equal(readFileSync(join(upper, 'lost.txt'), 'utf8'), 'never checkpointed\n');
    assert.equal(code(a.run(['checkpoint', ws])), 'E_LEASE_LOST');
    ok(a.run(['daemon', 'start']), 'daemon A again');
    assert.equal(code(a.run(['checkpoint', ws])), 'E_LEASE_LOST', 'a restarted daemon does not reclaim a lease another host took');
    const lsA = ok(a.run(['ls']), 'ls on A').workspaces.find((w: { id: string }) => w.id === ws);
    assert.equal(lsA.lease.here, 'lost');
    assert.match(ok(a.run(['show', ws]), 'show on A').lease.note, /taken over by host host-b/);
    assert.equal(existsSync(join(upper, 'lost.txt')), true, 'not resurrected, not silently deleted');
    assert.deepEqual(
      mountsUnder(a.mnt).filter((p) => p === mntA),
      [],
      'the dead overlay is gone from A',
    );
    assert.equal(code(a.run(['unmount', ws])), 'E_LEASE_LOST');
    ok(a.run(['unmount', ws, '--discard']), 'discard on A');
    assert.equal(existsSync(upper), false);
    assert.equal((await catalog.getWorkspace('default', ws)).mountHost, 'host-b', "B's mount is untouched");

    writeFileSync(join(mntB, 'b.txt'), 'b\n');
    const c2 = ok(b.run(['checkpoint', ws]), 'checkpoint on B');
    assert.equal(c2.parent, c1.id);
    ok(b.run(['unmount', ws]), 'unmount on B');
  });

  test('a host cut off (its daemon stopped past expiry, then resumed) cannot commit and shows its lease as lost', async () => {
    const copy = { AWC_MOUNT_DRIVER: 'copy' };
    const ws = ok(a.run(['fork', 'base', '--name', 'cut']), 'fork').workspaces[0].id as string;
    const mntA = join(a.mnt, 'cut');
    ok(a.run(['mount', ws, mntA], copy), 'copy mount on A');
    writeFileSync(join(mntA, 'x.txt'), 'x\n');
    const before = await catalog.getHost(a.id);
    const { daemon } = a.pids();
    assert.ok(daemon);
    signal(daemon, 'SIGSTOP');
    try {
      await waitFor("A's lease to expire", async () => (await catalog.getLease(ws))?.state === 'expired');
      const r = a.run(['checkpoint', ws], copy);
      assert.equal(code(r), 'E_LEASE_LOST');
      assert.match(errorOf(r).message, /expired/);
      assert.equal(ok(a.run(['ls']), 'ls').workspaces.find((w: { id: string }) => w.id === ws).lease.here, 'lost');
    } finally {
      signal(daemon, 'SIGCONT');
    }
    await waitFor('A to register a new session', async () => {
      const h = await catalog.getHost(a.id);
      return h !== undefined && h.live && h.session > before!.session;
    });
    assert.equal(code(a.run(['checkpoint', ws], copy)), 'E_LEASE_LOST', 'a resumed host does not get its lease back');
    const shown = ok(a.run(['show', ws]), 'show').lease;
    assert.deepEqual([shown.here, shown.holder, shown.state], ['lost', 'host-a', 'expired']);
    assert.equal(ok(a.run(['daemon', 'status']), 'status').session.lostSessions.includes(before!.session), true);
    const m = ok(b.run(['mount', ws, join(b.mnt, 'cut'), '--steal']), 'steal on B');
    assert.equal(existsSync(join(m.path, 'x.txt')), false);
    assert.equal(code(a.run(['checkpoint', ws], copy)), 'E_LEASE_LOST');
    ok(a.run(['unmount', ws, '--discard'], copy), 'discard the stale copy on A');
    assert.deepEqual(
      mountsUnder(a.mnt).filter((p) => p === mntA),
      [],
      "A's bind mount is gone",
    );
    ok(b.run(['unmount', ws]), 'unmount on B');
  });

  test('a checkpoint whose lease expires or is taken over between its scan and its commit is refused (an injection point), every time', async () => {
    // host C is this test process, as a library (no daemon: nothing renews its session after each operation)
    const lib = await Awc.open({
      home: join(dir, 'host-c', 'home'),
      host: 'host-c',
      catalog: a.env.AWC_CATALOG,
      objectStore: a.env.AWC_OBJECT_STORE,
      mountDriver: 'copy',
      leaseTtlMs: 300,
    });
    try {
      for (const takeOver of [false, true]) {
        const [w] = await lib.fork('base');
        const mnt = join(dir, 'host-c', `fence-${takeOver}`);
        await lib.mount(w!.id, mnt);
        writeFileSync(join(mnt, 'f.txt'), 'f\n');
        const snapshots = (await catalog.listSnapshots('default')).length;
        const err = await rejectsWith(
          lib.checkpoint(w!.id, {
            beforeCommit: async () => {
              await waitFor("C's session to expire", async () => (await catalog.getHost('host-c'))?.live === false);
              if (takeOver) ok(b.run(['mount', w!.id, join(b.mnt, 'fence'), '--steal']), 'steal on B');
            },
          }),
          'E_LEASE_LOST',
        );
        assert.match(err.message, takeOver ? /now host host-b's \(epoch \d+\)/ : /expired before the commit/);
        assert.equal((await catalog.getWorkspace('default', w!.id)).headSnapshotId, w!.headSnapshotId, 'the head did not move');
        assert.equal((await catalog.listSnapshots('default')).length, snapshots, 'no snapshot was written');
        await lib.unmount(w!.id, { discard: true });
        assert.deepEqual(mountsUnder(join(dir, 'host-c')), []);
        if (takeOver) ok(b.run(['unmount', w!.id]), 'unmount on B');
      }
    } finally {
      await lib.close();
    }
  });
});
