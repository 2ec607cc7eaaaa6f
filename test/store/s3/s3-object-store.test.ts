import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { CreateMultipartUploadCommand, ListMultipartUploadsCommand, ListObjectsV2Command, UploadPartCommand } from '@aws-sdk/client-s3';
import { sha256 } from '../../../src/core/digest.js';
import { AwcError } from '../../../src/core/errors.js';
import { openObjectStore } from '../../../src/store/open/open-object-store.js';
import { S3ObjectStore } from '../../../src/store/s3/s3-object-store.js';
import { objectStoreContract } from '../../contracts/object-store.contract.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { startFaultProxy, type Fault } from '../../helpers/fault-proxy.js';
import { listObjects } from '../../helpers/list-objects.js';
import { freshBucket, startS3Server, type TestBucket } from '../../helpers/s3.js';

const MiB = 1024 * 1024;

// The whole contract, on a real S3 protocol server (s3rver), under a key prefix, with the default
// multipart threshold (its 64 MiB object goes up in four 16 MiB parts).
const buckets = new WeakMap<S3ObjectStore, TestBucket>();
objectStoreContract('S3ObjectStore', {
  async create() {
    const bucket = await freshBucket();
    const store = new S3ObjectStore(bucket.options('awc/fleet/'));
    buckets.set(store, bucket);
    return store;
  },
  async cleanup(store) {
    const s = store as S3ObjectStore;
    s.close();
    await buckets.get(s)!.remove();
  },
});

/** Keys of the bucket as the server lists them (no prefix stripped). */
async function rawKeys(b: TestBucket): Promise<string[]> {
  const r = await b.client.send(new ListObjectsV2Command({ Bucket: b.name }));
  return (r.Contents ?? []).map((o) => o.Key!).sort();
}

async function uploadsOf(b: TestBucket): Promise<{ key: string; id: string }[]> {
  const r = await b.client.send(new ListMultipartUploadsCommand({ Bucket: b.name }));
  return (r.Uploads ?? []).map((u) => ({ key: u.Key!, id: u.UploadId! }));
}

test('S3ObjectStore: objects live under the key prefix; stores with other prefixes of one bucket do not see them', async (t) => {
  const b = await freshBucket(t);
  const a = new S3ObjectStore(b.options('fleet/a/'));
  const c = new S3ObjectStore(b.options('fleet/c/'));
  const whole = new S3ObjectStore(b.options(''));
  t.after(() => [a, c, whole].forEach((s) => s.close()));
  await a.put('packs/00/one', Buffer.from('one'));
  await c.put('packs/00/two', Buffer.from('two!'));
  assert.deepEqual(await rawKeys(b), ['fleet/a/packs/00/one', 'fleet/c/packs/00/two']);
  assert.deepEqual(await listObjects(a, ''), new Map([['packs/00/one', 3]]));
  assert.deepEqual(await listObjects(c, 'packs/'), new Map([['packs/00/two', 4]]));
  assert.equal(await a.has('packs/00/two'), false);
  assert.equal((await whole.get('fleet/c/packs/00/two')).toString(), 'two!');
  await rejectsWith(a.put('../x', Buffer.from('x')), 'E_PATH_TRAVERSAL');
  assert.throws(
    () => new S3ObjectStore({ ...b.options(), prefix: 'no-slash' }),
    (e: unknown) => (e as AwcError).code === 'E_CONFIG',
  );
});

test('openObjectStore: an s3:// URL opens an S3ObjectStore on its bucket, prefix and endpoint (credentials from AWS_* variables)', async (t) => {
  const b = await freshBucket(t);
  const saved = { ...process.env };
  Object.assign(process.env, b.env);
  t.after(() => {
    for (const k of Object.keys(b.env)) if (saved[k] === undefined) delete process.env[k];
    Object.assign(process.env, saved);
  });
  const store = await openObjectStore(b.url('team/awc'));
  assert.ok(store instanceof S3ObjectStore);
  t.after(() => (store as S3ObjectStore).close());
  await store.put('packs/ab/k', Buffer.from('via the URL'));
  assert.deepEqual(await rawKeys(b), ['team/awc/packs/ab/k']);
});

test('S3ObjectStore: a body over the multipart threshold goes up in parts and reads back byte-identical; no upload is left', async (t) => {
  const b = await freshBucket(t);
  const created: string[] = [];
  const store = new S3ObjectStore({
    ...b.options('mp/'),
    multipartThresholdBytes: MiB,
    partBytes: 256 * 1024,
    partConcurrency: 3,
    onMultipartCreated: (key, id) => void created.push(`${key} ${id}`),
  });
  t.after(() => store.close());
  const body = randomBytes(2.5 * MiB + 17); // 11 parts, the last one short
  await store.put('packs/aa/big', body);
  assert.equal(created.length, 1, 'one multipart upload');
  const got = await store.get('packs/aa/big');
  assert.equal(got.length, body.length);
  assert.equal(sha256(got), sha256(body));
  for (const [offset, length] of [
    [256 * 1024 - 5, 10],
    [MiB - 1, 2],
    [body.length - 20, 100],
  ] as const)
    assert.equal(sha256(await store.get('packs/aa/big', { offset, length })), sha256(body.subarray(offset, offset + length)));
  const small = randomBytes(MiB - 1); // under the threshold: one PUT
  await store.put('packs/aa/small', small);
  assert.equal(created.length, 1);
  assert.equal(sha256(await store.get('packs/aa/small')), sha256(small));
  assert.deepEqual(await uploadsOf(b), []);
});

