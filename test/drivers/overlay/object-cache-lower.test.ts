/**
 * The host object cache as a second data-only lower (`lowerdir=LAYER::CACHE::CONTENT`,
 * docs/explanation/host-cache-lower.md), through the CLI against the real kernel: a workspace's
 * reads fill CACHE with whole objects (one copy on the host: their chunks leave the chunk
 * cache); another workspace then reads them from CACHE with no FUSE READ at all; a write in a
 * workspace never reaches CACHE; a marker of another boot empties it; `objectCache: off`
 * mounts without it.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import {
  appendFileSync,
  closeSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { execSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shortContentName } from '../../../src/core/content-name.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { awc, awcOk, cleanupMounts } from '../../helpers/cli.js';

const report = detectDriver('auto');
const skip = report.driver === 'overlay' ? false : `overlay not available: ${report.reason}`;

/** The sum of one metric's samples (labels matching) in `awc metrics` text. */
function metric(home: string, name: string, labels: Record<string, string> = {}): number {
  const text = awc(home, ['metrics'], {}, { json: false }).stdout;
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) total += Number(m[3]);
  }
  return total;
}

/** Waits (up to 20 s) until `fn()` is true. */
async function until(what: string, fn: () => boolean): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (fn()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out waiting for ${what}`);
}

/** Every regular file of `dir` (relative path → bytes). */
function readAll(dir: string, rels: string[]): Map<string, Buffer> {
  return new Map(rels.map((r) => [r, readFileSync(join(dir, r))]));
}

function dropCaches(): void {
  writeFileSync('/proc/sys/vm/drop_caches', '3');
}

describe('the host object cache as a data-only lower (real overlayfs and FUSE)', { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-objcache-'));
  const home = join(work, 'home');
  const fixture = join(work, 'fixture');
  const cacheDir = join(home, 'host', 'cache');
  const objectsDir = join(cacheDir, 'objects');
  const files = new Map<string, Buffer>();
  let ws: string[] = [];
  /** Objects in CACHE after the first workspace's read. */
  let objects = 0;

  before(() => {
    mkdirSync(join(fixture, 'sub'), { recursive: true });
    for (let i = 0; i < 10; i++) {
      const rel = i % 2 ? `sub/f${i}` : `f${i}`;
      const data = randomBytes(30_000 + i * 37_000);
      writeFileSync(join(fixture, rel), data);
      files.set(rel, data);
    }
    files.set('dup', files.get('f0')!); // the same content twice: one object
    writeFileSync(join(fixture, 'dup'), files.get('f0')!);
    linkSync(join(fixture, 'f2'), join(fixture, 'hard'));
    files.set('hard', files.get('f2')!);
    // a sparse file: a 5 MiB hole, then 4 KiB of data (holes are never stored, and stay holes in CACHE)
    const fd = openSync(join(fixture, 'sparse'), 'w');
    writeSync(fd, randomBytes(4096), 0, 4096, 5 * 2 ** 20);
    closeSync(fd);
    files.set('sparse', readFileSync(join(fixture, 'sparse')));
    assert.equal(files.get('sparse')!.length, 5 * 2 ** 20 + 4096);
    writeFileSync(join(fixture, 'empty'), '');
    files.set('empty', Buffer.alloc(0));
  });

  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  /**
   * The dense objects of the fixture a read fills CACHE with (distinct non-empty contents, by
   * short name: a dense object's digest is the SHA-256 of its bytes); the sparse file is one
   * more object, whose digest is taken over its extents and chunks (src/core/sparse.ts).
   */
  const expected = (): Map<string, Buffer> => {
    const m = new Map<string, Buffer>();
    for (const [rel, data] of files)
      if (data.length > 0 && rel !== 'sparse') m.set(shortContentName(createHash('sha256').update(data).digest('hex')), data);
    return m;
  };

  test('reads through one workspace fill CACHE with whole objects, and their chunks leave the chunk cache', async () => {
    awcOk(home, ['snapshot', 'import', fixture, '--name', 'base']);
    ws = awcOk(home, ['fork', 'base', '--count', '3']).workspaces.map((w: { id: string }) => w.id);
    awcOk(home, ['mount', ws[0], join(work, 'm1')]);
    const line = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .find((l) => l.includes(` ${join(work, 'm1')} overlay `))!;
    assert.match(line, new RegExp(`lowerdir=[^,]*::${objectsDir}::${join(home, 'host', 'content')}[,\\s]`), line);
    const got = readAll(join(work, 'm1'), [...files.keys()]);
    for (const [rel, data] of files) assert.ok(got.get(rel)!.equals(data), rel);
    const want = expected();
    await until('every object read whole is in CACHE', () => existsSync(objectsDir) && readdirSync(objectsDir).length === want.size + 1);
    const names = readdirSync(objectsDir);
    const sparseShort = names.find((n) => !want.has(n))!;
    assert.deepEqual(names.filter((n) => n !== sparseShort).sort(), [...want.keys()].sort());
    want.set(sparseShort, files.get('sparse')!);
    for (const [short, data] of want) {
      const path = join(objectsDir, short);
      assert.ok(readFileSync(path).equals(data), short);
      assert.equal(statSync(path).mode & 0o7777, 0o600);
      assert.equal(statSync(path).uid, 0);
    }
    assert.equal(statSync(objectsDir).mode & 0o7777, 0o700);
    assert.ok(statSync(join(objectsDir, sparseShort)).blocks * 512 <= 64 * 1024, 'the holes of a sparse object stay holes');
    // one copy on the host: no chunk file is left in the chunk cache (two-hex directories)
    await until('the chunk cache gave up the chunks of objects in CACHE', () =>
      readdirSync(cacheDir)
        .filter((d) => /^[0-9a-f]{2}$/.test(d))
        .every((d) => readdirSync(join(cacheDir, d)).length === 0),
    );
    assert.equal(metric(home, 'awc_object_cache_objects'), want.size);
    objects = want.size;
    assert.equal(metric(home, 'awc_object_cache_events', { event: 'published' }), want.size);
  });

  test('another workspace reads every object from CACHE, without a FUSE READ, after the page cache is dropped', async () => {
    awcOk(home, ['mount', ws[1], join(work, 'm2')]);
    const readsBefore = metric(home, 'awc_fuse_operations_total', { op: 'read' });
    const opensBefore = metric(home, 'awc_object_cache_events', { event: 'kernel_open' });
    execSync('sync');
    dropCaches();
    const got = readAll(join(work, 'm2'), [...files.keys()]);
    for (const [rel, data] of files) assert.ok(got.get(rel)!.equals(data), rel);
    assert.equal(metric(home, 'awc_fuse_operations_total', { op: 'read' }), readsBefore, 'no READ reached the FUSE server');
    // the daemon reads the kernel's opens of CACHE files from inotify every second
    await until(
      `the kernel's opens of the ${objects} CACHE files`,
      () => metric(home, 'awc_object_cache_events', { event: 'kernel_open' }) - opensBefore >= objects,
    );
  });

  test('a write in a workspace copies the file up and never changes CACHE (rule 1)', () => {
    const short = shortContentName(createHash('sha256').update(files.get('f4')!).digest('hex'));
    appendFileSync(join(work, 'm2', 'f4'), 'changed');
    assert.ok(readFileSync(join(objectsDir, short)).equals(files.get('f4')!));
    assert.ok(readFileSync(join(work, 'm1', 'f4')).equals(files.get('f4')!), 'the other workspace still reads the original');
    assert.ok(readFileSync(join(work, 'm2', 'f4')).equals(Buffer.concat([files.get('f4')!, Buffer.from('changed')])));
  });

  test('a marker of fills never synced before a reboot empties CACHE at the next start; reads stay correct through FUSE', () => {
    awcOk(home, ['unmount', ws[0]]);
    awcOk(home, ['unmount', ws[1]]);
    awcOk(home, ['daemon', 'stop']);
    assert.ok(readdirSync(objectsDir).length > 0);
    writeFileSync(join(cacheDir, 'objects.unsynced'), 'a-boot-that-is-not-this-one\n');
    awcOk(home, ['mount', ws[2], join(work, 'm3')]);
    assert.deepEqual(readdirSync(objectsDir), [], 'CACHE emptied before anything was mounted with it');
    assert.equal(existsSync(join(cacheDir, 'objects.unsynced')), false);
    const got = readAll(join(work, 'm3'), [...files.keys()]);
    for (const [rel, data] of files) assert.ok(got.get(rel)!.equals(data), rel);
  });

  test('objectCache off: overlays are mounted LAYER::CONTENT, with no CACHE', () => {
    awcOk(home, ['unmount', ws[2]]);
    awcOk(home, ['daemon', 'stop']);
    awcOk(home, ['mount', ws[2], join(work, 'm3')], { AWC_OBJECT_CACHE: 'off' });
    const line = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .find((l) => l.includes(` ${join(work, 'm3')} overlay `))!;
    assert.doesNotMatch(line, /cache\/objects/, line);
    const got = readAll(join(work, 'm3'), [...files.keys()]);
    for (const [rel, data] of files) assert.ok(got.get(rel)!.equals(data), rel);
  });
});
