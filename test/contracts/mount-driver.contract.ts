/**
 * The MountDriver contract (src/drivers/port/mount-driver.ts), tus-node-server style: every
 * adapter runs these tests through `mountDriverContract(name, factory)`. They call the port
 * itself (not the service): mount, resume, unmount, scan (and its `committed`), inUse,
 * materialised and doctor; every error code the adapters throw through it; idempotence
 * (unmount twice, doctor twice, scan twice); bounds (an empty snapshot, a scan with no
 * changes); and two concurrent mounts and scans of one workspace.
 *
 * What differs between drivers by design is declared by the fixture (`keepsChanges`,
 * `outlivesForcedUnmount`, `resumesLostMount`), and both outcomes are checked for what
 * they promise.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Digest } from '../../src/core/digest.js';
import { AwcError } from '../../src/core/errors.js';
import { MOUNT_DRIVER_NAMES } from '../../src/core/mount-driver-name.js';
import type { WorkspaceRow } from '../../src/catalog/port/catalog.js';
import { ContentWriter } from '../../src/store/content/content-writer.js';
import { isMounted } from '../../src/host/mount/mount-table.js';
import type { MountDriver, ScanResult } from '../../src/drivers/port/mount-driver.js';
import { readHostState, type WorkspaceHostState } from '../../src/drivers/port/workspace-state.js';
import type { Awc } from '../../src/service/workspace/awc.js';

/** What a test file hands the suite: an adapter on a fresh home, and what its driver promises. */
export interface MountDriverFixture {
  driver: MountDriver;
  /** The service on the adapter's home (snapshots, forks, catalog and store for the checks). */
  awc: Awc;
  /** Scratch directory for sources and mount targets (outside the home). */
  work: string;
  /** Unmount keeps uncheckpointed changes (`pending`, resumed by the next mount) instead of refusing them (E_IN_USE). */
  keepsChanges: boolean;
  /** A forced unmount of a busy mount leaves it alive while processes hold it (`holders`, inUse, E_STILL_MOUNTED). */
  outlivesForcedUnmount: boolean;
  /** `resume` shows a mount lost under a recorded workspace (a reboot) again. */
  resumesLostMount: boolean;
  /** Unmounts what is left, stops what the adapter started, closes the service. */
  close(): Promise<void>;
}

const SEED = { 'a.txt': 'alpha\n', 'dir/b.txt': 'bravo\n', 'dir/deep/c.txt': 'charlie\n' };

