import type { Digest } from '../../core/digest.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { BlobIndex, WrittenPack } from '../../store/pack/pack-types.js';
import type { BuildLeasePort } from './build-leases.js';
import type { GcCatalog } from './gc-catalog.js';
import type { CatalogIdentityPort } from './identity.js';
import type { LabelPatch, Labels } from './labels.js';
import type { LayerImageRecord, NewLayerImage } from './layer-images.js';
import type { CatalogQuotaPort } from './quotas.js';

export type { LayerImageRecord, NewLayerImage } from './layer-images.js';
export type { BuildLease, BuildLeasePort } from './build-leases.js';
export type { CatalogQuotaPort, NamespaceQuota, QuotaPatch, QuotaUsage } from './quotas.js';

/**
 * The catalog port: everything mutable (namespaces, snapshots, workspaces, mount state,
 * pack and blob records). Implemented by `KyselyCatalog` (sql/, the queries of every SQL
 * dialect) with one adapter per dialect, both with the same schema: `SqliteCatalog`
 * (sqlite/) and `PostgresCatalog` (postgres/). Mutations that must be atomic are single
 * transactions. Every adapter runs the contract suite test/contracts/catalog.contract.ts.
 */

/** A snapshot row. Times are ISO-8601 strings (UTC). */
export interface SnapshotRow {
  id: string;
  namespace: string;
  name: string | null;
  /** Digest of the snapshot's root object. */
  root: Digest;
  parentId: string | null;
  message: string | null;
  createdAt: string;
  /** Regular files (counting each hardlinked inode once) and their logical bytes. */
  fileCount: number;
  byteCount: number;
  /** Labels (catalog/labels.ts); `{}` when none. */
  labels: Labels;
}

/** A workspace row. */
export interface WorkspaceRow {
  id: string;
  namespace: string;
  name: string | null;
  baseSnapshotId: string;
  headSnapshotId: string;
  mountState: 'unmounted' | 'mounted';
  /** Absolute mount target, driver and host name while mounted; null otherwise. */
  mountPath: string | null;
  mountDriver: MountDriverName | null;
  mountHost: string | null;
  createdAt: string;
  updatedAt: string;
  /** Labels (catalog/labels.ts); `{}` when none. */
  labels: Labels;
}

/** Which rows a list returns: only those with every given label (key=value). */
export interface ListFilter {
  labels?: Labels;
}

/** Input for a new snapshot: what the content writer produced plus metadata. */
/**
 * A snapshot's stored files and bytes per capture class (docs/explanation/capture-classes.md),
 * with `key`, the digest of the `.awc.json` policy they were counted under: a checkpoint adds
 * what changed to its head's counts instead of walking the whole tree
 * (src/service/capture/class-delta.ts).
 */
export interface SnapshotClassCounts {
  key: string;
  durable: { files: number; bytes: number };
  reconstructible: { files: number; bytes: number };
  ignored: { files: number; bytes: number };
}

export interface NewSnapshot {
  namespace: string;
  root: Digest;
  parentId?: string | null;
  message?: string | null;
  name?: string | null;
  fileCount: number;
  byteCount: number;
  /** Labels of the new snapshot (validated: E_USAGE). */
  labels?: Labels;
  /** Packs uploaded for this snapshot; their pack and blob rows are inserted in the same transaction. */
  packs: readonly WrittenPack[];
  /**
   * Keys of existing packs the writer deduplicated against (`ContentWriter.reusedPacks()`):
   * the commit is refused (E_PACK_CONDEMNED, retryable) unless each is still live
   * (docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe).
   */
  reusedPacks?: readonly string[];
  /** When the writer started, ms by the database's clock (`Catalog.nowMs()`); see docs/explanation/gc.md#the-same-pack-twice. */
  startedAtMs?: number;
}

/**
 * The catalog port (see module doc). All lookups are scoped to a namespace name. Build leases:
 * build-leases.ts. Quotas per namespace (`quota`, `setQuota`, `clearQuota`, `quotaUsage`) are
 * the block of {@link CatalogQuotaPort} (port/quotas.ts); `createSnapshot`, `commitCheckpoint`
 * and `forkWorkspaces` check them (E_QUOTA).
 */
