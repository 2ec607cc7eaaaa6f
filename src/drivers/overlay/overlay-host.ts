import { EventEmitter } from 'node:events';
import { mkdir, readdir } from 'node:fs/promises';
import { removeTree } from '../../core/remove-tree.js';
import * as fs from 'node:fs';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import { mkdirPrivate } from '../../core/private-fs.js';
import { utimesNsAt } from '../../host/sys/utimens.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { AwcConfig, AwcPaths } from '../../config/config.js';
import { limitsOf } from '../../config/daemon-limits.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import { checkMountTarget, unmount } from '../../host/mount/mount-commands.js';
import { mountsAt, readMountInfo } from '../../host/mount/mount-table.js';
import { describeUse, type Holder } from '../port/mount-use.js';
import { readHostState, workspaceDirs, writeHostState, type WorkspaceHostState } from '../port/workspace-state.js';
import { buildLayer, hasLayer } from './layer-builder.js';
import { publishesImages, SharedLayerImages, type LayerImageEvent, type LoadedLayer } from './shared-image.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { LayerGitIndexSource } from './layer-git-index.js';
import { LayerUse } from './layer-use.js';
import { sweepLayers, type LayerSweepResult } from './layer-sweep.js';
import { cleanLeftovers, findLeftovers } from './leftovers.js';
import { mountOverlay } from './overlay-mount.js';
import { PendingRemounts } from './pending-remounts.js';
import { overlayUpper, probeUpperInUse, upperInUse } from './upper-use.js';
import { undoMountRecord } from '../port/undo-mount-record.js';
import { openOwnedTarget } from '../../host/mount/owned-target.js';
import { join } from 'node:path';
import type { LogRecord, Logger } from '../../core/log.js';

/** A workspace's directories on this host (see workspaceDirs). */
type WorkspaceDirs = ReturnType<typeof workspaceDirs>;

/**
 * Never two overlays on one upper: an earlier mount may live on, detached or in another namespace.
 * @throws E_STILL_MOUNTED when an earlier mount of the workspace (other than the recorded `pending` one) still uses its upper
 */
async function refuseUpperInUse(wsId: string, dirs: WorkspaceDirs, pending: WorkspaceHostState | undefined): Promise<void> {
  if (!fs.existsSync(dirs.upper)) return;
  const use = await upperInUse(dirs.upper, dirs.dir, pending?.mount ? [pending.mount.id] : []);
  if (use.inUse) {
    throw new AwcError('E_STILL_MOUNTED', `an earlier mount of workspace ${wsId} is still alive: ${describeUse(use)}`, {
      details: { holders: use.holders, mountedAt: use.mountedAt },
    });
  }
}

/** The ordinary user an overlay is mounted for (see WorkspaceHostState.owner). */
export interface MountOwner {
  uid: number;
  gid: number;
}

/** What the overlays need of the host's content plane (the daemon's content FUSE server and its source). */
export interface OverlayContent {
  /** A tree reader of a namespace (layers are built from it). */
  reader(ns: string): TreeSource;
  /**
   * Makes a layer's content objects servable by the content FUSE server (called once per layer
   * and daemon): a built layer's are registered and announced, a shared image's content index
   * is added to be looked up lazily.
   */
  addLayer(ns: string, layer: LoadedLayer): void;
  /** Whether a short content name is free in the FUSE server's table (see buildLayer's `shortNameFree`); absent: no server yet. */
  shortNameFree?: (hex: string) => boolean;
  /** Where layers of a namespace find the proofs that give workspaces a trusted `.git/index` (see buildLayer's `git`); absent: the snapshot's own index. */
  gitIndex?: (ns: string) => LayerGitIndexSource;
  /** True when the daemon took over the content FUSE connection of the one before it. */
  resumedConnection(): boolean;
  /** The host object cache's directory, mounted as CACHE between the layer and CONTENT (src/host/read-path/object-cache.ts); absent: none. */
  objectCacheDir?: string;
  /** The object store layer images are shared through (src/drivers/overlay/shared-image.ts); absent: every layer is built here. */
  store?: ObjectStore;
}

/** Events of an {@link OverlayHost}. */
export interface OverlayHostEvents {
  /** A log line (`{level, msg, ...}`), when it was given no logger. */
  log: [LogRecord];
  /** A mount operation done (for the daemon's metrics). */
  op: [{ op: 'mount' | 'remount' | 'unmount' }];
  /** A shared layer image published, mounted, or not usable (for the daemon's metrics). */
  image: [LayerImageEvent];
}

