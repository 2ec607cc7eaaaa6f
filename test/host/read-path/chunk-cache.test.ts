import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256, type Digest } from '../../../src/core/digest.js';
import { CachedContentSource } from '../../../src/host/read-path/cached-content-source.js';
import { ChunkCache } from '../../../src/host/read-path/chunk-cache.js';
import { ChunkFetcher } from '../../../src/host/read-path/chunk-fetcher.js';
import { MiB, code, tmp, fixture, stack, shuffled, diskBytes, readWhole } from '../../helpers/read-path.js';

test('ChunkCache: put verifies, LRU eviction within budget, too-big chunks skipped', async (t) => {
  const dir = await tmp(t);
  const cache = new ChunkCache({ dir, budgetBytes: 10_000 });
  await cache.open();
  const evicted: Digest[] = [];
  const skipped: string[] = [];
  cache.on('evict', (e) => evicted.push(e.digest));
  cache.on('skip', (e) => skipped.push(e.reason));
  const chunks = Array.from({ length: 5 }, () => randomBytes(3000));
  const ds = chunks.map((c) => sha256(c));
  await assert.rejects(cache.put(ds[0], chunks[1]), (e) => code(e) === 'E_INTEGRITY');
  assert.equal(cache.has(ds[0]), false);
  for (let i = 0; i < 3; i++) assert.equal(await cache.put(ds[i], chunks[i]), true);
  assert.equal(cache.bytes, 9000);
  assert.ok(cache.getSync(ds[0])!.equals(chunks[0])); // 0 becomes most recently used
  assert.equal(await cache.put(ds[3], chunks[3]), true); // evicts 1 (least recently used)
  assert.deepEqual(evicted, [ds[1]]);
  assert.equal(cache.has(ds[1]), false);
  assert.equal(cache.getSync(ds[1]), undefined);
  assert.ok(cache.bytes <= 10_000);
  await cache.idle();
  assert.equal(diskBytes(dir), cache.bytes);
  const big = randomBytes(10_001);
  assert.equal(await cache.put(sha256(big), big), false);
  assert.deepEqual(skipped, ['too-big']);
  assert.equal(cache.count, 3);
});

test('budget: the cache never exceeds it (in memory and on disk), evicts, and refetches evicted chunks correctly', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 30, packBytes: 2 * MiB });
  const total = fx.files.reduce((n, f) => n + f.fc.size, 0);
  const budget = 512 * 1024;
  assert.ok(total > 4 * budget, `data ${total} should be several times the budget`);
  const cacheDir = join(dir, 'cache');
  const { cache, fetcher, source } = await stack(fx, cacheDir, budget);
  let evictions = 0;
  const evicted = new Set<Digest>();
  cache.on('evict', (e) => {
    evictions++;
    evicted.add(e.digest);
  });
  // checked at every change of the cache, not only between reads
  const overs: number[] = [];
  for (const ev of ['store', 'evict', 'skip'] as const) cache.on(ev, () => cache.bytes > budget && overs.push(cache.bytes));
  let maxDisk = 0;
  let read = 0;
  for (let round = 0; round < 3; round++) {
    // half the reads sequential, half concurrent in small bursts
    const order = shuffled(fx.files);
    for (let i = 0; i < order.length; i += 3) {
      const burst = order.slice(i, i + 3);
      const got = await Promise.all(burst.map((f) => readWhole(source, f.hex, f.fc.size)));
      burst.forEach((f, k) => assert.ok(got[k].equals(f.data)));
      read += burst.reduce((n, f) => n + f.fc.size, 0);
      assert.ok(cache.bytes <= budget, `cache.bytes ${cache.bytes} > budget ${budget}`);
      const disk = diskBytes(cacheDir);
      maxDisk = Math.max(maxDisk, disk);
      assert.ok(disk <= budget, `disk ${disk} > budget ${budget}`);
    }
  }
  await cache.idle();
  assert.ok(read >= 3 * total);
  assert.ok(diskBytes(cacheDir) <= budget && diskBytes(cacheDir) === cache.bytes);
  assert.ok(evictions > 0);
  assert.deepEqual(overs, []);
  t.diagnostic(`budget ${budget} B, read ${read} B, ${evictions} evictions, max on disk ${maxDisk} B`);
  // an evicted chunk is read again from the backend, correctly
  const victim = fx.files.find((f) => f.fc.chunks.some((c) => evicted.has(c.digest) && !cache.has(c.digest)));
  assert.ok(victim, 'some file has an evicted chunk');
  const before = fx.store.gets;
  const b = await readWhole(source, victim.hex, victim.fc.size);
  assert.ok(b.equals(victim.data));
  assert.ok(fx.store.gets > before, 'an evicted chunk must be fetched again');
  // a request bigger than the whole budget still returns every chunk
  const big = fx.files.flatMap((f) => f.fc.chunks);
  const bufs = await fetcher.get(big, fx.index);
  assert.equal(
    bufs.reduce((n, x) => n + x.length, 0),
    total,
  );
  assert.ok(cache.bytes <= budget && diskBytes(cacheDir) <= budget);
  await fetcher.idle();
  assert.ok(cache.bytes <= budget && diskBytes(cacheDir) <= budget);
});

