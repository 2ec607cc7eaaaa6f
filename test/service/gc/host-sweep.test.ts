/**
 * The host-local sweep (docs/explanation/gc.md#host-local-state): sweepLayers and LayerUse on
 * real layer directories (buildLayer, trusted xattrs: root), then the whole path through a real
 * host daemon with real overlay and copy mounts: rm a snapshot, gc with grace 0, `awc gc
 * --local` drops its layer and its unique cached chunks, keeps chunks shared with a live
 * snapshot and the layer of a mounted workspace, and every live snapshot exports
 * byte-identical afterwards. Real SQLite, real FsObjectStore.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Digest } from '../../../src/core/digest.js';
import { digestHex } from '../../../src/core/digest.js';
import { shortContentName } from '../../../src/core/content-name.js';
import { DaemonClient } from '../../../src/daemon/supervisor/client.js';
import { buildLayer } from '../../../src/drivers/overlay/layer-builder.js';
import { sweepLayers } from '../../../src/drivers/overlay/layer-sweep.js';
import { LayerUse } from '../../../src/drivers/overlay/layer-use.js';
import { writeHostState } from '../../../src/drivers/port/workspace-state.js';
import { loadConfig, pathsOf } from '../../../src/config/config.js';
import { HostSweeper } from '../../../src/daemon/session/host-sweeper.js';
import { ChunkCache } from '../../../src/host/read-path/chunk-cache.js';
import { DaemonMetrics } from '../../../src/daemon/metrics/metrics.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc as cli, cleanupMounts } from '../../helpers/cli.js';
import { exportAll, writeTree } from '../../helpers/gc-fixtures.js';

const isRoot = process.getuid?.() === 0;
const sha = (s: string): Digest => `sha256:${createHash('sha256').update(s).digest('hex')}`;

/** Waits (bounded) until `cond` holds: the cache writes behind, so a chunk's file lands a moment after its read. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await sleep(50);
  assert.ok(cond(), `timed out waiting for ${what}`);
}

describe('sweepLayers and LayerUse (real layer directories)', { skip: !isRoot && 'needs root (trusted xattrs)' }, () => {
  let work: string;
  let svc: Awc;
  const roots: Digest[] = [];

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-layer-sweep-'));
    svc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy' }, { create: true });
    for (const n of ['one', 'two', 'three', 'four']) {
      const s = await svc.importSnapshot(writeTree(join(work, `src-${n}`), { [`${n}.txt`]: `${n}\n` }));
      roots.push(s.root);
    }
  });
  after(async () => {
    await svc.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** A fresh layers directory with the layers of `rs` built in it, and an empty workspaces directory. */
  async function layersOf(name: string, rs: Digest[]): Promise<{ layers: string; workspaces: string }> {
    const layers = join(work, name, 'layers');
    const workspaces = join(work, name, 'workspaces');
    mkdirSync(workspaces, { recursive: true });
    for (const r of rs) await buildLayer(svc.reader(), r, layers);
    return { layers, workspaces };
  }
  const has = (layers: string, r: Digest) => existsSync(join(layers, digestHex(r)));

  it('drops only a layer no snapshot row, workspace state, overlay or mount holds; a dry run drops nothing', async () => {
    const [live, stated, lowered, dead] = roots as [Digest, Digest, Digest, Digest];
    const { layers, workspaces } = await layersOf('rule', roots);
    await writeHostState(workspaces, {
      v: 1,
      workspaceId: 'ws_kept',
      namespace: 'default',
      driver: 'overlay',
      target: '/nowhere',
      layerSnapshotId: 'sn_x',
      layerRoot: stated,
    });
    // an overlay whose lower is the layer (as mountOverlay writes it), in a mount table of our own
    const lower = `${join(layers, digestHex(lowered), 'tree')}::/var/lib/awc/host/content`;
    const mountinfo = `99 1 0:77 / /mnt/x rw - overlay overlay rw,lowerdir=${lower},upperdir=/u,workdir=/w\n`;
    const { readMountInfo } = await import('../../../src/host/mount/mount-table.js');
    const tmpLeft = join(layers, `${digestHex(dead)}.tmp-999999999-1`);
    mkdirSync(tmpLeft);
    const base = {
      layersDir: layers,
      workspacesDir: workspaces,
      use: new LayerUse(),
      liveRoots: async () => new Set([live]),
      forget: () => undefined,
      mountinfo: () => readMountInfo(mountinfo),
    };
    const dry = await sweepLayers({ ...base, dryRun: true });
    assert.deepEqual(
      dry.dropped.map((d) => d.root),
      [dead],
    );
    assert.ok(dry.dropped[0]!.bytes > 0, 'a layer takes some disk');
    for (const r of roots) assert.ok(has(layers, r), 'a dry run removes nothing');
    assert.ok(existsSync(tmpLeft));

    const forgotten: Digest[] = [];
    const r = await sweepLayers({ ...base, forget: (root) => forgotten.push(root) });
    assert.deepEqual(
      r.dropped.map((d) => d.root),
      [dead],
    );
    assert.deepEqual(forgotten, [dead], 'the in-memory layer is forgotten with it');
    assert.equal(r.kept, 3);
    assert.equal(r.leftovers, 1, 'the build left by a dead pid goes too');
    assert.ok(!existsSync(tmpLeft));
    assert.ok(!has(layers, dead));
    for (const k of [live, stated, lowered]) assert.ok(has(layers, k), `${k} kept`);
  });

  it('never drops a layer a mount holds, or took while the sweep ran (even if it finished meanwhile)', async () => {
    const [a, b, c] = roots as [Digest, Digest, Digest];
    const { layers, workspaces } = await layersOf('race', [a, b, c]);
    const use = new LayerUse();
    const releaseA = use.acquire(a); // a mount in progress
    const r = await sweepLayers({
      layersDir: layers,
      workspacesDir: workspaces,
      use,
      forget: () => undefined,
      // the injection point: while the sweep reads the catalog, a mount of b starts and finishes
      liveRoots: async () => {
        use.acquire(b)();
        return new Set<Digest>();
      },
    });
    assert.deepEqual(
      r.dropped.map((d) => d.root),
      [c],
    );
    assert.ok(has(layers, a) && has(layers, b));
    releaseA();
    // the next sweep: nothing holds a or b any more
    const again = await sweepLayers({
      layersDir: layers,
      workspacesDir: workspaces,
      use,
      forget: () => undefined,
      liveRoots: async () => new Set(),
    });
    assert.deepEqual(new Set(again.dropped.map((d) => d.root)), new Set([a, b]));
  });

  it('an unreadable workspace state: E_FORMAT, nothing dropped', async () => {
    const { layers, workspaces } = await layersOf('bad-state', [roots[0]!]);
    mkdirSync(join(workspaces, 'ws_bad'));
    writeFileSync(join(workspaces, 'ws_bad', 'state.json'), '{not json');
    const e = await rejectsWith(
      sweepLayers({
        layersDir: layers,
        workspacesDir: workspaces,
        use: new LayerUse(),
        forget: () => undefined,
        liveRoots: async () => new Set(),
      }),
      'E_FORMAT',
    );
    assert.match(e.hint ?? '', /state\.json/);
    assert.ok(has(layers, roots[0]!));
  });
});

