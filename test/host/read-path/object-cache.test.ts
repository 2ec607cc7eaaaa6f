/**
 * The host object cache (src/host/read-path/object-cache.ts), against real packs in a real
 * directory store read through the real content plane (chunk cache, fetcher, source): what
 * fills it, what it holds (exact bytes, 0600, published whole), the budget and its rule 4
 * ledger, ambiguous names, and the boot marker of rule 6 (docs/explanation/host-cache-lower.md).
 * The kernel's side (overlayfs reading CACHE) is in test/drivers/overlay/object-cache-lower.test.ts.
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { shortContentName } from '../../../src/core/content-name.js';
import { ContentPlane } from '../../../src/host/read-path/content-plane.js';
import { ObjectCache, type ObjectCacheOptions, type ObjectCacheSource } from '../../../src/host/read-path/object-cache.js';
import { code, fixture, tmp, type Fixture } from '../../helpers/read-path.js';

interface Setup {
  fx: Fixture;
  plane: ContentPlane;
  objects: ObjectCache;
  dir: string;
  paths: { dir: string; stagingDir: string; markerFile: string };
  live: string[];
}

/** A fixture of `count` files, a content plane over it, and an object cache (started) attached to it. */
async function setup(t: TestContext, count: number, opts: Partial<ObjectCacheOptions> = {}): Promise<Setup> {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count, packBytes: 1 << 20, sizes: (i) => 20_000 + i * 1000 });
  const plane = new ContentPlane({ store: fx.store, blobIndex: () => fx.index, cacheDir: join(dir, 'cache'), cacheBytes: 1 << 30 });
  await plane.open();
  plane.register('ns', fx.contents);
  const paths = {
    dir: join(dir, 'cache', 'objects'),
    stagingDir: join(dir, 'cache', 'objects.tmp'),
    markerFile: join(dir, 'cache', 'objects.unsynced'),
  };
  const live: string[] = [];
  const objects = new ObjectCache({
    ...paths,
    source: plane.source,
    budgetBytes: () => 1 << 30,
    nameIsFree: () => true,
    liveMounts: () => live,
    quietMs: 0,
    pollMs: 20,
    bootId: 'boot-a',
    ...opts,
  });
  await objects.open();
  plane.attachObjects(objects);
  objects.start();
  t.after(() => objects.close());
  return { fx, plane, objects, dir, paths, live };
}

/** Reads the whole object through the source in pieces of `piece` bytes (as FUSE reads do). */
async function readThrough(plane: ContentPlane, hex: string, size: number, piece = 8192, upTo = size): Promise<void> {
  for (let at = 0; at < upTo; at += piece) await plane.source.read(hex, at, Math.min(piece, upTo - at));
}

test('an object read whole through the source is published under its short name: exact bytes, 0600, and its chunks leave the chunk cache', async (t) => {
  const s = await setup(t, 6);
  const [a, b] = s.fx.files;
  await readThrough(s.plane, a.hex, a.data.length);
  await readThrough(s.plane, b.hex, b.data.length, 4096, 10_000); // only a part of b
  await s.plane.idle();
  await s.objects.idle();
  const path = join(s.paths.dir, shortContentName(a.hex));
  assert.ok(readFileSync(path).equals(a.data), 'CACHE holds the exact bytes');
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(statSync(s.paths.dir).mode & 0o777, 0o700);
  assert.deepEqual(readdirSync(s.paths.dir), [shortContentName(a.hex)], 'an object read in part is not filled');
  assert.deepEqual(readdirSync(s.paths.stagingDir), [], 'nothing left in staging');
  assert.equal(s.objects.stats.published, 1);
  assert.equal(s.objects.bytes, statSync(path).blocks * 512);
  for (const c of a.fc.chunks) assert.equal(s.plane.cache.has(c.digest), false, 'one copy on the host: the chunk left the chunk cache');
  assert.ok(
    b.fc.chunks.some((c) => s.plane.cache.has(c.digest)),
    "the partly read object's chunks stay in the chunk cache",
  );
  // an object served whole elsewhere (the arena) is queued at once
  s.objects.request(b.hex);
  await s.objects.idle();
  assert.ok(readFileSync(join(s.paths.dir, shortContentName(b.hex))).equals(b.data));
});