test('corruption: a flipped byte in a cached chunk file is detected, dropped and refetched', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 3, packBytes: 4 * MiB, sizes: () => 8000 });
  const { cache, fetcher, source } = await stack(fx, join(dir, 'cache'));
  const f = fx.files[0];
  assert.ok((await readWhole(source, f.hex, f.fc.size)).equals(f.data));
  await cache.idle();
  const d = f.fc.chunks[0].digest;
  const path = cache.pathOf(d);
  const bytes = readFileSync(path);
  bytes[123] ^= 0xff;
  writeFileSync(path, bytes);
  const corrupt: string[] = [];
  cache.on('corrupt', (e) => corrupt.push(e.reason));
  const gets = fx.store.gets;
  assert.equal(fetcher.getSync(f.fc.chunks[0]), undefined, 'a corrupt cache file is never served');
  assert.deepEqual(corrupt, ['digest']);
  const r = source.read(f.hex, 0, f.fc.size);
  assert.ok(r instanceof Promise, 'the corrupt chunk is a miss');
  assert.ok((await r).equals(f.data));
  assert.equal(fx.store.gets, gets + 1);
  await cache.idle();
  assert.ok(readFileSync(path).equals(f.data), 'the cache file was rewritten with good bytes');
  // a cache file that got shorter is also caught
  writeFileSync(path, f.data.subarray(0, 100));
  assert.equal(cache.getSync(d), undefined);
  assert.deepEqual(corrupt, ['digest', 'size']);
});

test('reopen: a new ChunkCache finds the chunks on disk and trims to a smaller budget, oldest first', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 12, packBytes: 4 * MiB });
  const cacheDir = join(dir, 'cache');
  const { cache, source } = await stack(fx, cacheDir);
  for (const f of fx.files) await readWhole(source, f.hex, f.fc.size);
  await cache.idle();
  const count = cache.count;
  const bytes = cache.bytes;
  assert.ok(count > 12);
  // leftovers of a crash are removed on open
  const someDigest = fx.files[0].fc.chunks[0].digest;
  writeFileSync(join(cacheDir, someDigest.slice(7, 9), '.tmp-1-1'), 'partial');

  const again = new ChunkCache({ dir: cacheDir, budgetBytes: 1 << 30 });
  await again.open();
  assert.equal(again.count, count);
  assert.equal(again.bytes, bytes);
  assert.equal(diskBytes(cacheDir), bytes);
  const f0 = fx.files[0];
  const fetcher = new ChunkFetcher({ store: fx.store, cache: again });
  const src = new CachedContentSource(fetcher);
  src.register(fx.contents, fx.index);
  const warm = src.read(f0.hex, 0, f0.fc.size);
  assert.ok(Buffer.isBuffer(warm) && warm.equals(f0.data), 'chunks found after reopen are served synchronously');

  // make one chunk the newest on disk, everything else older: the trim keeps the newest
  const all = fx.files.flatMap((f) => f.fc.chunks.map((c) => c.digest));
  const old = Date.now() / 1000 - 3600;
  all.forEach((d, i) => utimesSync(again.pathOf(d), old + i, old + i));
  const keep = fx.files[1].fc.chunks[0];
  utimesSync(again.pathOf(keep.digest), old + 10_000, old + 10_000);
  const small = Math.floor(bytes / 4);
  const trimmed = new ChunkCache({ dir: cacheDir, budgetBytes: small });
  let evicted = 0;
  trimmed.on('evict', () => evicted++);
  await trimmed.open();
  assert.ok(evicted > 0);
  assert.ok(trimmed.bytes <= small && trimmed.count < count);
  assert.ok(diskBytes(cacheDir) <= small);
  assert.equal(diskBytes(cacheDir), trimmed.bytes);
  assert.ok(trimmed.getSync(keep.digest), 'the most recently used chunk survives the trim');
});

