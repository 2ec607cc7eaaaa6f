import { ClassCountCache } from '../../service/capture/class-cache.js';
import { EventEmitter } from 'node:events';
import type { LogEvents, Logger } from '../../core/log.js';
import { connect } from 'node:net';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { rm } from 'node:fs/promises';
import * as fs from 'node:fs';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import { openBoundCatalog } from '../../catalog/open/open-catalog.js';
import { TEMP_GRACE_MS } from '../../store/fs/fs-object-store.js';
import { openObjectStore } from '../../store/open/open-object-store.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { layerGitSource } from '../../drivers/overlay/layer-git-index.js';
import { ContentFuse } from '../../host/fuse/content-fuse.js';
import { ContentPlane } from '../../host/read-path/content-plane.js';
import { ObjectCache } from '../../host/read-path/object-cache.js';
import type { Layer } from '../../drivers/overlay/layer-builder.js';
import type { Holder } from '../../drivers/port/mount-use.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';
import { unmount } from '../../host/mount/mount-commands.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { OverlayHost, type OverlayStatus } from '../../drivers/overlay/overlay-host.js';
import { pathsOf, type AwcConfig, type AwcPaths } from '../../config/config.js';
import { DaemonMetrics } from '../metrics/metrics.js';
import { serveMetricsOverTcp } from '../metrics/metrics-listener.js';
import { listenOnSocket, resolveGroup } from '../api/socket-file.js';
import { mkdirPrivate, writeFilePrivate } from '../../core/private-fs.js';
import { prepareHome } from '../../service/workspace/private-home.js';
import { livePid } from '../supervisor/pid-file.js';
import { HostHeartbeat, type HeartbeatStatus } from './heartbeat.js';
import { watchHome } from './home-watch.js';
import { HostSweeper } from './host-sweeper.js';
import { WorktreeSweeper } from './worktree-sweeper.js';
import { IdleSweeper } from './idle-sweeper.js';
import { loadConfig } from '../../config/config.js';
import { resolveUserRules } from '../users/user-access.js';
import { UserRpc } from '../users/user-rpc.js';
import { UserSockets } from '../users/user-sockets.js';
import { ANSWERED, ROOT_ENDPOINTS, type RootContext } from './root-handlers.js';
import { readJson, sendJson as send } from '../api/http-json.js';
import { WarmCliPool } from '../warm/warm-pool.js';
import { cliSocketOf, userCliSocketOf } from '../warm/warm-protocol.js';
import { checkFdReserve, configureDaemonLimits, warmLimits } from '../api/conn-guard.js';

/**
 * Size of the content FUSE server's hot arena (bytes). Measured on this checkout's tree, cold,
 * files in snapshot order: 8, 16 and 32 MiB all let the workers answer every READ of a
 * single-chunk file (2304 of 2404), 64 KiB only 56; 16 MiB leaves room for concurrent readers
 * at different places while keeping the daemon's memory in check (it counts in its RSS once
 * written).
 */
const ARENA_BYTES = 16 * 1024 * 1024;

/** Status answered on `GET /v1/status`. */
export interface DaemonStatus {
  pid: number;
  host: string;
  home: string;
  startedAt: string;
  /** The API socket this daemon listens on. */
  socket: string;
  content: string;
  contentObjects: number;
  mounts: OverlayStatus['mounts'];
  /** Pid of the supervisor that keeps the content FUSE connection across restarts, or null. */
  supervisor: number | null;
  /** True when this daemon took over the content FUSE connection of the one before it. */
  resumedConnection: boolean;
  /** True when a death of this daemon keeps the connection and fails only its in-flight requests (served on a clone of the supervisor's descriptor). */
  keepsConnection: boolean;
  /** Workspaces to remount once their old overlay (on a dead connection) has no users: who still holds it. */
  waiting: OverlayStatus['waiting'];
  /** This host's session in the catalog, which holds the leases of every workspace mounted here (docs/explanation/leases.md). */
  session: HeartbeatStatus | null;
  /** False for a daemon of an ordinary user: it holds the host's session (copy mounts) but serves no content and no overlays. */
  servesContent: boolean;
}

