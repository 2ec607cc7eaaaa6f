/**
 * gc collects packs without a row (docs/explanation/gc.md#packs-without-a-row): an import
 * killed after its upload and before its commit leaves pack objects no catalog row names.
 * gc adopts each one older than the grace as a `condemned` row, and a later run deletes it,
 * by the rules every condemned pack follows. A writer that uploads the same bytes again and
 * commits keeps them (its commit's guard un-condemns the row), and a tombstone whose object
 * came back is adopted again. Real SQLite + directory store, and real PostgreSQL + S3 (s3rver).
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { assertStoreConsistent, runToKill } from '../../helpers/crash-check.js';
import { writeTree } from '../../helpers/gc-fixtures.js';
import { listObjects } from '../../helpers/list-objects.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

/** A retention that puts every unnamed, unheld snapshot outside it. */
const ALL = -60_000;

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`gc of packs without a row (${backends})`, () => {
    let work: string;
    let home: string;
    let env: NodeJS.ProcessEnv = { AWC_MOUNT_DRIVER: 'copy' };
    let db: FreshDatabase | undefined;
    let bucket: TestBucket | undefined;
    const open = () => Awc.open({ home, mountDriver: 'copy', catalog: env.AWC_CATALOG, objectStore: env.AWC_OBJECT_STORE });

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-gc-orphans-'));
      home = join(work, 'home');
      if (backends === 'postgres + s3') {
        db = await freshDatabase();
        bucket = await freshBucket();
        env = { ...env, ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('orphans') };
        Object.assign(process.env, bucket.env); // the S3 credentials of the in-process service
      }
    });
    after(async () => {
      cleanupMounts(home, work, env);
      rmSync(work, { recursive: true, force: true });
      await bucket?.remove();
      await db?.drop();
    });

    it('adopts the packs of a killed import once older than the grace, deletes them in a later run; a writer that commits them keeps them', async () => {
      const keep = awcOk(home, ['snapshot', 'import', writeTree(join(work, 'keep'), { 'k.txt': 'kept\n' }), '--name', 'keep'], env);
      // one file with fixed times: every import of it makes the same pack (the same key)
      const orphanSrc = writeTree(join(work, 'orphan'), { 'o.txt': 'only in a pack no row names\n' });
      for (const p of [join(orphanSrc, 'o.txt'), orphanSrc]) utimesSync(p, 1_700_000_000, 1_700_000_000);
      runToKill(home, ['snapshot', 'import', orphanSrc, '--name', 'o'], 'import.commit.before', env);

      const svc = await open();
      try {
        const rowKeys = async () => new Map((await svc.catalog.gc().listPacks()).map((p) => [p.key, p.state]));
        const stored = async () => new Set((await listObjects(svc.store, 'packs/')).keys());
        const rows0 = await rowKeys();
        const orphans = [...(await stored())].filter((k) => !rows0.has(k));
        assert.equal(orphans.length, 1, 'the killed import left one pack no row names');
        const [orphan] = orphans as [string];

        // younger than the grace: left alone
        const r0 = await svc.gc({ retentionMs: ALL, graceMs: 3_600_000, repackBelow: 0 });
        assert.equal(r0.packs.adopted.count, 0);
        assert.equal((await rowKeys()).has(orphan), false);
        const dry = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0, dryRun: true });
        assert.equal(dry.packs.adopted.count, 1, 'a dry run reports it');
        assert.equal((await rowKeys()).has(orphan), false, 'and writes nothing');

        // run 1 adopts it as condemned and deletes nothing; run 2 deletes it
        const r1 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
        assert.deepEqual([r1.packs.adopted.count, r1.packs.deleted.count], [1, 0]);
        assert.ok(r1.packs.adopted.bytes > 0);
        assert.equal((await rowKeys()).get(orphan), 'condemned');
        assert.ok((await stored()).has(orphan));
        const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
        assert.equal(r2.packs.deleted.count, 1);
        assert.equal((await rowKeys()).get(orphan), 'deleted');
        assert.equal((await stored()).has(orphan), false, 'the object is gone');

        // the same bytes uploaded again by a writer killed before its commit: the tombstone is adopted again
        runToKill(home, ['snapshot', 'import', orphanSrc, '--name', 'o'], 'import.commit.before', env);
        assert.ok((await stored()).has(orphan));
        const r3 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
        assert.equal(r3.packs.adopted.count, 1);
        assert.equal((await rowKeys()).get(orphan), 'condemned');

        // a writer that uploads it and commits keeps it: its commit un-condemns the adopted row
        const o = awcOk(home, ['snapshot', 'import', orphanSrc, '--name', 'o'], env);
        assert.equal((await rowKeys()).get(orphan), 'live');
        for (let i = 0; i < 2; i++) {
          const r = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
          assert.deepEqual([r.packs.adopted.count, r.packs.deleted.count], [0, 0], `run ${i + 4} has nothing to collect`);
        }
        const trees = await assertStoreConsistent(svc, work);
        assert.deepEqual(new Set(trees.keys()), new Set([keep.id, o.id]));
        const live = new Set([...(await rowKeys())].filter(([, s]) => s === 'live').map(([k]) => k));
        assert.deepEqual(await stored(), live, 'every pack object left has a live row');
      } finally {
        await svc.close();
      }
    });
  });