export interface Catalog extends BuildLeasePort, CatalogQuotaPort {
  /** Blob index of one namespace (dedup stops at the namespace). */
  blobIndex(namespace: string): BlobIndex;

  /**
   * Inserts packs, blobs (a digest already indexed in the namespace keeps its location) and the
   * snapshot in one transaction. @throws E_NAME_TAKEN when `name` is used in the namespace,
   * E_NOT_FOUND (parentId), E_USAGE (bad name), E_QUOTA (over a quota of the namespace); nothing is written then.
   */
  createSnapshot(s: NewSnapshot): Promise<SnapshotRow>;

  /**
   * Checkpoint commit, one transaction: inserts packs, blobs and the snapshot (parent =
   * the workspace's head) and moves the workspace's head to it, only if the head is still
   * `expectedHeadId` and, when the workspace has a lease, only if `lease` is still its live
   * lease (same host, same epoch, the host's session unexpired by the database clock: the
   * fence, in the same transaction as the head move; docs/explanation/leases.md).
   * @throws E_NOT_FOUND, E_CHANGED_DURING_READ (head moved: retryable), E_LEASE_LOST (the
   *   epoch moved, the lease expired, or no `lease` was given for a leased workspace),
   *   E_NAME_TAKEN, E_USAGE, E_QUOTA (over a quota of the namespace); nothing is written then.
   */
  commitCheckpoint(c: CheckpointCommit): Promise<SnapshotRow>;

  /** Resolves a snapshot by exact id, exact name, or unique id prefix (≥ 4 chars). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getSnapshot(namespace: string, ref: string): Promise<SnapshotRow>;

  /** The class counts recorded with snapshot `id` (exact id), or undefined (none recorded, or no such snapshot). */
  snapshotClasses(namespace: string, id: string): Promise<SnapshotClassCounts | undefined>;

  /**
   * Records the class counts of snapshot `id` (counted after its commit, since they read the
   * snapshot's own `.gitignore` files): one UPDATE; nothing when the snapshot is gone.
   */
  setSnapshotClasses(namespace: string, id: string, classes: SnapshotClassCounts): Promise<void>;
  /** Snapshots, newest first; with `filter.labels`, only those carrying every given label. */
  listSnapshots(namespace: string, filter?: ListFilter): Promise<SnapshotRow[]>;
  /** Deletes a snapshot row. @throws E_NOT_FOUND, E_IN_USE (a workspace or snapshot refers to it) */
  deleteSnapshot(namespace: string, id: string): Promise<void>;

  /**
   * Creates `names.length` workspaces whose base and head are `snapshotId`, in one
   * transaction (catalog rows only). A null name stays unnamed.
   * `opts.labels` go on every new workspace.
   * @throws E_NOT_FOUND (snapshot), E_NAME_TAKEN, E_USAGE (bad name or labels), E_QUOTA (over the
   *   namespace's workspace quota); nothing is created then
   */
  forkWorkspaces(
    namespace: string,
    snapshotId: string,
    names: readonly (string | null)[],
    opts?: { labels?: Labels },
  ): Promise<WorkspaceRow[]>;
  /** Resolves a workspace by exact id, exact name, or unique id prefix (≥ 4 chars). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getWorkspace(namespace: string, ref: string): Promise<WorkspaceRow>;
  /** Workspaces, oldest first; with `filter.labels`, only those carrying every given label. */
  listWorkspaces(namespace: string, filter?: ListFilter): Promise<WorkspaceRow[]>;
  /**
   * Changes the labels of snapshot or workspace `id` (an exact id) in one transaction: a
   * string sets a key, null deletes it. Returns the labels after the change. Labels are
   * metadata: a snapshot stays immutable in its content.
   * @throws E_NOT_FOUND, E_USAGE (a bad key or value, more than 64 labels)
   */
  setLabels(kind: 'snapshot' | 'workspace', namespace: string, id: string, patch: LabelPatch): Promise<Labels>;
  /** The workspace mounted at `path` (absolute), if any, in any namespace. */
  findWorkspaceByMountPath(path: string): Promise<WorkspaceRow | undefined>;
  /** Workspaces mounted on `host`, in any namespace. */
  listMountedOnHost(host: string): Promise<WorkspaceRow[]>;
  /**
   * Records a mount (state 'mounted' with path, driver, host; the same again is idempotent) or
   * an unmount (all null). @throws E_NOT_FOUND, E_ALREADY_MOUNTED (mounted elsewhere),
   * E_TARGET_BUSY (another workspace is mounted there on that host), E_USAGE (relative path)
   */
  setMount(workspaceId: string, m: { path: string; driver: MountDriverName; host: string } | null): Promise<WorkspaceRow>;
  /** Deletes a workspace row. @throws E_NOT_FOUND, E_ALREADY_MOUNTED */
  deleteWorkspace(namespace: string, id: string): Promise<void>;

