import type { ColumnType, Insertable, Selectable } from 'kysely';

/**
 * Table types of the catalog database, as Kysely sees them (snake_case column names).
 *
 * Portability rules (SQLite and PostgreSQL run the same migrations):
 * - ids and names are `text`; timestamps are `text` ISO-8601 UTC (`2025-01-31T12:00:00.000Z`),
 *   which sort correctly as strings;
 * - byte sizes and offsets are SQL `bigint`: better-sqlite3 returns them as JS numbers, `pg`
 *   returns them as decimal strings. Their select type is therefore `number | string` and
 *   every read goes through `Number()` (see `toNum` in sql/rows.ts);
 * - counts are SQL `integer` (a JS number on both).
 *
 * `namespace` columns hold the namespace's **id** (`namespaces.id`), never its name.
 */

/** A `bigint` column: written as a number, read as a number (SQLite) or a string (pg). */
export type BigIntColumn = ColumnType<number | string, number, number>;
/** A nullable `bigint` column. */
export type NullableBigIntColumn = ColumnType<number | string | null, number | null, number | null>;

/** Table `namespaces`: tenant boundaries. Created on first use by name. */
export interface NamespacesTable {
  /** `ns_` + time-sortable random suffix. */
  id: string;
  /** Unique, e.g. `default`. */
  name: string;
  created_at: string;
}

/** Table `packs`: one row per uploaded pack object. */
export interface PacksTable {
  /** Object-store key of the pack (primary key). */
  key: string;
  namespace: string;
  /** Pack object size in bytes. */
  size: BigIntColumn;
  blob_count: number;
  created_at: string;
  /** `live` | `condemned` | `deleting` | `deleted` (docs/explanation/gc.md#pack-states); default live (0003_gc). */
  state: ColumnType<string, string | undefined, string>;
  /** When gc condemned it, ms since the epoch by the database's clock; null while live (0003_gc). */
  condemned_at: ColumnType<number | string | null, number | null | undefined, number | null>;
  /** When gc finished deleting its object, ms by the database's clock; null until then (0003_gc). */
  deleted_at: ColumnType<number | string | null, number | null | undefined, number | null>;
  /** When a snapshot or checkpoint commit inserted the row, ms by the database's clock; null for older rows and gc's (0009_namespace_quotas). */
  committed_at_ms: ColumnType<number | string | null, number | null | undefined, number | null>;
}

/** Table `namespace_quotas`: a namespace's limits, null = no limit (0009_namespace_quotas). */
export interface NamespaceQuotasTable {
  /** The namespace's id (primary key). */
  namespace: string;
  /** Most bytes of packs (not deleted), or null. */
  stored_bytes: NullableBigIntColumn;
  /** Most bytes of packs committed in the last 24 h, or null. */
  daily_new_bytes: NullableBigIntColumn;
  /** Most workspaces, or null. */
  workspaces: number | null;
  updated_at: string;
}

/**
 * Table `namespace_usage`: a namespace's running totals, kept by every statement that changes
 * them (0010_namespace_usage, src/catalog/sql/usage-counter.ts); no row: zeros.
 */
export interface NamespaceUsageTable {
  /** The namespace's id (primary key). */
  namespace: string;
  /** Bytes of the namespace's packs whose state is not `deleted`. */
  stored_bytes: BigIntColumn;
  /** The namespace's workspaces. */
  workspaces: number;
}

/** Table `blobs`: the blob index, primary key (namespace, digest). */
export interface BlobsTable {
  namespace: string;
  /** `sha256:<hex>` of the uncompressed bytes. */
  digest: string;
  /** `chunk` | `tree` | `root` (BlobKind). */
  kind: string;
  /** Key of the pack holding the blob (references packs.key). */
  pack: string;
  /** Byte offset of the stored bytes in the pack. */
  offset: BigIntColumn;
  /** Stored (possibly compressed) length in bytes. */
  stored_length: BigIntColumn;
  /** Uncompressed length in bytes. */
  raw_length: BigIntColumn;
  /** `none` | `lz4` (Codec). */
  codec: string;
}

/** Table `snapshots`: immutable points; name unique per namespace where not null. */
export interface SnapshotsTable {
  /** `sn_` + time-sortable random suffix. */
  id: string;
  namespace: string;
  name: string | null;
  /** Digest of the snapshot's root object. */
  root: string;
  parent_id: string | null;
  message: string | null;
  created_at: string;
  file_count: number;
  /** Logical bytes of the snapshot's regular files. */
  byte_count: BigIntColumn;
  /** Labels as a JSON object of strings, keys sorted (0004_labels; catalog/labels.ts). */
  labels: ColumnType<string, string | undefined, string>;
  /** SnapshotClassCounts as JSON, or null when not counted (0006_snapshot_classes). */
  classes: ColumnType<string | null, string | null | undefined, string | null>;
}

/** Table `workspaces`: writable lines of work; name unique per namespace where not null. */
export interface WorkspacesTable {
  /** `ws_` + time-sortable random suffix. */
  id: string;
  namespace: string;
  name: string | null;
  base_snapshot_id: string;
  head_snapshot_id: string;
  /** `unmounted` | `mounted`. */
  mount_state: string;
  mount_path: string | null;
  /** `overlay` | `copy` while mounted. */
  mount_driver: string | null;
  mount_host: string | null;
  created_at: string;
  updated_at: string;
  /** The snapshot this workspace's host state (overlay layer or copy) was built from; null without host state (0003_gc). */
  layer_snapshot_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** Labels as a JSON object of strings, keys sorted (0004_labels; catalog/labels.ts). */
  labels: ColumnType<string, string | undefined, string>;
}

