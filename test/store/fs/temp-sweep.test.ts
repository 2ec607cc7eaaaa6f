import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';

/** A checkpoint killed during a pack upload leaves `.tmp-…` files in the store: the daemon's start removes old ones. */
describe('leftover temporary objects', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-temp-sweep-'));
  after(() => rmSync(work, { recursive: true, force: true }));
  const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);

  test('awc daemon start removes temporary objects older than an hour and keeps fresh ones', () => {
    const home = join(work, 'home');
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    try {
      awcOk(home, ['snapshot', 'import', src], { AWC_MOUNT_DRIVER: 'copy' });
      const packDir = dirname(join(home, 'objects', findPack(join(home, 'objects'))));
      const old = join(packDir, '.tmp-99999993-0123456789ab');
      const fresh = join(packDir, '.tmp-99999994-0123456789ab');
      writeFileSync(old, Buffer.alloc(1024 * 1024));
      writeFileSync(fresh, 'still being written');
      utimesSync(old, twoHoursAgo, twoHoursAgo);
      awcOk(home, ['daemon', 'start']);
      assert.equal(existsSync(old), false, 'the old temporary object is gone');
      assert.equal(existsSync(fresh), true, 'a fresh one (a put in progress) is kept');
      assert.equal(readdirSync(packDir).filter((n) => !n.startsWith('.tmp-')).length, 1, 'the pack itself is kept');
    } finally {
      cleanupMounts(home, work);
    }
  });

  test('FsObjectStore.sweepIncomplete: only old .tmp- regular files of writers that no longer run, never through a symlink', async () => {
    const root = join(work, 'store');
    const store = new FsObjectStore(root);
    await store.put('packs/ab/abcd', Buffer.from('pack'));
    const outside = join(work, 'outside.txt');
    writeFileSync(outside, "not the store's");
    utimesSync(outside, twoHoursAgo, twoHoursAgo);
    symlinkSync(outside, join(root, 'packs', 'ab', '.tmp-link'));
    // writers that no longer run (pids above Linux's pid_max, 2^22)
    const old = join(root, 'packs', 'ab', '.tmp-99999991-old');
    writeFileSync(old, 'x'.repeat(10));
    utimesSync(old, twoHoursAgo, twoHoursAgo);
    writeFileSync(join(root, 'packs', '.tmp-99999992-new'), 'y');
    // a writer that runs (this process): kept whatever its age and the grace
    const live = join(root, 'packs', 'ab', `.tmp-${process.pid}-live`);
    writeFileSync(live, 'z'.repeat(5));
    utimesSync(live, twoHoursAgo, twoHoursAgo);
    assert.deepEqual(await store.sweepIncomplete(3600_000), { removed: 1, bytes: 10 });
    assert.equal(existsSync(old), false);
    assert.equal(existsSync(outside), true);
    assert.equal(existsSync(join(root, 'packs', '.tmp-99999992-new')), true);
    assert.deepEqual(await store.sweepIncomplete(0), { removed: 1, bytes: 1 }, 'a grace of 0 takes the fresh one too');
    assert.equal(existsSync(live), true, "a live writer's file is never taken");
    assert.equal((await store.get('packs/ab/abcd')).toString(), 'pack');
  });
});

/** Key of the one pack under `objects`. */
function findPack(objects: string): string {
  const walk = (dir: string, rel: string): string | undefined => {
    for (const n of readdirSync(dir, { withFileTypes: true })) {
      const r = rel === '' ? n.name : `${rel}/${n.name}`;
      if (n.isDirectory()) {
        const f = walk(join(dir, n.name), r);
        if (f) return f;
      } else if (n.isFile()) return r;
    }
    return undefined;
  };
  const f = walk(objects, '');
  assert.ok(f, 'a pack exists');
  return f;
}
