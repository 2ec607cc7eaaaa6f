/**
 * `awc fsck` (src/service/fsck/fsck.ts, docs/reference/fsck.md) on both backend pairs — a real
 * SQLite catalog with a real FsObjectStore, and a real PostgreSQL catalog with a real S3
 * bucket (s3rver): a sound store passes; a changed byte anywhere in the store is found by
 * `--read-data` every time; a missing or truncated pack, a wrong or missing blob row and a
 * corrupt chunk cache file are reported with their code and the snapshots they break;
 * `--repair` re-indexes from the packs' own indexes; a concurrent gc is never reported.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import * as lz4 from 'lz4-napi';
import type { KyselyCatalog } from '../../../src/catalog/sql/kysely-catalog.js';
import { sha256, type Digest } from '../../../src/core/digest.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { FsckReport } from '../../../src/service/fsck/fsck.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc as cli, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { gitRepo, tarHash, writeTree } from '../../helpers/gc-fixtures.js';
import { listObjects } from '../../helpers/list-objects.js';
import { ContentIndex } from '../../../src/store/content/content-index.js';
import { imageObjectKey } from '../../../src/store/content/image-object.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

/** A retention that puts the cutoff a minute ahead of the database's clock (every unnamed, unheld snapshot is outside it). */
const ALL = -60_000;

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`awc fsck (${backends})`, () => {
    let work: string;
    let home: string;
    let svc: Awc;
    let env: NodeJS.ProcessEnv = {};
    let db: FreshDatabase | undefined;
    let bucket: TestBucket | undefined;
    let s1: { id: string };
    let s2: { id: string };
    let s3: { id: string };
    const fsck = (opts: Parameters<Awc['fsck']>[0] = {}) => svc.fsck(opts);
    /** Replaces an object of the store by `body` (the store's own delete and put), returning the old bytes. */
    const replace = async (key: string, body: Buffer): Promise<Buffer> => {
      const old = await svc.store.get(key);
      await svc.store.delete(key);
      await svc.store.put(key, body);
      return old;
    };
    const restore = async (key: string, old: Buffer) => {
      await svc.store.delete(key);
      await svc.store.put(key, old);
    };
    const packOf = async (id: string): Promise<{ key: string; chunk: Digest }> => {
      const snap = await svc.getSnapshot(id);
      const reader = svc.reader();
      const root = await reader.readRoot(snap.root);
      const tree = await reader.readTree(root.tree);
      const big = tree.entries.find((e) => e.type === 'file' && e.chunks.length > 1);
      assert.ok(big && big.type === 'file');
      const loc = (await svc.catalog.blobIndex(svc.namespace).lookup([big.chunks[1]!.digest])).get(big.chunks[1]!.digest)!;
      return { key: loc.pack, chunk: loc.digest };
    };

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-fsck-'));
      home = join(work, 'home');
      if (backends === 'postgres + s3') {
        db = await freshDatabase();
        bucket = await freshBucket();
        env = { ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('fsck/') };
        Object.assign(process.env, bucket.env);
      }
      svc = await Awc.open({ home, mountDriver: 'copy', catalog: env.AWC_CATALOG, objectStore: env.AWC_OBJECT_STORE });
      s1 = await svc.importSnapshot(gitRepo(join(work, 'r1'), { 'a.txt': 'one\n', 'big.bin': randomBytes(400_000) }), { name: 's1' });
      s2 = await svc.importSnapshot(writeTree(join(work, 'r2'), { 'a.txt': 'one\n', 'b.txt': 'two\n' }), { name: 's2' });
      s3 = await svc.importSnapshot(writeTree(join(work, 'r3'), { 'big.bin': randomBytes(300_000).toString('hex') }), { name: 's3' });
    });
    after(async () => {
      await svc.close();
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
      await bucket?.remove();
      await db?.drop();
    });

    it('a sound store passes: exit 0; --read-data reads every pack; --subset a random share of them', async () => {
      const r = cli(home, ['fsck'], env);
      assert.equal(r.code, 0, r.stderr);
      const rep = r.json as FsckReport;
      assert.equal(rep.ok, true);
      assert.deepEqual(rep.problems, []);
      assert.equal(rep.checked.snapshots, 3);
      assert.equal(rep.checked.packs, 3);
      assert.equal(rep.checked.gitProofs, 1, "s1's git-index proof");
      assert.equal(rep.readData, null);
      const full = cli(home, ['fsck', '--read-data'], env);
      assert.equal(full.code, 0, full.stderr);
      assert.deepEqual({ packs: full.json.readData.packs, of: full.json.readData.of }, { packs: 3, of: 3 });
      const part = cli(home, ['fsck', '--read-data', '--subset', '34%'], env);
      assert.equal(part.code, 0, part.stderr);
      assert.deepEqual({ packs: part.json.readData.packs, of: part.json.readData.of }, { packs: 1, of: 3 });
      const text = cli(home, ['fsck'], env, { json: false });
      assert.match(
        text.stdout,
        /checked 3 snapshot\(s\), \d+ tree\(s\), \d+ blob\(s\), 3 pack\(s\), 1 git proof\(s\), 0 layer image\(s\)\nno problem found/,
      );
      assert.equal(errorOf(cli(home, ['fsck', '--subset', '10%'], env)).code, 'E_USAGE');
      assert.equal(errorOf(cli(home, ['fsck', '--read-data', '--subset', '0'], env)).code, 'E_USAGE');
    });

    it('a changed byte anywhere in the store is found by --read-data every time', async () => {
      const objects = [...(await listObjects(svc.store))].filter(([k]) => k.startsWith('packs/') || k.startsWith('gitproof/'));
      assert.ok(objects.some(([k]) => k.startsWith('gitproof/')));
      const trials: [string, number][] = [];
      for (const [key, size] of objects) {
        trials.push([key, 0], [key, size - 1], [key, Math.floor(size / 2)]);
        if (key.startsWith('packs/')) trials.push([key, size - 48 - 10], [key, size - 20]); // the index, the footer's checksum
        trials.push([key, Math.floor(Math.random() * size)]);
      }
      for (const [key, at] of trials) {
        const body = Buffer.from(await svc.store.get(key));
        body[at] ^= 1 << Math.floor(Math.random() * 8);
        const old = await replace(key, body);
        try {
          const rep = await fsck({ readData: true });
          // a git-index proof that proves less than it could is a warning (it loses nothing: git re-reads those files)
          const found = [...rep.problems, ...rep.warnings].filter((p) => p.key === key);
          assert.ok(
            rep.ok === false || found.some((w) => w.kind === 'gitproof-weaker'),
            `byte ${at} of ${key} changed, yet fsck --read-data found nothing`,
          );
          assert.ok(found.length > 0, `byte ${at} of ${key}: the problems name other objects: ${JSON.stringify(rep.problems)}`);
        } finally {
          await restore(key, old);
        }
      }
      assert.equal((await fsck({ readData: true })).ok, true, 'restored');
    });

    it('a missing pack, a truncated pack and a broken pack index: each reported with its code and the snapshots it breaks (exit 5)', async () => {
      const { key } = await packOf(s3.id);
      const old = await svc.store.get(key);
      await svc.store.delete(key);
      try {
        const r = cli(home, ['fsck'], env);
        assert.equal(r.code, 5, r.stderr);
        const p = (r.json as FsckReport).problems.find((x) => x.kind === 'pack-missing');
        assert.ok(p, JSON.stringify(r.json));
        assert.deepEqual({ code: p.code, key: p.key, snapshots: p.snapshots }, { code: 'E_OBJECT_NOT_FOUND', key, snapshots: [s3.id] });
        const text = cli(home, ['fsck'], env, { json: false });
        assert.equal(text.code, 5);
        assert.match(text.stdout, new RegExp(`E_OBJECT_NOT_FOUND pack-missing: pack ${key} .*\\[snapshots: ${s3.id}\\]`));
        await svc.store.put(key, old.subarray(0, old.length - 100));
        const t = await fsck();
        assert.deepEqual(
          t.problems.filter((x) => x.key === key).map((x) => [x.kind, x.code, x.snapshots]),
          [['pack-size', 'E_INTEGRITY', [s3.id]]],
        );
        await restore(key, Buffer.concat([old.subarray(0, old.length - 30), randomBytes(30)]));
        const f = await fsck();
        assert.deepEqual(
          f.problems.map((x) => [x.kind, x.key, x.snapshots]),
          [['pack-index', key, []]],
          'its reads go through the catalog: a broken footer breaks no snapshot, but the pack cannot be re-indexed',
        );
      } finally {
        await restore(key, old);
      }
      assert.equal((await fsck()).ok, true);
    });

    it('a blob row that disagrees with its pack, and a missing row: found (the snapshot named); --repair re-indexes from the pack', async () => {
      const { chunk } = await packOf(s1.id);
      const cat = svc.catalog as KyselyCatalog;
      const before = await tarHash(svc, s1.id, work);
      await sql`update blobs set ${sql.ref('offset')} = ${sql.ref('offset')} + 1 where digest = ${chunk}`.execute(cat.db);
      const r = await fsck();
      assert.equal(r.ok, false);
      const p = r.problems.find((x) => x.kind === 'index-mismatch');
      assert.deepEqual(
        { code: p?.code, digest: p?.digest, snapshots: p?.snapshots },
        { code: 'E_INTEGRITY', digest: chunk, snapshots: [s1.id] },
      );
      await rejectsWith(tarHash(svc, s1.id, work), 'E_INTEGRITY');
      const fixed = await fsck({ repair: true });
      assert.equal(fixed.ok, true, JSON.stringify(fixed.problems));
      assert.deepEqual(fixed.repaired, { blobRows: 1, droppedRows: 0, lostPacks: 0, cacheFiles: 0, layerImages: 0, remaining: 0 });
      assert.equal(await tarHash(svc, s1.id, work), before);

      await sql`delete from blobs where digest = ${chunk}`.execute(cat.db);
      const gone = await fsck();
      assert.deepEqual(
        gone.problems.map((x) => [x.kind, x.code, x.digest, x.snapshots]),
        [['blob-unindexed', 'E_OBJECT_NOT_FOUND', chunk, [s1.id]]],
      );
      const back = await fsck({ repair: true });
      assert.equal(back.ok, true, JSON.stringify(back.problems));
      assert.equal(back.repaired?.blobRows, 1);
      assert.equal(await tarHash(svc, s1.id, work), before);
    });

    it('--repair waits for no gc: a gc holding the lock makes it E_GC_RUNNING; a read-only fsck runs beside it', async () => {
      const gc = svc.catalog.gc();
      await gc.acquireLock('other-host:1:gc', 60_000);
      try {
        await rejectsWith(fsck({ repair: true }), 'E_GC_RUNNING');
        assert.equal((await fsck()).ok, true);
      } finally {
        await gc.releaseLock('other-host:1:gc');
      }
    });

    it('beside gc and commits: packs gc deletes and snapshots it removes meanwhile are not reported', async () => {
      const garbage = await svc.importSnapshot(writeTree(join(work, 'g'), { 'g.bin': randomBytes(200_000).toString('hex') }));
      let deleted = 0;
      let added: { id: string } | undefined;
      const r = await fsck({
        readData: true,
        hooks: {
          afterList: async () => {
            await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 }); // removes garbage, condemns its pack
            deleted = (await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 })).packs.deleted.count; // deletes it
            added = await svc.importSnapshot(writeTree(join(work, 'n'), { 'n.txt': 'new\n' }), { name: 'added-meanwhile' });
          },
        },
      });
      assert.equal(deleted, 1, "the garbage snapshot's pack was deleted while fsck ran");
      assert.equal(r.ok, true, JSON.stringify(r.problems));
      assert.ok(r.checked.snapshots >= 4, 'the garbage snapshot was listed before gc removed it');
      await assert.rejects(svc.getSnapshot(garbage.id));
      assert.ok(added);
      assert.equal((await fsck({ readData: true })).ok, true);
    });

    it('--repair after a lost pack: rows move to another pack holding the blobs (one gc repacked from), else they go and a new import heals the snapshot', async () => {
      const x2 = randomBytes(100_000);
      await svc.importSnapshot(
        writeTree(join(work, 'x'), { 'x1.bin': randomBytes(400_000).toString('base64'), 'x2.bin': x2.toString('hex') }),
      );
      const y = await svc.importSnapshot(writeTree(join(work, 'y'), { 'x2.bin': x2.toString('hex'), 'y.txt': 'y\n' }), { name: 'y' });
      const yHash = await tarHash(svc, y.id, work);
      const x2Chunks = async () => {
        const reader = svc.reader();
        const t = await reader.readTree((await reader.readRoot((await svc.getSnapshot(y.id)).root)).tree);
        const f = t.entries.find((e) => e.name === 'x2.bin');
        assert.ok(f?.type === 'file');
        return f.chunks.map((c) => c.digest);
      };
      const [first] = await x2Chunks();
      const packOfX2 = async () => (await svc.catalog.blobIndex(svc.namespace).lookup([first!])).get(first!)!.pack;
      const old = await packOfX2();
      const g = await svc.gc({ retentionMs: ALL }); // removes the unnamed snapshot: its pack is mostly garbage, so x2 is copied out
      assert.equal(g.packs.repacked.count, 1);
      const copy = await packOfX2();
      assert.notEqual(copy, old);
      await svc.store.delete(copy);
      const lost = await fsck();
      assert.deepEqual(
        lost.problems.filter((p) => p.kind === 'pack-missing').map((p) => [p.key, p.snapshots]),
        [[copy, [y.id]]],
      );
      const fixed = await fsck({ repair: true });
      assert.equal(fixed.ok, true, JSON.stringify(fixed.problems));
      assert.equal(fixed.repaired?.lostPacks, 1);
      assert.ok(fixed.repaired!.blobRows >= 1);
      assert.equal(await packOfX2(), old, 'the row names the pack the repack copied from (condemned, still there)');
      assert.equal(await tarHash(svc, y.id, work), yHash);
      assert.ok((await svc.gc({ retentionMs: ALL })).packs.uncondemned.count >= 1, 'the next gc finds it live again');

      // no other copy: the rows go with the pack; the snapshot stays broken until its content is imported again
      const before = await tarHash(svc, s2.id, work);
      const root = (await svc.getSnapshot(s2.id)).root;
      const p2 = (await svc.catalog.blobIndex(svc.namespace).lookup([root])).get(root)!.pack;
      const body = await svc.store.get(p2);
      await svc.store.delete(p2);
      const left = await fsck({ repair: true });
      assert.equal(left.ok, false);
      assert.equal(left.repaired?.lostPacks, 1);
      assert.ok(left.repaired!.droppedRows >= 2, 'the tree and the root of s2 were indexed there');
      assert.ok(
        left.problems.every((p) => p.snapshots.length === 1 && p.snapshots[0] === s2.id),
        JSON.stringify(left.problems),
      );
      const r = cli(home, ['fsck'], env);
      assert.equal(r.code, 5);
      await svc.importSnapshot(join(work, 'r2'), { name: 's2-again' }); // dedup finds nothing for the lost blobs: uploaded anew
      const healed = await fsck({ readData: true });
      assert.equal(healed.ok, true, JSON.stringify(healed.problems));
      assert.equal(await tarHash(svc, s2.id, work), before);
      assert.equal(await svc.store.has(p2), true, 'the same blobs make the same pack again');
      assert.deepEqual(await svc.store.get(p2), body);
    });

    if (backends === 'sqlite + file')
      it("this host's chunk cache: a file that does not hold its chunk is found by --read-data and dropped by --repair", async () => {
        const cache = svc.paths.cache;
        const good = Buffer.from('a good chunk\n');
        const write = (d: Digest, b: Buffer) => {
          mkdirSync(join(cache, d.slice(7, 9)), { recursive: true });
          writeFileSync(join(cache, d.slice(7, 9), d.slice(7)), b);
        };
        const bad = sha256('what the file should hold');
        write(sha256(good), good);
        write(bad, Buffer.from('something else'));
        const r = await fsck({ readData: true });
        assert.equal(r.readData?.cacheFiles, 2);
        assert.deepEqual(
          r.problems.map((p) => [p.kind, p.code, p.digest]),
          [['cache-corrupt', 'E_INTEGRITY', bad]],
        );
        assert.equal((await fsck()).ok, true, 'without --read-data the cache is not read');
        const fixed = await fsck({ readData: true, repair: true });
        assert.equal(fixed.ok, true);
        assert.equal(fixed.repaired?.cacheFiles, 1);
        assert.equal(existsSync(join(cache, bad.slice(7, 9), bad.slice(7))), false);
        assert.deepEqual(readFileSync(join(cache, sha256(good).slice(7, 9), sha256(good).slice(7))), good);
      });

    it('shared layer images: a missing, changed or foreign object of a record is image-invalid (no snapshot lost); --repair deletes the record', async () => {
      const ns = svc.namespace;
      const root = (await svc.getSnapshot(s2.id)).root;
      const put = async (body: Buffer): Promise<{ d: Digest; bytes: number }> => {
        const lz = await lz4.compress(body);
        await svc.store.put(imageObjectKey(sha256(lz)), lz);
        return { d: sha256(lz), bytes: lz.length };
      };
      const index = (r: Digest) => ContentIndex.encode({ root: r, files: 2, dirs: 1, contents: {}, hardlinks: {} });
      const record = async (imageBody: Buffer, indexBody: Buffer) => {
        const [img, ix] = [await put(imageBody), await put(indexBody)];
        await svc.catalog.deleteLayerImage(ns, root);
        await svc.catalog.recordLayerImage(ns, {
          root,
          image: img.d,
          imageBytes: img.bytes,
          index: ix.d,
          indexBytes: ix.bytes,
          builtBy: 'h',
        });
        return { image: imageObjectKey(img.d), index: imageObjectKey(ix.d) };
      };
      const images = (r: FsckReport) => r.problems.filter((p) => p.kind === 'image-invalid').map((p) => [p.code, p.key, p.snapshots]);
      const keys = await record(randomBytes(5000), index(root));
      const sound = await fsck({ readData: true });
      assert.equal(sound.ok, true, JSON.stringify(sound.problems));
      assert.equal(sound.checked.layerImages, 1);

      const old = await replace(keys.index, Buffer.from((await svc.store.get(keys.index)).map((b, i) => (i === 9 ? b ^ 4 : b))));
      assert.deepEqual(images(await fsck()), [], 'same size: only --read-data reads the bytes');
      assert.deepEqual(images(await fsck({ readData: true })), [['E_INTEGRITY', keys.index, []]]);
      await restore(keys.index, old);

      const foreign = await record(randomBytes(5000), index(sha256('another root')));
      assert.deepEqual(images(await fsck({ readData: true })), [['E_FORMAT', foreign.index, []]]);
      const cli1 = cli(home, ['fsck', '--read-data'], env);
      assert.notEqual(cli1.code, 0, 'a problem fails the command');
      assert.equal(cli1.json.unreferenced.images, 2, "the first record's objects, named by no record now");

      await svc.store.delete(foreign.image);
      assert.deepEqual(images(await fsck()), [['E_OBJECT_NOT_FOUND', foreign.image, []]]);
      const fixed = await fsck({ repair: true });
      assert.equal(fixed.repaired?.layerImages, 1);
      assert.deepEqual(images(fixed), []);
      assert.equal(
        await svc.catalog.layerImage(ns, root),
        undefined,
        'the record is gone: the next host to build the layer shares a new image',
      );
    });
  });
