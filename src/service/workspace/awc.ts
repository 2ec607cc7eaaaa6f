import { join, resolve } from 'node:path';
import { killPoint } from '../../core/kill-point.js';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import type { Catalog, ListFilter, SnapshotClassCounts, SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { LabelPatch, Labels } from '../../catalog/port/labels.js';
import { resolveRef, type ResolvedRef } from '../refs/resolve-ref.js';
import { openBoundCatalog, openCatalog, refuseLostCatalog } from '../../catalog/open/open-catalog.js';
import { openObjectStore } from '../../store/open/open-object-store.js';
import { ContentReader } from '../../store/content/content-reader.js';
import { ContentWriter } from '../../store/content/content-writer.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { prepareMountTarget, refuseInsideHome } from '../../host/mount/mount-commands.js';
import { assertHome, loadConfig, pathsOf, type AwcConfig, type AwcPaths } from '../../config/config.js';
import type { DriverContext, MountDriver, MountDriverName, MountResult, UnmountResult } from '../../drivers/port/mount-driver.js';
import type { MountOptions as DriverMountOptions } from '../../drivers/port/mount-driver.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';
import { detectDriver, type DriverReport } from '../../drivers/detect/detect-driver.js';
import { readHostState, removeHostState, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import { OverlayMountDriver } from '../../drivers/overlay/overlay-mount-driver.js';
import { CopyMountDriver } from '../../drivers/copy/copy-mount-driver.js';
import { refuseWhileUsed } from '../../drivers/port/mount-use.js';
import { changingOf, importSnapshot, type ImportOptions, type ImportResult } from '../import/import-snapshot.js';
import { diffRefs, type DiffOptions, type DiffRefsDeps, type DiffResult } from '../diff/diff-refs.js';
import { diffRootCounts } from '../capture/tree-stats.js';
import { ClassCountCache } from '../capture/class-cache.js';
import { prepareHome } from './private-home.js';
import { clearRelease, relinkReleasedWorktree } from './idle.js';
import { removeRef, type RemoveResult, type UnmountFlags } from './remove.js';
import { retryCondemned, type CommitHooks } from '../refs/commit-retry.js';
import { runGc, type GcOptions, type GcReport } from '../gc/gc.js';
import { runFsck, type FsckOptions, type FsckReport } from '../fsck/fsck.js';
import { NO_DAEMON } from './no-daemon.js';
import { LeaseGuard } from './lease-guard.js';
import { CaptureRecorder, captureFields, policyOf, storedClasses, type CaptureFields } from '../capture/capture-classes.js';
import { KeptFiles } from '../kept/kept-commands.js';
import { LiveState, type KeptFields } from './live-state.js';
import { exportRef } from '../export/export-ref.js';
import type { GitImportOptions, GitImportResult } from '../git/git-import.js';
import type { CheckpointGitOptions, GitExportOptions, GitExportResult } from '../git/git-export.js';
import type { AwcApi, CheckpointResult } from './awc-api.js';

export type { MountResult, Progress } from '../../drivers/port/mount-driver.js';
export type { ImportResult } from '../import/import-snapshot.js';

export type { CheckpointResult } from './awc-api.js';

/**
 * The workspace service: the five primitives (snapshot, fork, mount, checkpoint,
 * diff/export) plus listing, on one catalog and one object store, and a thin facade
 * over the mount drivers (src/drivers/: the adapter is picked by the name the host state
 * or the catalog records, or by `awc doctor`'s answer for a new mount). Overlay mounts run
 * in the host daemon, reached through the HostDaemonPort handed to `open`.
 */
export class Awc implements AwcApi, DriverContext {
  readonly paths: AwcPaths;
  /** This host's side of the lease protocol (sessions, the fencing token, what `ls` and `show` say). */
  readonly leases: LeaseGuard;
  /** Files kept on this host when a workspace's host state was dropped (`awc kept`). */
  readonly kept: KeptFiles;
  private readonly drivers: Record<MountDriverName, MountDriver>;
  private readonly live: LiveState;
  /** Class counts of snapshot roots on this host (checkpoints count what changed). */
  private readonly classCache: ClassCountCache;

  private constructor(
    readonly config: AwcConfig,
    readonly catalog: Catalog,
    readonly store: ObjectStore,
    private readonly daemon: HostDaemonPort,
  ) {
    this.paths = pathsOf(config);
    this.leases = new LeaseGuard(catalog, config, daemon === NO_DAEMON ? undefined : daemon, this.paths.workspaces);
    this.drivers = { overlay: new OverlayMountDriver(this, daemon), copy: new CopyMountDriver(this) };
    this.kept = new KeptFiles(this.paths);
    this.classCache = new ClassCountCache(this.paths.classCounts);
    this.live = new LiveState({
      drivers: this.drivers,
      paths: this.paths,
      reader: () => this.reader(),
      dryWriter: () => this.writer(true),
      headRoot: async (ws) => (await this.getSnapshot(ws.headSnapshotId)).root,
    });
  }

  /** See LeaseGuard.ensureSession (the daemon holds this host's leases, for every driver). @throws E_DAEMON_UNAVAILABLE */
  ensureHostSession(): Promise<void> {
    return this.leases.ensureSession();
  }

  /**
   * Opens the catalog and object store under the configured home. A missing home is created
   * (0700; see prepareHome) unless `create` is false (what the CLI's read-only commands
   * pass): then nothing is created and a home without its catalog is E_NO_HOME. `daemon`
   * makes the port to the host daemon (the CLI passes the daemon client); without it,
   * overlay mounts and unmounts fail with E_INTERNAL and checkpoints report no metrics.
   * The catalog and the store must belong together (src/catalog/open/store-binding.ts): a new
   * home records their identity, an upgraded one on its first open; `adopting` (only `awc fsck
   * --adopt-store`, which binds them itself: adopt-store.ts) opens the catalog without that check; `checking` (only
   * `awc fsck`) records nothing and opens an unbound catalog whose packs the store lacks, to report them (fsck-binding.ts).
   * @throws E_NO_HOME, E_CONFIG, E_STORE_MISMATCH, E_CATALOG_EMPTY, E_READ_ONLY / E_NO_SPACE / E_PERMISSION (the home's file system)
   */
  static async open(
    overrides: Partial<AwcConfig> = {},
    opts: { create?: boolean; adopting?: boolean; checking?: boolean; daemon?: (config: AwcConfig) => HostDaemonPort } = {},
  ): Promise<Awc> {
    const config = loadConfig(overrides);
    const paths = pathsOf(config);
    const store = await openObjectStore(config.objectStore);
    // a lost catalog is refused before anything is created (not E_NO_HOME: its store holds data)
    if (!opts.adopting) await refuseLostCatalog(config.catalog, store, config.objectStore);
    if (opts.create === false) await assertHome(config);
    await prepareHome(paths);
    const bind = opts.checking ? { lostPacks: 'report' as const, record: false } : {};
    const catalog = await (opts.adopting ? openCatalog(config.catalog) : openBoundCatalog(config.catalog, store, config.objectStore, bind));
    return new Awc(config, catalog, store, opts.daemon?.(config) ?? NO_DAEMON);
  }

  /** A service over an open catalog and store (the root daemon serving a user's call, src/daemon/users/user-rpc.ts); never `close` it. */
  static over(config: AwcConfig, catalog: Catalog, store: ObjectStore, daemon: HostDaemonPort): Awc {
    return new Awc(config, catalog, store, daemon);
  }

  async close(): Promise<void> {
    await this.catalog.close();
  }

  get namespace(): string {
    return this.config.namespace;
  }

  /** A reader of this namespace's content; `extra` serves blobs of an unflushed writer session. */
  reader(extra?: (d: Digest) => Buffer | undefined): ContentReader {
    return new ContentReader({ store: this.store, index: this.catalog.blobIndex(this.namespace), extra });
  }

  /**
   * A content writer (dedup against live packs only: `Catalog.dedupIndex`); a dry run with
   * `keepChunks` keeps the new chunks it saw in memory (see ContentWriterOptions).
   */
  protected writer(dryRun = false, keepChunks = false): ContentWriter {
    return new ContentWriter({
      store: this.store,
      index: this.catalog.dedupIndex(this.namespace),
      packBytes: this.config.packBytes,
      dryRun,
      keepChunks,
    });
  }

  /**
   * `awc gc` over this catalog and object store, every namespace (see runGc).
   * @throws E_GC_RUNNING, E_GC_LOCK_LOST, E_OBJECT_NOT_FOUND / E_INTEGRITY (a live blob unreadable)
   */
  gc(opts: Omit<GcOptions, 'catalog' | 'store'> = {}): Promise<GcReport> {
    return runGc({ ...opts, catalog: this.catalog, store: this.store });
  }

  /**
   * `awc fsck` over this catalog and object store, every namespace, and this host's chunk
   * cache (see runFsck). @throws E_USAGE, E_GC_RUNNING (repair beside a gc), E_GC_LOCK_LOST
   */
  fsck(opts: Omit<FsckOptions, 'catalog' | 'store' | 'cacheDir'> = {}): Promise<FsckReport> {
    return runFsck({ ...opts, catalog: this.catalog, store: this.store, cacheDir: this.paths.cache });
  }

  /** Snapshots of the namespace, newest first; with `filter.labels`, those carrying every given label. */
  listSnapshots(filter?: ListFilter): Promise<SnapshotRow[]> {
    return this.catalog.listSnapshots(this.namespace, filter);
  }

  /** Workspaces of the namespace, oldest first; with `filter.labels`, those carrying every given label. */
  listWorkspaces(filter?: ListFilter): Promise<WorkspaceRow[]> {
    return this.catalog.listWorkspaces(this.namespace, filter);
  }

  /**
   * Changes the labels of the snapshot or workspace `ref` names (see resolve): a string sets
   * a key, null deletes it. Returns the kind, id and labels after the change.
   * @throws E_NOT_FOUND, E_AMBIGUOUS, E_USAGE (a bad key or value, more than 64 labels)
   */
  async setLabels(ref: string, patch: LabelPatch): Promise<{ kind: 'snapshot' | 'workspace'; id: string; labels: Labels }> {
    const r = await this.resolve(ref);
    const id = r.kind === 'snapshot' ? r.snapshot.id : r.workspace.id;
    return { kind: r.kind, id, labels: await this.catalog.setLabels(r.kind, this.namespace, id, patch) };
  }

  /** A snapshot by id, unique id prefix or name (optionally written `snapshot:<ref>`). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getSnapshot(ref: string): Promise<SnapshotRow> {
    return this.catalog.getSnapshot(this.namespace, ref.replace(/^snapshot:/i, ''));
  }

  /** A workspace by id, unique id prefix or name (optionally written `workspace:<ref>`). @throws E_NOT_FOUND, E_AMBIGUOUS */
  getWorkspace(ref: string): Promise<WorkspaceRow> {
    return this.catalog.getWorkspace(this.namespace, ref.replace(/^workspace:/i, ''));
  }

  /**
   * Resolves a ref that may name a snapshot or a workspace (`show`, `diff`, `export`; see resolveRef).
   * @throws E_NOT_FOUND, E_AMBIGUOUS (with a hint naming both and how to say which)
   */
  resolve(ref: string): Promise<ResolvedRef> {
    return resolveRef(this, ref);
  }

  /**
   * Forks `count` workspaces from a snapshot: catalog rows only, one transaction.
   * With a name and count > 1, names are `<name>-1` … `<name>-K`. `labels` go on every new workspace.
   * @throws E_NOT_FOUND, E_NAME_TAKEN, E_USAGE (count out of range, bad labels)
   */
  async fork(snapshotRef: string, opts: { name?: string; count?: number; labels?: Labels } = {}): Promise<WorkspaceRow[]> {
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > 100_000)
      throw new AwcError('E_USAGE', `--count must be a whole number from 1 to 100000, got ${opts.count}`);
    const snap = await this.getSnapshot(snapshotRef);
    const names = Array.from({ length: count }, (_, i) =>
      opts.name === undefined ? null : count === 1 ? opts.name : `${opts.name}-${i + 1}`,
    );
    return this.catalog.forkWorkspaces(this.namespace, snap.id, names, { labels: opts.labels });
  }

  /** The mount driver this host uses (see `awc doctor`). */
  doctor(): DriverReport {
    return detectDriver(this.config.mountDriver);
  }

  /**
   * Mounts a workspace at `dir` (created when missing; must be empty) with the driver this
   * host uses (see doctor): overlay via the host daemon (started on demand), else copy.
   * A workspace recorded as mounted there whose mount is gone but kept (a copy after a
   * reboot) is shown again at the same target (`resumed`). A released workspace
   * (service/idle/idle-release.ts) is no longer released once mounted (clearRelease).
   * @throws E_ALREADY_MOUNTED, E_TARGET_BUSY, E_MOUNT_FAILED, E_PERMISSION (overlay forced without root),
   *   E_STILL_MOUNTED (an earlier mount is still alive: detached but used, or in another mount namespace),
   *   E_IN_USE (uncheckpointed changes kept by another driver, or that the driver cannot resume),
   *   E_LEASED (another host holds it; `steal` takes over an expired lease), E_LEASE_LOST (stale changes kept here)
   * `asUser`: an ordinary user's mount through the root daemon (overlay only, at a directory they own).
   */
  async mount(wsRef: string, dir: string, opts: DriverMountOptions = {}): Promise<MountResult> {
    const ws = await this.getWorkspace(wsRef);
    if (ws.mountState === 'mounted' && ws.mountHost === this.config.host && ws.mountPath === resolve(dir)) {
      const resumed = await this.driver(ws.mountDriver).resume(ws);
      if (resumed) return resumed;
    }
    if (ws.mountState === 'mounted' && ws.mountHost !== this.config.host) await this.leases.checkMountedElsewhere(ws, opts.steal === true);
    else if (ws.mountState === 'mounted')
      throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} is already mounted at ${ws.mountPath}`);
    const target = resolve(dir);
    // inside the home: refused (E_USAGE) before anything is created; a user's target is opened by the overlay host (openOwnedTarget)
    if (opts.asUser) refuseInsideHome(target, this.config.home);
    else await prepareMountTarget(target, this.config.home);
    const report = this.doctor();
    if (opts.asUser && report.driver !== 'overlay') throw new AwcError('E_PERMISSION', `users mount by overlay only; ${report.reason}`);
    if (this.config.mountDriver !== 'auto' && report.driver !== this.config.mountDriver) {
      throw new AwcError('E_PERMISSION', `the ${this.config.mountDriver} driver was asked for but ${report.reason}`);
    }
    let pending = await readHostState(this.paths.workspaces, ws.id);
    // never two mounts on one set of private changes (and never remove what an earlier mount still writes to)
    if (pending) await refuseWhileUsed(this.drivers[pending.driver], pending, 'it cannot be mounted again');
    if (pending && !(await this.live.changed(ws, pending, true))) {
      // kept changes that were all checkpointed since: start clean on the head
      await removeHostState(this.paths.workspaces, ws.id);
      pending = undefined;
    }
    if (pending && pending.driver !== report.driver) {
      throw new AwcError('E_IN_USE', `workspace ${ws.id} has uncheckpointed changes from a ${pending.driver} mount on this host`, {
        hint: `Mount it with AWC_MOUNT_DRIVER=${pending.driver}, or discard them with \`awc unmount ${ws.id} --discard\`.`,
      });
    }
    const mounted = await this.drivers[report.driver].mount(ws, target, pending, opts);
    // mounted again: no longer released (a hook worktree is linked to its registration again, its labels go, it is unlocked);
    // a user's mount is linked by the user's own process (remote-awc.ts): root never writes by path into a user's tree
    if (!opts.asUser) await relinkReleasedWorktree(ws, target);
    await clearRelease(ws, (id, patch) => this.setLabels(id, patch));
    return mounted;
  }

  /**
   * Unmounts a workspace (by ref or mount path) through its driver. Overlay: the upper is
   * kept when it holds uncheckpointed changes (the next mount resumes them) unless
   * `discard`. Copy driver: the nosuid,nodev bind mount is removed (lazily with `force`)
   * and the materialised tree deleted; uncheckpointed changes are refused unless `discard`.
   * An overlay detached with `force` while processes still use it keeps its upper (they may
   * still write there): the result is `pending` and names them in `holders`, and the
   * workspace cannot be mounted again (E_STILL_MOUNTED) nor discarded until they exit.
   * A workspace that is not mounted but kept changes here is cleared with `discard`. With `discard`,
   * secret files (they exist nowhere else) are kept on the host first and listed in `kept` (`awc kept`).
   * @throws E_NOT_MOUNTED, E_TARGET_BUSY (use force), E_IN_USE (copy driver with changes),
   *   E_STILL_MOUNTED (discard of an upper an earlier mount still uses)
   */
  async unmount(refOrPath: string, opts: UnmountFlags = {}): Promise<UnmountResult & KeptFields> {
    const ws = await this.workspaceByRefOrPath(refOrPath);
    if (ws.mountState === 'mounted' && opts.keptOnly) throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} was mounted meanwhile`);
    const state = await readHostState(this.paths.workspaces, ws.id);
    const kept = state && opts.discard ? await this.live.keepSecrets(ws, state) : {};
    return { ...(await this.unmountKept(ws, state, opts)), ...kept };
  }

  /** `unmount` once the secrets are kept. */
  private async unmountKept(ws: WorkspaceRow, state: WorkspaceHostState | undefined, opts: UnmountFlags): Promise<UnmountResult> {
    if (ws.mountState === 'mounted' && ws.mountHost !== this.config.host) {
      // taken over by another host: what is left here is stale, dropped only when asked
      if (state && opts.discard) await this.drivers[state.driver].dropStale(state);
      else if (state) await this.leases.commitLease(ws);
      else throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is mounted on host ${ws.mountHost}, not on this one`);
      return { workspace: ws.id, path: state.target, pending: false };
    }
    if (ws.mountState !== 'mounted') {
      if (state && opts.discard) {
        await refuseWhileUsed(this.drivers[state.driver], state, 'its changes cannot be discarded');
        await removeHostState(this.paths.workspaces, ws.id);
        await this.catalog.setLayerSnapshot(ws.id, null);
        await this.catalog.releaseLease(ws.id, this.config.host);
        return { workspace: ws.id, path: state.target, pending: false };
      }
      throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is not mounted`);
    }
    const r = await this.driver(ws.mountDriver).unmount(ws, state, {
      discard: opts.discard ?? false,
      force: opts.force ?? false,
      changed: async () => state !== undefined && (await this.live.changed(ws, state, true)),
    });
    // no host state left: no layer snapshot to keep for gc
    if (!(await readHostState(this.paths.workspaces, ws.id))) await this.catalog.setLayerSnapshot(ws.id, null);
    return r;
  }

  /** `awc rm`: removes a workspace or a snapshot row (see removeRef). @throws E_ALREADY_MOUNTED, E_IN_USE, E_NOT_FOUND */
  rm(ref: string, opts: { force?: boolean } = {}): Promise<RemoveResult> {
    return removeRef(this, this.live, ref, opts);
  }

  /** Where a workspace's driver materialised files outside its host directory (`awc usage`), if anywhere. */
  materialised(state: WorkspaceHostState): string | undefined {
    return this.drivers[state.driver].materialised(state);
  }

  /** The adapter of a driver the catalog recorded for a mounted workspace. */
  private driver(name: MountDriverName | null): MountDriver {
    if (name === null) throw new AwcError('E_INTERNAL', 'a mounted workspace without a mount driver in the catalog');
    return this.drivers[name];
  }

  private async workspaceByRefOrPath(refOrPath: string): Promise<WorkspaceRow> {
    if (refOrPath.includes('/') || refOrPath === '.') {
      const ws = await this.catalog.findWorkspaceByMountPath(resolve(refOrPath));
      if (ws) return ws;
    }
    return this.getWorkspace(refOrPath);
  }

  /**
   * Checkpoints a workspace: its current state becomes a new immutable snapshot (only what
   * changed is chunked and stored; packs and trees are uploaded before one catalog
   * transaction moves the head). Returns the head unchanged when nothing changed.
   * `allowChanging`: a file that keeps changing while read is stored as last read and
   * listed in `changing` instead of failing. The commit carries this host's lease (the fencing
   * token); `beforeCommit` is an injection point (tests: a take-over between scan and commit).
   * @throws E_NOT_FOUND, E_CHANGED_DURING_READ (retryable; `details.path` is the path in the workspace), E_NOT_MOUNTED (nothing to checkpoint from),
   *   E_LEASE_LOST (this host's lease expired or was taken over)
   */
  checkpoint(
    wsRef: string,
    opts: { message?: string; allowChanging?: boolean; testHooks?: CommitHooks; beforeCommit?: () => Promise<void> } = {},
  ): Promise<CheckpointResult> {
    return retryCondemned((n) => this.checkpointOnce(wsRef, opts, n));
  }

  /** One attempt of `checkpoint` (retried by it when gc condemned a pack it deduplicated against). */
  private async checkpointOnce(
    wsRef: string,
    opts: { message?: string; allowChanging?: boolean; testHooks?: CommitHooks; beforeCommit?: () => Promise<void> },
    attempt: number,
  ): Promise<CheckpointResult> {
    const t0 = performance.now();
    const ws = await this.getWorkspace(wsRef);
    const head = await this.getSnapshot(ws.headSnapshotId);
    const state = await readHostState(this.paths.workspaces, ws.id);
    // the head, unchanged: what a checkpoint with nothing new returns
    const unchanged = ({
      filesRead,
      skipped,
      ...rest
    }: Pick<CheckpointResult, 'filesRead' | 'skipped' | 'changing'>): Omit<CheckpointResult, keyof CaptureFields> => ({
      id: head.id,
      root: head.root,
      changed: false,
      parent: head.parentId ?? head.id,
      files: head.fileCount,
      bytes: head.byteCount,
      filesRead,
      newBytes: 0,
      skipped,
      ...rest,
    });
    const rec = this.live.capture();
    const classesOf = (snapshotId: string, root: Digest) => this.classFields(head, snapshotId, root, rec);
    if (!state) return { ...unchanged({ filesRead: 0, skipped: [] }), ...(await classesOf(head.id, head.root)) };
    const startedAtMs = await this.catalog.nowMs();
    // the fencing token: this host's live lease (a lost one refuses the checkpoint here, and the commit re-checks it)
    const lease = await this.leases.commitLease(ws);
    const writer = this.writer();
    const scan = await this.drivers[state.driver].scan(state, writer, { allowChanging: opts.allowChanging, filter: rec });
    killPoint('checkpoint.scan.after');
    if (scan.root === head.root) {
      await this.reportCheckpoint(state.driver, t0, 0);
      const fields = await classesOf(head.id, head.root);
      return { ...unchanged({ filesRead: scan.filesRead, skipped: scan.skipped, ...changingOf(scan.changing) }), ...fields };
    }
    const packs = await writer.flush();
    // the head's counts plus what changed since: only the changed directories are read
    const delta = await diffRootCounts(this.reader(writer.sessionBlob.bind(writer)), head.root, scan.root);
    const counts = { files: head.fileCount + delta.files, bytes: head.byteCount + delta.bytes };
    await opts.testHooks?.beforeCommit?.(attempt);
    await opts.beforeCommit?.();
    killPoint('checkpoint.commit.before');
    const snap = await this.catalog.commitCheckpoint({
      workspaceId: ws.id,
      expectedHeadId: head.id,
      lease,
      snapshot: {
        namespace: this.namespace,
        root: scan.root,
        parentId: head.id,
        message: opts.message ?? null,
        fileCount: counts.files,
        byteCount: counts.bytes,
        packs,
        reusedPacks: writer.reusedPacks(),
        startedAtMs,
      },
    });
    killPoint('checkpoint.commit.after');
    // every digest the scan saw is committed now: the driver's caches may say so
    await scan.committed(snap);
    killPoint('checkpoint.cache.after');
    // after the commit: the class counts read the new .gitignore files, whose chunks the index has only now
    const fields = await classesOf(snap.id, scan.root);
    await this.reportCheckpoint(state.driver, t0, writer.stats.newBytes, scan.root);
    return {
      id: snap.id,
      root: snap.root,
      changed: true,
      parent: head.id,
      files: counts.files,
      bytes: counts.bytes,
      filesRead: scan.filesRead,
      newBytes: writer.stats.newBytes,
      skipped: scan.skipped,
      ...changingOf(scan.changing),
      ...fields,
    };
  }

  /**
   * The capture fields of snapshot `snapshotId` (tree `root`) made from `head` by the walk
   * `rec`: its class counts are the head's (as the catalog or this host's cache holds them)
   * plus what changed (storedClasses), recorded in the catalog when it had none. A failed
   * record is dropped (a cache: the next checkpoint counts in full).
   */
  private async classFields(head: SnapshotRow, snapshotId: string, root: Digest, rec: CaptureRecorder): Promise<CaptureFields> {
    let asked: { recorded?: SnapshotClassCounts } | undefined;
    const prior = {
      root: head.root,
      classes: async () => (asked = { recorded: await this.catalog.snapshotClasses(this.namespace, head.id) }).recorded,
    };
    const c = await captureFields(this.reader(), root, rec, { cache: this.classCache, prior });
    const record = (id: string, counts: SnapshotClassCounts) =>
      this.catalog.setSnapshotClasses(this.namespace, id, counts).catch(() => undefined);
    if (c.prior) await record(head.id, c.prior);
    // a new snapshot's, or the head's when the catalog was asked and had none under this policy
    if (snapshotId !== head.id || (asked && asked.recorded?.key !== c.stored.key)) await record(snapshotId, c.stored);
    return c.fields;
  }

  /**
   * Best effort: tells a running host daemon about the checkpoint for its metrics, and, for an
   * overlay checkpoint that made the new root `root`, to share its layer image in the
   * background (see HostDaemonPort.reportCheckpoint): the checkpoint does not wait for it.
   */
  private reportCheckpoint(driver: MountDriverName, t0: number, newBytes: number, root?: Digest): Promise<void> {
    const image = driver === 'overlay' && root !== undefined ? { namespace: this.namespace, root } : {};
    return this.daemon.reportCheckpoint({ driver, durationMs: performance.now() - t0, newBytes, ...image });
  }

  /** Root digest of a ref: a snapshot's root, or a workspace's live state (mounted here; with what its scan left out) or head. */
  private async rootOf(ref: string, writer: ContentWriter): ReturnType<DiffRefsDeps['rootOf']> {
    const r = await this.resolve(ref);
    if (r.kind === 'snapshot') return { root: r.snapshot.root, label: r.snapshot.id };
    const state = await readHostState(this.paths.workspaces, r.workspace.id);
    return { ...(await this.live.rootAndLeftOut(r.workspace, state, writer)), label: r.workspace.id };
  }

  /**
   * Diffs two refs (see `diffRefs`): one ref is a workspace's head against its live state, or
   * a snapshot's parent against it; with `patch`, a git-style patch too.
   * @throws E_NOT_FOUND, E_AMBIGUOUS, E_CHANGED_DURING_READ (a live file kept changing)
   */
  diff(fromRef: string, toRef?: string, opts: DiffOptions = {}): Promise<DiffResult> {
    const deps: DiffRefsDeps = {
      resolve: (r) => this.resolve(r),
      getSnapshot: (r) => this.getSnapshot(r),
      rootOf: (r, w) => this.rootOf(r, w),
      reader: (extra) => this.reader(extra),
    };
    return diffRefs(deps, this.writer(true, opts.patch === true), fromRef, toRef, opts);
  }

  /**
   * Exports a snapshot (or a workspace's head) as a tar file or into a directory (written
   * beside it under a temporary name, in place only when complete; `overwrite` replaces a
   * non-empty directory). Into a directory, setuid/setgid bits and device nodes are left
   * out and listed in `leftOut` unless `keepPrivileges`; a tar keeps them.
   * @throws E_NOT_FOUND, E_TARGET_EXISTS (a tar file that exists, a directory not empty), E_PATH_TRAVERSAL, E_NO_SPACE…,
   *   E_USAGE (directory is, holds or is inside the home), E_TARGET_BUSY (a mount point at or below it)
   */
  export(ref: string, opts: Parameters<typeof exportRef>[2]): ReturnType<typeof exportRef> {
    return exportRef(this, ref, opts);
  }

  /**
   * Imports a directory or a tar file as a new snapshot. `allowChanging`: a file of a
   * directory that keeps changing while read is stored as last read and listed in `changing`.
   * @throws E_SOURCE_NOT_FOUND, E_NAME_TAKEN, E_PATH_TRAVERSAL, E_CHANGED_DURING_READ
   */
  async importSnapshot(source: string, opts: ImportOptions = {}): Promise<ImportResult> {
    let rec: CaptureRecorder | undefined;
    let writer: ContentWriter | undefined;
    const filter = () => (rec = new CaptureRecorder(this.reader(), { dropScratch: false }));
    const r = await retryCondemned((n) =>
      importSnapshot(
        this.catalog,
        this.namespace,
        () => (writer = this.writer()),
        source,
        { gitProofStore: this.store, ...opts, filter, statCacheDir: opts.statCache ? this.statCacheDir() : opts.statCacheDir },
        n,
      ),
    );
    if (rec && writer) await this.recordImportClasses(r, rec, writer);
    // the shared layer image, before the import returns: the first mount anywhere is a download (never fails the import)
    const deps = { config: this.config, catalog: this.catalog, store: this.store };
    const { importImage } = await import('../import/snapshot-image.js');
    const image = await importImage(deps, this.namespace, r.root, this.reader(writer?.sessionBlob.bind(writer)));
    if (image.image?.built) await this.daemon.reportImportImage({ outcome: 'published', reason: 'import' });
    if (image.imageSkipped?.reason === 'failed')
      await this.daemon.reportImportImage({ outcome: 'failed', reason: image.imageSkipped.code ?? 'E_INTERNAL' });
    return { ...r, ...image };
  }

  /** Where this host keeps the stat caches of directory imports (src/service/import/stat-cache.ts). */
  statCacheDir(): string {
    return join(this.paths.hostDir, 'import-stats');
  }

  /**
   * Counts an import's classes while its trees are in the writer's memory and records them
   * in the catalog, so the first checkpoint of every workspace made from it counts only what
   * it changed. An import with a parent (`prepare --update`) counts only what changed since
   * the parent (its recorded counts plus diffClasses). The import is committed: a count that
   * fails is left to that checkpoint.
   */
  private async recordImportClasses(r: ImportResult, rec: CaptureRecorder, writer: ContentWriter): Promise<void> {
    try {
      // an update (`parent`) counts what changed since its parent (diffClasses), not the whole tree
      const parent = r.parent === undefined ? undefined : await this.catalog.getSnapshot(this.namespace, r.parent);
      const prior = parent && { root: parent.root, classes: () => this.catalog.snapshotClasses(this.namespace, parent.id) };
      const { stored } = await storedClasses(this.reader(writer.sessionBlob.bind(writer)), r.root as Digest, policyOf(rec), {
        cache: this.classCache,
        ...(prior && { prior }),
      });
      await this.catalog.setSnapshotClasses(this.namespace, r.id, stored);
    } catch {
      // the first checkpoint counts (storedClasses), and records it
    }
  }

  /** `awc snapshot import --git` (see importGit). @throws E_GIT_NOT_A_REPO, E_GIT_BAD_REV, E_GIT_FAILED, and as importSnapshot */
  async importGit(repo: string, opts: GitImportOptions = {}): Promise<GitImportResult> {
    return (await import('../git/git-import.js')).importGit(this, repo, opts);
  }

  /**
   * `awc export <ref> --git <repo> --branch B` (see exportGit): the snapshot's changes against its base as one commit.
   * @throws E_GIT_NO_BASE, E_GIT_BRANCH_EXISTS, E_GIT_BRANCH_CHECKED_OUT, E_GIT_NOT_A_REPO, E_GIT_FAILED, E_USAGE, E_NOT_FOUND
   */
  async exportGit(ref: string, opts: GitExportOptions): Promise<GitExportResult> {
    return (await import('../git/git-export.js')).exportGit(this, ref, opts);
  }

  /** `awc checkpoint --git-branch B` (see checkpointGit): a checkpoint, then exportGit of the new head. @throws as checkpoint and exportGit */
  async checkpointGit(wsRef: string, opts: CheckpointGitOptions): Promise<{ checkpoint: CheckpointResult; git: GitExportResult }> {
    return (await import('../git/git-export.js')).checkpointGit(this, wsRef, opts);
  }
}
