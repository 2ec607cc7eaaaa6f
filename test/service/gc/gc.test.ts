/**
 * `awc gc` (src/service/gc/gc.ts, docs/explanation/gc.md) on both backend pairs — a real SQLite
 * catalog with a real FsObjectStore, and a real PostgreSQL catalog with a real S3 bucket
 * (s3rver): what survives, what goes and when, --dry-run changes nothing, exports are
 * byte-identical after gc, the fleet-wide lock.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { KyselyCatalog } from '../../../src/catalog/sql/kysely-catalog.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc as cli, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { assertEveryBlobStored, exportAll, gitRepo, writeTree } from '../../helpers/gc-fixtures.js';
import { listObjects } from '../../helpers/list-objects.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

/** A retention that puts the cutoff a minute ahead of the database's clock: every unnamed, unheld snapshot is outside it. */
const ALL = -60_000;
// The first two tests count condemnations and deletions of whole packs: repacking (its own tests, test/service/gc/gc-repack.test.ts) is off there.

async function bucketHash(svc: Awc): Promise<string> {
  const h = createHash('sha256');
  const objs = [...(await listObjects(svc.store))].sort(([a], [b]) => (a < b ? -1 : 1));
  for (const [k] of objs) h.update(k).update(await svc.store.get(k));
  return h.digest('hex');
}

