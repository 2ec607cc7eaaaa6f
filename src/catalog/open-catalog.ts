import { parseCatalogUrl } from '../config/backend-url.js';
import type { Catalog } from './catalog.js';

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
      const { SqliteCatalog } = await import('./sqlite/sqlite-catalog.js');
      return SqliteCatalog.open(where.path);
    }
    case 'postgres': {
      const { PostgresCatalog } = await import('./postgres/postgres-catalog.js');
      return PostgresCatalog.open(where.url);
    }
  }
}