/** Options of a {@link HostDaemon}. */
export interface HostDaemonOptions {
  /** A /dev/fuse descriptor the supervisor keeps open (src/daemon/supervisor/supervisor.ts). */
  fuseFd?: number;
  /** Take over the live connection of that descriptor (a restart after a crash) instead of mounting. */
  resume?: boolean;
  /** Age (ms) of the object store's leftover temporary files that `start` removes (default TEMP_GRACE_MS, 1 h). */
  tempGraceMs?: number;
  /** The awc version, recorded with the host's session. */
  version?: string;
  /** Where the daemon and its parts log (default: the daemon's `'log'` event). */
  logger?: Logger;
}

/** Events of a {@link HostDaemon}: its log records (when no logger was given), and `stopped` once it stopped by itself (`POST /v1/stop`, its home removed). */
export interface HostDaemonEvents extends LogEvents {
  stopped: [];
}

/** How long an ordinary user's warm CLI worker waits for a command before it is stopped (ms). */
const USER_WORKER_IDLE_MS = 10 * 60_000;

/**
 * The host daemon (`awcd`): owns the content FUSE mount (one per host, lazily serving file
 * contents by digest) and runs the overlay workspace mounts of this host (OverlayHost:
 * layers, overlays, remounts after a restart). Serves a JSON API on a Unix socket (`paths.socket`: 0600, or 0660 root:<socketGroup>;
 * see socket-file.ts), one handler per endpoint (ROOT_ENDPOINTS, root-handlers.ts):
 *
 * - `GET /v1/status` → DaemonStatus
 * - `POST /v1/mount {namespace, workspace, target}` → `{workspace, path, driver, resumed}`
 * - `POST /v1/unmount {namespace, workspace, force}` → `{workspace, path}`
 * - `POST /v1/stop {force}` → unmounts everything (uppers are kept) and exits; E_TARGET_BUSY
 *   (nothing stops, busy mounts stay served) when a mount is in use, unless `force`
 * - `GET /metrics` → Prometheus text exposition (content type from the registry; see metrics.ts)
 * - `GET /v1/metrics.json` → prom-client registry JSON `[{name, help, type, values: [{value, labels, metricName?}]}]`
 * - `POST /v1/checkpoint-report {driver, durationMs, newBytes, namespace?, root?}` → `{ok: true}`:
 *   counts a checkpoint the CLI ran (E_USAGE on invalid values); with `namespace` and `root` (an
 *   overlay checkpoint that made a new root), the root's layer image is shared in the background
 *   (OverlayHost.shareImageLater)
 * - `POST /v1/image-report {outcome, reason}` → `{ok: true}`: counts what became of an import's
 *   layer image in `awc_layer_images_total` (`published`/`import`, or `failed`/the error's code)
 * - `POST /v1/sweep {dryRun}` → HostSweepReport: one host-local sweep now (HostSweeper)
 * - `POST /v1/reload` → `{users: [uid…]}`: applies the home's `users` again (see reload; also on SIGHUP)
 *
 * Every user the `users` configuration allows gets a socket of their own with a smaller API
 * (UserRpc, src/daemon/users/user-rpc.ts).
 *
 * Errors are `{error: {code, message, hint, retryable}}` with HTTP 4xx/5xx. Logs (LogRecord,
 * src/core/log.ts) to the `logger` option, or as 'log' events; never prints.
 */