test('ChunkCache memory tier: bounded, oldest read-ahead chunks dropped, a hit moves the chunk to disk, verified on the way in', async (t) => {
  const dir = await tmp(t);
  const cache = new ChunkCache({ dir, budgetBytes: 1 << 20, memoryBytes: 10_000 });
  await cache.open();
  const dropped: Digest[] = [];
  cache.on('memory-evict', (e) => dropped.push(e.digest));
  const chunks = Array.from({ length: 5 }, () => randomBytes(3000));
  const ds = chunks.map((c) => sha256(c));
  assert.throws(
    () => cache.remember(ds[0], chunks[1]),
    (e) => code(e) === 'E_INTEGRITY',
  );
  assert.equal(cache.has(ds[0]), false);
  for (let i = 0; i < 5; i++) {
    assert.equal(cache.remember(ds[i], chunks[i]), true);
    assert.ok(cache.memoryUsed <= 10_000, `memory tier holds ${cache.memoryUsed} B`);
  }
  assert.deepEqual(dropped, [ds[0], ds[1]], 'the oldest read-ahead chunks leave first');
  assert.equal(cache.stats.readAheadWasted, 2);
  assert.equal(cache.memoryUsed, 9000);
  assert.equal(cache.has(ds[0]), false);
  assert.equal(cache.getSync(ds[0]), undefined);
  assert.equal(cache.has(ds[2]), true);
  assert.equal(cache.count, 0, 'read-ahead chunks are not written to disk until asked for');
  // a hit is served synchronously from memory and moves the chunk to the disk cache
  let hit: { memory?: boolean } | undefined;
  cache.once('hit', (e) => (hit = e));
  const b = cache.getSync(ds[2]);
  assert.ok(b && b.equals(chunks[2]));
  assert.equal(hit?.memory, true);
  assert.equal(cache.memoryUsed, 6000);
  await cache.idle();
  assert.equal(cache.count, 1);
  assert.ok(readFileSync(cache.pathOf(ds[2])).equals(chunks[2]));
  assert.equal(cache.stats.readAheadHits, 1);
  // already held, larger than the tier, or a disabled tier: not kept
  assert.equal(cache.remember(ds[2], chunks[2]), false);
  const big = randomBytes(10_001);
  assert.equal(cache.remember(sha256(big), big), false);
  assert.ok(cache.memoryUsed <= 10_000);
  const off = new ChunkCache({ dir: join(dir, 'off'), budgetBytes: 1 << 20, memoryBytes: 0 });
  await off.open();
  assert.equal(off.remember(ds[3], chunks[3]), false);
  assert.equal(off.memoryUsed, 0);
  // delete() drops a chunk from the tier too
  assert.equal(cache.delete(ds[3]), false);
  assert.equal(cache.has(ds[3]), false);
  assert.throws(
    () => new ChunkCache({ dir, budgetBytes: 1, memoryBytes: -1 }),
    (e) => code(e) === 'E_USAGE',
  );
});

