import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { CachedContentSource } from '../../../src/host/read-path/cached-content-source.js';
import { MiB, code, tmp, fixture, stack } from '../../helpers/read-path.js';

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
