import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256, type Digest } from '../src/core/digest.js';
import type { ChunkRef } from '../src/core/tree.js';
import { CachedContentSource, type LayerContents } from '../src/host/cached-content-source.js';
import { ChunkCache } from '../src/host/chunk-cache.js';
import { ChunkFetcher } from '../src/host/chunk-fetcher.js';
import { Singleflight } from '../src/host/singleflight.js';
import { ContentWriter, type FileContent } from '../src/store/content-writer.js';
import { FsObjectStore } from '../src/store/fs-object-store.js';
import { MemoryBlobIndex } from '../src/store/memory-blob-index.js';
import type { ObjectStore } from '../src/store/object-store.js';
import type { BlobLocation, WrittenPack } from '../src/store/pack-types.js';
import { CountingStore } from './helpers/counting-store.js';

const MiB = 1024 * 1024;

function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

async function tmp(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'awc-cache-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

interface Fixture {
  dir: string;
  fsStore: FsObjectStore;
  store: CountingStore;
  index: MemoryBlobIndex;
  packs: WrittenPack[];
  files: { data: Buffer; fc: FileContent; hex: string }[];
  contents: LayerContents;
}

/**
 * Writes `count` files with the real ContentWriter into a real FsObjectStore (packs of
 * `packBytes`), and records their blobs in a MemoryBlobIndex. Files alternate between
 * incompressible data (codec none) and compressible text (lz4), small (one chunk) and large
 * (several chunks).
 */
async function fixture(dir: string, opts: { count: number; packBytes: number; sizes?: (i: number) => number }): Promise<Fixture> {
  const fsStore = new FsObjectStore(join(dir, 'objects'));
  const index = new MemoryBlobIndex();
  const writer = new ContentWriter({ store: fsStore, index, packBytes: opts.packBytes });
  const sizes = opts.sizes ?? ((i: number) => (i % 3 === 0 ? 600_000 + i * 7919 : 1000 + i * 1543));
  const files: Fixture['files'] = [];
  for (let i = 0; i < opts.count; i++) {
    const n = sizes(i);
    let data: Buffer;
    if (i % 4 !== 1) {
      data = randomBytes(n);
    } else {
      const line = Buffer.from(`line ${i} of a compressible file ${randomBytes(4).toString('hex')}\n`);
      data = Buffer.alloc(n);
      for (let at = 0; at < n; at += line.length) line.copy(data, at);
      data[n >> 1] ^= 1;
    }
    const fc = await writer.writeBuffer(data);
    files.push({ data, fc, hex: fc.digest.slice(7) });
  }
  const packs = await writer.flush();
  index.addPacks(packs);
  const contents: LayerContents = {};
  for (const f of files) contents[f.hex] = [f.fc.size, f.fc.chunks.map((c) => [c.digest, c.size])];
  return { dir, fsStore, store: new CountingStore(fsStore), index, packs, files, contents };
}

/** A fresh (cold) cache, fetcher and source over a fixture's store. */
async function stack(fx: Fixture, cacheDir: string, budgetBytes = 1 << 30, store: ObjectStore = fx.store) {
  const cache = new ChunkCache({ dir: cacheDir, budgetBytes });
  await cache.open();
  const fetcher = new ChunkFetcher({ store, cache });
  const source = new CachedContentSource(fetcher);
  source.register(fx.contents, fx.index);
  return { cache, fetcher, source };
}

/**
 * Expected number of ranged reads for a set of blobs, computed from the pack index alone:
 * per pack, blobs by offset, a new read whenever the gap exceeds 128 KiB or the span would
 * exceed 8 MiB.
 */
function expectedRanges(locs: BlobLocation[], maxMerge = 8 * MiB, maxGap = 128 * 1024): number {
  const byPack = new Map<string, BlobLocation[]>();
  for (const l of locs) byPack.set(l.pack, [...(byPack.get(l.pack) ?? []), l]);
  let n = 0;
  for (const list of byPack.values()) {
    list.sort((a, b) => a.offset - b.offset);
    let start = -1;
    let end = -1;
    for (const l of list) {
      const e = l.offset + l.storedLength;
      if (start >= 0 && l.offset - end <= maxGap && Math.max(end, e) - start <= maxMerge) {
        end = Math.max(end, e);
      } else {
        n++;
        start = l.offset;
        end = e;
      }
    }
  }
  return n;
}

function distinctLocs(fx: Fixture, refs: readonly ChunkRef[]): BlobLocation[] {
  const m = new Map<Digest, BlobLocation>();
  for (const r of refs) m.set(r.digest, fx.index.get(r.digest)!);
  return [...m.values()];
}

function shuffled<T>(xs: readonly T[]): T[] {
  const a = xs.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Sum of the sizes of every file under `dir` (chunk files and temporary files). */
function diskBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) n += diskBytes(p);
    else if (e.isFile()) {
      try {
        n += statSync(p).size;
      } catch {
        // unlinked meanwhile
      }
    }
  }
  return n;
}

