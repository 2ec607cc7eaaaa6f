import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { sha256, type Digest } from '../../../src/core/digest.js';
import type { Entry } from '../../../src/core/tree.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { CountingStore } from '../../helpers/counting-store.js';
import { errorCode } from '../../helpers/assert-errors.js';
import { listObjects } from '../../helpers/list-objects.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

function tmp(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  return tempDirFor(t, 'awc-content-');
}

async function collect(it: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const b of it) parts.push(b);
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------
// ContentWriter + ContentReader

function world(dir: string, opts: { packBytes?: number; dryRun?: boolean } = {}) {
  const store = new CountingStore(new FsObjectStore(join(dir, 'objects')));
  const index = new MemoryBlobIndex();
  const writer = new ContentWriter({ store, index, ...opts });
  return { store, index, writer };
}

/** A few MB of random data with repetitive stretches (and a repeated random block). */
function mixed(): Buffer {
  // The block repeats: 1 MB is ~16 average chunks, so the chunker is back in step inside the
  // second copy and some chunks repeat whatever the random bytes (300 KB sometimes held none).
  const block = randomBytes(1_000_000);
  return Buffer.concat([
    randomBytes(1_500_000),
    Buffer.alloc(600_000, 0x20),
    block,
    Buffer.from('line of text\n'.repeat(50_000)),
    block,
    randomBytes(900_000),
  ]);
}

test('write + read round trip over FsObjectStore and MemoryBlobIndex', async (t) => {
  const dir = await tmp(t);
  const { store, index, writer } = world(dir);
  const big = mixed();
  const small = Buffer.from('hello\n');
  await writeFile(join(dir, 'big'), big);
  await writeFile(join(dir, 'small'), small);
  await writeFile(join(dir, 'empty'), '');
  const fb = await writer.writeFile(join(dir, 'big'));
  const fs = await writer.writeFile(join(dir, 'small'));
  const fe = await writer.writeFile(join(dir, 'empty'));
  assert.equal(fb.digest, sha256(big));
  assert.equal(fb.size, big.length);
  assert.ok(fb.chunks.length > 20);
  assert.equal(
    fb.chunks.reduce((a, c) => a + c.size, 0),
    big.length,
  );
  assert.deepEqual(fs, { digest: sha256(small), size: 6, chunks: [{ digest: sha256(small), size: 6 }] });
  assert.deepEqual(fe, { digest: sha256(''), size: 0, chunks: [] });
  // Repeated content inside the big file is stored once.
  assert.ok(writer.stats.newChunks < fb.chunks.length + 1);

  const base = { mode: 0o644, uid: 0, gid: 0, mtimeNs: '1' };
  const entries: Entry[] = [
    { type: 'file', name: 'big', ...base, ...fb },
    { type: 'file', name: 'small', ...base, ...fs },
    { type: 'file', name: 'empty', ...base, ...fe },
  ];
  const tree = await writer.writeTree(entries);
  const root = await writer.writeRoot({ ...base, mode: 0o755, tree });
  assert.ok(writer.sessionBlob(tree));
  assert.equal((await listObjects(store)).size, 0, 'nothing uploaded before the pack fills or flush');
  const packs = await writer.flush();
  assert.equal(packs.length, 1);
  assert.equal(writer.stats.packs, 1);
  assert.equal(writer.stats.storedBytes, packs[0].size);
  assert.equal(writer.stats.files, 3);
  assert.equal(writer.stats.bytes, big.length + 6);
  assert.deepEqual(await listObjects(store), new Map([[packs[0].key, packs[0].size]]));
  index.addPacks(packs);

  const reader = new ContentReader({ store, index });
  const r = await reader.readRoot(root);
  assert.equal(r.tree, tree);
  const tr = await reader.readTree(tree);
  assert.deepEqual(
    tr.entries.map((e) => e.name),
    ['big', 'empty', 'small'],
  );
  assert.ok((await collect(reader.readFile(fb))).equals(big));
  assert.ok((await collect(reader.readFile(fs))).equals(small));
  assert.equal((await collect(reader.readFile(fe))).length, 0);
  assert.ok((await reader.readBlob(fs.digest)).equals(small));

  // Neighbouring chunks are merged into few ranged GETs (≤ 8 MiB each).
  store.gets = 0;
  await collect(reader.readFile(fb));
  assert.ok(store.gets <= 2, `${store.gets} GETs for ${fb.chunks.length} chunks`);

  // Range reads, only the covering chunks.
  for (const [off, len] of [
    [0, 10],
    [0, big.length],
    [65_000, 300_000],
    [big.length - 5, 100],
    [big.length, 10],
    [1_234_567, 1],
    [2_000_000, 2_000_000],
  ]) {
    const got = await reader.readFileRange(fb, off, len);
    assert.ok(got.equals(big.subarray(off, Math.min(big.length, off + len))), `range ${off}+${len}`);
  }
  store.gets = 0;
  await reader.readFileRange(fb, 10, 10);
  assert.equal(store.gets, 1);
  await assert.rejects(reader.readFileRange(fb, -1, 10), (e) => errorCode(e) === 'E_USAGE');
});