/** The overlay workspace mounts of this host, as the daemon reports them. */
export interface OverlayStatus {
  mounts: { workspace: string; namespace: string; path: string }[];
  /** Workspaces to remount once their old overlay (on a dead connection) has no users: who still holds it. */
  waiting: { workspace: string; path: string; holders: Holder[] }[];
}

/**
 * The overlay driver, host side: every overlay workspace mount of this host, run in the
 * host daemon (which owns the content FUSE server the overlays read their data from).
 * Builds (once per snapshot) the layer directories, mounts one overlayfs per workspace
 * with a private upper, unmounts, and after a restart adopts or remounts what the catalog
 * records as mounted here (never two overlays on one upper). Logs to its `logger` (default:
 * its `'log'` event) and emits `op` events; never prints.
 */
export class OverlayHost extends EventEmitter<OverlayHostEvents> {
  /** Layers in use on this host, by namespace and root: built (or loaded) and registered once. */
  private layers = new Map<string, Promise<LoadedLayer>>();
  private mounts = new Map<string, { namespace: string; path: string; uid?: number }>();
  /** Mounts of each ordinary user under way (see userMountSlot). */
  private readonly userMountsStarting = new Map<number, number>();
  /** The layers mounts in progress hold (the host sweep never drops them). */
  private readonly layerUse = new LayerUse();
  /** Workspaces whose old overlay sits on a dead connection and is still used: remounted once it is free. */
  private readonly waiting: PendingRemounts;
  private readonly log: Logger;
  /** The layer images this host shares with the others (absent: `layerImages` is off, or no store was given). */
  private readonly images: SharedLayerImages | undefined;

  /** `logger`: where it logs (default: its `'log'` event). */
  constructor(
    private readonly config: AwcConfig,
    private readonly paths: AwcPaths,
    private readonly catalog: Catalog,
    private readonly content: OverlayContent,
    logger?: Logger,
  ) {
    super();
    this.log = logger ?? ((l) => void this.emit('log', l));
    this.images = this.sharedImages();
    this.waiting = new PendingRemounts(
      paths.workspaces,
      async (ns, wsId, path) => {
        await this.catalog.setMount(wsId, null);
        await this.mount(ns, wsId, path, 'remount');
      },
      this.log,
    );
  }

  /** Number of overlay workspaces mounted by this daemon. */
  get size(): number {
    return this.mounts.size;
  }

  /** The mounts and the workspaces waiting to be remounted. */
  status(): OverlayStatus {
    return {
      mounts: [...this.mounts.entries()].map(([workspace, m]) => ({ workspace, namespace: m.namespace, path: m.path })),
      waiting: this.waiting.entries().map(([workspace, w]) => ({ workspace, path: w.path, holders: w.holders })),
    };
  }

  /**
   * Registers the layers of the overlays that may still read from a connection taken over,
   * before it is served: those of the workspaces recorded as mounted here, and those of
   * workspaces whose earlier mount lives on detached (`unmount --force` with processes inside).
   */
  async registerMountedLayers(): Promise<void> {
    const mounted = new Set<string>();
    for (const ws of await this.catalog.listMountedOnHost(this.config.host)) if (ws.mountDriver === 'overlay') mounted.add(ws.id);
    const ids = await readdir(this.paths.workspaces).catch(() => [] as string[]);
    for (const id of ids) {
      try {
        const state = await readHostState(this.paths.workspaces, id);
        if (!state || state.driver !== 'overlay') continue;
        const dirs = workspaceDirs(this.paths.workspaces, id);
        if (!mounted.has(id) && !(state.mount && (await probeUpperInUse(dirs.upper, dirs.dir)))) continue;
        await this.layer(state.namespace, state.layerRoot, state.owner);
      } catch (err) {
        this.log({ level: 'error', msg: 'layer of a mounted workspace failed', workspace: id, err: String(err) });
      }
    }
  }

