import type { Kysely } from 'kysely';
import type { Digest } from '../../core/digest.js';
import { toAwcError } from '../../core/errors.js';
import type { BlobIndex } from '../../store/pack/pack-types.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import { sql } from 'kysely';
import type {
  Catalog,
  CheckpointCommit,
  HostRegistration,
  HostRow,
  HostSession,
  LeaseRow,
  ListFilter,
  NewSnapshot,
  SnapshotRow,
  WorkspaceRow,
  SnapshotClassCounts,
  LayerImageRecord,
  NewLayerImage,
} from '../port/catalog.js';
import { MIGRATIONS, MIGRATION_TABLE, migrateToLatest } from './migrations.js';
import type { Database } from './schema.js';
import type { GcCatalog } from '../port/gc-catalog.js';
import { BlobQueries } from './blob-queries.js';
import { GcQueries } from './gc-queries.js';
import { IdentityQueries } from './identity-queries.js';
import type { CatalogIdentityPort } from '../port/identity.js';
import { LayerImageQueries } from './layer-image-queries.js';
import { BuildLeaseQueries } from './build-lease-queries.js';
import type { BuildLease } from '../port/build-leases.js';
import { LeaseQueries } from './lease-queries.js';
import { SnapshotQueries } from './snapshot-queries.js';
import { SqlContext, type SqlCatalogOptions } from './sql-context.js';
import type { SqlDialect } from './sql-dialect.js';
import { WorkspaceQueries } from './workspace-queries.js';
import { setLabelsQuery } from './label-queries.js';
import type { LabelPatch, Labels } from '../port/labels.js';
import { QuotaQueries } from './quota-queries.js';
import type { NamespaceQuota, QuotaPatch, QuotaUsage } from '../port/quotas.js';

/**
 * `KyselyCatalog`: the `Catalog` port over any `Kysely<Database>`, with the queries written
 * once for every SQL dialect (one schema, one set of migrations: migrations.ts). A dialect
 * is a sibling folder that brings its Kysely dialect (driver, connection set-up,
 * transaction start) and its `SqlDialect` (errors, clock), and names the adapter: `sqlite/SqliteCatalog`
 * (better-sqlite3, the embedded default) and `postgres/PostgresCatalog` (pg).
 *
 * The queries are grouped by concern: `BlobQueries` (blob index, packs), `SnapshotQueries`
 * (snapshots, checkpoint commit), `WorkspaceQueries` (fork, lookups, mount state),
 * `LayerImageQueries` (records of shared layer images), over a shared `SqlContext`
 * (namespace ids, error-mapping read and transaction wrappers).
 *
 * Check-and-set operations (checkpoint commit, fork, mount) are written so they stay
 * correct under PostgreSQL's READ COMMITTED too: conditional `UPDATE … WHERE head = ?`
 * and unique indexes are the guards, pre-checks only give better messages.
 */
export class KyselyCatalog implements Catalog {
  /** The Kysely instance (exposed for tests, fsck and future service queries). */
  readonly db: Kysely<Database>;
  readonly #ctx: SqlContext;
  readonly #blobs: BlobQueries;
  readonly #snapshots: SnapshotQueries;
  readonly #workspaces: WorkspaceQueries;
  readonly #gc: GcQueries;
  readonly #leases: LeaseQueries;
  readonly #identity: IdentityQueries;
  readonly #images: LayerImageQueries;
  readonly #builds: BuildLeaseQueries;
  readonly #quotas: QuotaQueries;

  /**
   * Wraps a Kysely instance of one dialect, with that dialect's hooks (error mapping, clock). The caller
   * runs `migrate()` before use (the dialect adapters' `open` does).
   */
  constructor(db: Kysely<Database>, dialect: SqlDialect, opts: SqlCatalogOptions = {}) {
    this.db = db;
    this.#ctx = new SqlContext(db, dialect, opts);
    this.#blobs = new BlobQueries(this.#ctx);
    this.#quotas = new QuotaQueries(this.#ctx);
    this.#workspaces = new WorkspaceQueries(this.#ctx, this.#quotas);
    this.#gc = new GcQueries(this.#ctx);
    this.#identity = new IdentityQueries(this.#ctx);
    this.#images = new LayerImageQueries(this.#ctx);
    this.#builds = new BuildLeaseQueries(this.#ctx);
    this.#leases = new LeaseQueries(this.#ctx, this.#workspaces);
    this.#snapshots = new SnapshotQueries(this.#ctx, this.#blobs, this.#leases, this.#quotas);
  }

