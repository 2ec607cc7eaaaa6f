import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { getAttributeSync } from 'fs-xattr';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

/**
 * `awc usage` (docs/explanation/design.md#economics) and `awc metrics` (docs/explanation/design.md#interfaces), through the CLI with a temporary
 * home: logical vs unique stored vs host-materialised bytes, and the daemon's Prometheus
 * counters for FUSE requests, mounts and checkpoints.
 */

const MiB = 1024 * 1024;

/** Sums the samples of one metric in a Prometheus text exposition whose labels match `labels` (all given pairs). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  let found = false;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) {
      total += Number(m[3]);
      found = true;
    }
  }
  return found ? total : NaN;
}

/** Sums a flattened `--json` metric (bare number or `[{labels, value}]`) over samples matching `labels`. */
function jsonSample(metrics: Record<string, unknown>, name: string, labels: Record<string, string> = {}): number {
  const v = metrics[name];
  if (typeof v === 'number') return v;
  if (!Array.isArray(v)) return NaN;
  return v
    .filter((s: { labels: Record<string, string> }) => Object.entries(labels).every(([k, x]) => String(s.labels[k]) === x))
    .reduce((a: number, s: { value: number }) => a + s.value, 0);
}

describe('awc usage and awc metrics', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-usage-'));
  const home = join(work, 'home');
  const fixture = join(work, 'fixture');
  let fixtureBytes = 0;
  let snap: { id: string; bytes: number };
  let ws: string[] = [];

  before(() => {
    mkdirSync(join(fixture, 'sub'), { recursive: true });
    // compressible text: stored bytes must come out well below the logical size
    for (let i = 0; i < 16; i++) {
      const text = `line ${i}: the quick brown fox jumps over the lazy dog, again and again\n`.repeat(1000);
      writeFileSync(join(fixture, i % 2 ? 'sub' : '.', `file-${i}.txt`), text);
      fixtureBytes += Buffer.byteLength(text);
    }
  });

  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('awc metrics without a daemon: exit 0 and {running: false}; it does not start one', () => {
    const r = awc(home, ['metrics']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json, { running: false });
    const h = awc(home, ['metrics'], {}, { json: false });
    assert.equal(h.code, 0, h.stderr);
    assert.match(h.stdout, /not running/);
    assert.deepEqual(awcOk(home, ['daemon', 'status']), { running: false });
  });

  test('after import and fork ×3: logical = 3 × snapshot bytes, stored is deduplicated and compressed, nothing on the host', () => {
    snap = awcOk(home, ['snapshot', 'import', fixture, '--name', 'base']);
    assert.equal(snap.bytes, fixtureBytes);
    ws = awcOk(home, ['fork', 'base', '--count', '3']).workspaces.map((w: { id: string }) => w.id);
    const u = awcOk(home, ['usage']);
    assert.equal(u.namespace, 'default');
    assert.equal(u.totals.workspaces, 3);
    assert.equal(u.totals.snapshots, 1);
    assert.equal(u.totals.logicalBytes, 3 * snap.bytes);
    assert.equal(u.totals.snapshotLogicalBytes, snap.bytes);
    assert.ok(u.totals.uniqueStoredBytes > 0, 'something is stored');
    assert.ok(
      u.totals.uniqueStoredBytes < fixtureBytes,
      `compressible fixture stores less than its size (${u.totals.uniqueStoredBytes} vs ${fixtureBytes})`,
    );
    assert.equal(u.totals.uniqueStoredBytes, u.stored.bytes);
    assert.ok(u.stored.packs >= 1 && u.stored.blobs >= 1);
    assert.ok(u.totals.dedupRatio > 3, `3 copies of a compressible tree in a fraction of its size (ratio ${u.totals.dedupRatio})`);
    assert.equal(u.totals.snapshotDedupRatio, snap.bytes / u.stored.bytes, "dedup: the snapshots' logical bytes over the stored bytes");
    assert.ok(u.totals.snapshotDedupRatio > 1, 'a compressible tree is stored in less than its size');
    assert.equal(u.host.totalBytes, 0, 'nothing materialised before any mount');
    assert.equal(u.totals.hostBytes, 0);
    assert.equal(u.totals.hostOverCopies, 0, 'no host bytes against 3 full copies');
    const text = awc(home, ['usage'], {}, { json: false }).stdout;
    assert.match(text, /unique stored .*\d\.\d\dx dedup: snapshots logical \/ stored/);
    assert.match(text, /workspaces as full copies \(3\)/);
    assert.match(text, /materialised on .*0\.0% of the full copies/);
    assert.deepEqual(
      u.snapshots.map((s: { id: string; headOf: number; logicalBytes: number; workspaceLogicalBytes: number; layerBytes: number }) => [
        s.id,
        s.headOf,
        s.logicalBytes,
        s.workspaceLogicalBytes,
        s.layerBytes,
      ]),
      [[snap.id, 3, snap.bytes, 3 * snap.bytes, 0]],
    );
    assert.deepEqual(
      u.workspaces.map((w: { id: string; logicalBytes: number; hostBytes: number; mountState: string }) => [
        w.id,
        w.logicalBytes,
        w.hostBytes,
        w.mountState,
      ]),
      ws.map((id) => [id, snap.bytes, 0, 'unmounted']),
    );
    const h = awc(home, ['usage'], {}, { json: false });
    assert.equal(h.code, 0, h.stderr);
    assert.match(h.stdout, /workspaces as full copies \(3\) +3\.\d MiB/);
    assert.match(h.stdout, /KiB|MiB/);
    assert.ok(h.stdout.includes(snap.id) && ws.every((id) => h.stdout.includes(id)), 'per-snapshot and per-workspace tables');
  });

  test('copy driver: mounting and writing 1 MiB grows the host-materialised bytes by at least 1 MiB', () => {
    const env = { AWC_MOUNT_DRIVER: 'copy' };
    const before = awcOk(home, ['usage']).host.totalBytes;
    const target = join(work, 'copy-mnt');
    const m = awcOk(home, ['mount', ws[0], target], env);
    assert.equal(m.driver, 'copy');
    const mid = awcOk(home, ['usage']);
    const w0 = mid.workspaces.find((w: { id: string }) => w.id === ws[0]);
    assert.equal(w0.mountDriver, 'copy');
    assert.ok(w0.copyBytes >= fixtureBytes, `the materialised copy is counted (${w0.copyBytes})`);
    assert.ok(w0.upperBytes < fixtureBytes, `the materialised copy is counted once, not as upper bytes too (${w0.upperBytes})`);
    writeFileSync(join(target, 'big.bin'), randomBytes(MiB));
    const after = awcOk(home, ['usage']);
    assert.ok(after.host.totalBytes - before >= MiB, `host bytes grew by ${after.host.totalBytes - before}`);
    assert.ok(after.host.totalBytes - mid.host.totalBytes >= MiB);
    assert.equal(after.host.copyBytes, after.workspaces.find((w: { id: string }) => w.id === ws[0]).copyBytes);
    // the copy mount started the daemon: it holds the host's session, and with it the lease (docs/explanation/leases.md)
    assert.equal(awcOk(home, ['daemon', 'status']).running, true, 'a copy mount starts the daemon');
    awcOk(home, ['daemon', 'stop']); // its session (and the lease) outlive it by the lease TTL
    // a checkpoint with no daemon running: the metrics report is skipped silently, quickly
    const t0 = Date.now();
    const cp = awcOk(home, ['checkpoint', ws[0]], env);
    assert.equal(cp.changed, true);
    assert.ok(Date.now() - t0 < 30_000);
    assert.deepEqual(awcOk(home, ['daemon', 'status']), { running: false }, 'the checkpoint did not start a daemon');
    const u = awcOk(home, ['usage']);
    assert.equal(u.totals.snapshots, 2);
    assert.equal(u.totals.logicalBytes, 2 * snap.bytes + cp.bytes, 'the checkpointed workspace now counts its new head');
    assert.ok(u.totals.uniqueStoredBytes >= MiB, 'the random MiB is stored');
    awcOk(home, ['unmount', ws[0], '--discard'], env);
  });

  const overlay = detectDriver('auto').driver === 'overlay';
  test(
    'overlay driver over layer directories: FUSE, mount and checkpoint metrics; sparse layers cost ~0',
    { skip: overlay ? false : 'overlay is not possible on this host (see awc doctor)' },
    () => {
      // layer directories (layerImages off), whose contents the daemon registers whole: the workers answer their LOOKUPs
      const env = { AWC_MOUNT_DRIVER: 'overlay', AWC_LAYER_IMAGES: 'off' };
      awcOk(home, ['daemon', 'stop']);
      const target = join(work, 'overlay-mnt');
      assert.equal(awcOk(home, ['mount', ws[1], target], env).driver, 'overlay');
      let read = 0;
      for (const d of [target, join(target, 'sub')])
        for (const n of readdirSync(d)) if (n.endsWith('.txt')) read += readFileSync(join(d, n)).length;
      assert.equal(read, fixtureBytes);

      const text = awc(home, ['metrics'], {}, { json: false });
      assert.equal(text.code, 0, text.stderr);
      assert.ok(sample(text.stdout, 'awc_fuse_operations_total') > 0, 'FUSE requests are counted');
      assert.ok(sample(text.stdout, 'awc_fuse_operations_total', { op: 'read' }) > 0);
      // LOOKUPs are answered by the FUSE reader workers: counted all the same
      assert.ok(sample(text.stdout, 'awc_fuse_operations_total', { op: 'lookup' }) >= 16, 'worker-side LOOKUPs are counted');
      assert.ok(sample(text.stdout, 'awc_fuse_worker_operations_total', { op: 'lookup' }) >= 16, 'and shown as answered by the workers');
      // every placeholder: a short redirect (≤ 24 bytes) that fits in the inode, so no block at all
      const layers = join(home, 'host', 'layers');
      let placeholders = 0;
      const walk = (d: string): void => {
        for (const n of readdirSync(d)) {
          const p = join(d, n);
          const st = lstatSync(p);
          if (st.isDirectory()) walk(p);
          else if (st.isFile() && st.size > 0) {
            placeholders++;
            const redirect = getAttributeSync(p, 'trusted.overlay.redirect').toString();
            assert.match(redirect, /^\/[A-Za-z0-9_-]{23}$/, p);
            assert.equal(st.blocks, 0, `${p}: ${st.blocks} blocks allocated (an xattr block?)`);
          }
        }
      };
      for (const l of readdirSync(layers)) walk(join(layers, l, 'tree'));
      assert.ok(placeholders >= 16, `${placeholders} placeholders`);
      assert.ok(sample(text.stdout, 'awc_mount_operations_total', { op: 'mount' }) >= 1);
      assert.equal(sample(text.stdout, 'awc_mounted_workspaces'), 1);
      assert.ok(sample(text.stdout, 'awc_content_objects') >= 16);
      assert.ok(sample(text.stdout, 'awc_process_resident_memory_bytes') > 0, 'default process metrics with the awc_ prefix');
      for (const name of ['awc_backend_reads_total', 'awc_cache_hits_total', 'awc_singleflight_joins_total', 'awc_cache_budget_bytes'])
        assert.ok(text.stdout.includes(`# TYPE ${name} `), name);

      // writes land in the upper; a checkpoint (run by the CLI) is reported to the daemon
      writeFileSync(join(target, 'new.bin'), randomBytes(256 * 1024));
      const cp = awcOk(home, ['checkpoint', ws[1]], env);
      assert.equal(cp.changed, true);
      // a copy-driver checkpoint is reported too, while the daemon runs
      const copyTarget = join(work, 'copy-mnt-2');
      awcOk(home, ['mount', ws[2], copyTarget], { AWC_MOUNT_DRIVER: 'copy' });
      writeFileSync(join(copyTarget, 'x.txt'), 'changed\n');
      awcOk(home, ['checkpoint', ws[2]], { AWC_MOUNT_DRIVER: 'copy' });

      const j = awcOk(home, ['metrics']);
      assert.equal(j.running, true);
      const m = j.metrics as Record<string, unknown>;
      assert.ok(jsonSample(m, 'awc_fuse_operations_total') > 0);
      assert.ok(jsonSample(m, 'awc_mount_operations_total', { op: 'mount', driver: 'overlay' }) >= 1);
      assert.equal(jsonSample(m, 'awc_checkpoints_total', { driver: 'overlay' }), 1);
      assert.equal(jsonSample(m, 'awc_checkpoints_total', { driver: 'copy' }), 1);
      assert.ok(jsonSample(m, 'awc_checkpoint_bytes_total') >= 256 * 1024);
      assert.equal(m.awc_checkpoint_duration_seconds_count, 2);
      assert.equal(typeof m.awc_checkpoint_duration_seconds_sum, 'number');
      assert.equal(m.awc_mounted_workspaces, 1);
      assert.ok((m.awc_process_resident_memory_bytes as number) > 0);

      const u = awcOk(home, ['usage']);
      const w1 = u.workspaces.find((w: { id: string }) => w.id === ws[1]);
      assert.equal(w1.mountDriver, 'overlay');
      assert.ok(w1.upperBytes >= 256 * 1024, `the upper holds the written file (${w1.upperBytes})`);
      const layer = u.snapshots.find((s: { id: string }) => s.id === snap.id).layerBytes;
      assert.ok(
        layer > 0 && layer < fixtureBytes / 2,
        `the layer's placeholders are sparse (${layer} allocated for ${fixtureBytes} logical)`,
      );

      awcOk(home, ['unmount', ws[1], '--discard'], env);
      awcOk(home, ['unmount', ws[2], '--discard'], { AWC_MOUNT_DRIVER: 'copy' });
      const end = awcOk(home, ['metrics']).metrics as Record<string, unknown>;
      assert.equal(jsonSample(end, 'awc_mount_operations_total', { op: 'unmount', driver: 'overlay' }), 1);
      assert.equal(end.awc_mounted_workspaces, 0);
    },
  );
});