/** Every catalog table's rows in a fixed order, hashed: equal hashes mean no row changed (any dialect). */
async function catalogHash(svc: Awc): Promise<string> {
  const db = (svc.catalog as KyselyCatalog).db;
  const { sql } = await import('kysely');
  const h = createHash('sha256');
  for (const t of ['namespaces', 'packs', 'blobs', 'snapshots', 'workspaces', 'gc_lock']) {
    const rows = (await sql<Record<string, unknown>>`select * from ${sql.table(t)}`.execute(db)).rows;
    h.update(t).update(JSON.stringify(rows.map((r) => JSON.stringify(r, Object.keys(r).sort())).sort()));
  }
  return h.digest('hex');
}

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`awc gc (${backends})`, () => {
    let work: string;
    let home: string;
    let svc: Awc;
    let n = 0;
    /** The backend URLs of this run, as the CLI's environment. */
    let env: NodeJS.ProcessEnv = {};
    let db: FreshDatabase | undefined;
    let bucket: TestBucket | undefined;
    const src = (files: Record<string, string>) => writeTree(join(work, `src${n++}`), files);

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-gc-'));
      home = join(work, 'home');
      if (backends === 'postgres + s3') {
        db = await freshDatabase();
        bucket = await freshBucket();
        env = { ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('gc') };
        Object.assign(process.env, bucket.env); // the S3 credentials of the in-process service
      }
      svc = await Awc.open({ home, mountDriver: 'copy', catalog: env.AWC_CATALOG, objectStore: env.AWC_OBJECT_STORE });
    });
    after(async () => {
      await svc.close();
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
      await bucket?.remove();
      await db?.drop();
    });

    it('keeps what live roots reach, condemns the rest, deletes it only in a later run past the grace; exports stay byte-identical', async () => {
      const keep = await svc.importSnapshot(src({ 'a.txt': 'kept by name\n', 'shared.txt': 'shared\n' }), { name: 'gc-keep' });
      const forked = await svc.importSnapshot(src({ 'b.txt': 'kept by a workspace\n' }));
      const [ws] = await svc.fork(forked.id);
      const dir = join(work, 'mnt');
      await svc.mount(ws!.id, dir);
      writeFileSync(join(dir, 'c.txt'), 'checkpointed\n');
      const c1 = await svc.checkpoint(ws!.id);
      writeFileSync(join(dir, 'd.txt'), 'checkpointed later\n');
      const c2 = await svc.checkpoint(ws!.id);
      await svc.unmount(ws!.id);
      const garbage = await svc.importSnapshot(src({ 'g.txt': 'garbage only\n', 'shared.txt': 'shared\n' }));
      const before = await exportAll(svc, work);
      const packsBefore = await listObjects(svc.store, 'packs/');

      // run 1: garbage's row and c1 (an unnamed intermediate checkpoint) go; the pack only garbage used is
      // condemned (c1's pack keeps c.txt, which c2 still has), nothing is deleted
      const r1 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.deepEqual(new Set(r1.snapshots.removed), new Set([garbage.id, c1.id]));
      assert.equal(r1.packs.deleted.count, 0, 'nothing is deleted in the run that condemns');
      assert.equal(r1.packs.condemned.count, 1, 'the pack only garbage used');
      assert.deepEqual(await listObjects(svc.store, 'packs/'), packsBefore);
      assert.equal((await svc.getSnapshot(c2.id)).parentId, forked.id, 'c2 re-parented past the removed c1');

      // run 2: past the grace (0), the re-mark still finds them unreachable: deleted
      const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.equal(r2.packs.deleted.count, 1);
      assert.ok(r2.packs.deleted.bytes > 0);
      const packsAfter = await listObjects(svc.store, 'packs/');
      assert.equal(packsAfter.size, packsBefore.size - 1);
      const live = await assertEveryBlobStored(svc);
      assert.deepEqual(new Set(packsAfter.keys()), live, 'every pack left holds a live blob');

      for (const [id, hash] of await exportAll(svc, work)) assert.equal(hash, before.get(id), `export of ${id} changed`);
      assert.deepEqual(new Set((await svc.listSnapshots()).map((s) => s.id)), new Set([keep.id, forked.id, c2.id]));
      // a third run has nothing left to do
      const r3 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.deepEqual([r3.snapshots.removed.length, r3.packs.condemned.count, r3.packs.deleted.count], [0, 0, 0]);
    });

    it('a condemned pack is not deleted before the grace period has passed (by the database clock)', async () => {
      const g = await svc.importSnapshot(src({ 'x.txt': `grace ${Math.random()}\n` }));
      const r1 = await svc.gc({ retentionMs: ALL, graceMs: 3_600_000, repackBelow: 0 });
      assert.ok(r1.snapshots.removed.includes(g.id));
      assert.equal(r1.packs.condemned.count, 1);
      const r2 = await svc.gc({ retentionMs: ALL, graceMs: 3_600_000, repackBelow: 0 });
      assert.equal(r2.packs.deleted.count, 0, 'condemned less than an hour ago');
      const r3 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.equal(r3.packs.deleted.count, 1);
    });

    it('the retention window keeps fresh unnamed snapshots; heads, bases and layer snapshots are always kept', async () => {
      const fresh = await svc.importSnapshot(src({ 'f.txt': 'fresh\n' }));
      const r = await svc.gc({ graceMs: 0 }); // default retention: 7 days
      assert.ok(!r.snapshots.removed.includes(fresh.id));
      const layer = await svc.importSnapshot(src({ 'l.txt': 'layer\n' }));
      const [w] = await svc.fork(fresh.id);
      await svc.catalog.setLayerSnapshot(w!.id, layer.id);
      const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.ok(!r2.snapshots.removed.includes(fresh.id), 'head and base');
      assert.ok(!r2.snapshots.removed.includes(layer.id), 'layer snapshot');
      await svc.rm(w!.id);
    });

    it('--dry-run changes nothing (catalog and bucket byte-identical) and reports what the run then does', async () => {
      const a = await svc.importSnapshot(src({ 'dry.txt': `dry ${Math.random()}\n` }));
      await svc.gc({ retentionMs: ALL, graceMs: 0 }); // condemns a's pack: the dry run has a deletion to report
      const d2 = await svc.importSnapshot(src({ 'dry2.txt': `dry2 ${Math.random()}\n` })); // and a removal and a condemnation
      const sqlite = backends === 'sqlite + file';
      if (sqlite) {
        const { sql } = await import('kysely');
        await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute((svc.catalog as KyselyCatalog).db);
      }
      const files = ['catalog.sqlite', 'catalog.sqlite-wal'].map((f) => join(home, f));
      const hashFiles = () => (sqlite ? files.map((f) => createHash('sha256').update(readFileSync(f)).digest('hex')) : []);
      const catBefore = hashFiles();
      const rowsBefore = await catalogHash(svc);
      const bucketBefore = await bucketHash(svc);
      const dry = await svc.gc({ dryRun: true, retentionMs: ALL, graceMs: 0 });
      assert.deepEqual(hashFiles(), catBefore, 'catalog files byte-identical');
      assert.equal(await catalogHash(svc), rowsBefore, 'catalog rows unchanged');
      assert.equal(await bucketHash(svc), bucketBefore, 'bucket byte-identical');
      assert.equal(dry.dryRun, true);
      assert.ok(dry.snapshots.removed.includes(d2.id));
      assert.ok(dry.packs.condemned.count >= 1);
      assert.ok(dry.packs.deleted.count >= 1);
      const real = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.deepEqual({ ...real, dryRun: true, incomplete: dry.incomplete }, dry, 'the real run does what the dry run said');
      await assertEveryBlobStored(svc);
      void a;
    });

    it('removes the git-index proofs of removed snapshots once past the grace; keeps those of live ones; a dry run only counts', async () => {
      const gone = await svc.importSnapshot(gitRepo(join(work, `git${n++}`), { 'a.txt': 'unnamed\n' }));
      const kept = await svc.importSnapshot(gitRepo(join(work, `git${n++}`), { 'a.txt': 'named\n' }), { name: 'gc-git-kept' });
      const proofs = async () => [...(await listObjects(svc.store, 'gitproof/')).keys()].sort();
      const hex = (root: string) => root.slice(7);
      assert.deepEqual((await proofs()).filter((k) => k.endsWith(hex(gone.root)) || k.endsWith(hex(kept.root))).length, 2);
      const dry = await svc.gc({ dryRun: true, retentionMs: ALL, graceMs: 0 });
      assert.ok(dry.gitProofs.removed >= 1);
      assert.ok(
        (await proofs()).some((k) => k.endsWith(hex(gone.root))),
        'a dry run removes nothing',
      );
      const young = await svc.gc({ retentionMs: ALL, repackBelow: 0 }); // removes the snapshot; its proof is younger than 24 h
      assert.ok(young.snapshots.removed.includes(gone.id));
      assert.ok(
        (await proofs()).some((k) => k.endsWith(hex(gone.root))),
        'kept within the grace',
      );
      const r = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.ok(r.gitProofs.removed >= 1);
      const left = await proofs();
      assert.equal(
        left.some((k) => k.endsWith(hex(gone.root))),
        false,
        'the proof of the removed snapshot is gone',
      );
      assert.ok(
        left.some((k) => k.endsWith(hex(kept.root))),
        'the proof of a live snapshot stays',
      );
    });

    it("one gc at a time: a second gc fails with E_GC_RUNNING; a dead gc's lock expires; a gc that lost its lock stops", async () => {
      const gcat = svc.catalog.gc();
      await gcat.acquireLock('other-host:1:live', 60_000);
      const e = await rejectsWith(svc.gc({ graceMs: 0 }), 'E_GC_RUNNING');
      assert.equal(e.details?.owner, 'other-host:1:live');
      assert.equal(e.retryable, true);
      await gcat.releaseLock('other-host:1:live');

      await gcat.acquireLock('dead-host:1:dead', 0); // expires at once by the database clock
      await svc.gc({ graceMs: 0 });

      const victim = await svc.importSnapshot(src({ 'v.txt': `lost ${Math.random()}\n` }));
      const lost = await rejectsWith(
        svc.gc({
          retentionMs: ALL,
          graceMs: 0,
          hooks: {
            afterMark: async () => {
              // this gc stalled: its lock expired and another gc took it
              await (svc.catalog as KyselyCatalog).db.deleteFrom('gc_lock').execute();
              await gcat.acquireLock('thief:1:x', 60_000);
            },
          },
        }),
        'E_GC_LOCK_LOST',
      );
      assert.match(lost.message, /no longer holds/);
      const states = await gcat.listPacks();
      assert.ok(
        states.every((p) => p.state === 'live' || p.state === 'deleted'),
        'nothing condemned after the lock was lost',
      );
      await gcat.releaseLock('thief:1:x');
      void victim;
    });

    it('the CLI: --json report, --dry-run, a bad duration, E_GC_RUNNING', async () => {
      let r = cli(home, ['gc', '--dry-run'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.json.dryRun, true);
      assert.equal(typeof r.json.packs.deleted.bytes, 'number');
      r = cli(home, ['gc', '--grace', 'soon'], env);
      assert.equal(r.code, 2);
      assert.equal(errorOf(r).code, 'E_USAGE');
      await svc.catalog.gc().acquireLock('someone:1:y', 60_000);
      r = cli(home, ['gc'], env);
      assert.equal(r.code, 4);
      assert.equal(errorOf(r).code, 'E_GC_RUNNING');
      await svc.catalog.gc().releaseLock('someone:1:y');
      r = cli(home, ['gc', '--grace', '0s'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.json.dryRun, false);
      r = cli(home, ['gc'], env, { json: false });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /live snapshot\(s\)/);
    });
  });
