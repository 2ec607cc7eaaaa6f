import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { openCatalog } from '../../src/catalog/open/open-catalog.js';
import { AwcError } from '../../src/core/errors.js';

/**
 * Worker-thread side of `openRemoteCatalog` (remote-catalog.ts): opens its own catalog
 * (its own connection: for SQLite its own better-sqlite3 handle, which may block this
 * thread on a lock without blocking the test) and answers `{ id, method, args }` calls.
 */

type Call = { id: number; method: string; args: unknown[] };

const errorJson = (err: unknown) =>
  err instanceof AwcError ? err.toJSON() : { code: 'E_INTERNAL', message: String((err as Error)?.stack ?? err) };

/** Opens the catalog and serves calls on `port` until the worker is terminated. */
async function serve(port: MessagePort, url: string): Promise<void> {
  let cat: Catalog;
  try {
    cat = await openCatalog(url);
    port.postMessage({ ready: true });
  } catch (err) {
    port.postMessage({ ready: false, error: errorJson(err) });
    return;
  }
  port.on('message', (m: Call) => {
    const run = async () => {
      if (m.method === 'blobIndex.lookup') return cat.blobIndex(m.args[0] as string).lookup(m.args[1] as never);
      if (m.method.startsWith('identity.')) {
        const port = cat.identity() as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
        const fn = port[m.method.slice('identity.'.length)];
        if (typeof fn !== 'function') throw new Error(`no catalog method ${m.method}`);
        return fn.apply(port, m.args);
      }
      const fn = (cat as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[m.method];
      if (typeof fn !== 'function') throw new Error(`no catalog method ${m.method}`);
      return fn.apply(cat, m.args);
    };
    run().then(
      (value) => port.postMessage({ id: m.id, value }),
      (err) => port.postMessage({ id: m.id, error: errorJson(err) }),
    );
  });
}

// (the test runner also loads this file as a test file of its own: then it does nothing)
if (!isMainThread && parentPort) void serve(parentPort, (workerData as { url: string }).url);
