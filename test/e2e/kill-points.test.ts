/**
 * Issue 12, "Crash safety": SIGKILL of a checkpoint, an import and a gc at every step that
 * touches storage (src/core/kill-point.ts; docs/explanation/crash-safety.md lists the points and
 * why each is safe). Each point runs the real CLI in a fresh home (the copy driver, 1 MiB packs so
 * one run uploads two packs), once on SQLite + the directory store and once on PostgreSQL + S3
 * (s3rver; every object goes up as a multipart upload of 128 KiB parts, so that
 * `object.put.during` falls after a part of a pack is up and before the object is complete),
 * until it kills itself there, then asserts: the workspace head is the old snapshot before the catalog commit and the new one
 * after it, each exporting exactly what it should hold; the next checkpoint / import / gc
 * succeeds; the store is consistent (test/helpers/crash-check.ts).
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, cleanupMounts, readTreeInfo } from '../helpers/cli.js';
import { assertStoreConsistent, exportedTree, runToKill, withHome } from '../helpers/crash-check.js';
import type { Awc } from '../../src/service/workspace/awc.js';
import { freshDatabase, type FreshDatabase } from '../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../helpers/s3.js';

const BASE_ENV = { AWC_MOUNT_DRIVER: 'copy', AWC_PACK_BYTES: String(1 << 20) };
const BASE_CONFIG = { mountDriver: 'copy' as const, packBytes: 1 << 20 };

/** Writes the files of `files` (name → bytes) under `dir`. */
function write(dir: string, files: Record<string, string | Buffer>): void {
  for (const [name, body] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), body);
  }
}