async function readWhole(source: CachedContentSource, hex: string, size: number): Promise<Buffer> {
  return await source.read(hex, 0, size);
}

// ---------------------------------------------------------------------------------------------
// Singleflight

test('Singleflight: concurrent callers share one call, the key is released when it settles', async () => {
  const sf = new Singleflight<string, number>();
  let calls = 0;
  let joined = 0;
  sf.on('join', () => joined++);
  let release!: (v: number) => void;
  const fn = () => {
    calls++;
    return new Promise<number>((r) => (release = r));
  };
  const ps = Array.from({ length: 10 }, () => sf.do('k', fn));
  assert.equal(sf.inFlight, 1);
  assert.equal(calls, 1);
  release(42);
  assert.deepEqual(await Promise.all(ps), Array(10).fill(42));
  assert.equal(sf.joins, 9);
  assert.equal(joined, 9);
  assert.equal(sf.inFlight, 0);
  assert.equal(await sf.do('k', async () => (calls++, 7)), 7); // a new call after release
  assert.equal(calls, 2);
  // errors (also synchronous throws) are shared and release the key too
  const boom = () => {
    throw new Error('boom');
  };
  const errs = await Promise.allSettled([sf.do('e', boom), sf.do('e', boom)]);
  assert.ok(errs.every((r) => r.status === 'rejected'));
  assert.equal(sf.inFlight, 0);
});

// ---------------------------------------------------------------------------------------------
// ChunkCache

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

// ---------------------------------------------------------------------------------------------
// ChunkFetcher + CachedContentSource

test('100 concurrent readers of the same cold files: one backend read per distinct merged range, correct bytes', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 40, packBytes: MiB, sizes: (i) => (i % 4 === 0 ? 200_000 + i * 5003 : 1000 + i * 1543) });
  assert.ok(fx.packs.length >= 2, `fixture should span several packs (got ${fx.packs.length})`);
  const allRefs = fx.files.flatMap((f) => f.fc.chunks);
  const expected = expectedRanges(distinctLocs(fx, allRefs));
  // Every pack here holds only chunks we read, contiguously, and is under 8 MiB: one read per pack.
  assert.ok(fx.packs.every((p) => p.size < 8 * MiB));
  assert.equal(expected, fx.packs.length);

  // (a) 100 readers × every file through the content source, each reader in its own shuffled order.
  {
    const { cache, fetcher, source } = await stack(fx, join(dir, 'cache-a'));
    let joins = 0;
    fetcher.on('join', () => joins++);
    const results = await Promise.all(
      Array.from({ length: 100 }, async () => {
        const order = shuffled(fx.files);
        const got = await Promise.all(order.map((f) => readWhole(source, f.hex, f.fc.size)));
        return order.map((f, i) => ({ f, b: got[i] }));
      }),
    );
    for (const r of results) for (const { f, b } of r) assert.ok(b.equals(f.data), `reader got wrong bytes for ${f.hex}`);
    assert.equal(fx.store.gets, expected);
    assert.equal(fetcher.stats.backendReads, expected);
    t.diagnostic(
      `${fx.files.length} files, ${allRefs.length} chunk refs, ${fx.packs.length} packs: 100 readers → ${fx.store.gets} backend reads, ${joins} joins`,
    );
    assert.ok(joins > 0 && fetcher.joins === joins);
    await cache.idle();
    assert.equal(cache.count, new Set(allRefs.map((r) => r.digest)).size);
  }

  // (b) 100 fetcher.get calls over the same chunks, shuffled, with a fresh cold cache.
  {
    fx.store.gets = 0;
    const { fetcher } = await stack(fx, join(dir, 'cache-b'));
    const results = await Promise.all(
      Array.from({ length: 100 }, async () => {
        const refs = shuffled(allRefs);
        return { refs, bufs: await fetcher.get(refs, fx.index) };
      }),
    );
    const byDigest = new Map<Digest, Buffer>();
    for (const f of fx.files) {
      let at = 0;
      for (const c of f.fc.chunks) {
        byDigest.set(c.digest, f.data.subarray(at, at + c.size));
        at += c.size;
      }
    }
    for (const { refs, bufs } of results) refs.forEach((r, i) => assert.ok(bufs[i].equals(byDigest.get(r.digest)!)));
    assert.equal(fx.store.gets, expected);
    await fetcher.idle(); // let the background cache writes land before the directory is removed
  }

  // (c) requests arriving interleaved over many event-loop turns: every chunk is still read
  // from the backend exactly once (no two backend reads overlap), and all bytes are right.
  {
    fx.store.gets = 0;
    fx.store.reads = [];
    const { fetcher, source } = await stack(fx, join(dir, 'cache-c'));
    const fetched = new Map<Digest, number>();
    fetcher.on('fetch', (e) => fetched.set(e.digest, (fetched.get(e.digest) ?? 0) + 1));
    await Promise.all(
      Array.from({ length: 100 }, async (_, k) => {
        for (const f of shuffled(fx.files).slice(0, 10)) {
          if (Math.random() < 0.5) await new Promise((r) => setImmediate(r));
          const b = await readWhole(source, f.hex, f.fc.size);
          assert.ok(b.equals(f.data), `reader ${k}`);
        }
      }),
    );
    const touched = new Set(fx.files.flatMap((f) => f.fc.chunks.map((c) => c.digest)));
    for (const d of touched) assert.ok((fetched.get(d) ?? 0) <= 1, `chunk ${d} fetched ${fetched.get(d)} times`);
    assert.ok(fx.store.gets <= fetched.size);
    assert.equal(fetcher.stats.refetches, 0);
    await fetcher.idle();
  }
});