test('ChunkCache write-behind: a burst of puts is served from memory and written once it is over (or past writeBehindBytes, or on idle())', async (t) => {
  const dir = await tmp(t);
  const chunks = Array.from({ length: 20 }, () => randomBytes(5000));
  const ds = chunks.map((c) => sha256(c));
  const cache = new ChunkCache({ dir: join(dir, 'a'), budgetBytes: 1 << 30, writeBehindMs: 200 });
  await cache.open();
  const t0 = performance.now();
  const puts = chunks.map((c, i) => cache.put(ds[i], c));
  assert.equal(cache.bytes, 20 * 5000, 'the budget is accounted at once');
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(cache.count, 0, 'nothing written while the burst may go on');
  for (let i = 0; i < 20; i++) {
    const b = cache.getSync(ds[i]);
    assert.ok(b && b.equals(chunks[i]), 'served from memory meanwhile');
  }
  assert.deepEqual(await Promise.all(puts), Array(20).fill(true));
  // measured from before the burst (a late timer above cannot eat the margin): writes start once no put came for writeBehindMs
  assert.ok(performance.now() - t0 >= 200, 'written after the quiet time');
  assert.equal(cache.count, 20);
  for (let i = 0; i < 20; i++) assert.ok(readFileSync(cache.pathOf(ds[i])).equals(chunks[i]));
  // past writeBehindBytes, writes start during the burst
  const eager = new ChunkCache({ dir: join(dir, 'b'), budgetBytes: 1 << 30, writeBehindMs: 60_000, writeBehindBytes: 20_000 });
  await eager.open();
  const eagerPuts = chunks.map((c, i) => eager.put(ds[i], c));
  await Promise.all(eagerPuts.slice(0, 15));
  assert.ok(eager.count >= 15 && eager.pendingBytes <= 25_000, `${eager.count} written, ${eager.pendingBytes} B waiting`);
  // idle() does not wait for the quiet time
  const t1 = Date.now();
  await eager.idle();
  assert.ok(Date.now() - t1 < 5000, 'idle() flushes without waiting for a quiet minute');
  assert.equal(eager.count, 20);
  assert.equal(diskBytes(join(dir, 'b')), eager.bytes);
});

test('ChunkCache.markUsed: a use served elsewhere moves a memory-tier chunk to disk, refreshes a disk chunk in the LRU without reading it, and knows nothing else', async (t) => {
  const dir = await tmp(t);
  const cache = new ChunkCache({ dir, budgetBytes: 7000, memoryBytes: 10_000 });
  await cache.open();
  const chunks = Array.from({ length: 3 }, () => randomBytes(3000));
  const ds = chunks.map((c) => sha256(c));
  // memory tier → disk, counted as a memory hit
  assert.equal(cache.remember(ds[0], chunks[0]), true);
  const hits: { memory?: boolean }[] = [];
  cache.on('hit', (e) => hits.push(e));
  assert.equal(cache.markUsed(ds[0]), true);
  assert.equal(cache.memoryUsed, 0);
  await cache.idle();
  assert.ok(readFileSync(cache.pathOf(ds[0])).equals(chunks[0]), 'written to disk');
  assert.equal(cache.stats.readAheadHits, 1);
  // on disk: most recently used, without a read (a file made unreadable is not noticed)
  await cache.put(ds[1], chunks[1]);
  await cache.idle();
  writeFileSync(cache.pathOf(ds[0]), 'garbage that would fail verification if it were read');
  const corrupt: unknown[] = [];
  cache.on('corrupt', (e) => corrupt.push(e));
  assert.equal(cache.markUsed(ds[0]), true);
  assert.deepEqual(corrupt, [], 'markUsed does not read the file');
  await cache.put(ds[2], chunks[2]); // over the 7000-byte budget: the least recently used goes
  await cache.idle();
  assert.equal(cache.has(ds[1]), false, 'ds[1] was least recently used');
  assert.equal(cache.has(ds[0]), true, 'ds[0] was refreshed by markUsed');
  assert.equal(hits.length, 2);
  assert.ok(hits.every((h) => h.memory === true));
  // unknown: nothing recorded
  assert.equal(cache.markUsed(sha256(Buffer.from('nobody'))), false);
  assert.equal(hits.length, 2);
});

test('issue 24 item 9: the cache directory itself is made 0700, also a configured cacheDir that existed 0755', async (t) => {
  const parent = await tmp(t);
  const existing = join(parent, 'existing');
  mkdirSync(existing, { mode: 0o755 });
  chmodSync(existing, 0o755);
  const made = join(parent, 'new', 'cache');
  for (const dir of [existing, made]) {
    const cache = new ChunkCache({ dir, budgetBytes: 1 << 20 });
    await cache.open();
    assert.equal(statSync(dir).mode & 0o7777, 0o700, dir);
  }
});
