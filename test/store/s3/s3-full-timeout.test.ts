/**
 * The S3 store's errors for a full server and for one that stops answering, through the real
 * SDK and a fault proxy in front of a real S3 server (test/helpers/fault-proxy.ts): a server out
 * of disk (MinIO's 507 `XMinioStorageFull`) or over quota (Ceph RGW's 403 `QuotaExceeded`) is
 * E_NO_SPACE with a hint, never E_OBJECT_STORE_DENIED or a retry storm; a request left unanswered
 * past `requestTimeoutMs` is E_OBJECT_STORE_UNAVAILABLE (retryable) after the SDK's attempts.
 * test/service/workspace/store-faults.test.ts drives the same faults through a checkpoint.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { S3ObjectStore } from '../../../src/store/s3/s3-object-store.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { startFaultProxy, type Fault } from '../../helpers/fault-proxy.js';
import { freshBucket } from '../../helpers/s3.js';

for (const fault of ['full', 'quota'] as const satisfies readonly Fault[]) {
  test(`S3ObjectStore: a PUT answered "${fault}" is E_NO_SPACE with a hint; nothing is stored`, async (t) => {
    const b = await freshBucket(t);
    const proxy = await startFaultProxy(b.endpoint, (_n, req) => (req.method === 'PUT' ? fault : undefined));
    t.after(() => proxy.close());
    const store = new S3ObjectStore({ ...b.options('full/'), endpoint: proxy.endpoint, maxAttempts: 3 });
    t.after(() => store.close());
    const err = await rejectsWith(store.put('packs/ee/x', randomBytes(1000)), 'E_NO_SPACE');
    assert.equal(err.retryable, true);
    assert.match(err.hint, /full|quota/);
    assert.match(err.message, fault === 'full' ? /XMinioStorageFull/ : /QuotaExceeded/);
    const direct = new S3ObjectStore(b.options('full/'));
    t.after(() => direct.close());
    assert.equal(await direct.has('packs/ee/x'), false);
  });
}

test('S3ObjectStore: requests left unanswered past requestTimeoutMs are E_OBJECT_STORE_UNAVAILABLE after the attempts', async (t) => {
  const b = await freshBucket(t);
  const seed = new S3ObjectStore(b.options('hang/'));
  t.after(() => seed.close());
  await seed.put('packs/ff/there', Buffer.from('stored'));
  const proxy = await startFaultProxy(b.endpoint, (_n, req) => (req.method === 'GET' || req.method === 'PUT' ? 'hang' : undefined));
  t.after(() => proxy.close());
  const store = new S3ObjectStore({ ...b.options('hang/'), endpoint: proxy.endpoint, maxAttempts: 2, requestTimeoutMs: 300 });
  t.after(() => store.close());
  const started = Date.now();
  const get = await rejectsWith(store.get('packs/ff/there'), 'E_OBJECT_STORE_UNAVAILABLE');
  assert.equal(get.retryable, true);
  assert.ok(Date.now() - started < 20_000, 'the client timeout ended it');
  await rejectsWith(store.put('packs/ff/new', randomBytes(100)), 'E_OBJECT_STORE_UNAVAILABLE');
  assert.ok(proxy.seen.faults.hang >= 4, `each call was tried twice (${proxy.seen.faults.hang} hung requests)`);
});
