import { randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { AwcError, toAwcError } from '../../core/errors.js';
import { parseCatalogUrl, parseObjectStoreUrl, redactUrl } from '../../config/backend-url.js';
import type { AwcConfig } from '../../config/config.js';
import { openCatalog } from '../../catalog/open/open-catalog.js';
import { openObjectStore } from '../../store/open/open-object-store.js';
import type { DoctorCheck } from '../../drivers/port/mount-driver.js';

/** A doctor check of a backend, with the AWC code and hint of what failed. */
export interface BackendCheck extends DoctorCheck {
  name: 'catalog' | 'object store';
  /** The error's code when the check failed on an error (E_CATALOG_BUSY, E_FORMAT, E_PERMISSION…). */
  code?: string;
  hint?: string;
}

/** The failing check of an error, never with a password in it. */
function failed(name: BackendCheck['name'], where: string, err: unknown): BackendCheck {
  const e = err instanceof AwcError ? err : toAwcError(err);
  const scrub = (s: string) => s.split(where).join(redactUrl(where));
  return { name, ok: false, detail: `${redactUrl(where)}: ${scrub(e.message)}`, code: e.code, hint: e.hint ? scrub(e.hint) : undefined };
}

/**
 * What `awc doctor` says about the two backends of `config`:
 * - catalog: reachable, and its schema (migrations applied of those this awc knows; an
 *   older schema is migrated by the next command that opens it, a newer one means this awc
 *   is too old: E_FORMAT);
 * - object store: writable and readable, by a probe object (`doctor-probe-<random>`, put,
 *   read back, compared and deleted).
 * An embedded backend under a home that does not exist yet is reported as not created, and
 * nothing is created. Never throws: a failure is a check with `ok: false`, its code and hint.
 * URLs in details are redacted (no password).
 */
export async function checkBackends(config: AwcConfig): Promise<BackendCheck[]> {
  return [await checkCatalog(config.catalog), await checkObjectStore(config.objectStore)];
}

async function checkCatalog(url: string): Promise<BackendCheck> {
  const name = 'catalog';
  const where = parseCatalogUrl(url);
  if (where.kind === 'sqlite' && !existsSync(where.path))
    return { name, ok: false, detail: `${url}: not created yet (\`awc snapshot import <dir>\` creates it)` };
  // an empty file is a lost catalog, never one to create here (opening it would migrate it: store-binding.ts)
  if (where.kind === 'sqlite' && statSync(where.path).size === 0)
    return failed(name, url, new AwcError('E_CATALOG_EMPTY', `the catalog file ${where.path} is empty (0 bytes)`));
  try {
    const cat = await openCatalog(url);
    try {
      const { applied, latest } = await cat.schema();
      const last = applied.at(-1) ?? '(none)';
      return {
        name,
        ok: true,
        detail: `${redactUrl(url)}: reachable, schema ${last} (${last === latest ? 'the latest' : `this awc knows up to ${latest}`})`,
      };
    } finally {
      await cat.close();
    }
  } catch (err) {
    return failed(name, url, err);
  }
}

async function checkObjectStore(url: string): Promise<BackendCheck> {
  const name = 'object store';
  const where = parseObjectStoreUrl(url);
  if (where.kind === 'file' && !existsSync(where.path))
    return { name, ok: false, detail: `${url}: not created yet (\`awc snapshot import <dir>\` creates it)` };
  const key = `doctor-probe-${randomBytes(8).toString('hex')}`;
  const body = randomBytes(64);
  try {
    const store = await openObjectStore(url);
    await store.put(key, body);
    try {
      const back = await store.get(key);
      if (!back.equals(body))
        throw new AwcError('E_INTEGRITY', 'a probe object read back different bytes', { hint: 'Check the object store.' });
    } finally {
      await store.delete(key);
    }
    return { name, ok: true, detail: `${redactUrl(url)}: writable (a probe object was written, read back and deleted)` };
  } catch (err) {
    return failed(name, url, err);
  }
}
