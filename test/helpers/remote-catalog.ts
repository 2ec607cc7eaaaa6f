import { Worker } from 'node:worker_threads';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { AwcError, type ErrorJson } from '../../src/core/errors.js';

/**
 * A `Catalog` whose calls run in a worker thread on a connection of its own
 * (catalog-worker.ts opens `url` with `openCatalog`): another writer, as another process
 * would be, for adapters whose driver blocks its thread while it waits for a lock
 * (better-sqlite3). Every method of the port is forwarded (arguments and results are
 * structured-cloned; an AwcError comes back with its code, hint and details); `close` ends
 * the worker.
 */
export async function openRemoteCatalog(url: string): Promise<Catalog> {
  const worker = new Worker(new URL('./catalog-worker.js', import.meta.url), { workerData: { url } });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  let next = 0;
  let closed = false;
  await new Promise<void>((resolve, reject) => {
    worker.once('message', (m: { ready: boolean; error?: ErrorJson }) => (m.ready ? resolve() : reject(AwcError.fromJSON(m.error ?? {}))));
    worker.once('error', reject);
  });
  worker.on('message', (m: { id: number; value?: unknown; error?: ErrorJson }) => {
    const p = pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    if (m.error) p.reject(AwcError.fromJSON(m.error));
    else p.resolve(m.value);
  });
  worker.on('error', (err) => {
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  });
  const call = (method: string, args: unknown[]) =>
    new Promise<unknown>((resolve, reject) => {
      if (closed) return reject(new Error('the remote catalog is closed'));
      const id = next++;
      pending.set(id, { resolve, reject });
      worker.postMessage({ id, method, args });
    });
  return new Proxy({} as Catalog, {
    get(_t, prop) {
      if (prop === 'then' || typeof prop !== 'string') return undefined; // not a thenable
      if (prop === 'blobIndex') return (ns: string) => ({ lookup: (digests: unknown) => call('blobIndex.lookup', [ns, digests]) });
      if (prop === 'identity')
        return () =>
          new Proxy({}, { get: (_i, m) => (typeof m === 'string' ? (...args: unknown[]) => call(`identity.${m}`, args) : undefined) });
      if (prop === 'close')
        return async () => {
          if (closed) return;
          await call('close', []).catch(() => undefined);
          closed = true;
          await worker.terminate();
        };
      return (...args: unknown[]) => call(prop, args);
    },
  });
}
