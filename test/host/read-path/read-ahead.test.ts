import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Digest } from '../../../src/core/digest.js';
import {
  MiB,
  code,
  tmp,
  fixture,
  shuffled,
  diskBytes,
  readWhole,
  aheadStack,
  expectedAheadReads,
  inPackOrder,
} from '../../helpers/read-path.js';

test('read-ahead: a cold sequential read of N neighbouring small files costs the backend reads the pack layout predicts, far fewer than N', async (t) => {
  const dir = await tmp(t);
  const N = 150;
  const fx = await fixture(dir, { count: N, packBytes: 8 * MiB, sizes: (i) => 1000 + ((i * 1543) % 9000) });
  assert.equal(fx.packs.length, 1);
  const pack = fx.packs[0];
  const files = inPackOrder(fx);
  assert.ok(
    files.every((f) => f.fc.chunks.length === 1),
    'small files: one chunk each',
  );
  // Whichever of a pack's first window and its index comes back first, the reads are the same.
  const tail = (offset: number, length: number) => offset + length >= pack.size;
  const orders = {
    'as they come': undefined,
    'index late': (_k: string, offset: number, length: number) => (tail(offset, length) ? 25 : 0),
    'window late': (_k: string, offset: number, length: number) => (tail(offset, length) ? 0 : 25),
  };
  for (const [min, max, order] of [
    [64 * 1024, 64 * 1024, 'as they come'], // fixed windows
    [16 * 1024, 128 * 1024, 'as they come'], // windows doubling from 16 KiB to 128 KiB
    [64 * 1024, 64 * 1024, 'index late'],
    [64 * 1024, 64 * 1024, 'window late'],
    [16 * 1024, 128 * 1024, 'index late'],
  ] as const) {
    fx.store.gets = 0;
    fx.store.reads = [];
    fx.store.delay = orders[order];
    const { cache, fetcher, source } = await aheadStack(fx, join(dir, `cache-${min}-${max}-${order}`), {
      readAheadBytes: max,
      readAheadMinBytes: min,
    });
    let misses = 0;
    for (const f of files) {
      const r = source.read(f.hex, 0, f.fc.size);
      if (r instanceof Promise) misses++;
      assert.ok((await r).equals(f.data));
    }
    await fetcher.idle();
    const want = expectedAheadReads(pack, min, max);
    t.diagnostic(
      `${N} files, pack ${pack.size} B, windows ${min}..${max} B, ${order}: ${fx.store.gets} backend reads (${want.windows} windows, ${want.async} of them started in the background, + ${want.indexReads} index), ${misses} reads not served synchronously`,
    );
    assert.equal(fetcher.stats.packIndexReads, want.indexReads);
    assert.equal(fx.store.gets, want.windows + want.indexReads);
    assert.equal(fetcher.stats.backendReads, fx.store.gets);
    assert.ok(fx.store.gets * 5 < N, `${fx.store.gets} reads for ${N} files`);
    // every window after the first was started in the background, by a reader half way through the one before
    assert.equal(fetcher.stats.readAheadAsync, want.async);
    assert.ok(want.async >= want.windows / 2);
    // no byte of the pack's data area was read twice, the tail at most once more
    const dataEnd = Math.max(...pack.blobs.map((b) => b.offset + b.storedLength));
    const dataReads = fx.store.reads.filter((r) => r.offset < dataEnd && r.length !== pack.size - r.offset);
    const covered = dataReads.reduce((n, r) => n + Math.min(r.bytes, dataEnd - r.offset), 0);
    assert.ok(covered <= dataEnd + 64 * 1024, `read ${covered} B of a ${dataEnd} B data area`);
    assert.ok(misses < N / 3, `${misses} of ${N} reads were not served synchronously`);
    // every chunk that was read is on disk now; nothing was left in memory unused
    assert.equal(cache.count, N);
    assert.equal(cache.memoryCount, 0);
    assert.equal(cache.stats.readAheadWasted, 0);
  }
});