test('a read through the source of an object in CACHE is served from its file there, with no backend read; once it is gone, from the chunks again', async (t) => {
  const s = await setup(t, 3);
  const [a] = s.fx.files;
  await readThrough(s.plane, a.hex, a.data.length);
  await s.plane.idle();
  await s.objects.idle();
  assert.ok(s.objects.has(shortContentName(a.hex)));
  for (const c of a.fc.chunks) assert.equal(s.plane.cache.has(c.digest), false);
  const gets = s.fx.store.gets;
  const got = await s.plane.source.read(a.hex, 1000, 5000);
  assert.ok(got.equals(a.data.subarray(1000, 6000)));
  const tail = await s.plane.source.read(a.hex, a.data.length - 10, 100);
  assert.ok(tail.equals(a.data.subarray(a.data.length - 10)), 'clamped at its end');
  assert.equal(s.fx.store.gets, gets, 'no backend read');
  // the file removed behind the cache's back (as if evicted meanwhile): the chunks serve, fetched again
  rmSync(join(s.paths.dir, shortContentName(a.hex)));
  const again = await s.plane.source.read(a.hex, 0, a.data.length);
  assert.ok(again.equals(a.data));
  assert.ok(s.fx.store.gets > gets);
});

test('the budget: least recently used first out; while a mount is live an object the kernel opened is kept and a fill that does not fit is skipped', async (t) => {
  let budget = 1 << 30;
  const s = await setup(t, 4, { budgetBytes: () => budget });
  const f = s.fx.files;
  for (const x of f.slice(0, 3)) {
    s.objects.request(x.hex);
    await s.objects.idle();
  }
  const name = (i: number) => shortContentName(f[i].hex);
  const bytes = s.objects.bytes;
  // f[0] used again (a read through FUSE), so f[1] is the least recently used
  await s.plane.source.read(f[0].hex, 0, 10);
  budget = bytes; // room for the three, not for a fourth
  s.objects.request(f[3].hex);
  await s.objects.idle();
  assert.deepEqual(readdirSync(s.paths.dir).sort(), [name(0), name(2), name(3)].sort());
  assert.equal(s.objects.stats.evicted, 1);
  assert.ok(s.objects.bytes <= budget);
  // a live mount, and the kernel opened every object: nothing may be removed (it may be bound, rule 4)
  s.live.push('ws_1');
  for (const i of [0, 2, 3]) readFileSync(join(s.paths.dir, name(i)));
  await new Promise((r) => setTimeout(r, 100)); // the inotify queue is read every 20 ms
  assert.equal(s.objects.stats.kernelOpens, 3);
  s.objects.request(f[1].hex);
  await s.objects.idle();
  assert.equal(s.objects.stats.skipped, 1, 'the fill did not fit and nothing could go');
  assert.equal(s.objects.count, 3);
  // once no mount is live, the least recently used go (opened in the order 0, 2, 3) until f[1] fits
  s.live.length = 0;
  s.objects.request(f[1].hex);
  await s.objects.idle();
  const left = readdirSync(s.paths.dir).sort();
  assert.ok(left.includes(name(1)) && left.includes(name(3)) && !left.includes(name(0)), `left: ${left.join(' ')}`);
  assert.ok(s.objects.bytes <= budget);
});

test('an ambiguous short name is removed and never filled again; its bytes stay charged while a mount that may bind it lives', async (t) => {
  const s = await setup(t, 2);
  const [a] = s.fx.files;
  s.objects.request(a.hex);
  await s.objects.idle();
  const short = shortContentName(a.hex);
  readFileSync(join(s.paths.dir, short)); // opened by "the kernel"
  await new Promise((r) => setTimeout(r, 100));
  s.live.push('ws_1');
  const bytes = s.objects.bytes;
  s.objects.remove(short);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(existsSync(join(s.paths.dir, short)), false);
  assert.equal(s.objects.bytes, 0);
  assert.equal(s.objects.removedBytes, bytes, 'charged while ws_1 may hold it bound');
  s.live.length = 0;
  assert.equal(s.objects.removedBytes, 0, 'freed once that mount has ended');
  s.objects.request(a.hex);
  await readThrough(s.plane, a.hex, a.data.length);
  await s.objects.idle();
  assert.equal(existsSync(join(s.paths.dir, short)), false, 'never filled again');
});