test('ranged reads of multi-chunk files: cold and warm match the original bytes', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 6, packBytes: 4 * MiB, sizes: (i) => 700_000 + i * 100_003 });
  const { cache, source } = await stack(fx, join(dir, 'cache'));
  for (let round = 0; round < 2; round++) {
    for (const f of fx.files) {
      for (let k = 0; k < 20; k++) {
        const off = Math.floor(Math.random() * (f.fc.size + 10));
        const len = Math.floor(Math.random() * 300_000);
        const b = await source.read(f.hex, off, len);
        assert.ok(b.equals(f.data.subarray(off, off + len)), `round ${round} ${off}+${len}`);
      }
    }
    await cache.idle();
  }
  assert.equal((await source.read(fx.files[0].hex, 0, 0)).length, 0);
  await assert.rejects(
    async () => source.read('0'.repeat(64), 0, 10),
    (e) => code(e) === 'E_NOT_FOUND',
  );
  await assert.rejects(
    async () => source.read(fx.files[0].hex, -1, 10),
    (e) => code(e) === 'E_USAGE',
  );
});

test('sync hit path: after a warm read, source.read returns a Buffer, not a Promise', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 4, packBytes: 4 * MiB, sizes: (i) => (i < 2 ? 5000 : 900_000) });
  const { cache, source } = await stack(fx, join(dir, 'cache'));
  let misses = 0;
  cache.on('miss', () => misses++);
  for (const f of fx.files) {
    const cold = source.read(f.hex, 0, f.fc.size);
    assert.ok(cold instanceof Promise);
    assert.ok((await cold).equals(f.data));
  }
  await cache.idle();
  assert.equal(
    misses,
    fx.files.reduce((n, f) => n + f.fc.chunks.length, 0),
    'one miss per cold chunk',
  );
  let hits = 0;
  cache.on('hit', () => hits++);
  const gets = fx.store.gets;
  for (const f of fx.files) {
    const warm = source.read(f.hex, 0, f.fc.size);
    assert.ok(Buffer.isBuffer(warm), 'a warm read must be synchronous');
    assert.ok(warm.equals(f.data));
    const part = source.read(f.hex, 100, 1000); // inside the first chunk: a view, still sync
    assert.ok(Buffer.isBuffer(part) && part.equals(f.data.subarray(100, 1100)));
  }
  assert.ok(fx.files[2].fc.chunks.length > 1, 'a multi-chunk file is covered');
  assert.ok(hits > 0);
  assert.equal(fx.store.gets, gets);
  // a chunk still being written to the cache is served from memory, synchronously
  const { source: s2, fetcher: f2 } = await stack(fx, join(dir, 'cache2'));
  const f = fx.files[0];
  assert.ok((await s2.read(f.hex, 0, f.fc.size)).equals(f.data));
  const right = s2.read(f.hex, 0, f.fc.size);
  assert.ok(Buffer.isBuffer(right) && right.equals(f.data));
  await f2.idle();
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

