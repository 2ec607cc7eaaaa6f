import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { objectStoreContract } from '../../contracts/object-store.contract.js';
import { errorCode } from '../../helpers/assert-errors.js';
import { listObjects } from '../../helpers/list-objects.js';
import { makeTempDir, removeTempDir, tempDirFor } from '../../helpers/temp-dir.js';

const roots = new WeakMap<FsObjectStore, string>();
objectStoreContract('FsObjectStore', {
  async create() {
    const dir = await makeTempDir('awc-fs-store-');
    const store = new FsObjectStore(join(dir, 'objects'));
    roots.set(store, dir);
    return store;
  },
  async cleanup(store) {
    await removeTempDir(roots.get(store as FsObjectStore)!);
  },
});

test('FsObjectStore: put, get, range, has, size, list, delete', async (t) => {
  const dir = await tempDirFor(t, 'awc-fs-store-');
  const s = new FsObjectStore(join(dir, 'objects'));
  const body = randomBytes(100_000);
  await s.put('packs/ab/abcdef', body);
  await s.put('packs/cd/cdef', Buffer.from('x'));
  await s.put('other/thing', Buffer.from('y'));
  assert.ok((await s.get('packs/ab/abcdef')).equals(body));
  assert.ok((await s.get('packs/ab/abcdef', { offset: 1000, length: 5000 })).equals(body.subarray(1000, 6000)));
  assert.equal((await s.get('packs/ab/abcdef', { offset: 99_990, length: 100 })).length, 10);
  assert.equal((await s.get('packs/ab/abcdef', { offset: 200_000, length: 100 })).length, 0);
  assert.equal(await s.has('packs/ab/abcdef'), true);
  assert.equal(await s.has('packs/ab/nope'), false);
  assert.equal(await s.size('packs/ab/abcdef'), 100_000);
  assert.deepEqual(
    await listObjects(s, 'packs/'),
    new Map([
      ['packs/ab/abcdef', 100_000],
      ['packs/cd/cdef', 1],
    ]),
  );
  assert.deepEqual([...(await listObjects(s, 'packs/a')).keys()], ['packs/ab/abcdef']);
  assert.equal((await listObjects(s)).size, 3);
  assert.equal((await listObjects(s, 'nothing/here/')).size, 0);
  await s.delete('packs/cd/cdef');
  await s.delete('packs/cd/cdef');
  assert.equal(await s.has('packs/cd/cdef'), false);
});

test('FsObjectStore: missing objects, idempotent create-only put, bad keys, no temp files left', async (t) => {
  const dir = await tempDirFor(t, 'awc-fs-store-');
  const s = new FsObjectStore(dir);
  await assert.rejects(s.get('packs/00/missing'), (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND');
  await assert.rejects(s.get('packs/00/missing', { offset: 0, length: 1 }), (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND');
  await assert.rejects(s.size('packs/00/missing'), (e) => errorCode(e) === 'E_OBJECT_NOT_FOUND');
  await s.put('k/one', Buffer.from('first'));
  await s.put('k/one', Buffer.from('second')); // an existing object is never replaced
  assert.equal((await s.get('k/one')).toString(), 'first');
  await Promise.all(Array.from({ length: 8 }, () => s.put('k/two', Buffer.from('same'))));
  assert.equal((await s.get('k/two')).toString(), 'same');
  assert.deepEqual((await readdir(join(dir, 'k'))).sort(), ['one', 'two']);
  for (const bad of ['../x', '/abs', 'a//b', 'a/./b', 'a/../b', '', 'a/.tmp-1', 'sp ace']) {
    await assert.rejects(s.put(bad, Buffer.from('x')), (e) => errorCode(e) === 'E_PATH_TRAVERSAL', bad);
  }
});
