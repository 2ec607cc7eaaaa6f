import type { Digest } from '../../core/digest.js';
import type { CaptureFilter } from '../../core/capture-filter.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { Catalog, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { AwcConfig, AwcPaths } from '../../config/config.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import type { Holder, MountUse } from './mount-use.js';
import type { WorkspaceHostState } from './workspace-state.js';

export type { MountDriverName } from '../../core/mount-driver-name.js';
export type { Holder, MountUse } from './mount-use.js';

/**
 * The mount driver port: how a workspace is shown at a directory on this host, taken off
 * it again, and how its private changes (what was written through the mount) are scanned
 * into a tree root. Two adapters: `OverlayMountDriver` (src/drivers/overlay/: overlayfs in
 * the host daemon, reached through a {@link HostDaemonPort}) and `CopyMountDriver`
 * (src/drivers/copy/: a materialised copy behind a nosuid,nodev bind mount). The service
 * (`Awc`) resolves refs, checks targets and kept host state, and picks the adapter by the
 * name the host state or the catalog records; everything that differs between the drivers
 * is behind this interface. test/contracts/mount-driver.contract.ts is the suite every
 * adapter passes.
 *
 * Errors the adapters throw (AwcError codes): E_TARGET_BUSY (a target in use on unmount
 * without `force`, or not an empty directory), E_MOUNT_FAILED (mount(8) failed),
 * E_IN_USE (uncheckpointed changes the driver cannot keep or resume), E_STILL_MOUNTED (an
 * earlier mount still uses the private changes), E_NOT_MOUNTED (the daemon has no record
 * of the mount), E_DAEMON_UNAVAILABLE (overlay: no host daemon), E_CHANGED_DURING_READ
 * (scan without `allowChanging`).
 */
export interface MountDriver {
  readonly name: MountDriverName;

  /** The host checks this driver needs (root, kernel, devices…), each with its outcome; none for a driver that always works. */
  doctor(): DoctorCheck[];

  /**
   * Mounts workspace `ws` (unmounted) at `target`, an empty directory outside the home
   * (checked by the caller), then records the mount in the catalog and the host state.
   * `pending`: host state this driver kept from an earlier mount (uncheckpointed changes
   * on `pending.layerRoot`), resumed when the driver can. The mount record is written with
   * the workspace's lease (`Catalog.mountLeased`: one transaction). On failure nothing stays
   * mounted or recorded.
   * @throws E_LEASED, E_LEASE_LOST (see mountLeased), E_IN_USE (pending changes this driver cannot resume), E_STILL_MOUNTED, E_MOUNT_FAILED, E_TARGET_BUSY,
   *   E_ALREADY_MOUNTED (another mount recorded the workspace meanwhile)
   */
  mount(ws: WorkspaceRow, target: string, pending: WorkspaceHostState | undefined, opts?: MountOptions): Promise<MountResult>;

  /**
   * A workspace the catalog records as mounted at its target on this host, whose mount is
   * gone (a reboot) but whose files are kept: shows it at the target again. Returns
   * undefined when there is nothing to resume (then the caller answers E_ALREADY_MOUNTED).
   * @throws E_TARGET_BUSY (target not empty), E_MOUNT_FAILED
   */
  resume(ws: WorkspaceRow): Promise<MountResult | undefined>;

  /**
   * Takes mounted workspace `ws` off its target and clears its catalog record. `state` is
   * its host state (undefined when lost). Without `discard`, uncheckpointed changes
   * (`changed()` says whether there are) are kept on the host when the driver can (the
   * result is `pending`), else refused; with `discard` they are dropped. `force` detaches
   * a busy mount lazily; processes still inside keep it alive, and the result names them
   * (`holders`).
   * @throws E_TARGET_BUSY (busy, without force), E_IN_USE (changes this driver cannot keep), E_STILL_MOUNTED
   *   (discard while a detached mount lives on), E_NOT_MOUNTED, E_DAEMON_UNAVAILABLE
   */
  unmount(ws: WorkspaceRow, state: WorkspaceHostState | undefined, opts: UnmountOptions): Promise<UnmountResult>;

