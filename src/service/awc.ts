import { mkdir, readFile, stat } from 'node:fs/promises';
import * as fs from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { AwcError, toAwcError } from '../core/errors.js';
import type { Digest } from '../core/digest.js';
import type { Entry } from '../core/tree.js';
import type { Catalog, SnapshotRow, WorkspaceRow } from '../catalog/catalog.js';
import { SqliteCatalog } from '../catalog/sqlite/sqlite-catalog.js';
import { checkName } from '../catalog/names.js';
import { FsObjectStore } from '../store/fs-object-store.js';
import { ContentReader } from '../store/content-reader.js';
import { ContentWriter } from '../store/content-writer.js';
import type { ObjectStore } from '../store/object-store.js';
import { walkTree } from '../store/tree-source.js';
import { buildLayer } from '../host/layer-builder.js';
import { mergeUpper, type UpperStatCache } from '../host/upper-merge.js';
import { detectDriver, type DriverReport } from '../host/doctor.js';
import { readHostState, removeHostState, workspaceDirs, writeHostState, type WorkspaceHostState } from '../host/workspace-state.js';
import { checkMountTarget } from '../host/mount-commands.js';
import { recordStats } from '../host/copy-stat-cache.js';
import { describeUse, upperInUse, type Holder, type UpperUse } from '../host/upper-use.js';
import { DaemonClient } from '../daemon/client.js';
import { livePid } from '../daemon/pid-file.js';
import { assertHome, loadConfig, pathsOf, type AwcConfig, type AwcPaths } from '../config/config.js';
import { importDir } from './import-dir.js';
import { importTar } from './import-tar.js';
import { exportDir } from './export-dir.js';
import { copyTreeOf, mountCopy, rebindCopy, releaseCopy, restoreLeftOut } from './copy-driver.js';
import { checkTarTarget, exportTar } from './export-tar.js';
import { diffSnapshots, type Change } from './diff.js';
import { renderPatch } from './patch.js';
import { countRoot } from './tree-stats.js';
import { prepareHome } from './private-home.js';
import { replaceFilePrivate } from '../core/private-fs.js';

/** Result of an import: the new snapshot and what was stored. */
export interface ImportResult {
  id: string;
  name: string | null;
  root: Digest;
  files: number;
  bytes: number;
  newBytes: number;
  storedBytes: number;
  skipped: { path: string; reason: string }[];
  /** Files that kept changing while read, stored as last read (only with `allowChanging`; absent when none). */
  changing?: string[];
}

/** Result of a checkpoint. `changed` is false when the workspace equals its head (no snapshot made). */
export interface CheckpointResult {
  id: string;
  root: Digest;
  changed: boolean;
  parent: string;
  files: number;
  bytes: number;
  filesRead: number;
  newBytes: number;
  /** Entries the snapshot cannot hold (sockets), left out with this reason. */
  skipped: { path: string; reason: string }[];
  /** Files that kept changing while read, stored as last read (only with `allowChanging`; absent when none). */
  changing?: string[];
}

/** Result of a mount. */
export interface MountResult {
  workspace: string;
  path: string;
  driver: 'overlay' | 'copy';
  /** True when the mount resumed private changes kept from an earlier mount. */
  resumed: boolean;
  /**
   * Copy driver without a nosuid,nodev bind mount (not root): the setuid/setgid bits and
   * device nodes that were not materialised (slash-separated path, reason). Absent otherwise.
   */
  leftOut?: { path: string; reason: string }[];
}

/** Progress callback for long work (files and bytes done so far). */
export type Progress = (p: { files: number; bytes: number }) => void;

/**
 * The workspace service: the five primitives (snapshot, fork, mount, checkpoint,
 * diff/export) plus listing, on one catalog and one object store. Overlay mounts go
 * through the host daemon (it owns the content FUSE server); the copy driver runs here.
 */
export class Awc {
  readonly paths: AwcPaths;

  private constructor(
    readonly config: AwcConfig,
    readonly catalog: Catalog,
    readonly store: ObjectStore,
  ) {
    this.paths = pathsOf(config);
  }