/** New, incompressible bytes: more than one 1 MiB pack. */
const twoPacks = (): Buffer => randomBytes(1_300_000);

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`kill points (${backends}): a SIGKILL at every storage step leaves the old or the new state, both readable`, () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-kill-'));
    const homes: { home: string; env: NodeJS.ProcessEnv }[] = [];
    const dbs: FreshDatabase[] = [];
    let bucket: TestBucket | undefined;
    before(async () => {
      if (backends === 'postgres + s3') {
        bucket = await freshBucket();
        Object.assign(process.env, bucket.env); // the S3 credentials of the in-process service
      }
    });
    after(async () => {
      for (const h of homes) cleanupMounts(h.home, h.home, h.env);
      cleanupMounts(join(work, 'x'), work, BASE_ENV);
      rmSync(work, { recursive: true, force: true });
      for (const db of dbs) await db.drop();
      await bucket?.remove();
    });

    /** A fresh home (on PostgreSQL + S3: its own database and key prefix) with snapshot `base` imported from a small tree. */
    async function freshHome(label: string): Promise<{ home: string; dir: string; ENV: NodeJS.ProcessEnv; CONFIG: typeof BASE_CONFIG }> {
      const slug = label.replace(/[^a-z0-9]+/gi, '_');
      const dir = join(work, slug);
      const home = join(dir, 'home');
      let ENV: NodeJS.ProcessEnv = BASE_ENV;
      let CONFIG: typeof BASE_CONFIG & { catalog?: string; objectStore?: string } = BASE_CONFIG;
      if (bucket) {
        const db = await freshDatabase();
        dbs.push(db);
        const objectStore = `${bucket.url(`${slug}/`)}&multipartThreshold=1&partSize=131072`;
        ENV = { ...BASE_ENV, ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: objectStore };
        CONFIG = { ...BASE_CONFIG, catalog: db.url, objectStore };
      }
      homes.push({ home, env: ENV });
      write(join(dir, 'base'), { 'a.txt': 'alpha\n', 'gone.txt': 'to be deleted\n', 'sub/b.txt': 'beta\n'.repeat(100) });
      // set-up in process (one Node start less per point: CI time); what is killed is always the CLI
      await withHome(home, CONFIG, (svc) => svc.importSnapshot(join(dir, 'base'), { name: 'base' }));
      return { home, dir, ENV, CONFIG };
    }

    // point → whether the head moved (the catalog transaction committed) before the kill
    const CHECKPOINT: [string, boolean][] = [
      ['checkpoint.scan.after', false],
      ['pack.upload.before#1', false],
      ['object.put.during#1', false],
      ['pack.upload.after#1', false],
      ['pack.upload.before#2', false],
      ['object.put.during#2', false],
      ['pack.upload.after#2', false],
      ['writer.flush.after', false],
      ['checkpoint.commit.before', false],
      ['catalog.commit.inside', false],
      ['checkpoint.commit.after', true],
      ['checkpoint.cache.after', true],
    ];

    for (const [point, committed] of CHECKPOINT) {
      it(`checkpoint killed at ${point}: head ${committed ? 'new' : 'old'}, both readable, the next checkpoint holds the workspace`, async () => {
        const { home, dir, ENV, CONFIG } = await freshHome(`cp-${point}`);
        const mnt = join(dir, 'mnt');
        const [forked] = await withHome(home, CONFIG, (svc) => svc.fork('base', { name: 'w' }));
        const ws = forked.id;
        awcOk(home, ['mount', ws, mnt], ENV);
        const base = readTreeInfo(mnt);
        write(mnt, { 'a.txt': 'alpha, edited\n', 'new/big.bin': twoPacks(), 'new/small.txt': 'small\n' });
        unlinkSync(join(mnt, 'gone.txt'));
        const edited = readTreeInfo(mnt);
        const old = forked.headSnapshotId;

        runToKill(home, ['checkpoint', ws], point, ENV);

        const head = await withHome(home, CONFIG, async (svc) => {
          const head = (await svc.getWorkspace(ws)).headSnapshotId;
          assert.deepEqual(await exportedTree(svc, old, dir), base, 'the old snapshot holds the base');
          if (committed) {
            assert.notEqual(head, old, 'the commit was made before the kill: the head is the new snapshot');
            assert.deepEqual(await exportedTree(svc, head, dir), edited, 'the new snapshot holds the edits');
          } else assert.equal(head, old, 'killed before the commit: the head is the old snapshot');
          await assertStoreConsistent(svc, dir);
          return head;
        });
        // the workspace works on: more edits, and the next checkpoint holds all of them
        write(mnt, { 'after.txt': 'written after the crash\n' });
        const now = readTreeInfo(mnt);
        const next = awcOk(home, ['checkpoint', ws], ENV);
        assert.equal(next.changed, true);
        assert.equal(next.parent, head);
        await withHome(home, CONFIG, async (svc) => {
          assert.deepEqual(await exportedTree(svc, next.id, dir), now, 'the next checkpoint holds the workspace');
          await assertStoreConsistent(svc, dir);
        });
        cleanupMounts(home, dir, ENV);
      });
    }

    // point → whether the snapshot row exists after the kill
    const IMPORT: [string, boolean][] = [
      ['import.scan.after', false],
      ['pack.upload.before#1', false],
      ['object.put.during#1', false],
      ['pack.upload.after#1', false],
      ['pack.upload.before#2', false],
      ['object.put.during#2', false],
      ['pack.upload.after#2', false],
      ['writer.flush.after', false],
      ['import.commit.before', false],
      ['catalog.snapshot.inside', false],
      ['import.commit.after', true],
    ];

    for (const [point, committed] of IMPORT) {
      it(`import killed at ${point}: ${committed ? 'the snapshot exists and' : 'no snapshot;'} the next import succeeds`, async () => {
        const { home, dir, ENV, CONFIG } = await freshHome(`imp-${point}`);
        const src = join(dir, 'src');
        write(src, { 'big.bin': twoPacks(), 'x/y.txt': 'why\n', 'a.txt': 'alpha\n' });
        const want = readTreeInfo(src);
        runToKill(home, ['snapshot', 'import', src, '--name', 'imp'], point, ENV);
        const found = awc(home, ['show', 'imp'], ENV);
        if (committed) assert.equal(found.code, 0, found.stderr);
        else assert.notEqual(found.code, 0, 'no snapshot was committed');
        await withHome(home, CONFIG, async (svc) => {
          if (committed) assert.deepEqual(await exportedTree(svc, found.json.id, dir), want);
          await assertStoreConsistent(svc, dir);
        });
        const again = awcOk(home, ['snapshot', 'import', src, '--name', committed ? 'imp2' : 'imp'], ENV);
        await withHome(home, CONFIG, async (svc) => {
          assert.deepEqual(await exportedTree(svc, again.id, dir), want, 'the next import holds the source');
          await assertStoreConsistent(svc, dir);
        });
        cleanupMounts(home, dir, ENV);
      });
    }

    const GC = [
      'gc.lock.after',
      'gc.leftovers.after',
      'gc.row.removed#1',
      'gc.mark.after',
      'gc.delete.begun#1',
      'gc.delete.object.after#1',
      'gc.delete.finished#1',
      'gc.condemn.after',
      'gc.adopt.after',
      'pack.upload.before#1',
      'object.put.during#1',
      'pack.upload.after#1',
      'gc.repack.commit.before',
      'gc.repack.commit.after',
      'gc.sweep.after',
    ];
    const GC_ARGS = ['gc', '--retention', '0s', '--grace', '0s'];

    for (const point of GC) {
      it(`gc killed at ${point}: every live snapshot stays readable, the next gc succeeds and finishes the work`, async () => {
        const { home, dir, ENV, CONFIG } = await freshHome(`gc-${point}`);
        // the set-up runs in process (CI time: seven Node starts less per point); the gc that is killed is the CLI's
        const imp = async (
          svc: Awc,
          name: string | undefined,
          files: Record<string, string | Buffer>,
        ): Promise<{ id: string; tree: ReturnType<typeof readTreeInfo> }> => {
          const src = join(dir, `src-${Math.random().toString(36).slice(2)}`);
          write(src, files);
          const r = await svc.importSnapshot(src, name ? { name } : {});
          return { id: r.id, tree: readTreeInfo(src) };
        };
        const { keep, live, base } = await withHome(home, CONFIG, async (svc) => {
          // condemned by a first gc: the killed run deletes their packs
          await imp(svc, undefined, { 'old.bin': randomBytes(200_000) });
          const keep = await imp(svc, 'keep', { 'k.txt': 'kept\n' });
          await svc.gc({ retentionMs: 0, graceMs: 0 });
          // garbage for the killed run: a row to remove and packs to condemn; one of them mostly garbage but for `shared`
          await imp(svc, undefined, { 'junk.bin': randomBytes(300_000) });
          await imp(svc, undefined, { 'big.bin': randomBytes(900_000), 'shared.txt': 'shared by a live snapshot\n' });
          const live = await imp(svc, 'live', { 'shared.txt': 'shared by a live snapshot\n', 'own.txt': 'own\n' });
          return { keep, live, base: (await svc.getSnapshot('base')).id };
        });
        const expect = async (): Promise<void> =>
          withHome(home, CONFIG, async (svc) => {
            assert.deepEqual(await exportedTree(svc, keep.id, dir), keep.tree);
            assert.deepEqual(await exportedTree(svc, live.id, dir), live.tree);
            assert.ok((await exportedTree(svc, base, dir)).has('a.txt'));
            await assertStoreConsistent(svc, dir);
          });

        runToKill(home, GC_ARGS, point, ENV);
        await expect();
        const next = awc(home, GC_ARGS, ENV);
        assert.equal(next.code, 0, `the next gc runs (a dead gc's lock is taken over): ${next.stderr}`);
        await expect();
        // and a run after it finds nothing of the garbage left to delete but what it condemned itself
        awcOk(home, GC_ARGS, ENV);
        await expect();
        await withHome(home, CONFIG, async (svc) => {
          const states = (await svc.catalog.gc().listPacks()).map((p) => p.state);
          assert.ok(!states.includes('deleting'), `no pack left half deleted: ${states.join(',')}`);
        });
        cleanupMounts(home, dir, ENV);
      });
    }
  });