  /**
   * Scans the private changes of a workspace with host state `state` into a tree root
   * (files and trees written through `writer`; a dry-run writer stores nothing). Never
   * changes the workspace. Call the result's `committed` once its root is committed.
   * @throws E_CHANGED_DURING_READ (retryable; not with `allowChanging`), E_PERMISSION
   */
  scan(state: WorkspaceHostState, writer: ContentWriter, opts?: ScanOptions): Promise<ScanResult>;

  /** Whether an earlier mount still uses the workspace's private changes, and who holds it (never in use for a driver without such mounts). */
  inUse(state: WorkspaceHostState): Promise<MountUse>;

  /** A directory outside the workspace's host directory that holds materialised files (counted by `awc usage`), or undefined. */
  materialised(state: WorkspaceHostState): string | undefined;

  /**
   * Drops what this host keeps of a workspace whose lease another host took (stale private
   * changes): the mount left at `state.target` (a bind mount, a dead overlay) is detached and
   * the host state removed; the catalog is not touched. @throws E_STILL_MOUNTED (an earlier mount still uses them)
   */
  dropStale(state: WorkspaceHostState): Promise<void>;
}

/** Options of {@link MountDriver.scan}: `filter` leaves out what the capture filter names (docs/explanation/capture-classes.md). */
export interface ScanOptions {
  allowChanging?: boolean;
  filter?: CaptureFilter;
}

/** Options of {@link MountDriver.mount}. */
export interface MountOptions {
  onProgress?: Progress;
  /** Take over a workspace whose lease expired on another host (`awc mount --steal`). */
  steal?: boolean;
  /** An ordinary user's mount through the root daemon (overlay only; see OverlayHost.mount's `asUser`). */
  asUser?: { uid: number; gid: number };
}

/** What an adapter needs from the service: configuration, catalog and content (implemented by `Awc`). */
export interface DriverContext {
  readonly config: AwcConfig;
  readonly paths: AwcPaths;
  readonly catalog: Catalog;
  /** A reader of the namespace's content; `extra` serves blobs of an unflushed writer session. */
  reader(extra?: (d: Digest) => Buffer | undefined): ContentReader;
  /** Makes sure this host has a live session in the catalog (its daemon runs). @throws E_DAEMON_UNAVAILABLE */
  ensureHostSession(): Promise<void>;
}

/** One check `awc doctor` ran and its outcome. */
export interface DoctorCheck {
  name: string;
  ok: boolean;
  detail: string;
}

/** Progress callback for long work (files and bytes done so far). */
export type Progress = (p: { files: number; bytes: number }) => void;

/** Result of a mount. */
export interface MountResult {
  workspace: string;
  path: string;
  driver: MountDriverName;
  /** True when the mount resumed private changes kept from an earlier mount. */
  resumed: boolean;
  /**
   * Copy driver without a nosuid,nodev bind mount (not root): the setuid/setgid bits and
   * device nodes that were not materialised (slash-separated path, reason). Absent otherwise.
   */
  leftOut?: { path: string; reason: string }[];
}

/** Options of {@link MountDriver.unmount}. */
export interface UnmountOptions {
  discard: boolean;
  force: boolean;
  /** Whether the live state differs from the workspace's head (a scan; called only when needed). */
  changed: () => Promise<boolean>;
}

/** Result of an unmount: `pending` when uncheckpointed changes stay on the host (the next mount resumes them). */
export interface UnmountResult {
  workspace: string;
  path: string;
  pending: boolean;
  /** A lazily detached mount that processes keep alive: who holds it. */
  holders?: Holder[];
}

/** A scan of a workspace's private changes. */
export interface ScanResult {
  root: Digest;
  /** Files whose data was read (not reused from a stat cache). */
  filesRead: number;
  /** Entries the snapshot cannot hold (sockets), left out with this reason. */
  skipped: { path: string; reason: string }[];
  /** Files that kept changing while read, stored as last read (only with `allowChanging`). */
  changing?: string[];
  /** Tells the driver `root` is now committed as snapshot `snap`: it may refresh its caches against it. */
  committed(snap: { id: string; root: Digest }): Promise<void>;
}
