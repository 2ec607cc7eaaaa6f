import { redactUrl } from '../../config/backend-url.js';
import { bindCatalogToStore } from '../../catalog/open/store-binding.js';
import type { Awc } from '../workspace/awc.js';
import type { FsckOptions } from '../fsck/fsck.js';
import type { FsckReport } from '../fsck/fsck-report.js';

/**
 * `awc fsck` on a home the CLI opened with `checking` (Awc.open): the check (Awc.fsck), then
 * the catalog–store binding judged again with `lostPacks: 'report'` (src/catalog/open/store-binding.ts).
 * A catalog with no identity yet whose packs the store lacks gets one `store-unbound` problem
 * (the packs themselves are `pack-missing` problems, with the snapshots they break) and
 * nothing is recorded; once nothing is missing (after `--repair` dropped the lost packs, or
 * the right store was configured), the identity is recorded here, as any open would.
 * Report: `binding` filled in (docs/reference/fsck.md#the-report).
 * @throws what Awc.fsck and bindCatalogToStore throw (E_STORE_MISMATCH when the store is another catalog's)
 */
export async function fsckAndBind(awc: Awc, opts: Omit<FsckOptions, 'catalog' | 'store' | 'cacheDir'>): Promise<FsckReport> {
  const report = await awc.fsck(opts);
  const where = { catalog: redactUrl(awc.config.catalog), store: redactUrl(awc.config.objectStore) };
  const b = await bindCatalogToStore(awc.catalog, awc.store, where, { lostPacks: 'report' });
  report.binding = { outcome: b.outcome, catalogId: b.identity?.catalogId, storeId: b.identity?.storeId };
  if (b.outcome === 'unbound' && b.lost) {
    report.problems.unshift({
      kind: 'store-unbound',
      code: 'E_STORE_MISMATCH',
      message: `the catalog is not bound to this object store: the store lacks ${b.lost.missing} of the catalog's ${b.lost.packs} packs (each a pack-missing problem); every other command refuses with E_STORE_MISMATCH until they are in the store (the right AWC_OBJECT_STORE) or dropped (awc fsck --repair)`,
      snapshots: [],
    });
    report.ok = false;
  }
  return report;
}
