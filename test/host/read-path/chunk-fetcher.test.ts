import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256, type Digest } from '../../../src/core/digest.js';
import { MiB, code, tmp, fixture, stack, expectedRanges, distinctLocs, shuffled, readWhole } from '../../helpers/read-path.js';

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
