import { AwcError } from '../../core/errors.js';

/**
 * Quotas per namespace (docs/reference/quotas.md): limits the catalog checks inside the
 * transactions that add to a namespace: the snapshot commit of an import
 * (`Catalog.createSnapshot`), the checkpoint commit (`Catalog.commitCheckpoint`) and fork
 * (`Catalog.forkWorkspaces`). Over a limit the commit is refused with `E_QUOTA` and writes
 * nothing (its uploaded packs are garbage for gc, as for any failed commit).
 */

/** The length of the daily window, ms (judged by the database's clock). */
export const QUOTA_DAY_MS = 24 * 60 * 60 * 1000;

/** A namespace's limits; null (or absent in a patch) is no limit. Bytes are pack (stored) bytes. */
export interface NamespaceQuota {
  /** Most bytes of the namespace's packs that are not deleted (what `packStats().bytes` counts). */
  storedBytes: number | null;
  /** Most bytes of packs the namespace's commits added in the last 24 h (database clock). */
  dailyNewBytes: number | null;
  /** Most workspaces of the namespace. */
  workspaces: number | null;
}

/** A change of limits (`Catalog.setQuota`): a number sets the limit, null removes it, absent keeps it. */
export type QuotaPatch = Partial<NamespaceQuota>;

/** What a namespace uses now, as the quotas count it. */
export interface QuotaUsage {
  /** Bytes of packs not deleted (live, condemned or being deleted: gc has not freed them yet). */
  storedBytes: number;
  /** Bytes of packs committed in the last {@link QUOTA_DAY_MS} by the database's clock. */
  dailyNewBytes: number;
  /** Workspaces. */
  workspaces: number;
  /** The database's clock when counted, ms since the epoch. */
  nowMs: number;
}

/** The quota part of the catalog port (a block of its own in `Catalog`). */
export interface CatalogQuotaPort {
  /** The limits of `namespace`, or undefined when it has none (no row, or an unknown namespace). */
  quota(namespace: string): Promise<NamespaceQuota | undefined>;
  /**
   * Changes the limits of `namespace` (creating the namespace on first use) in one transaction and
   * returns them. A row whose limits are all null stays (it still serializes commits). @throws E_USAGE (a limit that is not a non-negative integer)
   */
  setQuota(namespace: string, patch: QuotaPatch): Promise<NamespaceQuota>;
  /** Removes the limits of `namespace`; false when it had none. */
  clearQuota(namespace: string): Promise<boolean>;
  /** What `namespace` uses now (zeros for an unknown namespace). */
  quotaUsage(namespace: string): Promise<QuotaUsage>;
}

/** Checks a patch: each given limit null or a non-negative safe integer. @throws E_USAGE */
export function checkQuotaPatch(patch: QuotaPatch): void {
  for (const key of ['storedBytes', 'dailyNewBytes', 'workspaces'] as const) {
    const v = patch[key];
    if (v === undefined || v === null) continue;
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new AwcError('E_USAGE', `quota ${key} must be a non-negative integer, not ${String(v)}`);
    }
  }
}