test('S3ObjectStore: a multipart upload whose parts keep failing is aborted; nothing is stored or left', async (t) => {
  const b = await freshBucket(t);
  const proxy = await startFaultProxy(b.endpoint, (_n, req) =>
    req.method === 'PUT' && req.url?.includes('partNumber=2') ? 'internal' : undefined,
  );
  t.after(() => proxy.close());
  const store = new S3ObjectStore({
    ...b.options('mp/'),
    endpoint: proxy.endpoint,
    multipartThresholdBytes: MiB,
    partBytes: 256 * 1024,
    maxAttempts: 2,
  });
  t.after(() => store.close());
  const err = await rejectsWith(store.put('packs/bb/big', randomBytes(2 * MiB)), 'E_OBJECT_STORE_UNAVAILABLE');
  assert.equal(err.details?.attempts, 2);
  assert.equal(proxy.seen.faults.internal, 2, 'part 2 was tried twice');
  assert.ok(
    proxy.seen.methods.some((m) => m.startsWith('DELETE') && m.includes('uploadId=')),
    'the upload was aborted',
  );
  assert.deepEqual(await uploadsOf(b), []);
  assert.equal(await store.has('packs/bb/big'), false);
});

test('S3ObjectStore.sweepIncomplete: an abandoned multipart upload is kept by sweepIncomplete(1 h), removed by sweepIncomplete(0); other prefixes untouched', async (t) => {
  const b = await freshBucket(t);
  const store = new S3ObjectStore(b.options('awc/'));
  t.after(() => store.close());
  const abandon = async (key: string): Promise<string> => {
    const u = await b.client.send(new CreateMultipartUploadCommand({ Bucket: b.name, Key: key }));
    await b.client.send(new UploadPartCommand({ Bucket: b.name, Key: key, UploadId: u.UploadId, PartNumber: 1, Body: randomBytes(1000) }));
    return u.UploadId!;
  };
  const mine = await abandon('awc/packs/cc/dead-writer');
  const other = await abandon('other/packs/cc/not-ours');
  await store.put('packs/cc/kept', Buffer.from('a stored object is never touched'));
  assert.deepEqual(await store.sweepIncomplete(60 * 60 * 1000), { removed: 0, bytes: 0 });
  assert.deepEqual((await uploadsOf(b)).map((u) => u.id).sort(), [mine, other].sort());
  assert.deepEqual(await store.sweepIncomplete(0), { removed: 1, bytes: 0 });
  assert.deepEqual(await uploadsOf(b), [{ key: 'other/packs/cc/not-ours', id: other }]);
  assert.equal((await store.get('packs/cc/kept')).toString(), 'a stored object is never touched');
  assert.deepEqual(await store.sweepIncomplete(0), { removed: 0, bytes: 0 });
});

test('S3ObjectStore.sweepIncomplete on a server without ListMultipartUploads (s3rver as published) is E_UNSUPPORTED with a hint', async (t) => {
  const plain = await startS3Server({ plain: true });
  const b = await freshBucket(t, plain.endpoint); // (removed before the server stops: after-hooks run in order)
  t.after(() => plain.stop());
  const store = new S3ObjectStore(b.options('awc/'));
  t.after(() => store.close());
  await store.put('packs/dd/x', Buffer.from('x'));
  const err = await rejectsWith(store.sweepIncomplete(0), 'E_UNSUPPORTED');
  assert.match(err.message, /ListMultipartUploads/);
  assert.match(err.hint, /S3-compatible server/);
});

for (const fault of ['slowdown', 'internal', 'throttle', 'reset'] as const satisfies readonly Fault[]) {
  test(`S3ObjectStore retries: the first 3 requests of each call answered "${fault}" → put, get, list, delete still succeed`, async (t) => {
    const b = await freshBucket(t);
    let failNext = 0;
    const proxy = await startFaultProxy(b.endpoint, () => (failNext-- > 0 ? fault : undefined));
    t.after(() => proxy.close());
    const store = new S3ObjectStore({ ...b.options('r/'), endpoint: proxy.endpoint, maxAttempts: 5 });
    t.after(() => store.close());
    const body = randomBytes(200_000);
    const call = async <T>(f: () => Promise<T>): Promise<T> => {
      failNext = 3;
      return f();
    };
    await call(() => store.has('packs/ee/warm-up')); // the bucket check and the HEAD
    await call(() => store.put('packs/ee/k', body));
    assert.equal(sha256(await call(() => store.get('packs/ee/k'))), sha256(body));
    assert.equal(sha256(await call(() => store.get('packs/ee/k', { offset: 1000, length: 5000 }))), sha256(body.subarray(1000, 6000)));
    assert.deepEqual(await call(() => listObjects(store, '')), new Map([['packs/ee/k', body.length]]));
    await call(() => store.delete('packs/ee/k'));
    assert.equal(await store.has('packs/ee/k'), false);
    assert.ok(proxy.seen.faults[fault] >= 18, `faults were injected (${proxy.seen.faults[fault]})`);
  });
}

