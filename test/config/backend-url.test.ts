import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { AwcError } from '../../src/core/errors.js';
import { fileUrl, parseCatalogUrl, parseObjectStoreUrl, redactUrl, sqliteUrl } from '../../src/config/backend-url.js';
import { loadConfig, pathsOf } from '../../src/config/config.js';

const configError = (fn: () => unknown, key: string) =>
  assert.throws(fn, (e: unknown) => e instanceof AwcError && e.code === 'E_CONFIG' && e.message.includes(key) && (e.hint ?? '').length > 0);

describe('backend URLs (catalog, objectStore)', () => {
  test('catalog: sqlite paths (one or three slashes, normalised), postgres URLs; others refused', () => {
    assert.deepEqual(parseCatalogUrl('sqlite:/var/lib/awc/catalog.sqlite'), { kind: 'sqlite', path: '/var/lib/awc/catalog.sqlite' });
    assert.deepEqual(parseCatalogUrl('sqlite:///a/./b/../c.sqlite'), { kind: 'sqlite', path: '/a/c.sqlite' });
    assert.deepEqual(parseCatalogUrl('postgres://u:p@db:5432/awc'), { kind: 'postgres', url: 'postgres://u:p@db:5432/awc' });
    assert.equal(parseCatalogUrl('postgresql://db/awc').kind, 'postgres');
    for (const bad of ['sqlite:relative.sqlite', 'mysql://db/awc', '', 'sqlite:/a%zz']) configError(() => parseCatalogUrl(bad), 'catalog');
  });

  test('issue 24 item 9: a relative file: URL is called a relative file URL (not an unknown scheme) and the message says how to write it', () => {
    for (const url of ['file:objects', 'file:./objects', 'file://objects/x']) {
      for (const fn of [() => parseObjectStoreUrl(url), () => loadConfig({ home: '/tmp/awc-no-such-home' }, { AWC_OBJECT_STORE: url })])
        assert.throws(fn, (e: unknown) => {
          assert.ok(e instanceof AwcError && e.code === 'E_CONFIG', String(e));
          assert.match(e.message, /objectStore/);
          assert.match(e.message, /a relative file URL/);
          assert.match(e.message, /file:\/absolute\/dir or file:\/\/\/absolute\/dir/);
          assert.doesNotMatch(e.message, /unknown scheme/);
          return true;
        });
    }
    assert.throws(() => parseObjectStoreUrl('file:/a%zz'), /bad %-escape/);
    assert.throws(() => parseObjectStoreUrl('ftp://x/y'), /unknown scheme/);
  });

  test('object store: file paths; s3 bucket, prefix, endpoint, region, path style', () => {
    assert.deepEqual(parseObjectStoreUrl('file:///srv/awc/objects'), { kind: 'file', path: '/srv/awc/objects' });
    assert.deepEqual(parseObjectStoreUrl('s3://my-bucket/fleet/a?endpoint=http://127.0.0.1:9000&region=eu-west-1'), {
      kind: 's3',
      bucket: 'my-bucket',
      prefix: 'fleet/a/',
      endpoint: 'http://127.0.0.1:9000',
      region: 'eu-west-1',
      forcePathStyle: true,
      multipartThresholdBytes: undefined,
      partBytes: undefined,
    });
    assert.deepEqual(parseObjectStoreUrl('s3://bkt'), {
      kind: 's3',
      bucket: 'bkt',
      prefix: '',
      endpoint: undefined,
      region: undefined,
      forcePathStyle: false,
      multipartThresholdBytes: undefined,
      partBytes: undefined,
    });
    const tuned = parseObjectStoreUrl('s3://bkt/p?multipartThreshold=131072&partSize=65536') as {
      multipartThresholdBytes?: number;
      partBytes?: number;
    };
    assert.deepEqual([tuned.multipartThresholdBytes, tuned.partBytes], [131072, 65536]);
    assert.equal(
      (parseObjectStoreUrl('s3://bkt/p?endpoint=https://s3.example&forcePathStyle=false') as { forcePathStyle: boolean }).forcePathStyle,
      false,
    );
    for (const bad of [
      'file:rel',
      'gs://bkt/x',
      's3://B/x',
      's3://bkt/../x',
      's3://bkt/a//b',
      's3://bkt/x?endpoint=ftp://h',
      's3://bkt/x?forcePathStyle=yes',
      's3://bkt/x?secret=1',
      's3://bkt/x?partSize=0',
      's3://bkt/x?multipartThreshold=1.5',
      's3://bkt/x?partSize=-1',
      's3://bkt/x?multipartThreshold=',
    ])
      configError(() => parseObjectStoreUrl(bad), 'objectStore');
  });

  test('the default URLs round-trip a path with % in it', () => {
    assert.deepEqual(parseCatalogUrl(sqliteUrl('/tmp/a%20b/catalog.sqlite')), { kind: 'sqlite', path: '/tmp/a%20b/catalog.sqlite' });
    assert.deepEqual(parseObjectStoreUrl(fileUrl('/tmp/100%/objects')), { kind: 'file', path: '/tmp/100%/objects' });
  });

  test('redactUrl hides a password and nothing else', () => {
    assert.equal(redactUrl('postgres://awc:s3cret@db:5432/awc'), 'postgres://awc:***@db:5432/awc');
    assert.equal(redactUrl('postgres://db/awc'), 'postgres://db/awc');
  });

  test('loadConfig: defaults under the home, AWC_CATALOG / AWC_OBJECT_STORE / AWC_CACHE_DIR override, bad values refused', () => {
    const home = '/tmp/awc-backend-url-none';
    const d = loadConfig({ home }, {});
    assert.equal(d.catalog, `sqlite:${home}/catalog.sqlite`);
    assert.equal(d.objectStore, `file:${home}/objects`);
    assert.equal(pathsOf(d).cache, `${home}/host/cache`);
    const c = loadConfig({ home }, { AWC_CATALOG: 'sqlite:/x/c.sqlite', AWC_OBJECT_STORE: 'file:/y/o', AWC_CACHE_DIR: '/z/cache' });
    const p = pathsOf(c);
    assert.deepEqual([p.catalog, p.objects, p.cache], ['/x/c.sqlite', '/y/o', '/z/cache']);
    configError(() => loadConfig({ home }, { AWC_CATALOG: 'nope' }), 'catalog');
    configError(() => loadConfig({ home }, { AWC_OBJECT_STORE: 's3://x' }), 'objectStore');
    configError(() => loadConfig({ home }, { AWC_CACHE_DIR: 'relative' }), 'cacheDir');
  });
});
