import type { Digest } from '../../core/digest.js';
import type { BlobLocation, PackIndexEntry, WrittenPack } from '../../store/pack/pack-types.js';

/** Default time-to-live of the gc lock (GcCatalog.acquireLock), renewed at every step: 15 min. */
export const DEFAULT_LOCK_TTL_MS = 15 * 60_000;

/**
 * The catalog's side of `rm` and `gc` (docs/explanation/gc.md): the fleet-wide gc lock,
 * the listings a mark starts from, and the guarded transitions of snapshot rows and pack
 * states. Every write method takes the lock `owner` and first extends the lock, in the
 * same transaction, only while that owner still holds it (else E_GC_LOCK_LOST, nothing
 * written). Times are ms since the epoch by the database's clock.
 */
export interface GcCatalog {
  /**
   * Takes the gc lock for `ttlMs` (an expired lock is taken over; the same owner again
   * extends it). @throws E_GC_RUNNING (held by another owner; details.owner, details.expiresAt)
   */
  acquireLock(owner: string, ttlMs: number): Promise<{ owner: string; takenAtMs: number; expiresAtMs: number }>;
  /** Extends the lock by `ttlMs` from now. @throws E_GC_LOCK_LOST (expired and taken, or released) */
  renewLock(owner: string, ttlMs: number): Promise<void>;
  /** Releases the lock if `owner` holds it (idempotent). */
  releaseLock(owner: string): Promise<void>;

  /** Every snapshot row of every namespace (namespace by name; createdAt ISO-8601). */
  listSnapshots(): Promise<GcSnapshot[]>;
  /** What every workspace holds: its base, head and layer snapshot ids (namespace by name). */
  listHolds(): Promise<{ namespace: string; workspaceId: string; base: string; head: string; layer: string | null }[]>;
  /** Every pack row of every namespace with its state. */
  listPacks(): Promise<GcPack[]>;

  /**
   * Removes snapshot `id` of `namespace` if it is still unnamed, created before
   * `createdBefore` (ISO-8601) and no workspace's base, head or layer, re-parenting its
   * children to its parent, in one transaction. Returns whether it was removed.
   * @throws E_GC_LOCK_LOST
   */
  removeGarbageSnapshot(owner: string, ttlMs: number, namespace: string, id: string, createdBefore: string): Promise<boolean>;
  /** live → condemned (condemned_at = now) for those of `keys` still live; returns how many. @throws E_GC_LOCK_LOST */
  condemnPacks(owner: string, ttlMs: number, keys: readonly string[]): Promise<number>;
  /** condemned → live for those of `keys` still condemned; returns how many. @throws E_GC_LOCK_LOST */
  uncondemnPacks(owner: string, ttlMs: number, keys: readonly string[]): Promise<number>;
  /**
   * Adopts pack objects of the store that have no row (a writer uploaded them and never
   * committed) as `condemned` rows, and moves a `deleted` tombstone whose object is there
   * again back to `condemned` (src/catalog/sql/pack-adoption.ts); rows in other states and
   * rows a commit writes meanwhile are left. `objects`: key and size in bytes. Returns how
   * many were adopted. @throws E_GC_LOCK_LOST
   */
  adoptPacks(owner: string, ttlMs: number, objects: readonly { key: string; size: number }[]): Promise<number>;
  /**
   * condemned → deleting, and its blob rows removed, if pack `key` is still condemned and
   * was condemned at least `graceMs` ago; returns whether it moved. @throws E_GC_LOCK_LOST
   */
  beginDelete(owner: string, ttlMs: number, key: string, graceMs: number): Promise<boolean>;
  /** deleting → deleted (deleted_at = now), once the object is gone. @throws E_GC_LOCK_LOST */
  finishDelete(owner: string, ttlMs: number, key: string): Promise<void>;
  /**
   * Commits a repack (docs/explanation/gc.md#repack), one transaction: condemns the packs
   * `r.from` (each must still be live, else nothing is written and it returns false), then
   * inserts `r.packs` (the copies, by the commit rules of "the same pack twice") and moves
   * the blob rows of their blobs to them (the rows' old pack is condemned now, so
   * `insertPacks`'s guarded conflict rule moves them). @throws E_GC_LOCK_LOST, E_PACK_CONDEMNED
   *   (a copy's key is being deleted, or was deleted after `r.startedAtMs`: nothing written)
   */
  commitRepack(owner: string, ttlMs: number, r: RepackCommit): Promise<boolean>;

  /** The blob rows that locate a blob in pack `key` (any namespace), in offset order (`awc fsck`). */
  listPackBlobs(key: string): Promise<BlobLocation[]>;
  /**
   * `awc fsck --repair`: re-indexes pack `r.key` of `r.namespace` from the pack's own index
   * (`r.entries`, read from its footer), one transaction, only while the pack row is `live` or
   * `condemned` (else nothing is written and it returns 0). Each entry's blob row is written
   * when there is none, when it names this pack (a row that disagrees with the pack is
   * corrected), or when its digest is in `r.replace` (the caller found its current location
   * broken: the pack is missing or does not hold it). Other rows keep their location (a blob
   * keeps its first location). Returns the rows inserted or changed.
   * @throws E_GC_LOCK_LOST
   */
  reindexPack(owner: string, ttlMs: number, r: PackReindex): Promise<number>;
  /**
   * `awc fsck --repair`, for pack `key` whose object is gone from the store (the caller has
   * checked): one transaction, only while the row is `live` or `condemned`, deletes the blob
   * rows still naming it (so no commit deduplicates against a blob that is gone: it uploads it
   * anew) and moves the row to `deleted`. Returns the blob rows deleted, or -1 when the row was
   * in no such state (nothing written). @throws E_GC_LOCK_LOST
   */
  dropLostPack(owner: string, ttlMs: number, key: string): Promise<number>;
}

/** A pack to re-index: its namespace, key, the entries of its own index, and the digests whose rows may move to it. */
export interface PackReindex {
  namespace: string;
  key: string;
  entries: readonly PackIndexEntry[];
  replace: ReadonlySet<string>;
}

/** A snapshot row as gc sees it. */
export interface GcSnapshot {
  namespace: string;
  id: string;
  name: string | null;
  root: Digest;
  parentId: string | null;
  createdAt: string;
}

/** A pack row as gc sees it. `condemnedAtMs` / `deletedAtMs`: database clock, null when unset. */
export interface GcPack {
  namespace: string;
  key: string;
  size: number;
  state: PackState;
  condemnedAtMs: number | null;
  deletedAtMs: number | null;
}

/** The states of a pack (docs/explanation/gc.md#pack-states). */
export type PackState = 'live' | 'condemned' | 'deleting' | 'deleted';

/** A repack to commit: the packs copied out of (`from`, keys) and the packs written with their live blobs. */
export interface RepackCommit {
  namespace: string;
  from: readonly string[];
  packs: readonly WrittenPack[];
  /** When the copy started, ms by the database's clock (the same-pack-twice rule). */
  startedAtMs: number;
}