/** Table `gc_lock`: the fleet-wide gc lock, one row per lock name (0003_gc). Times in ms by the database's clock. */
export interface GcLockTable {
  name: string;
  owner: string;
  taken_at: BigIntColumn;
  expires_at: BigIntColumn;
}

/**
 * Table `hosts` (0002): one row per host id (`config.host`) and its current session. Times
 * are ms since the Unix epoch by the database's clock. A session lives while
 * `expires_at_ms` is ahead of the database's now; once past, it is dead for good (a
 * registration then starts the next `session`). See docs/explanation/leases.md.
 */
export interface HostsTable {
  id: string;
  /** The host's incarnation: 1, 2, … (a new one each time a registration finds the last one expired). */
  session: BigIntColumn;
  /** Where the host can be reached (informational), e.g. its hostname. */
  address: string | null;
  /** Pid of the daemon that registered the session. */
  pid: number | null;
  daemon_version: string | null;
  /** The session's lease TTL in ms (each heartbeat sets expires_at_ms = now + ttl_ms). */
  ttl_ms: BigIntColumn;
  started_at_ms: BigIntColumn;
  heartbeat_at_ms: BigIntColumn;
  expires_at_ms: BigIntColumn;
}

/**
 * Table `leases` (0002): who may hold private state of a workspace. Live while `(host,
 * session)` is the host's live session. `host` null: released. The row stays after a release
 * so `epoch` (the fencing token) only grows.
 */
export interface LeasesTable {
  workspace_id: string;
  host: string | null;
  session: NullableBigIntColumn;
  epoch: BigIntColumn;
  acquired_at_ms: BigIntColumn;
  /** The host whose expired lease this holder took over (`--steal`), and when; null otherwise. */
  taken_from: string | null;
  taken_at_ms: NullableBigIntColumn;
}

/** Table `catalog_identity` (0005): this catalog's id and the store it is bound to (src/catalog/store-identity.ts); one row, `name` 'home'. */
export interface CatalogIdentityTable {
  name: string;
  catalog_id: string;
  store_id: string;
  /** `pending` (agreed in the catalog, not yet confirmed in the store) or `bound`. */
  state: string;
  created_at: string;
  bound_at: string | null;
}

/**
 * Table `layer_images` (0007): the shared layer image of a snapshot root, primary key
 * (namespace, root); the first row of a root wins (docs/explanation/layer-images.md).
 */
export interface LayerImagesTable {
  namespace: string;
  /** `sha256:<hex>` of the snapshot root the image shows. */
  root: string;
  /** `sha256:<hex>` of the EROFS image bytes (the stored, lz4-compressed image: object `images/<aa>/<hex>`). */
  image: string;
  /** Image size in bytes. */
  image_bytes: BigIntColumn;
  /** `sha256:<hex>` of the content index bytes (the stored, lz4-compressed content index: object `images/<aa>/<hex>`). */
  index_digest: string;
  /** Content index size in bytes. */
  index_bytes: BigIntColumn;
  /** The host id that built the image. */
  built_by: string;
  /** When it was recorded, ms since the epoch by the database's clock. */
  created_at: BigIntColumn;
}

/**
 * Table `build_leases` (0008): who builds what an environment key names (`awc prepare`), so
 * that concurrent builds of one key run once (src/catalog/port/build-leases.ts). One row per
 * (namespace, key), kept after a release so the epoch only grows.
 */
export interface BuildLeasesTable {
  namespace: string;
  key: string;
  /** The builder (host and process), null once released. */
  holder: string | null;
  /** Raised by every acquisition: the token the holder renews and releases with. */
  epoch: BigIntColumn;
  acquired_at_ms: BigIntColumn;
  /** The lease is the holder's until then (ms since the epoch by the database's clock). */
  expires_at_ms: BigIntColumn;
  /** What the last build released made (a snapshot id), null when it failed or still runs. */
  result: string | null;
}

/**
 * The catalog database. Reserved for a later migration (not created yet): `audit_events`
 * (id, namespace, at, actor, action, subject, details JSON as text).
 */
export interface Database {
  namespaces: NamespacesTable;
  packs: PacksTable;
  blobs: BlobsTable;
  snapshots: SnapshotsTable;
  workspaces: WorkspacesTable;
  gc_lock: GcLockTable;
  hosts: HostsTable;
  leases: LeasesTable;
  catalog_identity: CatalogIdentityTable;
  layer_images: LayerImagesTable;
  build_leases: BuildLeasesTable;
  namespace_quotas: NamespaceQuotasTable;
  namespace_usage: NamespaceUsageTable;
}

/** A selected `snapshots` row. */
export type SnapshotRecord = Selectable<SnapshotsTable>;
/** A selected `workspaces` row. */
export type WorkspaceRecord = Selectable<WorkspacesTable>;
/** An insertable `blobs` row. */
export type NewBlobRecord = Insertable<BlobsTable>;
/** An insertable `workspaces` row. */
export type NewWorkspaceRecord = Insertable<WorkspacesTable>;