test('read-ahead: requests past the middle that wait for an index that cannot be read are served from the window already read, with no read of their own', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 60, packBytes: 8 * MiB, sizes: (i) => 1500 + ((i * 977) % 3000) });
  const pack = fx.packs[0];
  const tail = (offset: number, length: number) => offset + length >= pack.size;
  fx.store.delay = (_k, offset, length) => (tail(offset, length) ? 20 : 0);
  fx.store.fail = (_k, offset, length) => tail(offset, length);
  const indexErrors: unknown[] = [];
  const { fetcher, source } = await aheadStack(fx, join(dir, 'cache'), { readAheadBytes: 64 * 1024, readAheadMinBytes: 64 * 1024 });
  fetcher.on('pack-index-error', (e) => indexErrors.push(e));
  const files = inPackOrder(fx);
  const first = fx.index.get(files[0].fc.chunks[0].digest)!;
  // the files wholly inside the first window [first blob, +64 KiB), half of them past its middle
  const inFirst = files.filter((f) => {
    const loc = fx.index.get(f.fc.chunks[0].digest)!;
    return loc.offset + loc.storedLength <= first.offset + 64 * 1024;
  });
  assert.ok(inFirst.length >= 8, `${inFirst.length} files in the first window`);
  // one reader starts the window; once its bytes are here the others join it, at once (those
  // past the middle wait for the index, whose read fails 20 ms later)
  assert.ok((await source.read(inFirst[0].hex, 0, inFirst[0].fc.size)).equals(inFirst[0].data));
  const rest = await Promise.all(inFirst.slice(1).map((f) => source.read(f.hex, 0, f.fc.size)));
  rest.forEach((b, i) => assert.ok(b.equals(inFirst[i + 1].data)));
  await fetcher.idle();
  assert.equal(indexErrors.length, 1, 'the index could not be read');
  assert.equal(fx.store.gets, 2, 'the window, and the failed read of the tail: nothing read again');
  // the rest is still read correctly, without read-ahead in this pack for now
  for (const f of files) assert.ok((await source.read(f.hex, 0, f.fc.size)).equals(f.data));
});

test('read-ahead: a pack smaller than the window is read once, its index taken from the same read', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 30, packBytes: 8 * MiB, sizes: (i) => 2000 + i * 311 });
  const { cache, fetcher, source } = await aheadStack(fx, join(dir, 'cache'), { readAheadBytes: 8 * MiB });
  const files = inPackOrder(fx);
  assert.ok((await source.read(files[0].hex, 0, files[0].fc.size)).equals(files[0].data));
  await fetcher.idle();
  assert.equal(fx.store.gets, 1);
  assert.equal(fetcher.stats.packIndexReads, 0);
  for (const f of files.slice(1)) {
    const r = source.read(f.hex, 0, f.fc.size);
    assert.ok(Buffer.isBuffer(r) && r.equals(f.data), 'read ahead: served synchronously');
  }
  assert.equal(fx.store.gets, 1);
  await cache.idle();
  assert.equal(cache.count, files.length);
});

test('read-ahead: a corrupt blob inside a window is never served, its neighbours are; a transient corruption is refetched on demand', async (t) => {
  const dir = await tmp(t);
  // every file below the chunker's minimum chunk (16 KiB), so each is one chunk whatever its random bytes
  const fx = await fixture(dir, { count: 40, packBytes: 8 * MiB, sizes: (i) => 1500 + i * 353 });
  const files = inPackOrder(fx);
  assert.ok(
    files.every((f) => f.fc.chunks.length === 1),
    'one chunk per file',
  );
  // (a) a byte flipped in the pack itself, in the 6th file's blob
  {
    const bad = files[5];
    const loc = fx.index.get(bad.fc.chunks[0].digest)!;
    const packPath = join(fx.fsStore.root, ...loc.pack.split('/'));
    const original = readFileSync(packPath);
    const broken = Buffer.from(original);
    broken[loc.offset + (loc.storedLength >> 1)] ^= 0x04;
    writeFileSync(packPath, broken);
    const { cache, fetcher, source } = await aheadStack(fx, join(dir, 'cache-a'), { readAheadBytes: 8 * MiB });
    const drops: Digest[] = [];
    fetcher.on('read-ahead-drop', (e) => drops.push(e.digest));
    const served: Digest[] = [];
    fetcher.on('fetch', (e) => served.push(e.digest));
    assert.ok((await source.read(files[0].hex, 0, files[0].fc.size)).equals(files[0].data));
    await fetcher.idle();
    assert.deepEqual(drops, [loc.digest]);
    assert.equal(fetcher.stats.readAheadDropped, 1);
    assert.ok(!served.includes(loc.digest));
    assert.equal(cache.has(loc.digest), false);
    for (const f of files) {
      if (f === bad) continue;
      const r = source.read(f.hex, 0, f.fc.size);
      assert.ok(Buffer.isBuffer(r) && r.equals(f.data), 'a neighbour of the bad blob is served, synchronously');
    }
    assert.equal(fx.store.gets, 1);
    // asked for: read on its own, refetched once, then E_INTEGRITY; never served, never cached
    await assert.rejects(
      async () => source.read(bad.hex, 0, bad.fc.size),
      (e) => code(e) === 'E_INTEGRITY',
    );
    assert.equal(fetcher.stats.refetches, 1);
    assert.equal(fetcher.stats.integrityErrors, 1);
    assert.equal(fx.store.gets, 3, 'one window, then the bad blob alone, then its refetch');
    await fetcher.idle();
    assert.equal(cache.has(loc.digest), false);
    writeFileSync(packPath, original);
  }
  // (b) the store corrupts the first read only: the blob hit is dropped from the window, and read again when asked for
  {
    fx.store.gets = 0;
    fx.store.reads = [];
    const { cache, fetcher, source } = await aheadStack(fx, join(dir, 'cache-b'), { readAheadBytes: 8 * MiB });
    const pack = fx.packs[0];
    // The first read starts at files[0]'s blob and returns the rest of the pack; its middle byte gets flipped.
    const start = fx.index.get(files[0].fc.chunks[0].digest)!.offset;
    const mid = start + ((pack.size - start) >> 1);
    const hitIdx = files.findIndex((f) => {
      const l = fx.index.get(f.fc.chunks[0].digest)!;
      return l.offset <= mid && mid < l.offset + l.storedLength;
    });
    assert.ok(hitIdx > 0, 'the flipped byte lands in a read-ahead blob');
    fx.store.corruptFirstReads = 1;
    assert.ok((await source.read(files[0].hex, 0, files[0].fc.size)).equals(files[0].data));
    await fetcher.idle();
    assert.equal(fetcher.stats.readAheadDropped, 1);
    for (const [i, f] of files.entries()) {
      const r = source.read(f.hex, 0, f.fc.size);
      if (i === hitIdx) assert.ok(r instanceof Promise, 'the dropped blob is a miss');
      else assert.ok(Buffer.isBuffer(r), `file ${i} should be a hit`);
      assert.ok((await r).equals(f.data));
    }
    assert.equal(fx.store.gets, 2);
    assert.equal(fetcher.stats.integrityErrors, 0);
    await fetcher.idle();
    assert.equal(cache.count, files.length);
  }
});