export class HostDaemon extends EventEmitter<HostDaemonEvents> {
  readonly paths: AwcPaths;
  private catalog!: Catalog;
  private store!: ObjectStore;
  /** The read path (chunk cache, fetcher, content source, readers and blob indexes by namespace). */
  private plane!: ContentPlane;
  /** The host object cache (absent: `objectCache` off, or it could not open). */
  private objects?: ObjectCache;
  private fuse?: ContentFuse;
  /** The overlay workspace mounts (made in start, once the catalog and the content FUSE server exist). */
  private overlays?: OverlayHost;
  private server?: Server;
  /** Inode of the socket file this daemon listens on (to never remove a successor's). */
  private socketIno?: number;
  private startedAt = new Date().toISOString();
  /** This host's session and its one-statement heartbeat (every lease of the host, every driver). */
  private heartbeat?: HostHeartbeat;
  /** The host-local sweep (layers and cache entries of removed snapshots), periodic and on demand. */
  private sweeper?: HostSweeper;
  /** The periodic worktree sweep (what `awc prune` does: worktrees their tool removed behind AWC's back). */
  private worktrees?: WorktreeSweeper;
  /** The periodic idle sweep (what `awc release --idle` does: idle workspaces released, old released ones removed). */
  private idle?: IdleSweeper;
  /** Content FUSE and overlays need root; an ordinary user's daemon only holds the session (copy mounts). */
  private readonly servesContent = process.getuid?.() === 0;
  private stopping?: Promise<void>;
  private unwatchHome?: () => void;
  /** The per-user sockets (root daemon only; see reload). */
  private userSockets?: UserSockets;
  /** Prometheus metrics of this daemon (served on `GET /metrics`). */
  readonly metrics = new DaemonMetrics();
  /** `GET /metrics` over TCP (config `metricsAddress`), when asked for. */
  private metricsServer?: Server;
  /** Warm CLI workers: for this daemon's own user and for every allowed user (config `warmCli`). */
  private warm?: WarmCliPool;
  /** Where the daemon and its parts log. */
  private readonly log: Logger;

  constructor(
    readonly config: AwcConfig,
    private readonly opts: HostDaemonOptions = {},
  ) {
    super();
    this.paths = pathsOf(config);
    this.log = opts.logger ?? ((l) => void this.emit('log', l));
  }