test('corruption: a flipped byte in a pack is E_INTEGRITY after one refetch, nothing returned or cached', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 6, packBytes: 4 * MiB });
  const f = fx.files.find((x) => x.fc.chunks.length > 1 && fx.index.get(x.fc.chunks[1].digest)!.codec === 'none')!;
  assert.ok(f, 'a multi-chunk incompressible file');
  const bad = fx.index.get(f.fc.chunks[1].digest)!;
  const packPath = join(fx.fsStore.root, ...bad.pack.split('/'));
  const pack = readFileSync(packPath);
  pack[bad.offset + 17] ^= 0x01;
  writeFileSync(packPath, pack);
  const { cache, fetcher, source } = await stack(fx, join(dir, 'cache'));
  const events: string[] = [];
  fetcher.on('refetch', () => events.push('refetch'));
  fetcher.on('integrity-error', () => events.push('integrity-error'));
  let got: unknown;
  await assert.rejects(
    (async () => {
      got = await source.read(f.hex, 0, f.fc.size);
    })(),
    (e) => code(e) === 'E_INTEGRITY',
  );
  assert.equal(got, undefined);
  assert.deepEqual(events, ['refetch', 'integrity-error']);
  assert.equal(fx.store.gets, 2, 'one merged read, then one refetch of the bad blob');
  await cache.idle();
  assert.equal(cache.has(bad.digest), false);
  assert.equal(cache.getSync(bad.digest), undefined);
  // the good chunks of the same read were still verified and cached
  assert.equal(cache.has(f.fc.chunks[0].digest), true);
  // a read that avoids the bad chunk works; one that touches it fails again
  const c0 = f.fc.chunks[0].size;
  assert.ok((await source.read(f.hex, 0, c0)).equals(f.data.subarray(0, c0)));
  await assert.rejects(
    async () => source.read(f.hex, c0, 10),
    (e) => code(e) === 'E_INTEGRITY',
  );
});

test('corruption: a store whose first read is corrupt and second good gives correct bytes after one refetch', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 6, packBytes: 4 * MiB });
  const { cache, fetcher, source } = await stack(fx, join(dir, 'cache'));
  fx.store.corruptFirstReads = 1;
  const got = await Promise.all(fx.files.map((f) => readWhole(source, f.hex, f.fc.size)));
  fx.files.forEach((f, i) => assert.ok(got[i].equals(f.data)));
  assert.equal(fetcher.stats.refetches, 1);
  assert.equal(fetcher.stats.integrityErrors, 0);
  assert.equal(fx.store.gets, fx.packs.length + 1);
  await cache.idle();
  for (const f of fx.files) for (const c of f.fc.chunks) assert.ok(cache.getSync(c.digest)); // all cached, all verified
});

test('unknown chunk digest → E_OBJECT_NOT_FOUND; other chunks of the call are still fetched', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 2, packBytes: 4 * MiB, sizes: () => 5000 });
  const { cache, fetcher } = await stack(fx, join(dir, 'cache'));
  const unknown = sha256('not stored anywhere');
  await assert.rejects(
    fetcher.get([fx.files[0].fc.chunks[0], { digest: unknown, size: 19 }], fx.index),
    (e) => code(e) === 'E_OBJECT_NOT_FOUND',
  );
  await fetcher.idle();
  assert.equal(cache.has(fx.files[0].fc.chunks[0].digest), true);
  await assert.rejects(fetcher.get([{ digest: fx.files[0].fc.chunks[0].digest, size: 4999 }], fx.index), (e) => code(e) === 'E_INTEGRITY');
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

// ---------------------------------------------------------------------------------------------
// Memory tier and pack read-ahead

/** A fresh (cold) cache, fetcher and source over a fixture's store, with read-ahead. */
async function aheadStack(
  fx: Fixture,
  cacheDir: string,
  opts: { readAheadBytes: number; readAheadMinBytes?: number; memoryBytes?: number; budgetBytes?: number },
) {
  const cache = new ChunkCache({ dir: cacheDir, budgetBytes: opts.budgetBytes ?? 1 << 30, memoryBytes: opts.memoryBytes });
  await cache.open();
  const fetcher = new ChunkFetcher({
    store: fx.store,
    cache,
    readAheadBytes: opts.readAheadBytes,
    readAheadMinBytes: opts.readAheadMinBytes,
  });
  const source = new CachedContentSource(fetcher);
  source.register(fx.contents, fx.index);
  return { cache, fetcher, source };
}

