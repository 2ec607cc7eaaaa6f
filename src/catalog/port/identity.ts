/**
 * A catalog's identity and the object store it is bound to (migration 0005, table
 * `catalog_identity`; the protocol is in src/catalog/open/store-binding.ts and
 * docs/reference/formats.md#catalog-and-store-identity).
 */

/** The identity row of a catalog. Ids are `cat_<32 hex>` and `st_<32 hex>`; times ISO-8601 UTC. */
export interface CatalogIdentity {
  catalogId: string;
  storeId: string;
  /** `pending`: agreed in the catalog, the store's identity object not yet confirmed; `bound`: confirmed. */
  state: 'pending' | 'bound';
  createdAt: string;
  boundAt: string | null;
}

/** What a catalog holds, as the binding judges whether it is empty. */
export interface CatalogContent {
  /** Namespaces, snapshots and pack rows (any state but `deleted`). */
  namespaces: number;
  snapshots: number;
  packs: number;
}

/** The identity part of the catalog port (`Catalog.identity()`). */
export interface CatalogIdentityPort {
  /** The identity row, or undefined when none was recorded yet (a new catalog, or one older than 0005). */
  read(): Promise<CatalogIdentity | undefined>;
  /**
   * Inserts `proposed` as a `pending` row unless a row exists (insert-if-absent: many hosts may
   * race here, one wins), then returns the row as stored, the winner's.
   */
  propose(proposed: { catalogId: string; storeId: string }): Promise<CatalogIdentity>;
  /**
   * Replaces a `pending` row that still names `stale`'s ids with a new `pending` row naming
   * `next` (compare-and-swap: of many hosts taking over the same row, one wins); returns the
   * row as stored, the winner's (a host whose proposer died takes its row over this way).
   */
  takeOver(stale: { catalogId: string; storeId: string }, next: { catalogId: string; storeId: string }): Promise<CatalogIdentity>;
  /** pending → bound (idempotent) for the row naming `catalogId`; returns the row as stored. */
  confirm(catalogId: string): Promise<CatalogIdentity>;
  /** Replaces the row with a `bound` one (the operator's `awc fsck --adopt-store` on an empty catalog). */
  replace(identity: { catalogId: string; storeId: string }): Promise<CatalogIdentity>;
  /** Counts of what the catalog holds (an empty catalog holds nothing). */
  content(): Promise<CatalogContent>;
}