  /**
   * Applies pending migrations; returns the names applied (empty when up to date).
   * @throws E_FORMAT (written by a newer awc), E_CATALOG_BUSY, E_NO_SPACE / E_READ_ONLY / E_IO (the disk failed it)
   */
  async migrate(): Promise<string[]> {
    const ctx = this.#ctx;
    try {
      return await migrateToLatest(this.db, (err) => ctx.errors.classify(err) ?? toAwcError(err));
    } catch (err) {
      throw ctx.mapError(err);
    }
  }

  /** Blob index of `namespace` (see `BlobQueries.blobIndex`). */
  blobIndex(namespace: string): BlobIndex {
    return this.#blobs.blobIndex(namespace);
  }

  /** Number of blobs indexed in `namespace` (0 for an unknown namespace). */
  countBlobs(namespace: string): Promise<number> {
    return this.#blobs.countBlobs(namespace);
  }

  /** Pack totals of `namespace`: pack count, stored bytes (sum of pack sizes), blob count. */
  packStats(namespace: string): Promise<{ packs: number; bytes: number; blobs: number }> {
    return this.#blobs.packStats(namespace);
  }

  /** See `SnapshotQueries.createSnapshot`. @throws E_NAME_TAKEN, E_NOT_FOUND (parent), E_USAGE */
  createSnapshot(s: NewSnapshot): Promise<SnapshotRow> {
    return this.#snapshots.createSnapshot(s);
  }

  /** See `SnapshotQueries.commitCheckpoint`. @throws E_NOT_FOUND, E_CHANGED_DURING_READ, E_LEASE_LOST, E_NAME_TAKEN */
  commitCheckpoint(c: CheckpointCommit): Promise<SnapshotRow> {
    return this.#snapshots.commitCheckpoint(c);
  }

  /** See `SnapshotQueries.getSnapshot`. @throws E_NOT_FOUND, E_AMBIGUOUS */
  getSnapshot(namespace: string, ref: string): Promise<SnapshotRow> {
    return this.#snapshots.getSnapshot(namespace, ref);
  }

  /** See `SnapshotQueries.snapshotClasses`. */
  snapshotClasses(namespace: string, id: string): Promise<SnapshotClassCounts | undefined> {
    return this.#snapshots.snapshotClasses(namespace, id);
  }

  /** See `SnapshotQueries.setSnapshotClasses`. */
  setSnapshotClasses(namespace: string, id: string, classes: SnapshotClassCounts): Promise<void> {
    return this.#snapshots.setSnapshotClasses(namespace, id, classes);
  }

  /** Snapshots of `namespace`, newest first, those with every label of `filter.labels`. */
  listSnapshots(namespace: string, filter?: ListFilter): Promise<SnapshotRow[]> {
    return this.#snapshots.listSnapshots(namespace, filter);
  }

  /** See `SnapshotQueries.deleteSnapshot`. @throws E_NOT_FOUND, E_IN_USE */
  deleteSnapshot(namespace: string, id: string): Promise<void> {
    return this.#snapshots.deleteSnapshot(namespace, id);
  }

  /** See `WorkspaceQueries.forkWorkspaces`. @throws E_NOT_FOUND, E_NAME_TAKEN, E_USAGE */
  forkWorkspaces(
    namespace: string,
    snapshotId: string,
    names: readonly (string | null)[],
    opts?: { labels?: Labels },
  ): Promise<WorkspaceRow[]> {
    return this.#workspaces.forkWorkspaces(namespace, snapshotId, names, opts);
  }

  /** See `WorkspaceQueries.getWorkspace`. @throws E_NOT_FOUND, E_AMBIGUOUS */
  getWorkspace(namespace: string, ref: string): Promise<WorkspaceRow> {
    return this.#workspaces.getWorkspace(namespace, ref);
  }