  /**
   * Starts: catalog, content FUSE (a live connection kept by the supervisor is taken over;
   * else a stale mount from a crashed daemon is detached first and a new one mounted), the API
   * socket, then the workspaces recorded as mounted on this host: adopted as they are when
   * their overlay still sits on the live connection, else remounted once the old overlay has
   * no users (see remountAll).
   * @throws E_FUSE (with `resume`: no live connection to take over), E_MOUNT_FAILED,
   *   E_DAEMON_UNAVAILABLE (another daemon answers on the socket), E_STORE_MISMATCH / E_CATALOG_EMPTY (store-binding.ts),
   *   E_CONFIG (`fdReserve` leaves too few descriptors: checkFdReserve)
   */
  async start(): Promise<void> {
    // a reserve that leaves no descriptors for connections: refused before anything is opened (E_CONFIG)
    checkFdReserve(this.config);
    const gid = this.config.socketGroup === undefined ? undefined : resolveGroup(this.config.socketGroup);
    await prepareHome(this.paths);
    await mkdirPrivate(this.paths.hostDir);
    if (await socketAnswers(this.paths.socket)) {
      throw new AwcError('E_DAEMON_UNAVAILABLE', `another host daemon already serves ${this.paths.socket}`, {
        hint: 'Use it, or stop it first with `awc daemon stop`.',
      });
    }
    const other = livePid(this.paths.pidFile);
    if (other !== undefined && other !== process.pid) {
      // a daemon that stopped answering is still unmounting: starting now would race it for the mounts
      throw new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon (pid ${other}) is still stopping`, {
        hint: 'Wait for it to exit, then start again.',
      });
    }
    this.store = await openObjectStore(this.config.objectStore);
    this.catalog = await openBoundCatalog(this.config.catalog, this.store, this.config.objectStore);
    // the host's session first: remounts take their leases under it
    this.heartbeat = new HostHeartbeat(this.catalog, {
      host: this.config.host,
      ttlMs: this.config.leaseTtlMs,
      intervalMs: this.config.heartbeatMs,
      daemonVersion: this.opts.version,
      logger: this.log,
    });
    await this.heartbeat.start();
    this.unwatchHome = watchHome(this.config.home, async () => {
      this.log({ level: 'warn', msg: 'the home was removed: stopping', home: this.config.home });
      await this.unmountAll(true).catch(() => undefined);
      await this.stop().finally(() => this.emit('stopped'));
    });
    if (!this.servesContent) return this.listen(gid);
    this.log({
      level: 'info',
      msg: 'swept temporary objects left by killed writers',
      ...(await this.store.sweepIncomplete(this.opts.tempGraceMs ?? TEMP_GRACE_MS).catch((err: unknown) => ({ error: String(err) }))),
    });
    const resume = this.opts.resume === true && this.opts.fuseFd !== undefined;
    // a daemon that died leaves its content mount behind, disconnected (ENOTCONN): detach it first
    if (!resume && isMounted(this.paths.content)) await unmount(this.paths.content, true);
    // (never touch a live content mount before it is served: a stat of it would wait for this very process)
    if (!resume) await mkdirPrivate(this.paths.content);
    const catalog = this.catalog;
    this.plane = new ContentPlane({
      store: this.store,
      blobIndex: (ns) => catalog.blobIndex(ns),
      cacheDir: this.paths.cache,
      cacheBytes: this.config.cacheBytes,
      logger: this.log,
    });
    await this.plane.open();
    this.metrics.observe(this.plane);
    // Hot arena: read-ahead chunks that are whole content objects are copied where the FUSE
    // reader workers answer their READs themselves (no main-thread hop on a cold read).
    // (x64 only: the arena's lock-free check was written and tested for x86's memory order; see content-arena.ts)
    const session =
      this.opts.fuseFd === undefined
        ? undefined
        : { fd: this.opts.fuseFd, stateFile: this.paths.fuseSession, nodeLog: this.paths.fuseNodes, resume };
    this.fuse = new ContentFuse({
      mountpoint: this.paths.content,
      source: this.plane.source,
      arenaBytes: process.arch === 'x64' ? ARENA_BYTES : 0,
      session,
    });
    this.plane.attachArena(this.fuse);
    this.objects = await this.openObjectCache(this.fuse);
    this.fuse.on('error', (err) => this.log({ level: 'error', msg: 'fuse', err: String(err) }));
    this.fuse.on('op', (op: string) => this.metrics.fuseOp(op));
    this.metrics.addCollector(() => {
      this.metrics.mountedWorkspaces.set(this.overlays?.size ?? 0);
      if (this.fuse) this.metrics.syncWorkerFuseOps(this.fuse.workerOps);
    });
    const overlays = this.startOverlays(this.fuse);
    // taking over: the layers of the workspaces still mounted are registered before any request is served
    if (resume) await overlays.registerMountedLayers();
    await this.fuse.mount();
    // remount before answering on the socket, so `awc daemon start` returns with the mounts back
    await overlays.remountAll();
    this.metrics.mountedWorkspaces.set(overlays.size);
    await overlays.sweepStrays();
    // every overlay adopted or remounted has its layer registered: CACHE may be filled and trimmed (its rule 3)
    this.objects?.start();
    await this.listen(gid);
  }

  /** Serves the API socket and writes the pid file; starts the periodic host sweep. */
  private async listen(gid: number | undefined): Promise<void> {
    configureDaemonLimits(this.config);
    this.sweeper = new HostSweeper(
      {
        catalog: this.catalog,
        cache: this.plane?.cache,
        layers: this.overlays,
        objects: this.objects,
        classCounts: new ClassCountCache(this.paths.classCounts),
      },
      this.metrics,
      this.config.sweepIntervalMs,
      this.log,
    );
    this.sweeper.start();
    const port = this.rootPort();
    const deps = { config: this.config, catalog: this.catalog, store: this.store, port, logger: this.log };
    this.worktrees = new WorktreeSweeper(deps, this.config.pruneIntervalMs);
    this.worktrees.start();
    this.idle = new IdleSweeper(deps, this.config.idleSweepIntervalMs);
    this.idle.start();
    this.server = createServer((req, res) => void this.handle(req, res));
    this.socketIno = await listenOnSocket(this.server, this.paths.socket, gid);
    if (this.config.metricsAddress) this.metricsServer = await serveMetricsOverTcp(this.metrics, this.config.metricsAddress, this.log);
    if (this.config.warmCli === 'on') await this.serveWarmCli();
    if (this.servesContent) await this.serveUsers(this.config);
    await writeFilePrivate(this.paths.pidFile, String(process.pid));
    this.log({ level: 'info', msg: 'started', pid: process.pid, servesContent: this.servesContent });
  }

  /** The port of the worktree and idle sweeps (configs `pruneIntervalMs`, `idleSweepIntervalMs`): mounts and unmounts through this daemon's overlays as root. */
  private rootPort(): HostDaemonPort {
    return {
      mount: (r) => this.overlayHost().mount(r.namespace, r.workspace, r.target, 'mount', r.steal === true),
      ensureRunning: async () => undefined,
      unmount: async (r) => void (await this.overlayHost().unmount(r.namespace, r.workspace, r.force)),
      reportCheckpoint: async (r) => this.metrics.recordCheckpoint(r),
      reportImportImage: async (r) => void this.metrics.layerImages.inc({ outcome: r.outcome, reason: r.reason }),
    };
  }

  /**
   * The warm CLI socket of this daemon's own user (beside the API socket; 0600 whatever
   * `socketGroup` says: its workers run any command as this user). A failure is logged: the
   * CLI then runs commands in its own process, as without warm workers.
   */
  private async serveWarmCli(): Promise<void> {
    this.warm = new WarmCliPool({ ...warmLimits(this.config), logger: this.log });
    this.warm.on('handed', (e) => this.metrics.warmCommands.inc({ uid: String(e.uid) }));
    const warm = { kind: 'local' as const, home: this.config.home, catalog: this.config.catalog, objectStore: this.config.objectStore };
    await this.warm
      .serve(cliSocketOf(this.paths.socket), { uid: process.getuid!(), gid: process.getgid!(), warm })
      .catch((err: unknown) => this.log({ level: 'warn', msg: 'no warm cli socket', err: String(err) }));
  }

  /** Gives every user the `users` rules of `config` allow a socket of their own, and takes it from the others (see UserSockets). */
  private async serveUsers(config: AwcConfig): Promise<void> {
    const users = resolveUserRules(config.users ?? []);
    if (!this.userSockets && users.size === 0) return;
    if (!this.userSockets) {
      const rpc = new UserRpc({
        config: this.config,
        paths: this.paths,
        catalog: this.catalog,
        store: this.store,
        overlays: () => this.overlayHost(),
        metrics: this.metrics,
        startedAt: this.startedAt,
      });
      this.userSockets = new UserSockets(this.paths.userSockets, (u, req, res) => void rpc.handle(u, req, res), this.config, this.log);
    }
    await this.userSockets.sync(users);
    if (!this.warm) return;
    // their warm CLI sockets beside their API sockets: a worker per user, forked on first use, stopped when idle
    const wanted = new Set<string>();
    for (const u of users.values()) {
      const path = userCliSocketOf(this.paths.userSockets, u.uid);
      wanted.add(path);
      await this.warm
        .serve(path, { uid: u.uid, gid: u.gid, user: u.name, warm: { kind: 'remote' } }, USER_WORKER_IDLE_MS)
        .catch((err: unknown) => this.log({ level: 'warn', msg: 'no warm cli socket', uid: u.uid, err: String(err) }));
    }
    for (const p of this.warm.paths()) if (p.startsWith(`${this.paths.userSockets}/`) && !wanted.has(p)) await this.warm.drop(p);
  }

  /**
   * Reads the home's config.json again (SIGHUP) and applies its `users`: sockets for users
   * newly allowed, none for those no longer allowed, new namespace rules for the others.
   * A configuration that does not validate changes nothing. @throws E_CONFIG
   */
  async reload(): Promise<number[]> {
    if (!this.servesContent) return [];
    const fresh = loadConfig({ home: this.config.home });
    (this.config as { users?: AwcConfig['users'] }).users = fresh.users;
    await this.serveUsers(fresh);
    this.log({ level: 'info', msg: 'reloaded', users: this.userSockets?.uids() ?? [] });
    return this.userSockets?.uids() ?? [];
  }

  /**
   * Opens the host object cache (docs/explanation/host-cache-lower.md) within the chunk cache's
   * budget (`cacheBytes` covers both), wired to the content plane and the FUSE server's short
   * names. Undefined when `objectCache` is off, or when it cannot open (logged: the overlays
   * then read every object through FUSE, as without it).
   */
  private async openObjectCache(fuse: ContentFuse): Promise<ObjectCache | undefined> {
    if (this.config.objectCache === 'off') return undefined;
    const p = this.paths.objectCache;
    const cache = this.plane.cache;
    const objects = new ObjectCache({
      dir: p.dir,
      stagingDir: p.staging,
      markerFile: p.marker,
      source: this.plane.source,
      budgetBytes: () => this.config.cacheBytes - cache.bytes,
      nameIsFree: (hex) => fuse.shortNameFree(hex),
      liveMounts: () => this.overlays?.status().mounts.map((m) => m.workspace) ?? [],
    });
    try {
      await objects.open();
    } catch (err) {
      this.log({ level: 'error', msg: 'object cache unusable: objects are read through FUSE only', err: String(err) });
      return undefined;
    }
    objects.on('reset', (e) => this.log({ level: 'warn', msg: 'object cache emptied', reason: e.reason }));
    objects.on('fill-error', (e) => this.log({ level: 'warn', msg: 'object cache fill failed', content: e.hex, err: String(e.error) }));
    fuse.on('ambiguous', (short) => objects.remove(short));
    this.plane.attachObjects(objects);
    this.metrics.observeObjects(objects);
    return objects;
  }

  /** The overlay mounts of this host over the content FUSE server: their layers are registered with the content plane and announced to the server. */
  private startOverlays(fuse: ContentFuse): OverlayHost {
    const overlays = new OverlayHost(
      this.config,
      this.paths,
      this.catalog,
      {
        reader: (ns) => this.plane.reader(ns),
        addLayer: (ns, layer) => {
          if ('index' in layer) {
            this.plane.addIndex(ns, layer.index);
            fuse
              .guardShortNames(layer.index.sizes())
              .catch((err: unknown) => this.log({ level: 'error', msg: 'short-name check failed', err: String(err) }));
            return;
          }
          this.plane.register(ns, layer.meta.contents);
          fuse.reserve(Object.keys(layer.meta.contents).length);
          fuse.announce(contentSizes(layer.meta.contents));
        },
        shortNameFree: (hex) => fuse.shortNameFree(hex),
        gitIndex: (ns) => layerGitSource(this.plane.reader(ns), this.store),
        resumedConnection: () => fuse.resumedConnection,
        store: this.store,
        objectCacheDir: this.objects && this.paths.objectCache.dir,
      },
      this.log,
    );
    overlays.on('image', (e) => this.metrics.layerImages.inc({ outcome: e.outcome, reason: e.reason ?? '' }));
    overlays.on('op', (e) => {
      this.metrics.mountOperations.inc({ op: e.op, driver: 'overlay' });
      this.metrics.mountedWorkspaces.set(overlays.size);
    });
    this.overlays = overlays;
    return overlays;
  }

  status(): DaemonStatus {
    return {
      pid: process.pid,
      host: this.config.host,
      home: this.config.home,
      startedAt: this.startedAt,
      socket: this.paths.socket,
      content: this.paths.content,
      contentObjects: this.plane?.source.size ?? 0,
      mounts: this.overlays?.status().mounts ?? [],
      supervisor: this.opts.fuseFd === undefined ? null : (livePid(this.paths.supervisorPidFile) ?? null),
      resumedConnection: this.fuse?.resumedConnection ?? false,
      keepsConnection: (this.fuse?.servesOnClone ?? false) && livePid(this.paths.supervisorPidFile) !== undefined,
      waiting: this.overlays?.status().waiting ?? [],
      session: this.heartbeat?.status() ?? null,
      servesContent: this.servesContent,
    };
  }

  /**
   * Unmounts every overlay that is not busy; returns the busy ones (see OverlayHost.unmountAll).
   */
  unmountAll(force: boolean): Promise<{ workspace: string; path: string; holders: Holder[] }[]> {
    return this.overlays?.unmountAll(force) ?? Promise.resolve([]);
  }

  /** Stops the daemon (see unmountAll; stop always forces, callers check busy mounts first). */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.unwatchHome?.();
      this.overlays?.stopRetrying();
      await this.overlays?.stopImages();
      await this.sweeper?.stop();
      await this.worktrees?.stop();
      await this.idle?.stop();
      try {
        await this.unmountAll(true);
      } catch (err) {
        this.log({ level: 'error', msg: 'unmount failed', err: String(err) });
      }
      // after the overlays that read them (lazily detached where a detached overlay still does)
      await this.overlays?.unmountLayerImages();
      await this.objects?.close();
      await this.fuse?.unmount();
      await this.plane?.idle();
      // the session is not ended: its leases outlive this daemon by the TTL (a restart continues it)
      await this.heartbeat?.stop();
      await this.userSockets?.close();
      await this.warm?.close();
      await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
      await new Promise<void>((r) => (this.metricsServer ? this.metricsServer.close(() => r()) : r()));
      // A daemon started since this one stopped answering owns the socket and pid files now: leave them.
      if (this.socketIno !== undefined && statIno(this.paths.socket) === this.socketIno) await rm(this.paths.socket, { force: true });
      if (livePid(this.paths.pidFile) === process.pid) await rm(this.paths.pidFile, { force: true });
      await this.catalog?.close();
      this.log({ level: 'info', msg: 'stopped' });
    })();
    return this.stopping;
  }

  /** The overlay mounts (requests are served only after start made them). */
  private overlayHost(): OverlayHost {
    if (!this.overlays && !this.servesContent)
      throw new AwcError('E_PERMISSION', 'overlay mounts need root: this host daemon runs as an ordinary user', {
        hint: 'Use the copy driver (AWC_MOUNT_DRIVER=copy), or run awc as root.',
      });
    if (!this.overlays) throw new AwcError('E_INTERNAL', 'the host daemon serves requests before it started');
    return this.overlays;
  }

  /** What the endpoints of ROOT_ENDPOINTS (root-handlers.ts) get of this daemon. */
  private readonly endpointContext: RootContext = {
    status: () => this.status(),
    overlays: () => this.overlayHost(),
    metrics: this.metrics,
    reload: () => this.reload(),
    sweeper: () => {
      if (!this.sweeper) throw new AwcError('E_INTERNAL', 'the host daemon serves requests before it started');
      return this.sweeper;
    },
    unmountAll: (force) => this.unmountAll(force),
    stopSoon: () => setImmediate(() => void this.stop().then(() => this.emit('stopped'))),
  };

  /** Serves one request of the root socket: its endpoint in ROOT_ENDPOINTS, or E_USAGE. Never throws. */
  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const route = `${req.method} ${req.url}`;
      const metricsText = route === 'GET /metrics';
      const body = !metricsText && req.method === 'POST' ? await readJson(req) : {};
      if (!Object.hasOwn(ROOT_ENDPOINTS, route)) throw new AwcError('E_USAGE', `no such endpoint ${req.method} ${req.url}`);
      const out = await ROOT_ENDPOINTS[route]!.handle(this.endpointContext, body, route, res);
      if (out !== ANSWERED) send(res, 200, out);
    } catch (err) {
      const e = toAwcError(err);
      send(res, e.code === 'E_INTERNAL' ? 500 : 400, { error: e.toJSON() });
    }
  }
}

export { livePid } from '../supervisor/pid-file.js';

/** True when something accepts connections on the Unix socket `path`. */
function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(path);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/** [hex, size in bytes, sparse] of every content object of a layer. */
function* contentSizes(contents: Layer['meta']['contents']): Generator<[string, number, boolean]> {
  for (const hex in contents) yield [hex, contents[hex]![0], contents[hex]![2] !== undefined];
}

/** The inode number of `path`, or undefined when it does not exist. */
function statIno(path: string): number | undefined {
  try {
    return fs.statSync(path).ino;
  } catch {
    return undefined;
  }
}
