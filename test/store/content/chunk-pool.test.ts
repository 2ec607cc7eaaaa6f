import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { closeSync, linkSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { importDir } from '../../../src/host/tree/import-dir.js';
import { ChunkPool } from '../../../src/store/content/chunk-pool.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

const MiB = 1024 * 1024;

/** Random bytes with a repeated 1 MiB block (dedup inside and across files). */
function mixed(size: number, block: Buffer): Buffer {
  const out = randomBytes(size);
  for (let at = 123_457; at + block.length <= size; at += 3 * block.length) block.copy(out, at);
  return out;
}

/** A tree whose files fall on both sides of the pool's threshold and of the 4 MiB read windows. */
function makeTree(dir: string): void {
  const block = randomBytes(MiB);
  mkdirSync(join(dir, 'sub/deeper'), { recursive: true });
  for (const [name, size] of [
    ['empty', 0],
    ['tiny', 100],
    ['below-pool', 64 * 1024 - 1],
    ['at-pool', 64 * 1024],
    ['one-window', 4 * MiB],
    ['window-less-1', 4 * MiB - 1],
    ['two-windows', 8 * MiB],
    ['sub/big', 13 * MiB + 17],
    ['sub/deeper/mid', 3 * MiB],
  ] as const)
    writeFileSync(join(dir, name), mixed(size, block));
  writeFileSync(join(dir, 'sub/text'), 'compressible text '.repeat(100_000));
  linkSync(join(dir, 'sub/big'), join(dir, 'hardlink-to-big'));
  // sparse: data, a 6 MiB hole, data
  const fd = openSync(join(dir, 'sparse'), 'w');
  writeSync(fd, mixed(MiB, block), 0, MiB, 0);
  writeSync(fd, randomBytes(300_000), 0, 300_000, 7 * MiB);
  closeSync(fd);
}

async function importWith(dir: string, chunkPool: ChunkPool | null): Promise<{ root: string; objects: string[]; packs: number }> {
  const objects = join(dir, `objects-${chunkPool ? chunkPool.size : 0}`);
  const writer = new ContentWriter({ store: new FsObjectStore(objects), index: new MemoryBlobIndex(), chunkPool, packBytes: 2 * MiB });
  const res = await importDir(join(dir, 'tree'), writer);
  const packs = await writer.flush();
  return {
    root: res.root,
    packs: packs.length,
    objects: packs.flatMap((p) => p.blobs.map((b) => `${b.kind} ${b.digest} ${b.rawLength}`)).sort(),
  };
}

test('an import gives the same root digest and the same blobs inline and with 1 or 3 chunking workers', async (t) => {
  const dir = await tempDirFor(t, 'awc-chunk-pool-');
  makeTree(join(dir, 'tree'));
  const one = new ChunkPool(1);
  const three = new ChunkPool(3);
  t.after(() => Promise.all([one.close(), three.close()]));
  const inline = await importWith(dir, null);
  const a = await importWith(dir, one);
  const b = await importWith(dir, three);
  assert.equal(a.root, inline.root);
  assert.equal(b.root, inline.root);
  assert.deepEqual(a.objects, inline.objects);
  assert.deepEqual(b.objects, inline.objects);
  assert.equal(three.threads().length, 3, 'every worker took files');
  assert.ok(a.packs > 1, 'several packs');
});

test('a chunking worker that dies fails the file being read with E_INTERNAL, and the pool starts a new one', async (t) => {
  const dir = await tempDirFor(t, 'awc-chunk-pool-');
  const path = join(dir, 'big');
  writeFileSync(path, randomBytes(48 * MiB));
  const pool = new ChunkPool(1);
  t.after(() => pool.close());
  const writer = new ContentWriter({ store: new FsObjectStore(join(dir, 'objects')), index: new MemoryBlobIndex(), chunkPool: pool });
  const reading = writer.writeFile(path);
  await new Promise((r) => setTimeout(r, 5)); // the session's worker has started
  const [w] = pool.threads();
  assert.ok(w, 'the file went to a worker');
  await w.terminate();
  const err = await rejectsWith(reading, 'E_INTERNAL');
  assert.match(err.message, /chunking worker thread died/);
  const again = await writer.writeFile(path);
  const inline = await new ContentWriter({
    store: new FsObjectStore(join(dir, 'o2')),
    index: new MemoryBlobIndex(),
    chunkPool: null,
  }).writeFile(path);
  assert.deepEqual(again, inline);
});