  /**
   * The workspaces the catalog says are mounted on this host (after a crash or restart). On a
   * connection taken over, an overlay still mounted at its path is adopted as it is: processes
   * inside keep their files. Otherwise the old overlay reads from a dead connection: it is
   * replaced, but only once nobody uses it (never two overlays on one upper); until then the
   * workspace waits (status `waiting`), retried every second.
   */
  async remountAll(): Promise<void> {
    for (const ws of await this.catalog.listMountedOnHost(this.config.host)) {
      if (ws.mountDriver !== 'overlay' || !ws.mountPath) continue;
      try {
        const upper = workspaceDirs(this.paths.workspaces, ws.id).upper;
        const here = mountsAt(ws.mountPath, 'overlay').at(-1);
        const state =
          this.content.resumedConnection() && here && overlayUpper(here) === upper
            ? await readHostState(this.paths.workspaces, ws.id)
            : undefined;
        if (state) {
          this.mounts.set(ws.id, { namespace: ws.namespace, path: ws.mountPath, uid: state.owner?.uid });
          this.log({ level: 'info', msg: 'adopted', workspace: ws.id, path: ws.mountPath });
          continue;
        }
        if (await this.waiting.tryRemount(ws.namespace, ws.id, ws.mountPath))
          this.log({ level: 'info', msg: 'remounted', workspace: ws.id, path: ws.mountPath });
      } catch (err) {
        this.log({ level: 'error', msg: 'remount failed', workspace: ws.id, err: String(err) });
      }
    }
  }

  /** Overlays on this home's uppers that no workspace of this daemon owns (a mount the dead daemon had not recorded): unmounted, lazily when busy. */
  async sweepStrays(): Promise<void> {
    const owned = new Set([...this.mounts.values(), ...this.waiting.entries().map(([, w]) => w)].map((m) => m.path));
    const strays = findLeftovers(this.paths, readMountInfo()).filter((l) => l.kind === 'overlay' && !owned.has(l.path));
    for (const c of await cleanLeftovers(strays))
      this.log({ level: 'warn', msg: 'stray overlay unmounted', path: c.path, lazy: c.lazy, err: c.error });
  }

  /**
   * Mounts a workspace: builds (once per snapshot) the layer directory, registers its
   * content objects with the FUSE server, and mounts one overlayfs with a private upper.
   * An upper kept from an earlier mount (uncheckpointed changes) is resumed on its layer, only
   * while this host kept the lease (else it is stale: E_LEASE_LOST). `steal` takes over an expired lease.
   * `owner` (an ordinary user's mount through the root daemon; a remount takes it from the
   * kept state): the target must be an empty directory that user owns, opened without
   * following symlinks and mounted through its descriptor (openOwnedTarget), the layer is
   * the user's (owners mapped to them) and the upper's root is theirs.
   * @throws E_LEASED, E_LEASE_LOST, E_ALREADY_MOUNTED, E_MOUNT_FAILED, E_NOT_FOUND, E_USAGE / E_TARGET_BUSY (see checkMountTarget),
   *   E_STILL_MOUNTED (an earlier overlay on the upper is alive), E_PERMISSION (owner: a target not theirs, or a symlink),
   *   E_TOO_MANY (owner: `userMaxMounts` of theirs mounted or being mounted already; details `{cap, value}`)
   */
  async mount(
    ns: string,
    wsId: string,
    target: string,
    op: 'mount' | 'remount' = 'mount',
    steal = false,
    asUser?: MountOwner,
  ): Promise<{ workspace: string; path: string; driver: 'overlay'; resumed: boolean }> {
    const done = op === 'mount' && asUser ? this.userMountSlot(asUser.uid) : undefined;
    try {
      return await this.mountNow(ns, wsId, target, op, steal, asUser);
    } finally {
      done?.();
    }
  }

  /**
   * Counts a mount of `uid` under way until the returned function is called (docs/explanation/security.md
   * "Per-user resource caps"). @throws E_TOO_MANY when `userMaxMounts` of theirs are mounted or under way
   */
  private userMountSlot(uid: number): () => void {
    const cap = limitsOf(this.config).userMaxMounts;
    const starting = this.userMountsStarting.get(uid) ?? 0;
    const mounted = [...this.mounts.values()].filter((m) => m.uid === uid).length;
    if (mounted + starting >= cap)
      throw new AwcError('E_TOO_MANY', `uid ${uid} has ${cap} workspaces mounted through the daemon already (userMaxMounts: ${cap})`, {
        hint: `Unmount a workspace you no longer use (\`awc unmount <workspace>\`), then mount again; the limit is userMaxMounts (${cap}) in the root home's config.json.`,
        details: { cap: 'userMaxMounts', value: cap },
      });
    this.userMountsStarting.set(uid, starting + 1);
    return () => {
      const n = (this.userMountsStarting.get(uid) ?? 1) - 1;
      if (n > 0) this.userMountsStarting.set(uid, n);
      else this.userMountsStarting.delete(uid);
    };
  }