  /**
   * Opens the catalog and object store under the configured home. A missing home is created
   * (0700; see prepareHome) unless `create` is false (what the CLI's read-only commands
   * pass): then nothing is created and a home without its catalog is E_NO_HOME.
   * @throws E_NO_HOME, E_CONFIG, E_READ_ONLY / E_NO_SPACE / E_PERMISSION (the home's file system)
   */
  static async open(overrides: Partial<AwcConfig> = {}, opts: { create?: boolean } = {}): Promise<Awc> {
    const config = loadConfig(overrides);
    const paths = pathsOf(config);
    if (opts.create === false) await assertHome(config.home);
    await prepareHome(paths);
    const catalog = await SqliteCatalog.open(paths.catalog);
    return new Awc(config, catalog, new FsObjectStore(paths.objects));
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

  /** A content writer; a dry run with `keepChunks` keeps the new chunks it saw in memory (see ContentWriterOptions). */
  private writer(dryRun = false, keepChunks = false): ContentWriter {
    return new ContentWriter({
      store: this.store,
      index: this.catalog.blobIndex(this.namespace),
      packBytes: this.config.packBytes,
      dryRun,
      keepChunks,
    });
  }

  /**
   * Imports a directory or a tar file as a new snapshot. `allowChanging`: a file of a
   * directory that keeps changing while read is stored as last read and listed in `changing`.
   * @throws E_SOURCE_NOT_FOUND, E_NAME_TAKEN, E_UNSUPPORTED_NAME, E_PATH_TRAVERSAL, E_CHANGED_DURING_READ
   */
  async importSnapshot(
    source: string,
    opts: {
      name?: string;
      message?: string;
      allowChanging?: boolean;
      onProgress?: Progress;
      onWarning?: (w: { code: string; path: string; message: string }) => void;
    } = {},
  ): Promise<ImportResult> {
    const src = resolve(source);
    let st: fs.Stats;
    try {
      st = await stat(src);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') throw new AwcError('E_SOURCE_NOT_FOUND', `no such file or directory: ${source}`);
      throw toAwcError(err);
    }
    checkName(opts.name, 'snapshot');
    if (opts.name !== undefined) await this.assertSnapshotNameFree(opts.name);
    const writer = this.writer();
    if (!st.isDirectory() && !(st.isFile() && looksLikeTar(src))) {
      throw new AwcError('E_USAGE', `${source} is neither a directory nor a tar archive`, {
        hint: 'Pass a directory, or a .tar / .tar.gz file.',
      });
    }
    const r = st.isDirectory()
      ? await importDir(src, writer, { onProgress: opts.onProgress, onWarning: opts.onWarning, allowChanging: opts.allowChanging })
      : await importTar(src, writer, { onProgress: opts.onProgress, onWarning: opts.onWarning });
    const packs = await writer.flush();
    const snap = await this.catalog.createSnapshot({
      namespace: this.namespace,
      root: r.root,
      name: opts.name ?? null,
      message: opts.message ?? `import ${src}`,
      fileCount: r.fileCount,
      byteCount: r.byteCount,
      packs,
    });
    return {
      id: snap.id,
      name: snap.name,
      root: snap.root,
      files: r.fileCount,
      bytes: r.byteCount,
      newBytes: writer.stats.newBytes,
      storedBytes: writer.stats.storedBytes,
      skipped: r.skipped,
      ...changingOf(r.changing),
    };
  }

  private async assertSnapshotNameFree(name: string): Promise<void> {
    const existing = await this.catalog.listSnapshots(this.namespace);
    if (existing.some((s) => s.name === name))
      throw new AwcError('E_NAME_TAKEN', `a snapshot named ${JSON.stringify(name)} already exists`);
  }

  listSnapshots(): Promise<SnapshotRow[]> {
    return this.catalog.listSnapshots(this.namespace);
  }

  listWorkspaces(): Promise<WorkspaceRow[]> {
    return this.catalog.listWorkspaces(this.namespace);
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
   * Resolves a ref that may name a snapshot or a workspace (`show`, `diff`, `export`). Ids
   * carry their kind (`sn_…`, `ws_…`), and `snapshot:<ref>` / `workspace:<ref>` say it; a
   * bare name or id prefix that matches a snapshot and a workspace is refused.
   * @throws E_NOT_FOUND, E_AMBIGUOUS (with a hint naming both and how to say which)
   */
  async resolve(ref: string): Promise<{ kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; workspace: WorkspaceRow }> {
    // ids carry their kind (names may not start with sn_/ws_), so a workspace id never resolves as a snapshot
    if (/^(ws_|workspace:)/i.test(ref)) return { kind: 'workspace', workspace: await this.getWorkspace(ref) };
    if (/^(sn_|snapshot:)/i.test(ref)) return { kind: 'snapshot', snapshot: await this.getSnapshot(ref) };
    const unlessNotFound = <T>(p: Promise<T>): Promise<T | undefined> =>
      p.catch((err: unknown) => {
        if (err instanceof AwcError && err.code === 'E_NOT_FOUND') return undefined;
        throw err;
      });
    const [snapshot, workspace] = await Promise.all([unlessNotFound(this.getSnapshot(ref)), unlessNotFound(this.getWorkspace(ref))]);
    if (snapshot && workspace) {
      throw new AwcError('E_AMBIGUOUS', `${JSON.stringify(ref)} names both snapshot ${snapshot.id} and workspace ${workspace.id}`, {
        hint: `Say which: snapshot:${ref} or workspace:${ref} (or the id ${snapshot.id} / ${workspace.id}).`,
        details: { ref, snapshot: snapshot.id, workspace: workspace.id },
      });
    }
    if (snapshot) return { kind: 'snapshot', snapshot };
    if (workspace) return { kind: 'workspace', workspace };
    throw new AwcError('E_NOT_FOUND', `no snapshot or workspace ${JSON.stringify(ref)}`);
  }

  /**
   * Forks `count` workspaces from a snapshot: catalog rows only, one transaction.
   * With a name and count > 1, names are `<name>-1` … `<name>-K`.
   * @throws E_NOT_FOUND, E_NAME_TAKEN, E_USAGE (count out of range)
   */
  async fork(snapshotRef: string, opts: { name?: string; count?: number } = {}): Promise<WorkspaceRow[]> {
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > 100_000)
      throw new AwcError('E_USAGE', `--count must be a whole number from 1 to 100000, got ${opts.count}`);
    const snap = await this.getSnapshot(snapshotRef);
    const names = Array.from({ length: count }, (_, i) =>
      opts.name === undefined ? null : count === 1 ? opts.name : `${opts.name}-${i + 1}`,
    );
    return this.catalog.forkWorkspaces(this.namespace, snap.id, names);
  }

  /** The mount driver this host uses (see `awc doctor`). */
  doctor(): DriverReport {
    return detectDriver(this.config.mountDriver);
  }

  /**
   * Mounts a workspace at `dir` (created when missing; must be empty). Overlay driver via
   * the host daemon (started on demand), else the copy driver. A copy workspace whose bind
   * mount is gone (a reboot) is shown again at the same target (`resumed`).
   * @throws E_ALREADY_MOUNTED, E_TARGET_BUSY, E_MOUNT_FAILED, E_PERMISSION (overlay forced without root),
   *   E_STILL_MOUNTED (an earlier mount is still alive: detached but used, or in another mount namespace)
   */
  async mount(wsRef: string, dir: string, opts: { onProgress?: Progress } = {}): Promise<MountResult> {
    const ws = await this.getWorkspace(wsRef);
    if (ws.mountState === 'mounted' && ws.mountDriver === 'copy' && ws.mountHost === this.config.host && ws.mountPath === resolve(dir)) {
      const state = await readHostState(this.paths.workspaces, ws.id);
      if (state && (await rebindCopy(state, (t) => prepareTarget(t, this.config.home))))
        return { workspace: ws.id, path: state.target, driver: 'copy', resumed: true };
    }
    if (ws.mountState === 'mounted') throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.id} is already mounted at ${ws.mountPath}`);
    const target = resolve(dir);
    if (target === this.config.home || target.startsWith(this.config.home + '/')) {
      throw new AwcError('E_USAGE', `${target} is inside the AWC home ${this.config.home}`, {
        hint: 'Mount workspaces outside the data directory.',
      });
    }
    await prepareTarget(target, this.config.home);
    const report = this.doctor();
    if (this.config.mountDriver === 'overlay' && report.driver !== 'overlay') {
      throw new AwcError('E_PERMISSION', `the overlay driver was asked for but ${report.reason}`);
    }
    let pending = await readHostState(this.paths.workspaces, ws.id);
    // never two overlays on one upper (and never remove an upper an earlier mount still writes to)
    if (pending?.driver === 'overlay') await this.refuseWhileUsed(pending, 'it cannot be mounted again');
    if (pending && (await this.liveRoot(ws, pending)) === (await this.getSnapshot(ws.headSnapshotId)).root) {
      // kept changes that were all checkpointed since: start clean on the head
      await removeHostState(this.paths.workspaces, ws.id);
      pending = undefined;
    }
    if (pending && pending.driver !== report.driver) {
      throw new AwcError('E_IN_USE', `workspace ${ws.id} has uncheckpointed changes from a ${pending.driver} mount on this host`, {
        hint: `Mount it with AWC_MOUNT_DRIVER=${pending.driver}, or discard them with \`awc unmount ${ws.id} --discard\`.`,
      });
    }
    if (report.driver === 'overlay') {
      const client = new DaemonClient(this.config);
      const r = (await client.call('POST', '/v1/mount', { namespace: this.namespace, workspace: ws.id, target })) as MountResult;
      return r;
    }
    return mountCopy(this, ws, target, pending, opts.onProgress);
  }

  /**
   * Unmounts a workspace (by ref or mount path). Overlay: the upper is kept when it holds
   * uncheckpointed changes (the next mount resumes them) unless `discard`. Copy driver: the
   * nosuid,nodev bind mount is removed (lazily with `force`) and the materialised tree
   * deleted; uncheckpointed changes are refused unless `discard`.
   * An overlay detached with `force` while processes still use it keeps its upper (they may
   * still write there): the result is `pending` and names them in `holders`, and the
   * workspace cannot be mounted again (E_STILL_MOUNTED) nor discarded until they exit.
   * @throws E_NOT_MOUNTED, E_TARGET_BUSY (use force), E_IN_USE (copy driver with changes),
   *   E_STILL_MOUNTED (discard of an upper an earlier mount still uses)
   */
  async unmount(
    refOrPath: string,
    opts: { discard?: boolean; force?: boolean } = {},
  ): Promise<{ workspace: string; path: string; pending: boolean; holders?: Holder[] }> {
    const ws = await this.workspaceByRefOrPath(refOrPath);
    const state = await readHostState(this.paths.workspaces, ws.id);
    if (ws.mountState !== 'mounted') {
      if (state && opts.discard) {
        if (state.driver === 'overlay') await this.refuseWhileUsed(state, 'its changes cannot be discarded');
        await removeHostState(this.paths.workspaces, ws.id);
        return { workspace: ws.id, path: state.target, pending: false };
      }
      throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is not mounted`);
    }
    const path = ws.mountPath!;
    if (ws.mountDriver === 'copy') {
      const live = state && !opts.discard ? await this.liveRoot(ws, state) : undefined; // discarding needs no scan
      const head = await this.getSnapshot(ws.headSnapshotId);
      const dirty = live !== undefined && live !== head.root;
      if (dirty && !opts.discard)
        throw new AwcError('E_IN_USE', `workspace ${ws.id} has changes that are not checkpointed`, {
          hint: `Run \`awc checkpoint ${ws.id}\` first, or pass --discard to drop them.`,
        });
      await releaseCopy(
        state ?? {
          v: 1,
          workspaceId: ws.id,
          namespace: this.namespace,
          driver: 'copy',
          target: path,
          layerSnapshotId: head.id,
          layerRoot: head.root,
        },
        opts.force ?? false,
      );
      await removeHostState(this.paths.workspaces, ws.id);
      await this.catalog.setMount(ws.id, null);
      return { workspace: ws.id, path, pending: false };
    }
    const client = new DaemonClient(this.config);
    // a daemon that died and that its supervisor is starting again still serves the mount: wait for it
    const supervised = livePid(this.paths.supervisorPidFile) !== undefined;
    await client
      .call('POST', '/v1/unmount', { namespace: this.namespace, workspace: ws.id, force: opts.force ?? false }, { start: supervised })
      .catch(async (err: unknown) => {
        // daemon gone: the mount is dead anyway; detach it and clear the record
        if (err instanceof AwcError && err.code === 'E_DAEMON_UNAVAILABLE') {
          const { unmount } = await import('../host/mount-commands.js');
          await unmount(path, true);
          await this.catalog.setMount(ws.id, null);
          return;
        }
        throw err;
      });
    let pending = false;
    if (state) {
      if (opts.force) {
        // a lazy detach: processes may still write into the upper through the old mount
        const use = await this.upperUse(state);
        if (use.inUse) {
          if (opts.discard)
            throw new AwcError(
              'E_STILL_MOUNTED',
              `workspace ${ws.id} was detached from ${path}, but its changes are not discarded: the old mount is still alive (${describeUse(use)})`,
              { hint: `Run \`awc unmount ${ws.id} --discard\` again once those processes have exited.`, details: { holders: use.holders } },
            );
          return { workspace: ws.id, path, pending: true, holders: use.holders };
        }
      }
      const head = await this.getSnapshot(ws.headSnapshotId);
      pending = opts.discard ? false : (await this.liveRoot(ws, state)) !== head.root;
      if (!pending) await removeHostState(this.paths.workspaces, ws.id);
    }
    return { workspace: ws.id, path, pending };
  }

  /** Whether an earlier overlay of a workspace still uses its upper (see upper-use.ts). */
  private upperUse(state: WorkspaceHostState): Promise<UpperUse> {
    const dirs = workspaceDirs(this.paths.workspaces, state.workspaceId);
    return upperInUse(dirs.upper, dirs.dir, state.mount ? [state.mount.id] : []);
  }

  /** @throws E_STILL_MOUNTED when an earlier overlay still uses the workspace's upper */
  private async refuseWhileUsed(state: WorkspaceHostState, what: string): Promise<void> {
    if (!fs.existsSync(workspaceDirs(this.paths.workspaces, state.workspaceId).upper)) return;
    const use = await this.upperUse(state);
    if (use.inUse)
      throw new AwcError(
        'E_STILL_MOUNTED',
        `workspace ${state.workspaceId}: ${what} while an earlier mount is alive (${describeUse(use)})`,
        { details: { holders: use.holders } },
      );
  }

  private async workspaceByRefOrPath(refOrPath: string): Promise<WorkspaceRow> {
    if (refOrPath.includes('/') || refOrPath === '.') {
      const ws = await this.catalog.findWorkspaceByMountPath(resolve(refOrPath));
      if (ws) return ws;
    }
    return this.getWorkspace(refOrPath);
  }

  /** Root digest of a workspace's current state: its live state when it has host state here, else its head. */
  private async liveRoot(ws: WorkspaceRow, state: WorkspaceHostState | undefined, writer?: ContentWriter): Promise<Digest> {
    if (!state) return (await this.getSnapshot(ws.headSnapshotId)).root;
    const w = writer ?? this.writer(true);
    return (await this.scanState(state, w)).root;
  }

  private async scanState(
    state: WorkspaceHostState,
    writer: ContentWriter,
    allowChanging = false,
  ): Promise<{
    root: Digest;
    filesRead: number;
    skipped: { path: string; reason: string }[];
    changing?: string[];
    upperCache?: UpperStatCache;
  }> {
    if (state.driver === 'copy') {
      const base = new Map<string, Entry>();
      const reader = this.reader();
      for await (const { path, entry } of walkTree(reader, state.layerRoot)) base.set(path, entry);
      const cache = state.statCache ?? {};
      const r = await importDir(copyTreeOf(state), writer, {
        // stat cache: a file or symlink whose inode, size, mtime and ctime are as materialised is the base entry
        reuse: (rel: string, st: fs.BigIntStats) => {
          const c = cache[rel];
          if (
            !c ||
            c[0] !== st.ino.toString() ||
            c[1] !== st.size.toString() ||
            c[2] !== st.mtimeNs.toString() ||
            c[3] !== st.ctimeNs.toString()
          )
            return undefined;
          const e = base.get(rel);
          return e && (e.type === 'file' || e.type === 'symlink') ? e : undefined;
        },
        allowChanging,
      });
      const root = await restoreLeftOut(this.reader(writer.sessionBlob.bind(writer)), writer, r.root, base, state.leftOut);
      return { root, filesRead: writer.stats.files, skipped: r.skipped, changing: r.changing };
    }
    const dirs = workspaceDirs(this.paths.workspaces, state.workspaceId);
    const layer = await buildLayer(this.reader(), state.layerRoot, this.paths.layers);
    const statCache = await readUpperCache(dirs.dir);
    const r = await mergeUpper({
      src: this.reader(writer.sessionBlob.bind(writer)),
      base: state.layerRoot,
      upper: dirs.upper,
      writer,
      hardlinks: layer.meta.hardlinks,
      contents: layer.meta.contents,
      statCache,
      allowChanging,
    });
    return { root: r.root, filesRead: r.filesRead, skipped: r.skipped, changing: r.changing, upperCache: r.statCache };
  }

  /**
   * Checkpoints a workspace: its current state becomes a new immutable snapshot (only what
   * changed is chunked and stored; packs and trees are uploaded before one catalog
   * transaction moves the head). Returns the head unchanged when nothing changed.
   * `allowChanging`: a file that keeps changing while read is stored as last read and
   * listed in `changing` instead of failing.
   * @throws E_NOT_FOUND, E_CHANGED_DURING_READ (retryable; `details.path` is the path in the workspace), E_NOT_MOUNTED (nothing to checkpoint from)
   */
  async checkpoint(wsRef: string, opts: { message?: string; allowChanging?: boolean } = {}): Promise<CheckpointResult> {
    const t0 = performance.now();
    const ws = await this.getWorkspace(wsRef);
    const head = await this.getSnapshot(ws.headSnapshotId);
    const state = await readHostState(this.paths.workspaces, ws.id);
    if (!state) {
      return {
        id: head.id,
        root: head.root,
        changed: false,
        parent: head.parentId ?? head.id,
        files: head.fileCount,
        bytes: head.byteCount,
        filesRead: 0,
        newBytes: 0,
        skipped: [],
      };
    }
    const writer = this.writer();
    const scan = await this.scanState(state, writer, opts.allowChanging);
    if (scan.root === head.root) {
      await this.reportCheckpoint(state.driver, t0, 0);
      return {
        id: head.id,
        root: head.root,
        changed: false,
        parent: head.parentId ?? head.id,
        files: head.fileCount,
        bytes: head.byteCount,
        filesRead: scan.filesRead,
        newBytes: 0,
        skipped: scan.skipped,
        ...changingOf(scan.changing),
      };
    }
    const packs = await writer.flush();
    const counts = await countRoot(this.reader(writer.sessionBlob.bind(writer)), scan.root);
    const snap = await this.catalog.commitCheckpoint({
      workspaceId: ws.id,
      expectedHeadId: head.id,
      snapshot: {
        namespace: this.namespace,
        root: scan.root,
        parentId: head.id,
        message: opts.message ?? null,
        fileCount: counts.files,
        byteCount: counts.bytes,
        packs,
      },
    });
    if (scan.upperCache) {
      // every digest in it is now committed: the next checkpoint may skip these files
      await writeUpperCache(workspaceDirs(this.paths.workspaces, ws.id).dir, scan.upperCache);
    }
    if (state.driver === 'copy') {
      // the materialised directory now equals the new head: refresh the stat cache against it
      const statCache = recordStats(copyTreeOf(state), scan.changing);
      await writeHostState(this.paths.workspaces, { ...state, layerSnapshotId: snap.id, layerRoot: snap.root, statCache });
    }
    await this.reportCheckpoint(state.driver, t0, writer.stats.newBytes);
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
    };
  }

  /**
   * Best effort: tells a running host daemon about a checkpoint that scanned a workspace
   * (`POST /v1/checkpoint-report {driver, durationMs, newBytes}`) for its Prometheus
   * metrics. Never starts the daemon, never throws, and waits at most ~1 s.
   */
  private async reportCheckpoint(driver: 'overlay' | 'copy', t0: number, newBytes: number): Promise<void> {
    const body = { driver, durationMs: performance.now() - t0, newBytes };
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        // a late rejection after the timer won must not become an unhandled rejection
        new DaemonClient(this.config).call('POST', '/v1/checkpoint-report', body, { start: false, timeoutMs: 1000 }).catch(() => undefined),
        new Promise((r) => (timer = setTimeout(r, 1000)).unref()),
      ]);
    } catch {
      // no daemon, an older daemon, or a slow one: metrics are not worth failing a checkpoint
    } finally {
      clearTimeout(timer);
    }
  }

  /** Root digest of a ref: a snapshot's root, or a workspace's live state (mounted here) or head. */
  private async rootOf(ref: string, writer: ContentWriter): Promise<{ root: Digest; label: string }> {
    const r = await this.resolve(ref);
    if (r.kind === 'snapshot') return { root: r.snapshot.root, label: r.snapshot.id };
    const state = await readHostState(this.paths.workspaces, r.workspace.id);
    return { root: await this.liveRoot(r.workspace, state, writer), label: r.workspace.id };
  }

  /**
   * Diffs two refs. One ref: a workspace's head against its live state, or a snapshot's
   * parent against it. Returns the changes and, with `patch`, a git-style patch. For a patch
   * the dry-run scan of a live state keeps its new bytes (in no store yet) in memory.
   * @throws E_NOT_FOUND, E_AMBIGUOUS, E_CHANGED_DURING_READ (a live file kept changing)
   */
  async diff(
    fromRef: string,
    toRef?: string,
    opts: { patch?: boolean; binary?: boolean; metadata?: boolean } = {},
  ): Promise<{ from: Digest; to: Digest; changes: Change[]; patch?: string }> {
    const writer = this.writer(true, opts.patch === true);
    let from: Digest;
    let to: Digest;
    if (toRef === undefined) {
      const r = await this.resolve(fromRef);
      if (r.kind === 'workspace') {
        from = (await this.getSnapshot(r.workspace.headSnapshotId)).root;
        to = (await this.rootOf(fromRef, writer)).root;
      } else {
        to = r.snapshot.root;
        from = r.snapshot.parentId ? (await this.getSnapshot(r.snapshot.parentId)).root : await this.emptyRoot(writer);
      }
    } else {
      from = (await this.rootOf(fromRef, writer)).root;
      to = (await this.rootOf(toRef, writer)).root;
    }
    const src = this.reader(writer.sessionBlob.bind(writer));
    const changes = await diffSnapshots(src, from, to, { metadata: opts.metadata });
    const out: { from: Digest; to: Digest; changes: Change[]; patch?: string } = { from, to, changes };
    if (opts.patch) {
      const readAll = async (f: { size: number; chunks: { digest: Digest; size: number }[] }): Promise<Buffer> => {
        const parts: Buffer[] = [];
        for await (const b of src.readFile(f)) parts.push(b); // new bytes of a live state come from the writer's session
        return Buffer.concat(parts);
      };
      out.patch = await renderPatch(src, readAll, changes, from, to, { binary: opts.binary ? 'full' : 'summary' });
    }
    return out;
  }

  private async emptyRoot(writer: ContentWriter): Promise<Digest> {
    const tree = await writer.writeTree([]);
    return writer.writeRoot({ mode: 0o755, uid: 0, gid: 0, mtimeNs: '0', tree });
  }

  /**
   * Exports a snapshot (or a workspace's head) as a tar file or into a directory (written
   * beside it under a temporary name, in place only when complete; `overwrite` replaces a
   * non-empty directory). Into a directory, setuid/setgid bits and device nodes are left
   * out and listed in `leftOut` unless `keepPrivileges`; a tar keeps them.
   * @throws E_NOT_FOUND, E_TARGET_EXISTS (a tar file that exists, a directory not empty), E_PATH_TRAVERSAL, E_NO_SPACE…,
   *   E_USAGE (directory is, holds or is inside the home), E_TARGET_BUSY (a mount point at or below it)
   */
  async export(
    ref: string,
    opts: { tar?: string; dir?: string; overwrite?: boolean; keepPrivileges?: boolean; onProgress?: Progress },
  ): Promise<{ id: string; root: Digest; files: number; bytes: number; leftOut?: { path: string; reason: string }[] }> {
    if ((opts.tar === undefined) === (opts.dir === undefined))
      throw new AwcError('E_USAGE', 'export needs exactly one of --tar FILE or --dir DIR');
    const r = await this.resolve(ref);
    const snap = r.kind === 'snapshot' ? r.snapshot : await this.getSnapshot(r.workspace.headSnapshotId);
    if (opts.tar !== undefined && opts.tar !== '-') await checkTarTarget(resolve(opts.tar));
    const res =
      opts.tar !== undefined
        ? await exportTar(this.reader(), snap.root, opts.tar === '-' ? process.stdout : resolve(opts.tar))
        : await exportDir(this.reader(), snap.root, resolve(opts.dir!), {
            onProgress: opts.onProgress,
            overwrite: opts.overwrite,
            unprivileged: !opts.keepPrivileges,
            home: this.config.home,
          });
    return {
      id: snap.id,
      root: snap.root,
      files: res.files,
      bytes: res.bytes,
      ...('leftOut' in res ? { leftOut: (res as { leftOut: { path: string; reason: string }[] }).leftOut } : {}),
    };
  }
}