describe('host sweep through the daemon: overlay and copy mounts, rm + gc', { skip: !isRoot && 'needs root (overlay mounts)' }, () => {
  let work: string;
  let home: string;
  let svc: Awc;
  let copySvc: Awc;
  const env = { AWC_SWEEP_INTERVAL_MS: '0' };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-host-sweep-'));
    home = join(work, 'home');
    // the daemon the client starts inherits this: no periodic sweep behind the test's back
    process.env.AWC_SWEEP_INTERVAL_MS = '0';
    // the chunk cache's part of the sweep: objects read whole stay chunks (the host object cache's part is below)
    process.env.AWC_OBJECT_CACHE = 'off';
    svc = await Awc.open({ home, mountDriver: 'overlay' }, { create: true, daemon: (c) => new DaemonClient(c) });
    copySvc = await Awc.open({ home, mountDriver: 'copy' });
  });
  after(async () => {
    await copySvc.close();
    await svc.close();
    cleanupMounts(home, work, env);
    delete process.env.AWC_SWEEP_INTERVAL_MS;
    delete process.env.AWC_OBJECT_CACHE;
    rmSync(work, { recursive: true, force: true });
  });

  it('drops the layer and the unique chunks of a removed snapshot; keeps shared chunks, mounted layers, copies; exports unchanged', async () => {
    const paths = pathsOf(svc.config);
    const chunkFile = (d: Digest) => join(paths.cache, digestHex(d).slice(0, 2), digestHex(d));
    const layerDir = (r: Digest) => join(paths.layers, digestHex(r));
    const shared = 'shared by both snapshots\n';
    const onlyA = 'only in the removed snapshot\n';
    const onlyB = 'only in the kept snapshot\n';
    // B first: A then dedups `shared` against B's pack, so A's own pack holds only what is A's
    const b = await svc.importSnapshot(writeTree(join(work, 'src-b'), { 'shared.txt': shared, 'b.txt': onlyB }), { name: 'keep' });
    const a = await svc.importSnapshot(writeTree(join(work, 'src-a'), { 'shared.txt': shared, 'a.txt': onlyA }));

    // A: mounted (its layer built, its chunks read into the cache), unmounted clean, removed
    const [wsA] = await svc.fork(a.id);
    const mntA = join(work, 'mnt-a');
    await svc.mount(wsA!.id, mntA);
    assert.equal(readFileSync(join(mntA, 'a.txt'), 'utf8'), onlyA);
    assert.equal(readFileSync(join(mntA, 'shared.txt'), 'utf8'), shared);
    await svc.unmount(wsA!.id);
    // B: mounted and read, and stays mounted; a copy workspace of B too
    const [wsB] = await svc.fork(b.id);
    const mntB = join(work, 'mnt-b');
    await svc.mount(wsB!.id, mntB);
    assert.equal(readFileSync(join(mntB, 'b.txt'), 'utf8'), onlyB);
    const [wsC] = await copySvc.fork(b.id);
    const mntC = join(work, 'mnt-c');
    await copySvc.mount(wsC!.id, mntC);
    writeFileSync(join(mntC, 'uncheckpointed.txt'), 'a private change of the copy workspace\n');
    for (const d of [sha(onlyA), sha(shared), sha(onlyB)]) await until(() => existsSync(chunkFile(d)), `cache file of ${d}`);
    assert.ok(existsSync(layerDir(a.root)) && existsSync(layerDir(b.root)));

    await svc.rm(wsA!.id);
    await svc.rm(a.id);
    const before = await exportAll(svc, work);
    // grace 0: the first run condemns A's pack, the second deletes it (and its blob rows)
    await svc.gc({ graceMs: 0 });
    const gc2 = await svc.gc({ graceMs: 0 });
    assert.equal(gc2.packs.deleted.count, 1, 'A had one pack of its own');

    let r = cli(home, ['gc', '--local', '--dry-run'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.dryRun, true);
    assert.deepEqual(
      r.json.layers.dropped.map((l: { root: string }) => l.root),
      [a.root],
    );
    assert.equal(r.json.chunks.dropped, 1);
    assert.ok(existsSync(layerDir(a.root)) && existsSync(chunkFile(sha(onlyA))), 'a dry run drops nothing');

    r = cli(home, ['gc', '--local'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.dryRun, false);
    assert.deepEqual(
      r.json.layers.dropped.map((l: { root: string }) => l.root),
      [a.root],
    );
    assert.equal(r.json.chunks.dropped, 1, "only A's own chunk");
    assert.equal(r.json.chunks.bytes, Buffer.byteLength(onlyA));
    assert.equal(r.json.freedBytes, r.json.chunks.bytes + r.json.layers.bytes + r.json.layers.leftovers.bytes);
    assert.ok(!existsSync(layerDir(a.root)), "A's layer is gone");
    assert.ok(!existsSync(chunkFile(sha(onlyA))), "A's own chunk is gone from the cache");
    assert.ok(existsSync(chunkFile(sha(shared))), 'a chunk B still reaches stays');
    assert.ok(existsSync(chunkFile(sha(onlyB))), "B's chunk stays");
    assert.ok(existsSync(layerDir(b.root)), 'the layer of the mounted workspace stays');

    // the mounts still read, the copy keeps its private change, every live snapshot exports the same
    assert.equal(readFileSync(join(mntB, 'shared.txt'), 'utf8'), shared);
    assert.equal(readFileSync(join(mntC, 'uncheckpointed.txt'), 'utf8'), 'a private change of the copy workspace\n');
    assert.deepEqual(await exportAll(svc, work), before);

    // text output, and the daemon's metrics
    r = cli(home, ['gc', '--local'], env, { json: false });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /this host: dropped 0 layer\(s\) .* and 0 cached chunk\(s\)/);
    const metrics = (await new DaemonClient(svc.config).call('GET', '/v1/metrics.json')) as {
      name: string;
      values: { value: number; labels: Record<string, string> }[];
    }[];
    const dropped = metrics.find((m) => m.name === 'awc_host_sweep_dropped_total')!;
    assert.equal(dropped.values.find((v) => v.labels.kind === 'layer')?.value, 1);
    assert.equal(dropped.values.find((v) => v.labels.kind === 'chunk')?.value, 1);

    // a mount of the kept snapshot after the sweep builds and reads as before
    await svc.unmount(wsB!.id);
    await svc.mount(wsB!.id, mntB);
    assert.equal(readFileSync(join(mntB, 'b.txt'), 'utf8'), onlyB);
    await svc.unmount(wsB!.id);
    await copySvc.unmount(wsC!.id, { discard: true });
  });

  it('`awc gc` on this host runs the sweep after it (its report under `local`)', async () => {
    const s = await svc.importSnapshot(writeTree(join(work, 'src-d'), { 'd.txt': 'short-lived\n' }));
    const [ws] = await svc.fork(s.id);
    const mnt = join(work, 'mnt-d');
    await svc.mount(ws!.id, mnt);
    assert.equal(readFileSync(join(mnt, 'd.txt'), 'utf8'), 'short-lived\n');
    const hex = digestHex(sha('short-lived\n'));
    await until(() => existsSync(join(pathsOf(svc.config).cache, hex.slice(0, 2), hex)), 'the cache file');
    await svc.unmount(ws!.id);
    await svc.rm(ws!.id);
    await svc.rm(s.id);
    let r = cli(home, ['gc', '--grace', '0s'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(
      r.json.local.layers.dropped.map((l: { root: string }) => l.root),
      [s.root],
      'the layer goes with the first gc (its row is gone)',
    );
    r = cli(home, ['gc', '--grace', '0s'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.local.chunks.dropped, 1, 'the chunk goes once its pack is deleted');
    r = cli(home, ['gc', '--dry-run'], env);
    assert.equal(r.json.local, null, 'a dry run of gc leaves this host alone');
  });
});

describe('host sweep of the host object cache (CACHE): through the daemon', { skip: !isRoot && 'needs root (overlay mounts)' }, () => {
  let work: string;
  let home: string;
  let svc: Awc;
  const env = { AWC_SWEEP_INTERVAL_MS: '0' };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-host-sweep-objects-'));
    home = join(work, 'home');
    process.env.AWC_SWEEP_INTERVAL_MS = '0';
    svc = await Awc.open({ home, mountDriver: 'overlay' }, { create: true, daemon: (c) => new DaemonClient(c) });
  });
  after(async () => {
    await svc.close();
    cleanupMounts(home, work, env);
    delete process.env.AWC_SWEEP_INTERVAL_MS;
    rmSync(work, { recursive: true, force: true });
  });

  it('drops the objects only a removed snapshot reached; keeps those a live one reaches; the kept snapshot reads as before', async () => {
    const objectFile = (content: string) => join(pathsOf(svc.config).objectCache.dir, shortContentName(digestHex(sha(content))));
    const shared = 'shared by both snapshots\n';
    const onlyA = 'only in the removed snapshot\n';
    const onlyB = 'only in the kept snapshot\n';
    const b = await svc.importSnapshot(writeTree(join(work, 'src-b'), { 'shared.txt': shared, 'b.txt': onlyB }), { name: 'keep' });
    const a = await svc.importSnapshot(writeTree(join(work, 'src-a'), { 'shared.txt': shared, 'a.txt': onlyA }));
    const [wsA] = await svc.fork(a.id);
    await svc.mount(wsA!.id, join(work, 'mnt-a'));
    assert.equal(readFileSync(join(work, 'mnt-a', 'a.txt'), 'utf8'), onlyA);
    assert.equal(readFileSync(join(work, 'mnt-a', 'shared.txt'), 'utf8'), shared);
    await svc.unmount(wsA!.id);
    const [wsB] = await svc.fork(b.id);
    await svc.mount(wsB!.id, join(work, 'mnt-b'));
    assert.equal(readFileSync(join(work, 'mnt-b', 'b.txt'), 'utf8'), onlyB);
    for (const c of [onlyA, shared, onlyB]) await until(() => existsSync(objectFile(c)), `CACHE file of ${JSON.stringify(c)}`);
    await svc.rm(wsA!.id);
    await svc.rm(a.id);
    await svc.gc({ graceMs: 0 });
    await svc.gc({ graceMs: 0 });
    let r = cli(home, ['gc', '--local', '--dry-run'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.objects.dropped, 1);
    assert.ok(existsSync(objectFile(onlyA)), 'a dry run drops nothing');
    r = cli(home, ['gc', '--local'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.objects.dropped, 1, "only A's own object");
    assert.equal(r.json.objects.kept, 2);
    assert.ok(r.json.objects.bytes > 0 && r.json.freedBytes >= r.json.objects.bytes);
    assert.ok(!existsSync(objectFile(onlyA)), "A's own object left CACHE");
    assert.ok(existsSync(objectFile(shared)) && existsSync(objectFile(onlyB)), 'objects B reaches stay');
    const text = cli(home, ['gc', '--local'], env, { json: false });
    assert.match(text.stdout, /dropped 0 layer\(s\) .*, 0 cached object\(s\) .* and 0 cached chunk\(s\)/);
    await svc.unmount(wsB!.id);
    await svc.mount(wsB!.id, join(work, 'mnt-b'));
    assert.equal(readFileSync(join(work, 'mnt-b', 'shared.txt'), 'utf8'), shared);
    assert.equal(readFileSync(join(work, 'mnt-b', 'b.txt'), 'utf8'), onlyB);
    await svc.unmount(wsB!.id);
  });
});

describe('HostSweeper: the periodic run, its metrics, its configuration', () => {
  it('runs every sweepIntervalMs by itself and counts each run; a failed run is counted and logged', async () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-host-sweeper-'));
    const svc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy' }, { create: true });
    const metrics = new DaemonMetrics({ defaultMetrics: false });
    const cache = new ChunkCache({ dir: join(work, 'cache'), budgetBytes: 1 << 20 });
    await cache.open();
    const sweeper = new HostSweeper({ catalog: svc.catalog, cache }, metrics, 1000);
    try {
      const logged = new Promise<Record<string, unknown>>((resolve) => sweeper.once('log', resolve));
      sweeper.start();
      // the sweeper's timer is unref'd (it never keeps a daemon alive): keep the test's loop alive meanwhile
      const keepAlive = setTimeout(() => undefined, 60_000);
      const l = await logged.finally(() => clearTimeout(keepAlive)); // the timer's first run, waited for by its event
      assert.equal(l.msg, 'host sweep');
      assert.equal(l.freedBytes, 0);
      await sweeper.stop();
      const runs = async () => (await metrics.registry.getSingleMetric('awc_host_sweeps_total')!.get()).values;
      assert.deepEqual(
        (await runs()).map((v) => [v.labels.result, v.value]),
        [['ok', 1]],
      );
      await svc.close(); // the catalog is gone: the next run fails
      const failed = new Promise<Record<string, unknown>>((resolve) => sweeper.once('log', resolve));
      await assert.rejects(sweeper.run({}));
      assert.equal((await failed).level, 'error');
      assert.ok((await runs()).some((v) => v.labels.result === 'error' && v.value === 1));
    } finally {
      await sweeper.stop();
      await svc.close().catch(() => undefined);
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('sweepIntervalMs: default 1 h, 0 turns the periodic run off, anything else out of range is E_CONFIG', () => {
    const home = join(tmpdir(), 'awc-no-such-home');
    assert.equal(loadConfig({ home }, {}).sweepIntervalMs, 3_600_000);
    assert.equal(loadConfig({ home }, { AWC_SWEEP_INTERVAL_MS: '0' }).sweepIntervalMs, 0);
    for (const bad of ['5', '-1', '1.5', 'soon', String(8 * 86_400_000)])
      assert.throws(
        () => loadConfig({ home }, { AWC_SWEEP_INTERVAL_MS: bad }),
        (e: { code?: string; message?: string }) => e.code === 'E_CONFIG' && /sweepIntervalMs/.test(e.message ?? ''),
        bad,
      );
  });
});