test('dedup: identical files store no new chunks, across writers too', async (t) => {
  const dir = await tmp(t);
  const { store, index, writer } = world(dir);
  const data = randomBytes(3_000_000);
  await writeFile(join(dir, 'a'), data);
  await writeFile(join(dir, 'b'), data);
  const a = await writer.writeFile(join(dir, 'a'));
  const newAfterA = writer.stats.newChunks;
  const b = await writer.writeFile(join(dir, 'b'));
  assert.deepEqual(a, b);
  assert.equal(writer.stats.newChunks, newAfterA);
  assert.equal(writer.stats.chunks, a.chunks.length * 2);
  index.addPacks(await writer.flush());
  const before = await listObjects(store);

  // A second writer against the same index stores nothing new.
  const w2 = new ContentWriter({ store, index });
  const c = await w2.writeBuffer(data);
  assert.deepEqual(c, a);
  assert.equal(w2.stats.newChunks, 0);
  assert.deepEqual(await w2.flush(), []);
  assert.deepEqual(await listObjects(store), before);
  // Same content as a stream: same result.
  const w3 = new ContentWriter({ store, index });
  async function* pieces() {
    for (let o = 0; o < data.length; o += 100_003) yield data.subarray(o, o + 100_003);
  }
  assert.deepEqual(await w3.writeStream(pieces()), a);
  assert.equal(w3.stats.newChunks, 0);
});

test('small files share packs; packs are uploaded as they fill', async (t) => {
  const dir = await tmp(t);
  const { store, writer } = world(dir, { packBytes: 1 << 20 });
  for (let i = 0; i < 200; i++) await writer.writeBuffer(Buffer.from(`file number ${i}\n`));
  assert.equal((await listObjects(store)).size, 0);
  await writer.writeBuffer(randomBytes(3_500_000));
  assert.ok((await listObjects(store)).size >= 2, 'full packs were uploaded before flush');
  const packs = await writer.flush();
  assert.ok(packs.length >= 4);
  assert.equal((await listObjects(store)).size, packs.length);
  for (const p of packs) assert.ok(p.size <= (1 << 20) + 300_000);
  assert.equal(
    packs.reduce((n, p) => n + p.blobs.length, 0),
    writer.stats.newChunks,
  );
});

test('concurrent writes and uploads keep every pack', async (t) => {
  const dir = await tmp(t);
  const { store, index, writer } = world(dir, { packBytes: 512 * 1024 });
  const datas = Array.from({ length: 6 }, () => randomBytes(1_000_000));
  const files = await Promise.all(datas.map((d) => writer.writeBuffer(d)));
  const packs = await writer.flush();
  assert.equal((await listObjects(store)).size, packs.length);
  index.addPacks(packs);
  const reader = new ContentReader({ store, index });
  for (let i = 0; i < datas.length; i++) assert.ok((await collect(reader.readFile(files[i]))).equals(datas[i]));
});