/** The upper stat cache of a workspace (empty when absent or unreadable: it is only a cache). */
async function readUpperCache(dir: string): Promise<UpperStatCache> {
  try {
    return JSON.parse(await readFile(join(dir, 'upper-cache.json'), 'utf8')) as UpperStatCache;
  } catch {
    return {};
  }
}

/** Writes the upper stat cache atomically. */
async function writeUpperCache(dir: string, cache: UpperStatCache): Promise<void> {
  await replaceFilePrivate(join(dir, 'upper-cache.json'), JSON.stringify(cache));
}

/** True when the file starts like a tar archive (ustar magic at 257) or a gzip stream. */
function looksLikeTar(path: string): boolean {
  const fd = fs.openSync(path, 'r');
  try {
    const b = Buffer.alloc(512);
    const n = fs.readSync(fd, b, 0, 512, 0);
    if (n >= 2 && b[0] === 0x1f && b[1] === 0x8b) return true;
    return n === 512 && b.subarray(257, 262).toString('latin1') === 'ustar';
  } finally {
    fs.closeSync(fd);
  }
}

/** Creates the target when missing; refuses a non-empty directory, a file, a mount point, or a path inside the home. */
async function prepareTarget(target: string, home: string): Promise<void> {
  if (!isAbsolute(target)) throw new AwcError('E_USAGE', `target must be absolute: ${target}`);
  let existing: fs.Stats | undefined;
  try {
    existing = await stat(target);
  } catch {
    existing = undefined;
  }
  if (existing && !existing.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${target} exists and is not a directory`);
  await mkdir(target, { recursive: true });
  await checkMountTarget(target, home);
}

/** `{changing}` when some file kept changing while read, else nothing (results carry the key only when it says something). */
function changingOf(changing: string[] | undefined): { changing?: string[] } {
  return changing && changing.length > 0 ? { changing } : {};
}
