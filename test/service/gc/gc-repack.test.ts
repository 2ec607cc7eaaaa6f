/**
 * gc's repack (docs/explanation/gc.md#repack) on both backend pairs — a real SQLite catalog
 * with a real FsObjectStore, and a real PostgreSQL catalog with a real S3 bucket (s3rver):
 * a live pack that is mostly garbage has its live blobs copied into a new pack, its blob rows
 * moved, and is condemned, then deleted by a later run; exports stay byte-identical; a
 * checkpoint that deduplicated against the old pack is refused and retried (injection
 * points, no timers); the threshold and the CLI.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { sha256 } from '../../../src/core/digest.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { ImportResult } from '../../../src/service/import/import-snapshot.js';
import { awc as cli, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { assertEveryBlobStored, exportAll, paused, writeTree } from '../../helpers/gc-fixtures.js';
import { listObjects } from '../../helpers/list-objects.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

/** A retention that puts the cutoff a minute ahead of the database's clock: every unnamed, unheld snapshot is outside it. */
const ALL = -60_000;

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`gc repack (${backends})`, () => {
    let work: string;
    let home: string;
    let svc: Awc;
    let n = 0;
    let env: NodeJS.ProcessEnv = {};
    let db: FreshDatabase | undefined;
    let bucket: TestBucket | undefined;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-gc-repack-'));
      home = join(work, 'home');
      if (backends === 'postgres + s3') {
        db = await freshDatabase();
        bucket = await freshBucket();
        env = { ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('repack') };
        Object.assign(process.env, bucket.env);
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

    const stateOf = async (key: string) => (await svc.catalog.gc().listPacks()).find((p) => p.key === key)?.state;
    const packOf = async (body: string) =>
      (await svc.catalog.blobIndex(svc.namespace).lookup([sha256(Buffer.from(body))])).values().next().value?.pack;

    /**
     * Pack P of an unnamed import X (garbage for gc): a small file `kept` that a named snapshot K
     * shares (the only live blob of P) and 16 KiB of random garbage (one chunk). Returns P, K and the files.
     */
    async function mostlyGarbage() {
      const i = n++;
      const kept = `kept by K ${i} ${Math.random()}\n`;
      const garbage = randomBytes(12 * 1024).toString('base64'); // 16 KiB: one chunk (below FastCDC's minimum)
      const before = await listObjects(svc.store, 'packs/');
      await svc.importSnapshot(writeTree(join(work, `x${i}`), { 'kept.txt': kept, 'garbage.txt': garbage }));
      const added = [...(await listObjects(svc.store, 'packs/')).keys()].filter((k) => !before.has(k));
      assert.equal(added.length, 1);
      const k = await svc.importSnapshot(writeTree(join(work, `k${i}`), { 'kept.txt': kept }), { name: `keep-${i}` });
      const pack = added[0]!;
      assert.equal(await packOf(kept), pack, 'K deduplicated its file against P');
      return { pack, k, kept, garbage };
    }

    it('copies the live blobs of a mostly-garbage pack into a new pack, condemns it, deletes it in a later run; exports unchanged', async () => {
      const { pack, k, kept } = await mostlyGarbage();
      const size = (await listObjects(svc.store, 'packs/')).get(pack)!;
      const exports = await exportAll(svc, work);
      const dry = await svc.gc({ dryRun: true, retentionMs: ALL, graceMs: 0 });
      assert.equal(dry.packs.repacked.count, 1, 'the dry run reports the repack');
      assert.equal(dry.packs.repacked.bytes, size);
      assert.equal(await stateOf(pack), 'live', 'the dry run changed nothing');
      assert.equal(await packOf(kept), pack);

      const r1 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.deepEqual(r1.packs.repacked, dry.packs.repacked, 'the run repacks what the dry run said');
      assert.ok(r1.packs.repacked.liveBytes < size / 2);
      assert.equal(await stateOf(pack), 'condemned', 'the old pack follows the normal states');
      assert.equal(await svc.store.has(pack), true, 'and stays readable until a later run');
      const copy = await packOf(kept);
      assert.ok(copy && copy !== pack, 'the blob row moved to the copy');
      assert.equal(await stateOf(copy), 'live');
      assert.equal(await svc.store.has(copy), true);

      const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.ok(r2.packs.deleted.count >= 1);
      assert.equal(await stateOf(pack), 'deleted');
      assert.equal(await svc.store.has(pack), false);
      assert.equal(r2.packs.repacked.count, 0, 'a copy is all live: not repacked again');
      for (const [id, hash] of await exportAll(svc, work)) assert.equal(hash, exports.get(id), `export of ${id} changed`);
      const out = join(work, `out${n++}`);
      await svc.export(k.id, { dir: out });
      assert.equal(readFileSync(join(out, 'kept.txt'), 'utf8'), kept);
      await assertEveryBlobStored(svc);
    });

    it('the threshold: a pack above it, or a threshold of 0, is not repacked; a threshold outside 0..1 is E_USAGE', async () => {
      const { pack } = await mostlyGarbage();
      const off = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.equal(off.packs.repacked.count, 0);
      assert.equal(await stateOf(pack), 'live');
      const low = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0.0001 });
      assert.equal(low.packs.repacked.count, 0, 'the live share is above 0.01 %');
      assert.equal(await stateOf(pack), 'live');
      const e = await svc.gc({ graceMs: 0, repackBelow: 1.5 }).catch((x: unknown) => x);
      assert.equal((e as { code?: string }).code, 'E_USAGE');
      const r = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.equal(r.packs.repacked.count, 1);
      assert.equal(await stateOf(pack), 'condemned');
    });

    it('race: dedup against the old pack before the repack, commit after it: refused (E_PACK_CONDEMNED), retried against the copy', async () => {
      const { pack, kept } = await mostlyGarbage();
      const yFiles = { 'kept.txt': kept, 'own.txt': `y's own ${n}\n` };
      const attempts: number[] = [];
      let y: ReturnType<typeof paused<ImportResult>> | undefined;
      const r = await svc.gc({
        retentionMs: ALL,
        graceMs: 0,
        hooks: {
          afterMark: async () => {
            y = paused(
              (testHooks) => svc.importSnapshot(writeTree(join(work, `y${n++}`), yFiles), { name: `y-${n}`, testHooks }),
              attempts,
            );
            await y.atCommit; // Y deduplicated kept.txt against P (live) and uploaded its own pack
          },
          afterRepack: () => y!.release(),
        },
      });
      assert.equal(r.packs.repacked.count, 1);
      const res = await y!.result;
      assert.deepEqual(attempts, [0, 1], 'the first commit was refused, the retry committed');
      await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.equal(await stateOf(pack), 'deleted');
      const out = join(work, `out${n++}`);
      await svc.export(res.id, { dir: out });
      for (const [name, body] of Object.entries(yFiles)) assert.equal(readFileSync(join(out, name), 'utf8'), body);
      await assertEveryBlobStored(svc);
    });

    it('race: a commit between the mark and the repack that reuses a garbage blob of the old pack: the re-mark un-condemns it', async () => {
      const { pack, kept, garbage } = await mostlyGarbage();
      const yFiles = { 'kept.txt': kept, 'garbage.txt': garbage };
      let res: ImportResult | undefined;
      const r = await svc.gc({
        retentionMs: ALL,
        graceMs: 0,
        hooks: {
          beforeRepackCommit: async () =>
            void (res = await svc.importSnapshot(writeTree(join(work, `y${n++}`), yFiles), { name: `y-${n}` })),
        },
      });
      assert.equal(r.packs.repacked.count, 1, 'the repack committed (the commit before it only touched P as live)');
      assert.equal(await stateOf(pack), 'condemned');
      assert.equal(await packOf(garbage), pack, 'the blob the mark did not see as live stays in P');
      const r2 = await svc.gc({ retentionMs: ALL, graceMs: 0 });
      assert.ok(r2.packs.uncondemned.count >= 1);
      assert.equal(await stateOf(pack), 'live', 'the re-mark saw Y: P is kept');
      assert.equal(await svc.store.has(pack), true);
      const out = join(work, `out${n++}`);
      await svc.export(res!.id, { dir: out });
      for (const [name, body] of Object.entries(yFiles)) assert.equal(readFileSync(join(out, name), 'utf8'), body);
      await assertEveryBlobStored(svc);
    });

    it('the CLI: --repack-below, the repack line and the --json report', () => {
      let r = cli(home, ['gc', '--dry-run', '--repack-below', '0'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.json.packs.repacked, { count: 0, bytes: 0, liveBytes: 0 });
      r = cli(home, ['gc', '--dry-run', '--repack-below', '150'], env);
      assert.equal(r.code, 2);
      assert.equal(errorOf(r).code, 'E_USAGE');
      r = cli(home, ['gc', '--dry-run', '--repack-below', 'half'], env);
      assert.equal(errorOf(r).code, 'E_USAGE');
      r = cli(home, ['gc', '--dry-run', '--repack-below', '50%'], env, { json: false });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /would repack \d+ pack\(s\)/);
    });
  });