  /** Workspaces of `namespace`, oldest first, those with every label of `filter.labels`. */
  listWorkspaces(namespace: string, filter?: ListFilter): Promise<WorkspaceRow[]> {
    return this.#workspaces.listWorkspaces(namespace, filter);
  }

  /** See `setLabelsQuery` (sql/label-queries.ts). @throws E_NOT_FOUND, E_USAGE */
  setLabels(kind: 'snapshot' | 'workspace', namespace: string, id: string, patch: LabelPatch): Promise<Labels> {
    return setLabelsQuery(this.#ctx, kind, namespace, id, patch);
  }

  /** The workspace mounted at `path` (absolute), in any namespace, if any. */
  findWorkspaceByMountPath(path: string): Promise<WorkspaceRow | undefined> {
    return this.#workspaces.findWorkspaceByMountPath(path);
  }

  /** Workspaces mounted on `host`, in any namespace, oldest first. */
  listMountedOnHost(host: string): Promise<WorkspaceRow[]> {
    return this.#workspaces.listMountedOnHost(host);
  }

  /** See `WorkspaceQueries.setMount`. @throws E_NOT_FOUND, E_ALREADY_MOUNTED, E_TARGET_BUSY, E_USAGE */
  setMount(workspaceId: string, m: { path: string; driver: MountDriverName; host: string } | null): Promise<WorkspaceRow> {
    return this.#workspaces.setMount(workspaceId, m);
  }

  /** See `WorkspaceQueries.deleteWorkspace`. @throws E_NOT_FOUND, E_ALREADY_MOUNTED */
  deleteWorkspace(namespace: string, id: string): Promise<void> {
    return this.#workspaces.deleteWorkspace(namespace, id);
  }

  /** See `Catalog.schema`: the names in the migration table, oldest first, and the newest known. */
  schema(): Promise<{ applied: string[]; latest: string }> {
    return this.#ctx.read(async () => {
      const rows = await sql<{ name: string }>`select name from ${sql.table(MIGRATION_TABLE)} order by name`.execute(this.db);
      return { applied: rows.rows.map((r) => r.name), latest: Object.keys(MIGRATIONS).sort().at(-1) ?? '' };
    });
  }

  /** The database's clock, ms since the epoch. */
  nowMs(): Promise<number> {
    return this.#gc.nowMs();
  }

  /** The dedup index of `namespace`: blobs of live packs only (see `BlobQueries.blobIndex`). */
  dedupIndex(namespace: string): BlobIndex {
    return this.#blobs.blobIndex(namespace, { livePacksOnly: true });
  }

  /** See `GcQueries.setLayerSnapshot`. @throws E_NOT_FOUND */
  setLayerSnapshot(workspaceId: string, snapshotId: string | null): Promise<void> {
    return this.#gc.setLayerSnapshot(workspaceId, snapshotId);
  }

  /** See `GcQueries.removeSnapshot`. @throws E_NOT_FOUND, E_IN_USE */
  removeSnapshot(namespace: string, id: string, opts?: { force?: boolean }): Promise<{ reparented: string[]; rebased: string[] }> {
    return this.#gc.removeSnapshot(namespace, id, opts);
  }

  /** See `LayerImageQueries.layerImage`. */
  layerImage(namespace: string, root: Digest): Promise<LayerImageRecord | undefined> {
    return this.#images.layerImage(namespace, root);
  }

  /** See `LayerImageQueries.recordLayerImage` (first wins). @throws E_USAGE, E_CHANGED_DURING_READ */
  recordLayerImage(namespace: string, rec: NewLayerImage): Promise<LayerImageRecord> {
    return this.#images.recordLayerImage(namespace, rec);
  }

  /** See `LayerImageQueries.layerImagesWithoutSnapshot`. */
  layerImagesWithoutSnapshot(namespace: string): Promise<LayerImageRecord[]> {
    return this.#images.layerImagesWithoutSnapshot(namespace);
  }

  /** See `LayerImageQueries.listLayerImages`. */
  listLayerImages(): Promise<(LayerImageRecord & { namespace: string })[]> {
    return this.#images.listLayerImages();
  }

  /** See `LayerImageQueries.deleteLayerImage`. */
  deleteLayerImage(namespace: string, root: Digest): Promise<void> {
    return this.#images.deleteLayerImage(namespace, root);
  }

  /** The gc lock, listings and guarded transitions (`GcQueries`). */
  gc(): GcCatalog {
    return this.#gc;
  }

  /** The identity row and what the catalog holds (`IdentityQueries`). */
  identity(): CatalogIdentityPort {
    return this.#identity;
  }

  /** See `LeaseQueries.registerHost`. @throws E_USAGE (bad TTL) */
  registerHost(h: HostRegistration): Promise<HostSession> {
    return this.#leases.registerHost(h);
  }

  /** See `LeaseQueries.heartbeat` (one statement). */
  heartbeat(host: string, session: number): Promise<boolean> {
    return this.#leases.heartbeat(host, session);
  }

  /** See `LeaseQueries.getHost`. */
  getHost(id: string): Promise<HostRow | undefined> {
    return this.#leases.getHost(id);
  }

  /** See `LeaseQueries.mountLeased`. @throws E_LEASED, E_LEASE_LOST, E_DAEMON_UNAVAILABLE, E_CHANGED_DURING_READ, what setMount throws */
  mountLeased(
    workspaceId: string,
    m: { path: string; driver: MountDriverName; host: string },
    opts?: { steal?: boolean; keepsPrivate?: boolean; expectHeadId?: string; layerSnapshotId?: string },
  ): Promise<{ workspace: WorkspaceRow; lease: LeaseRow; taken: boolean }> {
    return this.#leases.mountLeased(workspaceId, m, opts);
  }

  /** See `LeaseQueries.releaseLease`. */
  releaseLease(workspaceId: string, host: string): Promise<boolean> {
    return this.#leases.releaseLease(workspaceId, host);
  }

  /** See `LeaseQueries.getLease`. */
  getLease(workspaceId: string): Promise<LeaseRow | undefined> {
    return this.#leases.getLease(workspaceId);
  }

  /** See `LeaseQueries.listLeases`. */
  listLeases(namespace: string): Promise<LeaseRow[]> {
    return this.#leases.listLeases(namespace);
  }

  // --- quotas per namespace (port/quotas.ts, 0009_namespace_quotas) ---

  /** See `QuotaQueries.quota`. */
  quota(namespace: string): Promise<NamespaceQuota | undefined> {
    return this.#quotas.quota(namespace);
  }

  /** See `QuotaQueries.setQuota`. @throws E_USAGE */
  setQuota(namespace: string, patch: QuotaPatch): Promise<NamespaceQuota> {
    return this.#quotas.setQuota(namespace, patch);
  }

  /** See `QuotaQueries.clearQuota`. */
  clearQuota(namespace: string): Promise<boolean> {
    return this.#quotas.clearQuota(namespace);
  }

  /** See `QuotaQueries.quotaUsage`. */
  quotaUsage(namespace: string): Promise<QuotaUsage> {
    return this.#quotas.quotaUsage(namespace);
  }

  /** Closes the connection (idempotent). */
  async close(): Promise<void> {
    await this.db.destroy();
  }

  /** See BuildLeasePort.acquireBuildLease (src/catalog/port/build-leases.ts). @throws E_USAGE */
  acquireBuildLease(namespace: string, key: string, holder: string, ttlMs: number): Promise<{ acquired: boolean; lease: BuildLease }> {
    return this.#builds.acquireBuildLease(namespace, key, holder, ttlMs);
  }

  /** See BuildLeasePort.renewBuildLease. */
  renewBuildLease(namespace: string, key: string, epoch: number, ttlMs: number): Promise<boolean> {
    return this.#builds.renewBuildLease(namespace, key, epoch, ttlMs);
  }

  /** See BuildLeasePort.releaseBuildLease. */
  releaseBuildLease(namespace: string, key: string, epoch: number, result: string | null): Promise<boolean> {
    return this.#builds.releaseBuildLease(namespace, key, epoch, result);
  }

  /** See BuildLeasePort.getBuildLease. */
  getBuildLease(namespace: string, key: string): Promise<BuildLease | undefined> {
    return this.#builds.getBuildLease(namespace, key);
  }
}
