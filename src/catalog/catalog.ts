import type { Digest } from '../core/digest.js';
import type { MountDriverName } from '../core/mount-driver-name.js';
import type { BlobIndex, WrittenPack } from '../store/pack-types.js';
import type { GcCatalog } from './gc-catalog.js';

/**
 * The catalog port: everything mutable (namespaces, snapshots, workspaces, mount state,
 * pack and blob records). Implemented by `KyselyCatalog` (sql/, the queries of every SQL
 * dialect) with one adapter per dialect: `SqliteCatalog` (sqlite/) now, PostgreSQL later
 * with the same schema. Mutations that must be atomic are single transactions. Every
 * adapter runs the contract suite test/contracts/catalog.contract.ts.
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
}

/** Input for a new snapshot: what the content writer produced plus metadata. */
export interface NewSnapshot {
  namespace: string;
  root: Digest;
  parentId?: string | null;
  message?: string | null;
  name?: string | null;
  fileCount: number;
  byteCount: number;
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

/** The catalog port (see module doc). All lookups are scoped to a namespace name. */
export interface Catalog {
  /** Blob index of one namespace (dedup stops at the namespace). */
  blobIndex(namespace: string): BlobIndex;

  /**
   * Inserts packs, blobs (a digest already indexed in the namespace keeps its location) and the
   * snapshot in one transaction. @throws E_NAME_TAKEN when `name` is used in the namespace,
   * E_NOT_FOUND (parentId), E_USAGE (bad name); nothing is written then.
   */
  createSnapshot(s: NewSnapshot): Promise<SnapshotRow>;

  /**
   * Checkpoint commit, one transaction: inserts packs, blobs and the snapshot (parent =
   * the workspace's head) and moves the workspace's head to it, only if the head is still
   * `expectedHeadId`. @throws E_NOT_FOUND, E_CHANGED_DURING_READ (head moved: retryable),
   * E_NAME_TAKEN, E_USAGE; nothing is written then.
   */
  commitCheckpoint(c: { workspaceId: string; expectedHeadId: string; snapshot: NewSnapshot }): Promise<SnapshotRow>;

  /** Resolves a snapshot by exact id, exact name, or unique id prefix (≥ 4 chars). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getSnapshot(namespace: string, ref: string): Promise<SnapshotRow>;
  /** Snapshots, newest first. */
  listSnapshots(namespace: string): Promise<SnapshotRow[]>;
  /** Deletes a snapshot row. @throws E_NOT_FOUND, E_IN_USE (a workspace or snapshot refers to it) */
  deleteSnapshot(namespace: string, id: string): Promise<void>;

  /**
   * Creates `names.length` workspaces whose base and head are `snapshotId`, in one
   * transaction (catalog rows only). A null name stays unnamed.
   * @throws E_NOT_FOUND (snapshot), E_NAME_TAKEN, E_USAGE (bad name); nothing is created then
   */
  forkWorkspaces(namespace: string, snapshotId: string, names: readonly (string | null)[]): Promise<WorkspaceRow[]>;
  /** Resolves a workspace by exact id, exact name, or unique id prefix (≥ 4 chars). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getWorkspace(namespace: string, ref: string): Promise<WorkspaceRow>;
  /** Workspaces, oldest first. */
  listWorkspaces(namespace: string): Promise<WorkspaceRow[]>;
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
  /** The gc lock, listings and guarded transitions. */
  gc(): GcCatalog;
}
