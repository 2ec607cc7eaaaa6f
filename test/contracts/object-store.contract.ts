import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { sha256 } from '../../src/core/digest.js';
import type { ObjectStore } from '../../src/store/object/object-store.js';
import type { AdapterFactory } from './adapter-factory.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { listObjects } from '../helpers/list-objects.js';

/**
 * The contract every `ObjectStore` adapter passes (src/store/object/object-store.ts): every method,
 * E_OBJECT_NOT_FOUND, create-only idempotent puts, the bounds of ranged reads, listing, a
 * 64 MiB object and concurrent writers of one key. Objects are content-addressed, so every
 * read is checked against the sha256 of the bytes that were put (a store that damages an
 * upload, e.g. a streamed multipart body, fails here). After every test, every object the
 * store lists is read whole and checked against the digests of the bodies put under its key,
 * and every key put and not deleted must be listed (nothing lost, nothing made up).
 *
 * Usage, in the adapter's test file:
 *   objectStoreContract('FsObjectStore', { create: async () => new FsObjectStore(dir), cleanup: async () => rm(dir) });
 */
export function objectStoreContract(name: string, factory: AdapterFactory<ObjectStore>): void {
  describe(`ObjectStore contract: ${name}`, () => {
    let raw: ObjectStore;
    let store: ObjectStore;
    let puts: PutLog;
    beforeEach(async () => {
      raw = await factory.create();
      puts = new PutLog();
      store = puts.wrap(raw);
    });
    afterEach(async (t) => {
      try {
        // (after a failed test, only the cleanup: its own assertion is the one to read)
        if ((t as { passed?: boolean }).passed !== false) await puts.verifyEveryObject(raw);
      } finally {
        await factory.cleanup(raw);
      }
    });

    it('put then get returns the same bytes (by digest); has, size and list agree', async () => {
      for (const n of [1, 1000, 100_000, 1_048_577]) {
        const { key, body } = await putRandom(store, n);
        assertSameBytes(await store.get(key), body, `${key} (${n} bytes)`);
        assert.equal(await store.has(key), true);
        assert.equal(await store.size(key), n);
      }
      assert.equal((await listObjects(store, 'packs/')).size, 4);
      assert.equal(await store.has('packs/00/never-put'), false);
    });

    it('an empty object: stored, sized 0, listed, read whole and ranged as no bytes', async () => {
      const key = keyOf(Buffer.alloc(0));
      await store.put(key, new Uint8Array(0));
      assert.equal(await store.has(key), true);
      assert.equal(await store.size(key), 0);
      assert.equal((await store.get(key)).length, 0);
      assert.equal((await store.get(key, { offset: 0, length: 0 })).length, 0);
      assert.equal((await store.get(key, { offset: 0, length: 10 })).length, 0);
      assert.deepEqual(await listObjects(store, key), new Map([[key, 0]]));
    });

    it('ranged reads at the edges: offset 0, last byte, length 0, across and past the end', async () => {
      const n = 10_000;
      const { key, body } = await putRandom(store, n);
      const cases: [number, number, Buffer][] = [
        [0, 1, body.subarray(0, 1)],
        [0, n, body],
        [0, n + 1, body], // asks one byte too many: gets what exists
        [1234, 5000, body.subarray(1234, 6234)],
        [n - 1, 1, body.subarray(n - 1)],
        [n - 10, 100, body.subarray(n - 10)],
        [0, 0, Buffer.alloc(0)],
        [5000, 0, Buffer.alloc(0)],
        [n, 0, Buffer.alloc(0)],
        [n, 5, Buffer.alloc(0)], // starts at the end
        [n + 1000, 5, Buffer.alloc(0)], // starts past the end
      ];
      for (const [offset, length, want] of cases) {
        assertSameBytes(await store.get(key, { offset, length }), want, `${offset}+${length}`);
      }
    });

    it('a missing object: get, ranged get and size are E_OBJECT_NOT_FOUND; has is false; delete is no error', async () => {
      const key = 'packs/00/missing';
      await rejectsWith(store.get(key), 'E_OBJECT_NOT_FOUND');
      await rejectsWith(store.get(key, { offset: 0, length: 1 }), 'E_OBJECT_NOT_FOUND');
      await rejectsWith(store.size(key), 'E_OBJECT_NOT_FOUND');
      assert.equal(await store.has(key), false);
      await store.delete(key);
      assert.equal((await listObjects(store, '')).size, 0);
    });

    it('put is create-only and idempotent: the same bytes again, or other bytes under the key, leave the object as it was', async () => {
      const { key, body } = await putRandom(store, 4096);
      await store.put(key, body);
      assertSameBytes(await store.get(key), body, 'same bytes again');
      await store.put(key, randomBytes(100)); // an existing object is never replaced
      assertSameBytes(await store.get(key), body, 'other bytes under the key');
      assert.equal(await store.size(key), 4096);
      assert.deepEqual(await listObjects(store, key), new Map([[key, 4096]]));
    });

    it('list says when each object was stored (ms since the epoch, the store clock: within minutes of ours)', async () => {
      const before = Date.now();
      const { key } = await putRandom(store, 100);
      const listed = [];
      for await (const o of store.list(key)) listed.push(o);
      assert.equal(listed.length, 1);
      assert.equal(listed[0]!.key, key);
      assert.ok(Math.abs(listed[0]!.modifiedMs - before) < 5 * 60_000, `modifiedMs ${listed[0]!.modifiedMs} vs now ${before}`);
    });

    it('delete removes the object (twice is fine); a later put stores it again', async () => {
      const { key, body } = await putRandom(store, 777);
      await store.delete(key);
      assert.equal(await store.has(key), false);
      await rejectsWith(store.get(key), 'E_OBJECT_NOT_FOUND');
      await rejectsWith(store.size(key), 'E_OBJECT_NOT_FOUND');
      assert.equal((await listObjects(store, '')).size, 0);
      await store.delete(key);
      await store.put(key, body);
      assertSameBytes(await store.get(key), body, 'put after delete');
    });

    it('list: exact prefixes, partial segments, nested keys, many keys with their sizes', async () => {
      const many = 1100; // more than one page of an S3 listing (1000)
      const want = new Map<string, number>();
      const keys = Array.from({ length: many }, (_, i) => i);
      for (let i = 0; i < keys.length; i += 50) {
        await Promise.all(
          keys.slice(i, i + 50).map(async (j) => {
            const body = randomBytes(j % 97);
            const key = `packs/${keyOf(body).slice(6, 8)}/${String(j).padStart(5, '0')}-${sha256(body).slice(7)}`;
            await store.put(key, body);
            want.set(key, body.length);
          }),
        );
      }
      await store.put('other/thing', Buffer.from('y'));
      await store.put('packsx', Buffer.from('zz'));
      assert.deepEqual(await listObjects(store, 'packs/'), want);
      assert.equal((await listObjects(store, '')).size, many + 2);
      assert.deepEqual(await listObjects(store, 'other/'), new Map([['other/thing', 1]]));
      const sub = [...want.keys()][0]!.slice(0, 'packs/x'.length);
      assert.deepEqual(await listObjects(store, sub), new Map([...want].filter(([k]) => k.startsWith(sub))), `partial segment ${sub}`);
      assert.deepEqual([...(await listObjects(store, 'packs')).keys()].sort(), [...want.keys(), 'packsx'].sort());
      assert.equal((await listObjects(store, 'nothing/here/')).size, 0);
    });

    it('a 64 MiB object: whole and ranged reads across part boundaries match its digest', async () => {
      const MiB = 1024 * 1024;
      const { key, body } = await putRandom(store, 64 * MiB);
      assert.equal(await store.size(key), 64 * MiB);
      assertSameBytes(await store.get(key), body, 'whole 64 MiB');
      for (const [offset, length] of [
        [5 * MiB - 10, 20],
        [8 * MiB - 1, 2],
        [16 * MiB - 3, MiB + 6],
        [63 * MiB, MiB],
        [64 * MiB - 1, 10],
      ] as const) {
        assertSameBytes(await store.get(key, { offset, length }), body.subarray(offset, offset + length), `${offset}+${length}`);
      }
      assert.deepEqual(await listObjects(store, key), new Map([[key, 64 * MiB]]));
    });

    it('two concurrent puts of one key: both resolve and the object is one whole body', async () => {
      const body = randomBytes(300_000);
      const key = keyOf(body);
      await Promise.all(Array.from({ length: 8 }, () => store.put(key, body)));
      assertSameBytes(await store.get(key), body, 'eight puts of the same bytes');

      // Different bytes under one key (a caller bug for a content-addressed key): one of them wins whole.
      const a = randomBytes(200_000);
      const b = randomBytes(250_000);
      const k2 = 'packs/ff/raced';
      await Promise.all([store.put(k2, a), store.put(k2, b)]);
      const got = await store.get(k2);
      const d = sha256(got);
      assert.ok(d === sha256(a) || d === sha256(b), 'the stored object is one of the two bodies, not a mix');
      assert.equal(await store.size(k2), got.length);
      assert.equal(sha256(await store.get(k2)), d, 'and it stays that one');
    });
  });
}