/** Registers the contract tests for one adapter; `skip` (a reason) skips them all. */
export function mountDriverContract(name: string, make: () => Promise<MountDriverFixture>, skip: string | false = false): void {
  describe(`MountDriver contract: ${name}`, { skip }, () => {
    let f: MountDriverFixture;
    let seed: { id: string; root: Digest };
    let targets = 0;

    before(async () => {
      f = await make();
      seed = await snapshotOf('seed', SEED, true);
    });
    after(async () => {
      await f?.close();
    });

    /** Imports a directory holding `files` (and, with `link`, a symlink `ln` → a.txt) as a snapshot. */
    const snapshotOf = async (label: string, files: Record<string, string>, link = false): Promise<{ id: string; root: Digest }> => {
      const src = join(f.work, `src-${label}`);
      mkdirSync(src, { recursive: true });
      for (const [p, text] of Object.entries(files)) {
        mkdirSync(join(src, p, '..'), { recursive: true });
        writeFileSync(join(src, p), text);
      }
      if (link) symlinkSync('a.txt', join(src, 'ln'));
      const r = await f.awc.importSnapshot(src);
      return { id: r.id, root: r.root };
    };
    const fork = async (snap = seed): Promise<WorkspaceRow> => (await f.awc.fork(snap.id))[0]!;
    const row = (ws: WorkspaceRow): Promise<WorkspaceRow> => f.awc.getWorkspace(ws.id);
    const stateOf = (ws: WorkspaceRow): Promise<WorkspaceHostState | undefined> => readHostState(f.awc.paths.workspaces, ws.id);
    const target = (): string => join(f.work, `mnt-${++targets}`);
    /** A dry-run writer (stores nothing), or with `store` one whose packs a commit uploads. */
    const writer = (o: { store?: boolean; testHooks?: ConstructorParameters<typeof ContentWriter>[0]['testHooks'] } = {}): ContentWriter =>
      new ContentWriter({
        store: f.awc.store,
        index: f.awc.catalog.blobIndex(f.awc.namespace),
        packBytes: f.awc.config.packBytes,
        dryRun: o.store !== true,
        testHooks: o.testHooks,
      });
    const headRoot = async (ws: WorkspaceRow): Promise<Digest> => (await f.awc.getSnapshot((await row(ws)).headSnapshotId)).root;
    /** Mounts a fresh fork at a new empty target (what the service checks first). */
    const mounted = async (snap = seed): Promise<{ ws: WorkspaceRow; dir: string }> => {
      const ws = await fork(snap);
      const dir = target();
      mkdirSync(dir);
      await f.driver.mount(ws, dir, undefined);
      return { ws: await row(ws), dir };
    };
    const scan = async (ws: WorkspaceRow, w = writer(), allowChanging = false): Promise<ScanResult> =>
      f.driver.scan((await stateOf(ws))!, w, { allowChanging });
    const changed = (ws: WorkspaceRow) => async () => (await scan(ws)).root !== (await headRoot(ws));
    const unmount = async (ws: WorkspaceRow, o: { discard?: boolean; force?: boolean } = {}) =>
      f.driver.unmount(await row(ws), await stateOf(ws), { discard: o.discard ?? false, force: o.force ?? false, changed: changed(ws) });
    /** Commits a scan made with a storing writer as the workspace's new head, then tells the driver. */
    const commit = async (ws: WorkspaceRow, s: ScanResult, w: ContentWriter): Promise<{ id: string; root: Digest }> => {
      const packs = await w.flush();
      const head = await f.awc.getSnapshot((await row(ws)).headSnapshotId);
      const snap = await f.awc.catalog.commitCheckpoint({
        workspaceId: ws.id,
        expectedHeadId: head.id,
        // the fencing token a checkpoint carries (docs/explanation/leases.md)
        lease: await f.awc.leases.commitLease(await row(ws)),
        snapshot: { namespace: f.awc.namespace, root: s.root, parentId: head.id, message: null, fileCount: 0, byteCount: 0, packs },
      });
      await s.committed(snap);
      return { id: snap.id, root: snap.root };
    };
    const code = (c: string) => (err: unknown) => err instanceof AwcError && err.code === c;
    /** A process whose working directory is `dir` (keeps a mount busy) until killed. */
    const holder = (dir: string) => spawn('sleep', ['300'], { cwd: dir, stdio: 'ignore' });

    test('name and doctor: a known name; the checks are stable, well formed, and pass where the suite runs', () => {
      assert.ok((MOUNT_DRIVER_NAMES as readonly string[]).includes(f.driver.name));
      const a = f.driver.doctor();
      assert.deepEqual(f.driver.doctor(), a, 'doctor is idempotent');
      for (const c of a) {
        assert.equal(typeof c.name, 'string');
        assert.equal(typeof c.detail, 'string');
        assert.equal(c.ok, true, `${c.name}: ${c.detail}`);
      }
    });

    test('mount shows the snapshot at the target and records the mount in the catalog and the host state', async () => {
      const ws = await fork();
      const dir = target();
      mkdirSync(dir);
      const r = await f.driver.mount(ws, dir, undefined);
      assert.deepEqual(
        { ...r, leftOut: undefined },
        { workspace: ws.id, path: dir, driver: f.driver.name, resumed: false, leftOut: undefined },
      );
      assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'alpha\n');
      assert.equal(readFileSync(join(dir, 'dir/deep/c.txt'), 'utf8'), 'charlie\n');
      assert.equal(readlinkSync(join(dir, 'ln')), 'a.txt');
      const now = await row(ws);
      assert.deepEqual([now.mountState, now.mountDriver, now.mountPath], ['mounted', f.driver.name, dir]);
      const st = (await stateOf(ws))!;
      assert.deepEqual([st.driver, st.target, st.layerRoot, st.workspaceId], [f.driver.name, dir, seed.root, ws.id]);
      const m = f.driver.materialised(st);
      if (m !== undefined) assert.ok(lstatSync(m).isDirectory(), 'materialised names a directory');
      // the live mount uses its own private changes where a mount can outlive its unmount (an overlay on its upper)
      const use = await f.driver.inUse(st);
      assert.equal(use.inUse, f.outlivesForcedUnmount);
      if (use.inUse) assert.deepEqual(use.mountedAt, [dir]);
      await unmount(ws);
    });

    test('a mounted workspace: mount again is E_ALREADY_MOUNTED, and the first mount is intact', async () => {
      const { ws, dir } = await mounted();
      const other = target();
      mkdirSync(other);
      await assert.rejects(f.driver.mount(ws, other, undefined), code('E_ALREADY_MOUNTED'));
      assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'alpha\n');
      assert.equal((await row(ws)).mountPath, dir);
      assert.equal(isMounted(other), false);
      await unmount(ws);
    });

    test('scan with no changes gives the head root (twice, and never changes the workspace)', async () => {
      const { ws, dir } = await mounted();
      const a = await scan(ws);
      const b = await scan(ws);
      assert.equal(a.root, seed.root);
      assert.equal(b.root, seed.root);
      assert.deepEqual(a.skipped, []);
      assert.ok(!a.changing || a.changing.length === 0);
      assert.deepEqual(readdirSync(dir).sort(), ['a.txt', 'dir', 'ln']);
      const un = await unmount(ws);
      assert.equal(un.pending, false);
    });

    test('scan sees writes, new and removed entries; committed lets the next scan reuse what it read', async () => {
      const { ws, dir } = await mounted();
      writeFileSync(join(dir, 'a.txt'), 'alpha 2\n');
      mkdirSync(join(dir, 'new'));
      writeFileSync(join(dir, 'new/n.txt'), 'new\n');
      rmSync(join(dir, 'dir/deep'), { recursive: true });
      const dry = await scan(ws);
      assert.notEqual(dry.root, seed.root);
      assert.equal((await scan(ws)).root, dry.root, 'the same state scans to the same root');
      assert.ok(dry.filesRead >= 1);
      const w = writer({ store: true });
      const real = await scan(ws, w);
      assert.equal(real.root, dry.root);
      const snap = await commit(ws, real, w);
      const again = await scan(ws);
      assert.equal(again.root, snap.root);
      assert.equal(again.filesRead, 0, 'after committed, unchanged files are not read again');
      assert.equal(await changed(ws)(), false);
      assert.equal((await unmount(ws)).pending, false);
    });

    test('E_CHANGED_DURING_READ: a file that changes on every read; allowChanging stores it as last read', async () => {
      const { ws, dir } = await mounted();
      writeFileSync(join(dir, 'hot.txt'), 'hot\n');
      let n = 0;
      const touch = (p: string) => {
        if (p.endsWith('hot.txt')) writeFileSync(join(dir, 'hot.txt'), `hot ${++n}\n`);
      };
      await assert.rejects(scan(ws, writer({ testHooks: { afterRead: touch } })), (err: unknown) => {
        assert.ok(err instanceof AwcError && err.code === 'E_CHANGED_DURING_READ', String(err));
        assert.equal(err.retryable, true);
        return true;
      });
      const r = await scan(ws, writer({ testHooks: { afterRead: touch } }), true);
      assert.deepEqual(r.changing, ['hot.txt']);
      assert.equal((await unmount(ws, { discard: true })).pending, false);
    });

    test('unmount of a clean workspace: not pending, target empty, record and host state gone; unmount again is E_NOT_MOUNTED', async () => {
      const { ws, dir } = await mounted();
      const r = await unmount(ws);
      assert.deepEqual(r, { workspace: ws.id, path: dir, pending: false });
      assert.equal(isMounted(dir), false);
      assert.deepEqual(readdirSync(dir), []);
      assert.equal((await row(ws)).mountState, 'unmounted');
      assert.equal(await stateOf(ws), undefined);
      await assert.rejects(unmount(ws), code('E_NOT_MOUNTED'));
      await assert.rejects(unmount(ws, { discard: true, force: true }), code('E_NOT_MOUNTED'));
    });

    test('unmount with uncheckpointed changes: kept (pending, resumed by the next mount) or refused (E_IN_USE); discard drops them', async () => {
      const { ws, dir } = await mounted();
      writeFileSync(join(dir, 'mine.txt'), 'mine\n');
      if (f.keepsChanges) {
        const r = await unmount(ws);
        assert.equal(r.pending, true);
        assert.equal(isMounted(dir), false);
        const kept = (await stateOf(ws))!;
        assert.ok(kept, 'the host state stays');
        const again = target();
        mkdirSync(again);
        const m = await f.driver.mount(await row(ws), again, kept);
        assert.equal(m.resumed, true);
        assert.equal(readFileSync(join(again, 'mine.txt'), 'utf8'), 'mine\n');
        assert.equal((await unmount(ws, { discard: true })).pending, false);
      } else {
        await assert.rejects(unmount(ws), code('E_IN_USE'));
        assert.equal((await row(ws)).mountState, 'mounted');
        assert.equal(readFileSync(join(dir, 'mine.txt'), 'utf8'), 'mine\n', 'nothing was lost');
        // and pending changes handed to mount cannot be resumed either
        const other = await fork();
        const t2 = target();
        mkdirSync(t2);
        await assert.rejects(f.driver.mount(other, t2, { ...(await stateOf(ws))!, workspaceId: other.id }), code('E_IN_USE'));
        assert.equal((await unmount(ws, { discard: true })).pending, false);
      }
      assert.equal(await stateOf(ws), undefined);
      assert.equal((await row(ws)).mountState, 'unmounted');
    });

    test('a busy mount: unmount is E_TARGET_BUSY naming the process (pid, command; the hint says which to end, not --force) and stays mounted; force detaches it (alive while held, or gone)', async () => {
      const { ws, dir } = await mounted();
      const p = holder(dir);
      try {
        await new Promise((r) => setTimeout(r, 200));
        await assert.rejects(unmount(ws), (err: AwcError) => {
          assert.equal(err.code, 'E_TARGET_BUSY');
          assert.match(err.message, new RegExp(`in use by pid ${p.pid} \\(\\S+, cwd `));
          assert.match(err.hint, new RegExp(`kill ${p.pid}`));
          assert.doesNotMatch(err.hint, /--force/);
          assert.ok((err.details?.holders as { pid: number }[]).some((h) => h.pid === p.pid));
          return true;
        });
        assert.equal((await row(ws)).mountState, 'mounted');
        assert.ok(isMounted(dir));
        const st = (await stateOf(ws))!;
        const r = await unmount(ws, { force: true });
        assert.equal(isMounted(dir), false, 'detached');
        assert.equal((await row(ws)).mountState, 'unmounted');
        if (f.outlivesForcedUnmount) {
          assert.equal(r.pending, true);
          assert.ok(r.holders?.some((h) => h.pid === p.pid));
          const use = await f.driver.inUse(st);
          assert.equal(use.inUse, true);
          const again = target();
          mkdirSync(again);
          await assert.rejects(f.driver.mount(await row(ws), again, st), code('E_STILL_MOUNTED'));
          assert.equal(isMounted(again), false);
        } else {
          assert.equal(r.pending, false);
          assert.equal((await f.driver.inUse(st)).inUse, false);
        }
      } finally {
        p.kill('SIGKILL');
        await new Promise((r) => p.once('exit', r));
      }
      const st = await stateOf(ws);
      if (st) {
        const deadline = Date.now() + 10_000;
        while ((await f.driver.inUse(st)).inUse && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        assert.equal((await f.driver.inUse(st)).inUse, false, 'free once the holder exited');
        const again = target();
        mkdirSync(again);
        await f.driver.mount(await row(ws), again, st);
        assert.equal((await unmount(ws, { discard: true })).pending, false);
      }
    });

    test('resume: nothing to resume while the mount lives; a lost mount is shown again, or left to its owner', async () => {
      const { ws, dir } = await mounted();
      assert.equal(await f.driver.resume(await row(ws)), undefined);
      if (f.resumesLostMount) {
        assert.equal(spawnSync('umount', ['-l', dir]).status, 0);
        const r = await f.driver.resume(await row(ws));
        assert.deepEqual(r, { workspace: ws.id, path: dir, driver: f.driver.name, resumed: true });
        assert.equal(readFileSync(join(dir, 'a.txt'), 'utf8'), 'alpha\n');
      }
      assert.equal((await unmount(ws)).pending, false);
    });

    test('bounds: an empty snapshot mounts as an empty directory and scans to its root', async () => {
      const empty = await snapshotOf('empty', {});
      const { ws, dir } = await mounted(empty);
      assert.deepEqual(readdirSync(dir), []);
      assert.equal((await scan(ws)).root, empty.root);
      writeFileSync(join(dir, 'first.txt'), '1\n');
      assert.notEqual((await scan(ws)).root, empty.root);
      assert.equal((await unmount(ws, { discard: true })).pending, false);
      assert.equal(existsSync(join(dir, 'first.txt')), false);
    });

    test('two concurrent scans of one workspace give the same root', async () => {
      const { ws, dir } = await mounted();
      writeFileSync(join(dir, 'c.txt'), 'concurrent\n');
      const [a, b] = await Promise.all([scan(ws), scan(ws)]);
      assert.equal(a.root, b.root);
      assert.notEqual(a.root, seed.root);
      assert.equal((await unmount(ws, { discard: true })).pending, false);
    });

    test('two concurrent mounts of one workspace: one wins, the other fails and leaves nothing; the winner is intact', async () => {
      // the lease and the mount record are one transaction, taken before anything is built: the loser
      // fails there (E_ALREADY_MOUNTED) and never touches the winner's private tree or target
      const ws = await fork();
      const [d1, d2] = [target(), target()];
      mkdirSync(d1);
      mkdirSync(d2);
      const rs = await Promise.allSettled([f.driver.mount(ws, d1, undefined), f.driver.mount(ws, d2, undefined)]);
      const won = rs.filter((r) => r.status === 'fulfilled');
      assert.equal(won.length, 1, JSON.stringify(rs.map((r) => (r.status === 'rejected' ? String(r.reason) : r.value))));
      const lost = rs.find((r) => r.status === 'rejected')!;
      assert.ok(lost.reason instanceof AwcError, String(lost.reason));
      const winner = (won[0] as PromiseFulfilledResult<{ path: string }>).value.path;
      const loser = winner === d1 ? d2 : d1;
      assert.equal(isMounted(loser), false);
      assert.deepEqual(readdirSync(loser), []);
      assert.equal((await row(ws)).mountPath, winner);
      assert.equal(readFileSync(join(winner, 'dir/deep/c.txt'), 'utf8'), 'charlie\n');
      assert.equal((await scan(ws)).root, seed.root, 'the winner scans to its head: nothing corrupted');
      assert.equal((await unmount(ws)).pending, false);
    });
  });
}