test('S3ObjectStore retries: a response body cut off midway is read again', async (t) => {
  const b = await freshBucket(t);
  let cut = 0;
  const proxy = await startFaultProxy(b.endpoint, (_n, req) =>
    req.method === 'GET' && req.url?.includes('/packs/') && cut-- > 0 ? 'cut' : undefined,
  );
  t.after(() => proxy.close());
  const store = new S3ObjectStore({ ...b.options(), endpoint: proxy.endpoint, maxAttempts: 4 });
  t.after(() => store.close());
  const body = randomBytes(3 * MiB);
  await store.put('packs/ff/cut', body);
  cut = 2;
  assert.equal(sha256(await store.get('packs/ff/cut')), sha256(body));
  assert.equal(proxy.seen.faults.cut, 2);
  cut = 10;
  const err = await rejectsWith(store.get('packs/ff/cut'), 'E_OBJECT_STORE_UNAVAILABLE');
  assert.equal(err.retryable, true);
  assert.equal(err.details?.attempts, 4);
});

test('S3ObjectStore retries: more failures than maxAttempts → E_OBJECT_STORE_UNAVAILABLE, retryable, naming the attempts', async (t) => {
  const b = await freshBucket(t);
  const store0 = new S3ObjectStore(b.options());
  await store0.put('packs/00/there', Buffer.from('x'));
  store0.close();
  for (const fault of ['slowdown', 'reset'] as const) {
    const proxy = await startFaultProxy(b.endpoint);
    const store = new S3ObjectStore({ ...b.options(), endpoint: proxy.endpoint, maxAttempts: 3 });
    try {
      assert.equal(await store.has('packs/00/there'), true); // the bucket is checked, through the healthy proxy
      const before = proxy.seen.requests;
      proxy.plan = () => fault;
      const err = await rejectsWith(store.get('packs/00/there'), 'E_OBJECT_STORE_UNAVAILABLE');
      assert.equal(err.retryable, true);
      assert.equal(err.details?.attempts, 3, fault);
      assert.match(err.message, /after 3 attempts/);
      if (fault === 'slowdown') assert.equal(err.details?.s3Code, 'SlowDown');
      assert.equal(proxy.seen.requests - before, 3, `${fault}: exactly maxAttempts requests`);
    } finally {
      store.close();
      await proxy.close();
    }
  }
});

test('S3ObjectStore errors: wrong credentials, a missing bucket, a closed port → their codes with hints, no secret anywhere', async (t) => {
  const b = await freshBucket(t);
  const secret = `s3cr3t-${randomBytes(8).toString('hex')}`;
  const token = `t0ken-${randomBytes(8).toString('hex')}`;
  const noSecret = (e: AwcError): void => {
    const all = JSON.stringify({ ...e.toJSON(), stack: e.stack, cause: String(e.cause ?? '') });
    assert.ok(!all.includes(secret) && !all.includes(token), `no credential in ${all}`);
  };

  const denied = new S3ObjectStore({
    ...b.options(),
    credentials: { accessKeyId: 'AKIAWRONGWRONGWRONG', secretAccessKey: secret, sessionToken: token },
  });
  t.after(() => denied.close());
  for (const op of [() => denied.put('packs/00/x', Buffer.from('x')), () => denied.get('packs/00/x'), () => listObjects(denied, '')]) {
    const e = await rejectsWith(op(), 'E_OBJECT_STORE_DENIED');
    assert.match(e.hint, /AWS_ACCESS_KEY_ID/);
    assert.equal(e.details?.status, 403); // (HeadBucket first: its 403 has no body to name InvalidAccessKeyId)
    assert.match(e.message, /access denied/);
    noSecret(e);
  }

  const missing = new S3ObjectStore({ ...b.options(), bucket: `${b.name}-missing` });
  t.after(() => missing.close());
  for (const op of [() => missing.has('packs/00/x'), () => missing.size('packs/00/x'), () => missing.put('packs/00/x', Buffer.from('x'))]) {
    const e = await rejectsWith(op(), 'E_BUCKET_NOT_FOUND');
    assert.match(e.message, new RegExp(`${b.name}-missing`));
    assert.match(e.hint, /create it/);
  }

  const port = await new Promise<number>((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const p = (srv.address() as { port: number }).port;
      srv.close(() => resolve(p));
    });
  });
  const closed = new S3ObjectStore({
    ...b.options(),
    endpoint: `http://user:${secret}@127.0.0.1:${port}`,
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: secret },
    maxAttempts: 2,
  });
  t.after(() => closed.close());
  const e = await rejectsWith(closed.get('packs/00/x'), 'E_OBJECT_STORE_UNAVAILABLE');
  assert.equal(e.retryable, true);
  assert.match(e.hint, /Nothing answers/);
  assert.match(e.message, /ECONNREFUSED/);
  noSecret(e);
});