test('a fill whose bytes come out short fails with E_INTEGRITY and publishes nothing (fault injected in the source)', async (t) => {
  const dir = await tmp(t);
  const fx = await fixture(dir, { count: 1, packBytes: 1 << 20, sizes: () => 50_000 });
  const f = fx.files[0];
  const source: ObjectCacheSource = {
    lookup: () => ({ size: f.data.length }),
    read: (_hex, offset, length) => Promise.resolve(f.data.subarray(offset, offset + length - 1)),
  };
  const paths = { dir: join(dir, 'objects'), stagingDir: join(dir, 'objects.tmp'), markerFile: join(dir, 'objects.unsynced') };
  const objects = new ObjectCache({
    ...paths,
    source,
    budgetBytes: () => 1 << 30,
    nameIsFree: () => true,
    liveMounts: () => [],
    quietMs: 0,
    bootId: 'b',
  });
  await objects.open();
  objects.start();
  const errors: unknown[] = [];
  objects.on('fill-error', (e) => errors.push(e.error));
  objects.request(f.hex);
  await objects.idle();
  await objects.close();
  assert.deepEqual(errors.map(code), ['E_INTEGRITY']);
  assert.deepEqual(readdirSync(paths.dir), []);
  assert.deepEqual(readdirSync(paths.stagingDir), []);
  assert.equal(objects.stats.fillErrors, 1);
});

test('rule 6: a marker of another boot empties CACHE at open; one of this boot keeps it; a clean close leaves no marker', async (t) => {
  const s = await setup(t, 2);
  s.objects.request(s.fx.files[0].hex);
  await s.objects.idle();
  assert.equal(readFileSync(s.paths.markerFile, 'utf8').trim(), 'boot-a', 'the marker names the boot while fills are not synced');
  await s.objects.close();
  assert.equal(existsSync(s.paths.markerFile), false, 'synced at close');
  const reopen = async (bootId: string) => {
    const o = new ObjectCache({
      ...s.paths,
      source: s.plane.source,
      budgetBytes: () => 1 << 30,
      nameIsFree: () => true,
      liveMounts: () => [],
      bootId,
    });
    const resets: string[] = [];
    o.on('reset', (e) => resets.push(e.reason));
    await o.open();
    await o.close();
    return { count: o.count, resets };
  };
  writeFileSync(s.paths.markerFile, 'boot-a\n');
  assert.deepEqual(await reopen('boot-a'), { count: 1, resets: [] }, 'a daemon crash without an OS crash loses nothing');
  writeFileSync(s.paths.markerFile, 'boot-a\n');
  assert.deepEqual(await reopen('boot-b'), { count: 0, resets: ['unsynced-boot'] });
  assert.deepEqual(readdirSync(s.paths.dir), []);
  assert.equal(existsSync(s.paths.markerFile), false);
});

test('open: anything in CACHE that is not a regular file under a short name is removed (a symlink is not followed); staging is emptied', async (t) => {
  const dir = await tmp(t);
  const paths = { dir: join(dir, 'objects'), stagingDir: join(dir, 'objects.tmp'), markerFile: join(dir, 'objects.unsynced') };
  mkdirSync(paths.dir, { recursive: true });
  mkdirSync(paths.stagingDir, { recursive: true });
  const outside = join(dir, 'outside');
  writeFileSync(outside, 'keep me');
  const short = shortContentName('ab'.repeat(32));
  symlinkSync(outside, join(paths.dir, short));
  writeFileSync(join(paths.dir, 'junk'), 'x');
  writeFileSync(join(paths.stagingDir, 'half-written'), 'x');
  const good = shortContentName('cd'.repeat(32));
  writeFileSync(join(paths.dir, good), 'data');
  const source: ObjectCacheSource = { lookup: () => undefined, read: () => Buffer.alloc(0) };
  const o = new ObjectCache({ ...paths, source, budgetBytes: () => 1 << 30, nameIsFree: () => true, liveMounts: () => [], bootId: 'b' });
  await o.open();
  await o.close();
  assert.deepEqual(readdirSync(paths.dir), [good]);
  assert.deepEqual(readdirSync(paths.stagingDir), []);
  assert.equal(readFileSync(outside, 'utf8'), 'keep me');
  assert.ok(lstatSync(outside).isFile());
  assert.equal(o.count, 1);
});