/** What a test put and deleted, to check every stored object after it (see the suite's doc). */
class PutLog {
  private readonly digests = new Map<string, Set<string>>();
  private readonly live = new Set<string>();

  /** `store` with its puts and deletes recorded (a put is recorded before it is made: a racing put may be the one kept). */
  wrap(store: ObjectStore): ObjectStore {
    return {
      put: async (key, body) => {
        const set = this.digests.get(key) ?? new Set<string>();
        set.add(sha256(body));
        this.digests.set(key, set);
        await store.put(key, body);
        this.live.add(key);
      },
      get: (key, range) => store.get(key, range),
      has: (key) => store.has(key),
      size: (key) => store.size(key),
      delete: async (key) => {
        await store.delete(key);
        this.live.delete(key);
      },
      list: (prefix) => store.list(prefix),
      sweepIncomplete: (ms) => store.sweepIncomplete(ms),
    };
  }

  /** Every listed object reads whole as one of the bodies put under its key, with its listed size; every live key is listed. */
  async verifyEveryObject(store: ObjectStore): Promise<void> {
    const listed = await listObjects(store, '');
    for (const [key, size] of listed) {
      const want = this.digests.get(key);
      assert.ok(want, `${key} is stored but was never put`);
      const got = await store.get(key);
      assert.equal(got.length, size, `${key}: listed with ${size} bytes, reads ${got.length}`);
      assert.ok(want.has(sha256(got)), `${key}: the stored bytes match the digest of no body put under the key`);
    }
    for (const key of this.live) assert.ok(listed.has(key), `${key} was put (and not deleted) but is not listed`);
  }
}

/** The key AWC would give `body`: `packs/<2 hex>/<sha256 hex>`. */
function keyOf(body: Uint8Array): string {
  const hex = sha256(body).slice('sha256:'.length);
  return `packs/${hex.slice(0, 2)}/${hex}`;
}

async function putRandom(store: ObjectStore, n: number): Promise<{ key: string; body: Buffer }> {
  const body = randomBytes(n);
  const key = keyOf(body);
  await store.put(key, body);
  return { key, body };
}

/** Asserts `got` holds exactly `want`: same length and same sha256 (no huge diffs printed). */
function assertSameBytes(got: Uint8Array, want: Uint8Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: ${got.length} bytes instead of ${want.length}`);
  assert.equal(sha256(got), sha256(want), `${what}: the bytes read do not match the digest of the bytes put`);
}
