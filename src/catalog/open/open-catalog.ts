import { lstat } from 'node:fs/promises';
import { AwcError } from '../../core/errors.js';
import { parseCatalogUrl, redactUrl } from '../../config/backend-url.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { Catalog } from '../port/catalog.js';
import { bindCatalogToStore, readStoreIdentity, storeHoldsPacks, type BindOptions } from './store-binding.js';

/**
 * Opens the catalog a configuration names (`config.catalog`, see src/config/backend-url.ts):
 * `sqlite:` → `SqliteCatalog`, `postgres://` → `PostgresCatalog` (both migrated on open). The one place where a URL picks a
 * catalog adapter. Each adapter is imported only when its URL names it (a SQLite home never loads
 * pg; CLI latency, docs/explanation/cli-latency.md).
 * @throws E_CONFIG (bad URL), what the adapter's `open` throws (E_CATALOG_BUSY, E_CATALOG_UNAVAILABLE, E_FORMAT, E_READ_ONLY…)
 */
export async function openCatalog(url: string): Promise<Catalog> {
  const where = parseCatalogUrl(url);
  switch (where.kind) {
    case 'sqlite': {
      const { SqliteCatalog } = await import('../sqlite/sqlite-catalog.js');
      return SqliteCatalog.open(where.path);
    }
    case 'postgres': {
      const { PostgresCatalog } = await import('../postgres/postgres-catalog.js');
      return PostgresCatalog.open(where.url);
    }
  }
}

/**
 * Refuses to go on when the configured SQLite catalog file is missing or empty (0 bytes: SQLite
 * would open it as a new, empty database) while `store` holds packs or an identity: an
 * empty catalog is never re-created in front of a store with data. Reads the store only
 * then (`storeUrl`: for messages, redacted); a PostgreSQL catalog is judged by {@link openBoundCatalog} after it opens.
 * @throws E_CATALOG_EMPTY, what the store throws
 */
export async function refuseLostCatalog(url: string, store: ObjectStore, storeUrl: string): Promise<void> {
  const c = parseCatalogUrl(url);
  if (c.kind !== 'sqlite' || c.path === ':memory:') return;
  let size: number;
  try {
    size = (await lstat(c.path)).size;
  } catch {
    size = 0; // missing (or unreadable: the open reports that)
  }
  if (size > 0) return;
  const id = await readStoreIdentity(store);
  if (id || (await storeHoldsPacks(store)))
    throw new AwcError(
      'E_CATALOG_EMPTY',
      `the catalog file ${c.path} is missing or empty, and the object store holds ${id ? `store ${id.storeId} of catalog ${id.catalogId}` : 'packs'} (object store ${redactUrl(storeUrl)})`,
      {
        hint: 'Restore the catalog file from a copy, or fix AWC_CATALOG if it names the wrong file; to rebuild a catalog from the store instead, run `awc fsck --adopt-store` (docs/how-to/recover-a-catalog.md). Nothing was created.',
        details: { catalog: c.path, store: id && { storeId: id.storeId, catalogId: id.catalogId } },
      },
    );
}

/**
 * Opens the catalog `url` names in front of `store` and checks that the two belong together
 * (src/catalog/open/store-binding.ts), recording their identity on a new home or the first open
 * after the upgrade (`storeUrl`: the store's URL, for messages, redacted). What `Awc.open` and the host daemon use;
 * `opts` as bindCatalogToStore takes them (`awc fsck` opens with `lostPacks: 'report'`).
 * @throws E_CATALOG_EMPTY, E_STORE_MISMATCH, E_FORMAT, and what `openCatalog` throws
 */
export async function openBoundCatalog(url: string, store: ObjectStore, storeUrl: string, opts: BindOptions = {}): Promise<Catalog> {
  const where = { catalog: redactUrl(url), store: redactUrl(storeUrl) };
  await refuseLostCatalog(url, store, storeUrl);
  const catalog = await openCatalog(url);
  try {
    await bindCatalogToStore(catalog, store, where, opts);
  } catch (err) {
    await catalog.close().catch(() => undefined);
    throw err;
  }
  return catalog;
}
