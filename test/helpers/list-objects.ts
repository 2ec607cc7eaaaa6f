import { strict as assert } from 'node:assert';
import type { ObjectStore } from '../../src/store/object/object-store.js';

/** Every key under `prefix` of `store` with its size in bytes; asserts that no key is listed twice. */
export async function listObjects(store: ObjectStore, prefix = ''): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const o of store.list(prefix)) {
    assert.ok(!out.has(o.key), `${o.key} listed twice`);
    out.set(o.key, o.size);
  }
  return out;
}