test('read-ahead: 100 concurrent readers share windows: every chunk read from the backend once, correct bytes; a small memory tier stays bounded', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 80, packBytes: 2 * MiB, sizes: (i) => (i % 9 === 0 ? 300_000 + i * 977 : 1000 + i * 1543) });
  assert.ok(fx.packs.length >= 2);
  const { cache, fetcher, source } = await aheadStack(fx, join(dir, 'cache'), { readAheadBytes: 1 * MiB, readAheadMinBytes: 64 * 1024 });
  const fetched = new Map<Digest, number>();
  fetcher.on('fetch', (e) => fetched.set(e.digest, (fetched.get(e.digest) ?? 0) + 1));
  await Promise.all(
    Array.from({ length: 100 }, async (_, k) => {
      for (const f of shuffled(fx.files).slice(0, 20)) {
        if (Math.random() < 0.5) await new Promise((r) => setImmediate(r));
        assert.ok((await readWhole(source, f.hex, f.fc.size)).equals(f.data), `reader ${k}`);
      }
    }),
  );
  await fetcher.idle();
  for (const [d, n] of fetched) assert.equal(n, 1, `chunk ${d} fetched ${n} times`);
  const stored = fx.packs.reduce((n, p) => n + p.size, 0);
  assert.ok(fx.store.bytes <= stored * 1.5, `read ${fx.store.bytes} B of ${stored} B of packs`);
  t.diagnostic(
    `${fx.files.length} files in ${fx.packs.length} packs: ${fx.store.gets} backend reads, ${fetcher.stats.readAheadChunks} chunks read ahead, ${fetcher.joins} joins`,
  );

  // a memory tier smaller than one window: never above its size, bytes still right
  const small = await aheadStack(fx, join(dir, 'cache-small'), { readAheadBytes: 1 * MiB, memoryBytes: 32 * 1024 });
  let over = 0;
  small.cache.on('memory-evict', () => small.cache.memoryUsed > 32 * 1024 && over++);
  for (const f of inPackOrder(fx)) {
    assert.ok((await readWhole(small.source, f.hex, f.fc.size)).equals(f.data));
    assert.ok(small.cache.memoryUsed <= 32 * 1024);
  }
  await small.fetcher.idle();
  assert.equal(over, 0);
  assert.ok(small.cache.stats.readAheadWasted > 0, 'a tier that small drops read-ahead chunks');
  await cache.idle();
});

test('read-ahead: the disk budget holds, only chunks asked for are written, evicted chunks are fetched again', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 60, packBytes: 2 * MiB, sizes: (i) => 1000 + ((i * 7919) % 30_000) });
  const budget = 200 * 1024;
  const cacheDir = join(dir, 'cache');
  const { cache, fetcher, source } = await aheadStack(fx, cacheDir, { readAheadBytes: 512 * 1024, budgetBytes: budget });
  const files = inPackOrder(fx);
  assert.ok((await readWhole(source, files[0].hex, files[0].fc.size)).equals(files[0].data));
  await fetcher.idle();
  assert.equal(cache.count, 1, 'only the chunk asked for is on disk');
  assert.ok(cache.memoryCount > 5);
  for (let round = 0; round < 2; round++) {
    for (const f of files) {
      assert.ok((await readWhole(source, f.hex, f.fc.size)).equals(f.data));
      assert.ok(cache.bytes <= budget);
      assert.ok(diskBytes(cacheDir) <= budget);
    }
  }
  await fetcher.idle();
  assert.ok(diskBytes(cacheDir) <= budget && diskBytes(cacheDir) === cache.bytes);
  assert.ok(fx.store.gets > fx.packs.length, 'evicted chunks were fetched again');
});