  private async mountNow(
    ns: string,
    wsId: string,
    target: string,
    op: 'mount' | 'remount',
    steal: boolean,
    asUser?: MountOwner,
  ): Promise<{ workspace: string; path: string; driver: 'overlay'; resumed: boolean }> {
    // whoever may use the socket (socketGroup) never gets a mount over a non-empty directory
    // a user's target: refused before anything is recorded; opened again (and mounted through its descriptor) below
    if (op === 'mount' && asUser) openOwnedTarget(target, asUser.uid).close();
    if (op === 'mount') await checkMountTarget(target, this.config.home);
    const ws = await this.catalog.getWorkspace(ns, wsId);
    // (mounted on another host: mountLeased refuses with E_LEASED, or lets a steal of an expired lease go on)
    if (ws.mountState === 'mounted' && ws.mountHost === this.config.host)
      throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} is already mounted at ${ws.mountPath}`);
    const pending = await readHostState(this.paths.workspaces, ws.id);
    const owner = pending ? pending.owner : asUser;
    if (pending && asUser && pending.owner?.uid !== asUser.uid)
      throw new AwcError('E_PERMISSION', `workspace ${ws.id} keeps changes of another user's mount on this host`);
    let layerSnapshotId: string;
    let layerRoot: Digest;
    if (pending) {
      layerSnapshotId = pending.layerSnapshotId;
      layerRoot = pending.layerRoot;
    } else {
      const head = await this.catalog.getSnapshot(ns, ws.headSnapshotId);
      layerSnapshotId = head.id;
      layerRoot = head.root;
    }
    // held until the state names the layer (or the mount failed): the host sweep never drops it meanwhile
    const release = this.layerUse.acquire(layerRoot);
    try {
      const dirs = workspaceDirs(this.paths.workspaces, ws.id);
      await refuseUpperInUse(ws.id, dirs, pending);
      // the lease (kept, taken, or stolen after expiry), the mount record and the layer's snapshot, in one
      // transaction (one commit), before the layer is built or anything shows at the target: a host that
      // loses the race never builds, mounts, nor touches the upper; a gc anywhere keeps the layer's
      // snapshot from here on (docs/explanation/gc.md#what-is-live)
      const { taken } = await this.catalog.mountLeased(
        ws.id,
        { path: target, driver: 'overlay', host: this.config.host },
        { steal, keepsPrivate: pending !== undefined, expectHeadId: pending ? undefined : layerSnapshotId, layerSnapshotId },
      );
      let mounted = false;
      try {
        const layer = await this.layer(ns, layerRoot, owner);
        if (!pending) await this.freshUpper(ns, dirs, layerRoot, owner);
        await mkdirPrivate(dirs.work);
        const opened = owner ? openOwnedTarget(target, owner.uid) : undefined;
        try {
          await this.mountOverlay(layer.dir, dirs, target, opened?.fd);
        } finally {
          opened?.close();
        }
        mounted = true;
        const m = mountsAt(target, 'overlay').at(-1);
        const mount = m ? { id: m.mountId, dev: `${m.major}:${m.minor}` } : undefined;
        await writeHostState(this.paths.workspaces, {
          v: 1,
          workspaceId: ws.id,
          namespace: ns,
          driver: 'overlay',
          target,
          layerSnapshotId,
          layerRoot,
          mount,
          ...(owner ? { owner } : {}),
        });
      } catch (err) {
        if (mounted) await unmount(target, true);
        // a fresh upper made for this mount holds nothing: never leave it to look like kept changes
        if (!pending) await removeTree(dirs.dir).catch(() => undefined);
        await undoMountRecord(this.catalog, ws.id, this.config.host, taken);
        throw err;
      }
      this.mounts.set(ws.id, { namespace: ns, path: target, uid: owner?.uid });
      this.emit('op', { op });
      return { workspace: ws.id, path: target, driver: 'overlay', resumed: pending !== undefined };
    } finally {
      release();
    }
  }

  /** Mounts the overlay of a workspace: its layer over CACHE (when the host has one) over CONTENT (see mountOverlay). */
  private mountOverlay(layerDir: string, dirs: WorkspaceDirs, target: string, fd: number | undefined): Promise<void> {
    const cache = this.content.objectCacheDir;
    return mountOverlay({ layer: layerDir, content: this.paths.content, cache, upper: dirs.upper, work: dirs.work, target, fd });
  }

  /** Makes an empty upper directory for a first mount, with the attributes of the snapshot root (the overlay root shows them). */
  private async freshUpper(ns: string, dirs: WorkspaceDirs, layerRoot: Digest, owner: MountOwner | undefined): Promise<void> {
    await removeTree(dirs.dir);
    await mkdirPrivate(dirs.dir);
    await mkdir(dirs.upper);
    // the overlay root shows the upper directory's own attributes: give it the snapshot root's
    const root = await this.content.reader(ns).readRoot(layerRoot);
    fs.chownSync(dirs.upper, owner?.uid ?? root.uid, owner?.gid ?? root.gid);
    fs.chmodSync(dirs.upper, root.mode);
    utimesNsAt(undefined, dirs.upper, root.mtimeNs);
  }

  /**
   * Unmounts a workspace's overlay and clears its mount record; the upper stays on disk.
   * @throws E_NOT_MOUNTED, E_TARGET_BUSY (unless force: lazy unmount)
   */
  async unmount(ns: string, wsId: string, force = false): Promise<{ workspace: string; path: string }> {
    const ws = await this.catalog.getWorkspace(ns, wsId);
    if (ws.mountState !== 'mounted' || !ws.mountPath) throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is not mounted`);
    await unmount(ws.mountPath, force);
    await this.catalog.setMount(ws.id, null);
    this.mounts.delete(ws.id);
    this.waiting.delete(ws.id);
    this.emit('op', { op: 'unmount' });
    return { workspace: ws.id, path: ws.mountPath };
  }

  /**
   * Unmounts every overlay that is not busy. Returns the busy ones (still mounted and
   * served). With `force`, busy ones are detached lazily instead: processes inside keep a
   * detached view whose writes still land in the upper, so the workspace must not be
   * mounted again while they run.
   */
  async unmountAll(force: boolean): Promise<{ workspace: string; path: string; holders: Holder[] }[]> {
    const busy: { workspace: string; path: string; holders: Holder[] }[] = [];
    for (const [id, m] of [...this.mounts]) {
      try {
        await unmount(m.path, false);
      } catch (err) {
        if (!(err instanceof AwcError && err.code === 'E_TARGET_BUSY')) throw err;
        if (!force) {
          busy.push({ workspace: id, path: m.path, holders: (err.details?.holders as Holder[] | undefined) ?? [] });
          continue;
        }
        this.log({ level: 'warn', msg: 'busy mount detached lazily', workspace: id, path: m.path });
        await unmount(m.path, true);
      }
      await this.catalog.setMount(id, null);
      this.mounts.delete(id);
      this.emit('op', { op: 'unmount' });
    }
    return busy;
  }

  /** No more remount retries (the daemon stops). */
  stopRetrying(): void {
    this.waiting.stop();
  }

  /**
   * Drops the layers of this host nothing needs (sweepLayers: not a root of `liveRoots`, not in
   * use by a workspace state, an overlay or a mount in progress here).
   * @throws see sweepLayers
   */
  async sweepLayers(liveRoots: () => Promise<ReadonlySet<Digest>>, dryRun = false): Promise<LayerSweepResult> {
    const out = await this.sweepLayersIn(this.paths.layers, liveRoots, dryRun);
    // the layers built for ordinary users (one tree per root and uid), by the same rule
    for (const uid of await readdir(this.paths.userLayers).catch(() => [] as string[])) {
      if (!/^\d+$/.test(uid)) continue;
      const r = await this.sweepLayersIn(join(this.paths.userLayers, uid), liveRoots, dryRun);
      out.dropped.push(...r.dropped);
      out.kept += r.kept;
      out.leftovers += r.leftovers;
      out.leftoverBytes += r.leftoverBytes;
    }
    return out;
  }

  private sweepLayersIn(layersDir: string, liveRoots: () => Promise<ReadonlySet<Digest>>, dryRun: boolean): Promise<LayerSweepResult> {
    return sweepLayers({
      layersDir,
      workspacesDir: this.paths.workspaces,
      use: this.layerUse,
      liveRoots,
      dryRun,
      forget: (root) => {
        for (const key of [...this.layers.keys()]) if (key.endsWith(`\0${root}`)) this.layers.delete(key);
      },
    });
  }

  /**
   * Shares the layer image of snapshot `root` of `ns` in the background, when this host shares
   * images and none is recorded yet (SharedLayerImages.publishLater): called after a checkpoint
   * made the root, which returned first. Never throws, never waits.
   */
  shareImageLater(ns: string, root: Digest): void {
    this.images?.publishLater(ns, root);
  }

  /**
   * Unmounts the layer images of this home (image-backed layers' trees), for a daemon that
   * stops after its overlays: a stopped home holds no mount (lazily detached when an overlay
   * still reads one; the next use mounts it again). Never throws: failures are logged.
   */
  async unmountLayerImages(): Promise<void> {
    this.layers.clear();
    const images = findLeftovers(this.paths, readMountInfo()).filter((l) => l.kind === 'layer');
    for (const c of await cleanLeftovers(images))
      if (c.error) this.log({ level: 'warn', msg: 'a layer image was not unmounted', path: c.path, err: c.error });
  }

  /** Cancels this host's image build under way, if any (SharedLayerImages.stop); resolves once it is gone. */
  stopImages(): Promise<void> {
    return this.images?.stop() ?? Promise.resolve();
  }

  /** The shared layer images of this host, by the `layerImages` policy (`auto`: built and shared when the catalog is PostgreSQL). */
  private sharedImages(): SharedLayerImages | undefined {
    if ((this.config.layerImages ?? 'auto') === 'off' || !this.content.store) return undefined;
    const images = new SharedLayerImages({
      catalog: this.catalog,
      store: this.content.store,
      host: this.config.host,
      workDir: this.paths.imageBuilds,
      publish: publishesImages(this.config),
      reader: (ns) => this.content.reader(ns),
      gitIndex: this.content.gitIndex,
      logger: this.log,
    });
    images.on('image', (e) => this.emit('image', e));
    return images;
  }

  /** The layer of a snapshot root, built once per host and registered with the content plane once per daemon. */
  private layer(ns: string, root: Digest, owner?: MountOwner): Promise<LoadedLayer> {
    const key = `${ns}\0${owner ? `${owner.uid}:${owner.gid}` : ''}\0${root}`;
    let p = this.layers.get(key);
    if (!p) {
      const t0 = performance.now();
      p = this.loadLayer(ns, root, owner).then((layer) => {
        const t1 = performance.now();
        this.content.addLayer(ns, layer);
        const ms = (t: number) => Math.round(t * 10) / 10;
        this.log({ level: 'info', msg: 'layer ready', root, loadMs: ms(t1 - t0), registerMs: ms(performance.now() - t1) });
        return layer;
      });
      p.catch(() => this.layers.delete(key));
      this.layers.set(key, p);
    }
    return p;
  }

  /**
   * The layer of `root`: an image-backed layer of this host (mounted again if needed), else,
   * when this host has none, the image another host shared (docs/explanation/layer-images.md),
   * else one built here: an image when this host can mount one (SharedLayerImages.buildHere),
   * else a layer directory; a fleet host then shares its image in the background. An ordinary
   * user's layer (owners mapped to the user) is built here only, never taken from another host.
   */
  private async loadLayer(ns: string, root: Digest, owner?: MountOwner): Promise<LoadedLayer> {
    const dir = owner ? join(this.paths.userLayers, String(owner.uid)) : this.paths.layers;
    const images = this.images;
    const reopened = await images?.reopen(root, dir);
    if (reopened) return reopened;
    const shortNameFree = this.content.shortNameFree;
    if (images && !(await hasLayer(root, dir))) {
      const fetched = owner ? undefined : await images.fetch(ns, root, dir);
      const layer = fetched ?? (await images.buildHere(ns, root, dir, { owner, shortNameFree }));
      if (layer) {
        if (!fetched && !owner) images.publishLater(ns, root);
        return layer;
      }
    }
    const layer = await buildLayer(this.content.reader(ns), root, dir, { shortNameFree, owner, git: this.content.gitIndex?.(ns) });
    if (!owner) images?.publishLater(ns, root);
    return layer;
  }
}
