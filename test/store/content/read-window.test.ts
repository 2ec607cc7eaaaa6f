import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import type { Digest } from '../../../src/core/digest.js';
import { AwcError } from '../../../src/core/errors.js';
import { exportDir } from '../../../src/host/tree/export-dir.js';
import { importDir } from '../../../src/host/tree/import-dir.js';
import { exportTar } from '../../../src/service/tar/export-tar.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import type { ObjectStore } from '../../../src/store/object/object-store.js';
import type { WrittenPack } from '../../../src/store/pack/pack-types.js';
import { S3ObjectStore } from '../../../src/store/s3/s3-object-store.js';
import { CountingStore } from '../../helpers/counting-store.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

/**
 * The cross-file read window of exports (src/store/content/read-window.ts) on both object stores:
 * exports through it are byte-identical to the old path, its GETs stay within its bounds
 * (counted by a wrapper around the real store), and a corrupted pack range fails the export
 * with E_INTEGRITY, leaving nothing behind.
 */

const KiB = 1024;

/** Many small files in nested directories (plus duplicates, empty files, a hardlink, a symlink and one multi-chunk file). */
function buildTree(dir: string): number {
  let files = 0;
  for (let d = 0; d < 12; d++) {
    const sub = join(dir, `pkg-${String(d).padStart(2, '0')}`, d % 3 === 0 ? 'lib/deep' : 'lib');
    mkdirSync(sub, { recursive: true });
    for (let f = 0; f < 40; f++) {
      const size = (f * 977 + d * 131) % (6 * KiB);
      const body = f % 5 === 0 ? Buffer.from(`module.exports = ${f};\n`.repeat(1 + (size >> 5))) : randomBytes(size);
      writeFileSync(join(sub, `f${f}.js`), body);
      files++;
    }
    writeFileSync(join(dir, `pkg-${String(d).padStart(2, '0')}`, 'LICENSE'), 'the same licence text in every package\n');
    files++;
  }
  mkdirSync(join(dir, 'empty-dir'));
  writeFileSync(join(dir, 'empty-file'), '');
  writeFileSync(join(dir, 'big.bin'), randomBytes(3 * 1024 * KiB));
  linkSync(join(dir, 'pkg-00', 'LICENSE'), join(dir, 'pkg-00', 'LICENSE.link'));
  symlinkSync('pkg-01/lib/f1.js', join(dir, 'link-to-f1'));
  return files + 2;
}

interface Snapshot {
  store: ObjectStore;
  index: MemoryBlobIndex;
  root: Digest;
  packs: WrittenPack[];
}

async function snapshot(src: string, store: ObjectStore): Promise<Snapshot> {
  const index = new MemoryBlobIndex();
  const w = new ContentWriter({ store, index, packBytes: 1024 * KiB });
  const { root } = await importDir(src, w);
  const packs = await w.flush();
  index.addPacks(packs);
  return { store, index, root, packs };
}

/** The root digest of a directory as imported into a throwaway store (equal roots: equal trees, bytes and attributes). */
async function rootOf(dir: string, tmp: string): Promise<Digest> {
  const w = new ContentWriter({
    store: new FsObjectStore(join(tmp, `check-${randomBytes(4).toString('hex')}`)),
    index: new MemoryBlobIndex(),
  });
  return (await importDir(dir, w)).root;
}

