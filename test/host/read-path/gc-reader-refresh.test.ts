/**
 * Readers after a repack (docs/explanation/gc.md#readers-after-a-repack), on both backend
 * pairs (SQLite + directory, PostgreSQL + S3 on s3rver): a reader that found a blob's
 * location before gc repacked its pack and deleted the old one reads the bytes from the copy,
 * instead of failing on the missing pack.
 * - ContentReader (exports, the daemon's tree reads): a file read that began before the
 *   repack, its later ranged GETs planned at the old locations; real catalog, real store.
 * - ChunkFetcher (the daemon's chunk plane, with and without read-ahead): its locations were
 *   found before the repack (the index answers the first lookup from a copy taken before the
 *   repack — a fault injected in the lookup-then-read window, in addition to the real test).
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Digest } from '../../../src/core/digest.js';
import type { ChunkRef, FileEntry } from '../../../src/core/tree.js';
import { ChunkCache } from '../../../src/host/read-path/chunk-cache.js';
import { ChunkFetcher } from '../../../src/host/read-path/chunk-fetcher.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { BlobIndex } from '../../../src/store/pack/pack-types.js';
import { MERGE_MAX_BYTES } from '../../../src/store/pack/range-plan.js';
import { cleanupMounts } from '../../helpers/cli.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

const ALL = -60_000;
const MiB = 1024 * 1024;

for (const backends of ['sqlite + file', 'postgres + s3'] as const)
  describe(`readers after a repack (${backends})`, () => {
    let work: string;
    let svc: Awc;
    let n = 0;
    let db: FreshDatabase | undefined;
    let bucket: TestBucket | undefined;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-gc-reader-'));
      let env: Record<string, string | undefined> = {};
      if (backends === 'postgres + s3') {
        db = await freshDatabase();
        bucket = await freshBucket();
        env = { AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('reader') };
        Object.assign(process.env, bucket.env);
      }
      svc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy', catalog: env.AWC_CATALOG, objectStore: env.AWC_OBJECT_STORE });
    });
    after(async () => {
      await svc.close();
      cleanupMounts(join(work, 'home'), work);
      rmSync(work, { recursive: true, force: true });
      await bucket?.remove();
      await db?.drop();
    });

    /**
     * A file of `bytes` random bytes in pack P of an unnamed import X, shared by a named
     * snapshot K: after gc removes X, P's live blobs are exactly the file's chunks (X's tree,
     * root and other file are garbage), so a repack with the threshold at 100 % copies them.
     */
    async function sharedFile(bytes: number): Promise<{ data: Buffer; file: FileEntry; pack: string }> {
      const i = n++;
      const data = randomBytes(bytes);
      for (const who of ['x', 'k']) {
        mkdirSync(join(work, `${who}${i}`));
        writeFileSync(join(work, `${who}${i}`, 'f.bin'), data);
      }
      writeFileSync(join(work, `x${i}`, 'x-only.txt'), `only in X ${i}\n`); // X's tree differs from K's whatever the mtimes
      await svc.importSnapshot(join(work, `x${i}`));
      const k = await svc.importSnapshot(join(work, `k${i}`), { name: `k${i}` });
      const reader = svc.reader();
      const tree = await reader.readTree((await reader.readRoot(k.root)).tree);
      const file = tree.entries.find((e) => e.name === 'f.bin') as FileEntry;
      const pack = (await svc.catalog.blobIndex(svc.namespace).lookup([file.chunks[0]!.digest])).values().next().value!.pack;
      return { data, file, pack };
    }

    /** Repacks P (threshold 100 %) and deletes it in a second run; asserts the store lacks it after. */
    async function repackAndDelete(pack: string): Promise<void> {
      const r1 = await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 1 });
      assert.ok(r1.packs.repacked.count >= 1, 'P was repacked');
      await svc.gc({ retentionMs: ALL, graceMs: 0, repackBelow: 0 });
      assert.equal(await svc.store.has(pack), false, 'the old pack is deleted');
    }

    it('ContentReader: a file read begun before the repack finishes from the copy after the old pack is deleted', async () => {
      const { data, file, pack } = await sharedFile(2 * MERGE_MAX_BYTES + 4 * MiB); // ≥ 3 ranged GETs
      const reader = svc.reader(); // opened before the repack
      const it = reader.readFile(file)[Symbol.asyncIterator]();
      const parts: Buffer[] = [];
      const first = await it.next(); // locations of every chunk found; the first GET done, the second in flight
      assert.ok(!first.done);
      parts.push(first.value);
      await repackAndDelete(pack);
      for (let r = await it.next(); !r.done; r = await it.next()) parts.push(r.value);
      assert.ok(Buffer.concat(parts).equals(data), 'bytes correct');
      // and a new blob read through the same reader
      const one = await reader.readChunks([file.chunks.at(-1)!]);
      for await (const b of one) assert.equal(b.length, file.chunks.at(-1)!.size);
    });

    for (const readAheadBytes of [0, 8 * MiB])
      it(`ChunkFetcher (read-ahead ${readAheadBytes ? 'on' : 'off'}): chunks located before the repack are looked up again, once`, async () => {
        const { data, file, pack } = await sharedFile(3 * MiB);
        const real = svc.catalog.blobIndex(svc.namespace);
        const before = await real.lookup(file.chunks.map((c) => c.digest));
        let lookups = 0;
        const staleFirst: BlobIndex = {
          lookup: async (ds: readonly Digest[]) => (lookups++ === 0 ? new Map(ds.map((d) => [d, before.get(d)!])) : real.lookup(ds)),
        };
        await repackAndDelete(pack);
        const cache = new ChunkCache({ dir: join(work, `cache${n++}`), budgetBytes: 64 * MiB });
        await cache.open();
        const fetcher = new ChunkFetcher({ store: svc.store, cache, readAheadBytes });
        const relocated: string[] = [];
        fetcher.on('relocate', (e) => relocated.push(e.pack));
        const bufs = await fetcher.get(file.chunks as ChunkRef[], staleFirst);
        assert.ok(Buffer.concat(bufs).equals(data), 'bytes correct');
        assert.equal(fetcher.stats.relocations, file.chunks.length, 'every chunk was looked up again');
        assert.ok(relocated.every((p) => p === pack));
        await fetcher.idle();
        await cache.idle();
        // a chunk in no pack at all still fails, with E_OBJECT_NOT_FOUND, after one more lookup
        const gone = { digest: ('sha256:' + '0'.repeat(64)) as Digest, size: 1 };
        const loc = { ...before.get(file.chunks[0]!.digest)!, digest: gone.digest };
        let asked = 0;
        const once: BlobIndex = { lookup: async () => (asked++ === 0 ? new Map([[gone.digest, loc]]) : new Map()) };
        const e = await fetcher.get([gone], once).catch((x: unknown) => x);
        assert.equal(asked, 2, 'looked up twice: the stale answer, then the real one');
        assert.equal((e as { code?: string }).code, 'E_OBJECT_NOT_FOUND');
      });
  });