  /** Pack totals of a namespace: pack count, stored bytes (sum of pack object sizes), blob count (0s for an unknown namespace). */
  packStats(namespace: string): Promise<{ packs: number; bytes: number; blobs: number }>;

  /**
   * The catalog's schema: the migrations applied to the database (in order) and the newest
   * one this awc knows. `awc doctor` reports it. @throws E_CATALOG_BUSY…, as a read
   */
  schema(): Promise<{ applied: string[]; latest: string }>;

  /**
   * Registers host `h.id`'s session: a live session is continued (same `session`, expiry
   * renewed); an expired or missing one starts the next session (its leases stay with the dead
   * session and are lost, unless `reclaim`: the leases still naming this host move to the new
   * session with their epoch raised, what a daemon does when it starts). One transaction.
   */
  registerHost(h: HostRegistration): Promise<HostSession>;

  /**
   * The heartbeat: ONE statement renews host `host`'s session `session` (expiry = database now
   * + the session's TTL), and with it every lease of that session. Returns false when the session
   * had already expired (or is not the host's current one): its leases are lost, nothing was renewed.
   */
  heartbeat(host: string, session: number): Promise<boolean>;

  /** The host row, or undefined when the host never registered. */
  getHost(id: string): Promise<HostRow | undefined>;

  /**
   * Mount with a lease, one transaction: takes (or keeps) the workspace's lease for `m.host`'s
   * live session, then records the mount as `setMount` does. A lease kept by this host is
   * kept (same epoch); a released one is taken (epoch + 1); one of another live host is
   * refused; an expired one is taken only with `steal` (epoch + 1; the expired holder's mount
   * record is replaced). `keepsPrivate`: the host resumes private state kept from an earlier
   * mount, valid only while the lease never left this host. `expectHeadId`: the head the mount
   * was built from must still be the head. `layerSnapshotId`: also records the snapshot the host
   * state is built from (as `setLayerSnapshot`), in the same transaction: one commit per mount.
   * `taken`: the lease was taken by this call (not kept).
   * Callers record the mount first and only then make it (a host that loses never shows a file).
   * @throws E_LEASED (held by a live host, or expired without `steal`; details: holder, expiresAtMs),
   *   E_LEASE_LOST (`keepsPrivate`, but the lease was taken or released since),
   *   E_DAEMON_UNAVAILABLE (`m.host` has no live session: its daemon is not running),
   *   E_CHANGED_DURING_READ (head moved), what `setMount` throws; nothing is written then
   */
  mountLeased(
    workspaceId: string,
    m: { path: string; driver: MountDriverName; host: string },
    opts?: { steal?: boolean; keepsPrivate?: boolean; expectHeadId?: string; layerSnapshotId?: string },
  ): Promise<{ workspace: WorkspaceRow; lease: LeaseRow; taken: boolean }>;

  /**
   * Releases `host`'s lease on a workspace that is not mounted (the host holds nothing private
   * of it any more). The epoch stays. Returns false when there was nothing of `host`'s to release.
   */
  releaseLease(workspaceId: string, host: string): Promise<boolean>;

  /** The workspace's lease as the database clock judges it now, or undefined when it never had one. */
  getLease(workspaceId: string): Promise<LeaseRow | undefined>;

  /** The leases of a namespace's workspaces (see getLease). */
  listLeases(namespace: string): Promise<LeaseRow[]>;

  /** Closes the connection (idempotent). */
  close(): Promise<void>;