/**
 * The backend reads a cold, sequential read of every blob of one pack (in offset order, each
 * blob asked for once the previous one was served) costs with read-ahead, worked out from the
 * pack layout alone by the documented rules: the first window of a pack is read before its
 * index is known ([first blob, +min) — blob boundaries ignored) and, once it is, ends at its
 * last whole blob; when that read does not reach the end of the pack, one more read fetches its
 * tail (the index; the first guess is enough here);
 * each later window holds whole blobs from the first one it lacks up to the stream's size,
 * which starts at `min` and doubles (up to `max`) while a window starts where the last one
 * ended. A window whose second half holds a chunk read ahead (and that is not the last) has
 * the next one read in the background (`async`) when the reader gets there; otherwise the
 * next miss starts it.
 */
function expectedAheadReads(pack: WrittenPack, min: number, max: number): { windows: number; indexReads: number; async: number } {
  const blobs = pack.blobs.slice().sort((a, b) => a.offset - b.offset);
  const endOf = (b: BlobLocation) => b.offset + b.storedLength;
  let windows = 0;
  let async = 0;
  let indexReads = 0;
  let i = 0; // first blob not read yet
  let next = -1; // where the last window ended
  let size = min;
  let asked = true; // the window starts at a blob asked for (a miss), else it was started in the background
  while (i < blobs.length) {
    const start = blobs[i].offset;
    let end: number;
    if (windows === 0) {
      end = Math.min(start + Math.max(min, blobs[0].storedLength), pack.size);
      if (end < pack.size) indexReads = 1;
    } else {
      size = start >= next && start - next <= 128 * 1024 ? Math.min(max, size * 2) : min;
      end = endOf(blobs[i]);
      for (let j = i + 1; j < blobs.length && endOf(blobs[j]) - start <= size; j++) end = endOf(blobs[j]);
    }
    windows++;
    const middle = start + ((end - start) >> 1);
    let j = i;
    let trigger = false;
    for (; j < blobs.length && endOf(blobs[j]) <= end; j++) if (!(asked && j === i) && blobs[j].offset >= middle) trigger = true;
    if (trigger && j < blobs.length) async++;
    asked = !(trigger && j < blobs.length);
    next = j < blobs.length ? Math.min(end, blobs[j].offset) : end;
    i = j;
  }
  return { windows, indexReads, async };
}

/** Files of a fixture in pack order (by the offset of their first chunk). */
function inPackOrder(fx: Fixture): Fixture['files'] {
  return fx.files.slice().sort((a, b) => fx.index.get(a.fc.chunks[0].digest)!.offset - fx.index.get(b.fc.chunks[0].digest)!.offset);
}

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
  const fx = await fixture(dir, { count: 40, packBytes: 8 * MiB, sizes: (i) => 1500 + i * 397 });
  const files = inPackOrder(fx);
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

test('CachedContentSource reuseSyncBuffers: synchronous multi-chunk reads share one scratch buffer, asynchronous ones never do', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 2, packBytes: 4 * MiB, sizes: () => 700_000 });
  const [a, b] = fx.files;
  assert.ok(a.fc.chunks.length > 2 && b.fc.chunks.length > 2);
  const { cache, fetcher } = await stack(fx, join(dir, 'cache'));
  const source = new CachedContentSource(fetcher, { reuseSyncBuffers: true });
  source.register(fx.contents, fx.index);
  // cold: asynchronous answers are buffers of their own
  const [ca, cb] = await Promise.all([source.read(a.hex, 0, 300_000), source.read(b.hex, 0, 300_000)]);
  assert.ok(ca.equals(a.data.subarray(0, 300_000)) && cb.equals(b.data.subarray(0, 300_000)));
  await cache.idle();
  // warm: right bytes at return time, from one reused buffer
  const wa = source.read(a.hex, 1000, 300_000);
  assert.ok(Buffer.isBuffer(wa) && wa.equals(a.data.subarray(1000, 301_000)));
  const wb = source.read(b.hex, 2000, 300_000);
  assert.ok(Buffer.isBuffer(wb) && wb.equals(b.data.subarray(2000, 302_000)));
  assert.equal(wa.buffer, wb.buffer, 'one scratch buffer');
  // without the option every assembled answer is a buffer of its own
  const plain = new CachedContentSource(fetcher);
  plain.register(fx.contents, fx.index);
  const pa = plain.read(a.hex, 1000, 300_000) as Buffer;
  const pb = plain.read(b.hex, 2000, 300_000) as Buffer;
  assert.notEqual(pa.buffer, pb.buffer);
  assert.ok(pa.equals(a.data.subarray(1000, 301_000)));
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