test('dryRun uploads nothing but hashes, counts and keeps session trees', async (t) => {
  const dir = await tmp(t);
  const { store, index, writer } = world(dir, { dryRun: true, packBytes: 256 * 1024 });
  const data = mixed();
  const f = await writer.writeBuffer(data);
  assert.equal(f.digest, sha256(data));
  const tree = await writer.writeTree([{ type: 'file', name: 'f', mode: 0o644, uid: 0, gid: 0, mtimeNs: '0', ...f }]);
  const root = await writer.writeRoot({ mode: 0o755, uid: 0, gid: 0, mtimeNs: '0', tree });
  assert.ok(writer.stats.newChunks > 0);
  assert.deepEqual(await writer.flush(), []);
  assert.equal(writer.stats.packs, 0);
  assert.equal(writer.stats.storedBytes, 0);
  assert.equal((await listObjects(store)).size, 0);
  const reader = new ContentReader({ store, index, extra: (d) => writer.sessionBlob(d) });
  assert.equal((await reader.readRoot(root)).tree, tree);
  assert.equal((await reader.readTree(tree)).entries[0].name, 'f');
  await assert.rejects(collect(reader.readFile(f)), (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND');
});

test('a file that changes while it is read: re-read once, then E_CHANGED_DURING_READ', async (t) => {
  const dir = await tmp(t);
  for (const size of [1000, 5_000_000]) {
    const path = join(dir, `grow-${size}`);
    await writeFile(path, randomBytes(size));
    // Grows during every read.
    const always = new ContentWriter({
      store: new FsObjectStore(join(dir, 'o1')),
      index: new MemoryBlobIndex(),
      testHooks: { afterRead: (p) => appendFile(p, 'more') },
    });
    await assert.rejects(
      always.writeFile(path),
      (e) => errorCode(e) === 'E_CHANGED_DURING_READ' && (e as { retryable: boolean }).retryable,
    );
    assert.equal(always.stats.files, 0);
    // Grows during the first read only: the second read wins and sees the new content.
    const once = new ContentWriter({
      store: new FsObjectStore(join(dir, 'o2')),
      index: new MemoryBlobIndex(),
      testHooks: { afterRead: (p, attempt) => (attempt === 0 ? appendFile(p, 'tail') : undefined) },
    });
    const f = await once.writeFile(path);
    const now = await readFile(path);
    assert.equal(f.size, now.length);
    assert.equal(f.digest, sha256(now));
  }
  // Without a hook: a file truly rewritten between reads is caught by the size check too.
  const path = join(dir, 'plain');
  await writeFile(path, 'abc');
  const w = new ContentWriter({ store: new FsObjectStore(join(dir, 'o3')), index: new MemoryBlobIndex() });
  assert.equal((await w.writeFile(path)).digest, sha256('abc'));
});

test('writeFile errors: missing file, not a regular file', async (t) => {
  const dir = await tmp(t);
  const { writer } = world(dir);
  await assert.rejects(writer.writeFile(join(dir, 'nope')), (e) => errorCode(e) === 'E_SOURCE_NOT_FOUND');
  await assert.rejects(writer.writeFile(dir), (e) => errorCode(e) === 'E_UNSUPPORTED');
  execFileSync('mkfifo', [join(dir, 'fifo')]);
  await assert.rejects(writer.writeFile(join(dir, 'fifo')), (e) => errorCode(e) === 'E_UNSUPPORTED');
});

test('reader: integrity failures are refetched once, then reported; unknown blobs are E_OBJECT_NOT_FOUND', async (t) => {
  const dir = await tmp(t);
  const { store, index, writer } = world(dir);
  const data = randomBytes(600_000);
  const f = await writer.writeBuffer(data);
  const packs = await writer.flush();
  index.addPacks(packs);
  const reader = new ContentReader({ store, index });

  // A transient bad read is refetched and served.
  store.corruptFirstReads = 1;
  assert.ok((await collect(reader.readFile(f))).equals(data));
  store.corruptFirstReads = 1;
  assert.ok((await reader.readBlob(f.chunks[0].digest)).length > 0);
  // Persistent corruption is reported, never served.
  store.corruptFirstReads = 2;
  await assert.rejects(reader.readBlob(f.chunks[0].digest), (e) => errorCode(e) === 'E_INTEGRITY');
  store.corruptFirstReads = 0;
  const file = join(dir, 'objects', ...packs[0].key.split('/'));
  const bytes = await readFile(file);
  const loc = packs[0].blobs.find((b) => b.digest === f.chunks[1].digest)!;
  bytes[loc.offset + 7] ^= 0xff;
  await writeFile(file, bytes);
  await assert.rejects(collect(reader.readFile(f)), (e) => errorCode(e) === 'E_INTEGRITY');
  assert.ok((await reader.readFileRange(f, 0, f.chunks[0].size)).equals(data.subarray(0, f.chunks[0].size)));

  await assert.rejects(reader.readBlob(sha256('unknown')), (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND');
  await assert.rejects(
    collect(reader.readChunks([{ digest: sha256('unknown') as Digest, size: 7 }])),
    (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND',
  );
});

test('chunk digests are sha256 of raw bytes', async (t) => {
  const dir = await tmp(t);
  const { writer } = world(dir);
  const data = randomBytes(1_000_000);
  const f = await writer.writeBuffer(data);
  let off = 0;
  for (const c of f.chunks) {
    assert.equal(
      c.digest,
      `sha256:${createHash('sha256')
        .update(data.subarray(off, off + c.size))
        .digest('hex')}`,
    );
    off += c.size;
  }
});