function sha(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

async function rejectsWith(p: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof AwcError, `expected AwcError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return true;
  });
}

describe('read window of exports', () => {
  let tmp: string;
  let src: string;
  let files: number;
  let bucket: TestBucket;
  const stores: { name: string; snap: Snapshot }[] = [];

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'awc-window-'));
    src = join(tmp, 'src');
    mkdirSync(src);
    files = buildTree(src);
    stores.push({ name: 'directory store', snap: await snapshot(src, new FsObjectStore(join(tmp, 'objects'))) });
    bucket = await freshBucket();
    const s3 = new S3ObjectStore(bucket.options('awc/'));
    stores.push({ name: 's3 store', snap: await snapshot(src, s3) });
  });

  after(async () => {
    await bucket?.remove();
    rmSync(tmp, { recursive: true, force: true });
  });

  for (const which of ['directory store', 's3 store']) {
    it(`${which}: exportDir and exportTar through the window equal the old path, byte for byte`, async () => {
      const { snap } = stores.find((s) => s.name === which)!;
      const original = await rootOf(src, tmp);
      assert.equal(snap.root, original);
      const counted = new CountingStore(snap.store);
      const out = join(tmp, `dir-${which.replace(' ', '-')}`);
      const res = await exportDir(new ContentReader({ store: counted, index: snap.index }), snap.root, out);
      assert.equal(res.files, files);
      assert.equal(await rootOf(out, tmp), original);
      // far fewer GETs than files: neighbouring files share ranged GETs
      assert.ok(counted.gets < files / 4, `${counted.gets} GETs for ${files} files`);

      const oldOut = join(tmp, `old-${which.replace(' ', '-')}`);
      const old = new CountingStore(snap.store);
      await exportDir(new ContentReader({ store: old, index: snap.index }), snap.root, oldOut, { readWindow: false });
      assert.equal(await rootOf(oldOut, tmp), original);
      assert.ok(old.gets > files / 2, `the old path: ${old.gets} GETs for ${files} files`);

      const tarNew = join(tmp, `new-${which.replace(' ', '-')}.tar`);
      const tarOld = join(tmp, `old-${which.replace(' ', '-')}.tar`);
      await exportTar(new ContentReader({ store: snap.store, index: snap.index }), snap.root, tarNew);
      await exportTar(new ContentReader({ store: snap.store, index: snap.index }), snap.root, tarOld, { readWindow: false });
      assert.equal(sha(tarNew), sha(tarOld));
    });
  }

  it('keeps its bounds: GETs in flight, span per GET, bytes held', async () => {
    const { snap } = stores[0];
    const counted = new CountingStore(snap.store);
    counted.delay = () => 3; // every GET takes a moment, so that the window fills up to its bound
    const limits = { maxMergeBytes: 64 * KiB, maxGapBytes: 4 * KiB };
    const reader = new ContentReader({ store: counted, index: snap.index });
    const opts = { maxInFlight: 3, maxBufferedBytes: 256 * KiB, maxFileBytes: 4096 * KiB, limits };
    // exportTar: one file at a time, so the window alone makes the requests concurrent
    const tar = join(tmp, 'bounded.tar');
    await exportTar(reader, snap.root, tar, { readWindow: opts });
    assert.ok(counted.maxInFlight <= 3, `at most 3 GETs at once, saw ${counted.maxInFlight}`);
    assert.ok(counted.maxInFlight >= 2, `the window runs GETs in parallel (saw at most ${counted.maxInFlight})`);
    // every GET spans at most maxMergeBytes, or is one blob that is larger on its own
    const blobs = new Set(snap.packs.flatMap((p) => p.blobs.map((b) => `${p.key}@${b.offset}+${b.storedLength}`)));
    for (const r of counted.reads) {
      if (r.length > limits.maxMergeBytes) assert.ok(blobs.has(`${r.key}@${r.offset}+${r.length}`), `a GET of ${JSON.stringify(r)}`);
    }
    assert.ok(counted.gets < files / 3, `${counted.gets} GETs for ${files} files`);
    assert.equal(sha(tar), sha(join(tmp, 'old-directory-store.tar')));
  });

  it('bounded memory: the window never holds more than maxBufferedBytes (+ one file)', async () => {
    const { snap } = stores[0];
    const { ReadWindow } = await import('../../../src/store/content/read-window.js');
    const reader = new ContentReader({ store: snap.store, index: snap.index });
    const w = new ReadWindow(reader, snap.root, { maxBufferedBytes: 40 * KiB, maxFileBytes: 8 * KiB });
    let n = 0;
    const walk = async (tree: Digest): Promise<void> => {
      for (const e of (await w.readTree(tree)).entries) {
        if (e.type === 'dir') await walk(e.tree);
        else if (e.type === 'file') {
          const parts: Buffer[] = [];
          for await (const b of w.readFile(e)) parts.push(b);
          assert.equal(createHash('sha256').update(Buffer.concat(parts)).digest('hex'), e.digest.slice(7), e.name);
          n++;
          await new Promise((r) => setImmediate(r)); // a slow consumer: the walk runs ahead as far as it may
        }
      }
    };
    await walk((await w.readRoot(snap.root)).tree);
    w.close();
    assert.equal(n, files);
    assert.ok(w.stats.peakBufferedBytes <= 48 * KiB, `held at most ${w.stats.peakBufferedBytes} bytes`);
    assert.ok(w.stats.planned > files / 2, `${w.stats.planned} files from the plan`);
  });

  for (const which of ['directory store', 's3 store']) {
    it(`${which}: a corrupted pack range fails the export with E_INTEGRITY and leaves nothing`, async () => {
      const { snap } = stores.find((s) => s.name === which)!;
      // a copy of the snapshot's packs in a store of its own, one pack with bytes flipped in its middle
      const victim = snap.packs.find((p) => p.size < 1024 * KiB * 2)!;
      let store: ObjectStore;
      const good = await snap.store.get(victim.key);
      const body = Buffer.from(good);
      body[body.length >> 2] ^= 0xff;
      if (which === 'directory store') {
        store = new FsObjectStore(join(tmp, `corrupt-${randomBytes(4).toString('hex')}`));
        for (const p of snap.packs) await store.put(p.key, p.key === victim.key ? body : await snap.store.get(p.key));
      } else {
        store = snap.store;
        await bucket.client.send(new PutObjectCommand({ Bucket: bucket.name, Key: `awc/${victim.key}`, Body: body }));
      }
      const reader = () => new ContentReader({ store, index: snap.index });
      const parent = join(tmp, `corrupt-out-${which.replace(' ', '-')}`);
      mkdirSync(parent);
      try {
        await rejectsWith(exportDir(reader(), snap.root, join(parent, 'out')), 'E_INTEGRITY');
        await rejectsWith(exportTar(reader(), snap.root, join(parent, 'out.tar')), 'E_INTEGRITY');
        assert.deepEqual(readdirSync(parent), [], 'nothing half-written');
        assert.equal(existsSync(join(parent, 'out')), false);
      } finally {
        if (store === snap.store)
          await bucket.client.send(new PutObjectCommand({ Bucket: bucket.name, Key: `awc/${victim.key}`, Body: good }));
      }
    });
  }
});