  // --- rm and gc (docs/explanation/gc.md) ---
  /** The database's clock, ms since the epoch (leases and gc judge time by it, never a host's). */
  nowMs(): Promise<number>;
  /** The blob index of `namespace` for dedup: blobs of live packs only (condemned ones are never reused). */
  dedupIndex(namespace: string): BlobIndex;
  /** Records the snapshot a workspace's host state (overlay layer or copy) was built from; null when it has none. @throws E_NOT_FOUND */
  setLayerSnapshot(workspaceId: string, snapshotId: string | null): Promise<void>;
  /**
   * `awc rm <snapshot>`: removes the row, re-parenting its children to its parent. @throws E_NOT_FOUND,
   * E_IN_USE (head or layer of a workspace; without `force` also a workspace's base or the parent of named snapshots)
   */
  removeSnapshot(namespace: string, id: string, opts?: { force?: boolean }): Promise<{ reparented: string[]; rebased: string[] }>;
  // --- shared layer images (docs/explanation/layer-images.md#sharing-images) ---
  /** The layer image record of snapshot root `root` in `namespace`, or undefined (none, or an unknown namespace). */
  layerImage(namespace: string, root: Digest): Promise<LayerImageRecord | undefined>;
  /**
   * Records `rec` as the layer image of its root (creating the namespace on first use), stamped
   * with the database's now, and returns the stored record. First wins: when the root already
   * has one (another host won the race), nothing is written and that record is returned; the
   * caller then uses it (and may delete its own uploaded objects).
   * `INSERT … ON CONFLICT DO NOTHING`, then read back. @throws E_USAGE (a malformed field)
   */
  recordLayerImage(namespace: string, rec: NewLayerImage): Promise<LayerImageRecord>;
  /** The layer image records of `namespace` whose root is the root of no snapshot of it (gc deletes them), by root. */
  layerImagesWithoutSnapshot(namespace: string): Promise<LayerImageRecord[]>;
  /** Every layer image record of every namespace, with the namespace's name (gc reads them all). */
  listLayerImages(): Promise<(LayerImageRecord & { namespace: string })[]>;
  /** Deletes the layer image record of `root` in `namespace`; nothing when there is none. */
  deleteLayerImage(namespace: string, root: Digest): Promise<void>;

  /** The gc lock, listings and guarded transitions. */
  gc(): GcCatalog;
  /** The catalog's identity and the store it is bound to (src/catalog/open/store-binding.ts). */
  identity(): CatalogIdentityPort;
}

/** Input of `Catalog.commitCheckpoint`. */
export interface CheckpointCommit {
  workspaceId: string;
  expectedHeadId: string;
  snapshot: NewSnapshot;
  /** The lease the checkpoint was taken under (the fencing token): host and epoch. */
  lease?: { host: string; epoch: number };
}

/** What a host registers (`Catalog.registerHost`). */
export interface HostRegistration {
  id: string;
  address?: string | null;
  pid?: number | null;
  daemonVersion?: string | null;
  /** Lease TTL of the session in ms: each heartbeat sets its expiry to the database's now + ttlMs. */
  ttlMs: number;
  /** Move the leases still naming this host to a new session (epoch + 1): a daemon's start. */
  reclaim?: boolean;
}

/** A registered session (times: ms by the database clock). */
export interface HostSession {
  host: string;
  session: number;
  /** True when a live session was continued, false when a new one started. */
  continued: boolean;
  /** Leases moved to the new session by `reclaim`. */
  reclaimed: number;
  expiresAtMs: number;
}

/** A `hosts` row (times: ms by the database clock). `live`: its session's expiry is ahead of the database's now. */
export interface HostRow {
  id: string;
  session: number;
  address: string | null;
  pid: number | null;
  daemonVersion: string | null;
  ttlMs: number;
  startedAtMs: number;
  heartbeatAtMs: number;
  expiresAtMs: number;
  live: boolean;
}

/**
 * A workspace's lease, judged by the database clock (`nowMs`). `state`: `live` (its host's
 * current session, unexpired), `expired` (its session expired or was replaced: the holder may
 * not commit, and another host may take it with `--steal`), `released` (no holder). Times are
 * ms since the Unix epoch by the database clock.
 */
export interface LeaseRow {
  workspaceId: string;
  host: string | null;
  epoch: number;
  state: 'live' | 'expired' | 'released';
  /** Expiry of the holder's session (null when released, or when that session is gone). */
  expiresAtMs: number | null;
  acquiredAtMs: number;
  /** The host whose expired lease this holder took over, and when (null when it was not a take-over). */
  takenFrom: string | null;
  takenAtMs: number | null;
  nowMs: number;
}
