/**
 * The race of docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe, driven through
 * injection points (gc's afterMark / afterCondemn hooks, the commit's beforeCommit hook; no
 * timers): a checkpoint or import that deduplicates against blobs of a snapshot gc is
 * removing ends either committed with every blob readable, or refused (E_PACK_CONDEMNED)
 * and retried, never a snapshot that references a deleted pack. Real SQLite, real
 * FsObjectStore, the copy driver.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc, type CheckpointResult } from '../../../src/service/workspace/awc.js';
import type { ImportResult } from '../../../src/service/import/import-snapshot.js';
import { cleanupMounts } from '../../helpers/cli.js';
import { assertEveryBlobStored, paused, writeTree } from '../../helpers/gc-fixtures.js';
import { listObjects } from '../../helpers/list-objects.js';

const ALL = -60_000; // cutoff a minute ahead of the database clock: every unnamed, unheld snapshot is garbage

describe('gc racing a commit that deduplicates against what gc condemns', () => {
  let work: string;
  let home: string;
  let svc: Awc;
  let n = 0;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-gc-race-'));
    home = join(work, 'home');
    svc = await Awc.open({ home, mountDriver: 'copy' });
  });
  after(async () => {
    await svc.close();
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  /** An unnamed import X (garbage for gc) whose files Y will share; returns X's pack P and Y's source. */
  async function setup(): Promise<{ pack: string; ySrc: string; yFiles: Record<string, string> }> {
    const i = n++;
    const shared = { 'f1.txt': `shared one ${i} ${Math.random()}\n`, 'f2.txt': `shared two ${i}\n`.repeat(50) };
    const before = await listObjects(svc.store, 'packs/');
    await svc.importSnapshot(writeTree(join(work, `x${i}`), shared));
    const added = [...(await listObjects(svc.store, 'packs/')).keys()].filter((k) => !before.has(k));
    assert.equal(added.length, 1);
    const yFiles = { ...shared, 'own.txt': `y's own ${i}\n` };
    return { pack: added[0]!, ySrc: writeTree(join(work, `y${i}`), yFiles), yFiles };
  }

  async function stateOf(key: string): Promise<string | undefined> {
    return (await svc.catalog.gc().listPacks()).find((p) => p.key === key)?.state;
  }

  /** Y exports file for file as its source, and every live blob is stored. */
  async function assertReadable(id: string, files: Record<string, string>): Promise<void> {
    const out = join(work, `out${n++}`);
    await svc.export(id, { dir: out });
    for (const [name, body] of Object.entries(files)) assert.equal(readFileSync(join(out, name), 'utf8'), body, name);
    await assertEveryBlobStored(svc);
  }

  it('dedup before the condemnation, commit after it: refused with E_PACK_CONDEMNED, retried, committed; P deleted later', async () => {
    const { pack, ySrc, yFiles } = await setup();
    const attempts: number[] = [];
    let y: ReturnType<typeof paused<ImportResult>> | undefined;
    await svc.gc({
      retentionMs: ALL,
      graceMs: 0,
      hooks: {
        afterMark: async () => {
          y = paused((testHooks) => svc.importSnapshot(ySrc, { name: `race-${n++}`, testHooks }), attempts);
          await y.atCommit; // Y has deduplicated against P (still live) and uploaded its own pack
        },
        afterCondemn: () => y!.release(),
      },
    });
    const res = await y!.result;
    assert.deepEqual(attempts, [0, 1], 'the first commit was refused, the retry committed');
    assert.equal(await stateOf(pack), 'condemned');
    const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
    assert.ok(r2.packs.deleted.count >= 1);
    assert.equal(await stateOf(pack), 'deleted');
    assert.equal(await svc.store.has(pack), false);
    await assertReadable(res.id, yFiles);
  });

  it('commit before the condemnation: gc condemns P anyway, the re-mark finds it live and un-condemns it', async () => {
    const { pack, ySrc, yFiles } = await setup();
    let res: ImportResult | undefined;
    await svc.gc({
      retentionMs: ALL,
      graceMs: 0,
      hooks: { afterMark: async () => void (res = await svc.importSnapshot(ySrc, { name: `race-${n}` })) },
    });
    assert.equal(await stateOf(pack), 'condemned', 'the mark did not see Y');
    const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
    assert.ok(r2.packs.uncondemned.count >= 1);
    assert.equal(await stateOf(pack), 'live');
    assert.equal(await svc.store.has(pack), true);
    await assertReadable(res!.id, yFiles);
  });

  it('dedup after the condemnation: the condemned blobs are not reused, uploaded again; P deleted later', async () => {
    const { pack, ySrc, yFiles } = await setup();
    const attempts: number[] = [];
    let res: ImportResult | undefined;
    await svc.gc({
      retentionMs: ALL,
      graceMs: 0,
      hooks: {
        afterCondemn: async () =>
          void (res = await svc.importSnapshot(ySrc, { name: `race-${n}`, testHooks: { beforeCommit: (a) => void attempts.push(a) } })),
      },
    });
    assert.deepEqual(attempts, [0], 'nothing to refuse: P was never used for dedup');
    await svc.gc({ retentionMs: ALL, graceMs: 0 });
    assert.equal(await stateOf(pack), 'deleted');
    await assertReadable(res!.id, yFiles);
  });

  it('dedup before the condemnation, commit after a second gc deleted P: refused, retried, committed', async () => {
    const { pack, ySrc, yFiles } = await setup();
    const attempts: number[] = [];
    let y: ReturnType<typeof paused<ImportResult>> | undefined;
    await svc.gc({
      retentionMs: ALL,
      graceMs: 0,
      hooks: {
        afterMark: async () => {
          y = paused((testHooks) => svc.importSnapshot(ySrc, { name: `race-${n++}`, testHooks }), attempts);
          await y.atCommit;
        },
      },
    });
    await svc.gc({ retentionMs: ALL, graceMs: 0 }); // deletes P while Y waits to commit
    assert.equal(await svc.store.has(pack), false);
    y!.release();
    const res = await y!.result;
    assert.deepEqual(attempts, [0, 1]);
    await assertReadable(res.id, yFiles);
  });

  it('a checkpoint (commitCheckpoint) that deduplicated against P is refused once gc condemned P, and retried', async () => {
    const { pack, yFiles } = await setup();
    const base = await svc.importSnapshot(writeTree(join(work, `b${n++}`), { 'base.txt': 'base\n' }), { name: `race-base-${n}` });
    const [ws] = await svc.fork(base.id);
    const dir = join(work, `mnt${n++}`);
    await svc.mount(ws!.id, dir);
    for (const [name, body] of Object.entries(yFiles)) writeFileSync(join(dir, name), body);
    const attempts: number[] = [];
    let cp: ReturnType<typeof paused<CheckpointResult>> | undefined;
    await svc.gc({
      retentionMs: ALL,
      graceMs: 0,
      hooks: {
        afterMark: async () => {
          cp = paused((testHooks) => svc.checkpoint(ws!.id, { testHooks }), attempts);
          await cp.atCommit;
        },
        afterCondemn: () => cp!.release(),
      },
    });
    const res = await cp!.result;
    assert.equal(res.changed, true);
    assert.deepEqual(attempts, [0, 1]);
    await svc.unmount(ws!.id);
    await svc.gc({ retentionMs: ALL, graceMs: 0 });
    assert.equal(await stateOf(pack), 'deleted');
    await assertReadable(res.id, { ...yFiles, 'base.txt': 'base\n' });
  });
});
