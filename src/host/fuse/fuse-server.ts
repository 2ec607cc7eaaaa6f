/**
 * The FUSE session of a server that speaks the kernel protocol directly over /dev/fuse (no
 * libfuse): the life cycle of one connection, whatever file system it serves.
 *
 * - **Mount**: opens /dev/fuse (or takes the descriptor a supervisor keeps, see
 *   fuse-session.ts and src/daemon/supervisor/supervisor.ts), runs util-linux `mount` asynchronously with
 *   it as the child's fd 3, answers INIT (fuse-init.ts), records the connection id and sets
 *   the backing device's readahead. A successor to a dead server instead takes the live
 *   connection over: no mount, no INIT.
 * - **Workers**: `readers` threads do blocking reads of the device (reader-pool.ts) and post
 *   each request to the main thread, which answers it with a synchronous write (the reply
 *   helpers here). Cache hits are answered inside the message handler; a Promise is answered
 *   when it settles, while other requests keep flowing.
 * - **Teardown**: fails pending requests, aborts the connection through fusectl, unmounts
 *   (lazily when busy), stops the workers and closes the descriptors; an unsupervised
 *   connection is also aborted when the process exits.
 *
 * The file system itself (what each request is answered with) is a subclass: it implements
 * {@link FuseServer.dispatch} and the reader workers' shared tables (content-fuse.ts).
 */
import { EventEmitter } from 'node:events';
import { closeSync, existsSync, openSync, realpathSync, statSync, writeFileSync, writeSync, writevSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { basename, dirname, join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { CTRL_SLOTS, CTRL_STOP, CTRL_TABLE_GEN, STALE_REPLY_CODES, type ReaderWorkerData, type TableUpdate } from './control.js';
import { mountsAt } from '../mount/mount-table.js';
import { runCommand } from '../mount/mount-commands.js';
import { abortFuseConnection, ensureFusectl, FUSECTL_DIR } from './fusectl.js';
import { cloneFuseDevice } from './dev-clone.js';
import { NodeLog, readSessionState, writeSessionState, type FuseSessionState } from './fuse-session.js';
import { MAX_PAGES, READ_BUFFER_SIZE, answerInit } from './fuse-init.js';
import { ReaderPool, type ReaderPost } from './reader-pool.js';
import { Errno, FUSE_KERNEL_VERSION, FUSE_MIN_MINOR_VERSION, OUT_HEADER_SIZE, encodeOutHeader } from './protocol.js';

/** Options of a {@link FuseServer}. */
export interface FuseServerOptions {
  /** An existing, empty directory to mount on. */
  mountpoint: string;
  /** Worker threads doing blocking reads of /dev/fuse; default 2. */
  readers?: number;
  /**
   * After answering a request, keep polling the workers for the next one for this many
   * microseconds before going back to the event loop (default 0 = off). Waking an idle event
   * loop costs tens of µs on a VM, and a sequential reader sends its next request (one LOOKUP
   * then one READ per file) within ~100 µs: on an idle 2-vCPU VM, 100 µs halved the cold
   * per-file cost (216 → 95 µs). On a loaded host the spinning thread steals CPU from the
   * readers and made it worse (≈130 → 190 µs/file at load 5 on 2 vCPUs), hence off by default;
   * enable it on hosts with idle cores. Continuous handling yields to the event loop every 2 ms
   * so timers, I/O and async misses still progress.
   */
  spinUs?: number;
  /**
   * Readahead of the mount's backing device in KiB (/sys/class/bdi/0:<id>/read_ahead_kb),
   * default 1024 = max_pages: the kernel then asks for 1 MiB per READ on sequential reads
   * instead of 128 KiB (measured 32 MiB: 256 READs → 32, 1.2 → 1.7 GB/s). 0 keeps the kernel default.
   */
  readAheadKb?: number;
  /**
   * Keep-alive session: serve a connection whose /dev/fuse descriptor `fd` a supervisor keeps
   * open (see fuse-session.ts and src/daemon/supervisor/supervisor.ts). With `resume` false the server
   * mounts with that descriptor; with `resume` true it takes over the live connection recorded
   * in `stateFile` (no mount, no INIT) and answers for the node ids in `nodeLog`. Either way it
   * reads requests from a clone of `fd` when it can (FUSE_DEV_IOC_CLONE), so its death fails
   * only the requests it had read, and it never aborts the connection when the process dies.
   */
  session?: { fd: number; stateFile: string; nodeLog: string; resume: boolean };
}

/** Events of every {@link FuseServer}: `'op'` (opcode name) per request the main thread handles, `'error'` for failures it cannot report to the kernel. */
export type FuseServerEvents = { op: [op: string]; error: [err: Error] };

/** The buffers the reader workers share with the file system (see ReaderWorkerData). */
export type ReaderTables = Pick<ReaderWorkerData, 'table' | 'generation' | 'arena' | 'arenaUnits' | 'nodes'>;

type State = 'new' | 'mounting' | 'mounted' | 'unmounting' | 'closed';

/** The synchronous aborts of the servers with a live connection, for the process 'exit' hook. */
const live = new Set<() => void>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => FuseServer.abortAllSync());
}

/**
 * The session of one FUSE connection (see the file comment). Subclasses answer the requests;
 * this class never prints, it emits `'error'`.
 */
export abstract class FuseServer<E extends FuseServerEvents & Record<keyof E, unknown[]> = FuseServerEvents> extends EventEmitter<E> {
  private readonly mountpoint: string;
  private readonly readAheadKb: number;
  private readonly pool: ReaderPool;
  private state: State = 'new';
  /** The descriptor requests are read from and replies written to (-1 when closed). */
  protected fd = -1;
  /** Shared control array of the workers (control.ts: the stop flag, the generation, counters). */
  protected readonly ctrl = new Int32Array(new SharedArrayBuffer(CTRL_SLOTS * 4));
  private connId: number | undefined;
  private unmountPromise: Promise<void> | undefined;
  private mountPromise: Promise<void> | undefined;
  private initWaiter: { resolve: () => void; reject: (e: Error) => void } | undefined;
  private mountedPath = '';
  private protoMinor: number | undefined;
  /** Requests waiting on a Promise, by unique id: failed with EIO at teardown. */
  protected readonly pending = new Set<number>();

  /** Reusable reply buffers (every reply is written synchronously, so one of each suffices). */
  private readonly hdr = Buffer.alloc(OUT_HEADER_SIZE);
  protected readonly small = Buffer.alloc(OUT_HEADER_SIZE + 256);
  private readonly iov: Buffer[] = [this.hdr, this.hdr];
  /** atime/mtime/ctime (seconds) of everything served: the mount's (or the taken-over connection's) start. */
  protected mountTime = Math.floor(Date.now() / 1000);
  protected readonly session: FuseServerOptions['session'];
  /** The connection this server takes over (session.resume), read at construction. */
  protected readonly resumed: FuseSessionState | undefined;
  /** The log of node ids handed out on a session's connection (fuse-session.ts). */
  protected readonly nodeLog: NodeLog | undefined;
  /** True when requests are read from a clone of the session descriptor. */
  private cloned = false;
  private readonly abortHook = (): void => this.abortSync();

  /** Creates a server; nothing happens until {@link mount}. */
  constructor(opts: FuseServerOptions) {
    super();
    this.mountpoint = opts.mountpoint;
    this.readAheadKb = Math.max(0, Math.floor(opts.readAheadKb ?? MAX_PAGES * 4));
    const onMessage = (msg: ReaderPost): void => this.onMessage(msg);
    const onError = (err: unknown): void => this.emitError(err);
    this.pool = new ReaderPool(Math.max(1, Math.floor(opts.readers ?? 2)), Math.max(0, opts.spinUs ?? 0) / 1000, onMessage, onError);
    this.session = opts.session;
    if (this.session?.resume) {
      this.resumed = readSessionState(this.session.stateFile);
      if (this.resumed) {
        this.mountTime = this.resumed.mountTime;
        this.protoMinor = this.resumed.protoMinor;
      }
    }
    if (this.session) this.nodeLog = new NodeLog(this.session.nodeLog, !this.resumed);
  }

  /** Answers one request (the whole of it, header included) on the main thread. */
  protected abstract dispatch(b: Buffer): void;
  /** A worker answered a READ at offset 0 of node `nodeid` itself. */
  protected abstract onServed(nodeid: number): void;
  /** The shared buffers the workers start with (later ones go out through {@link publish}). */
  protected abstract readerTables(): ReaderTables;

  /** True when this server took over a live connection (no mount, no INIT) instead of mounting. */
  get resumedConnection(): boolean {
    return this.resumed !== undefined;
  }

  /** True when requests are read from a clone of the session descriptor (see FuseServerOptions.session). */
  get servesOnClone(): boolean {
    return this.cloned;
  }

  /** The FUSE connection id (the minor device number of the mount; /sys/fs/fuse/connections/<id>), once mounted. */
  get connectionId(): number | undefined {
    return this.connId;
  }

  /** The negotiated protocol version (`7.<minor>`, the kernel's minor), once INIT has been answered. */
  get protocolVersion(): string | undefined {
    return this.protoMinor === undefined ? undefined : `${FUSE_KERNEL_VERSION}.${this.protoMinor}`;
  }

  /** True while the connection is served (mounted or taken over, not yet torn down). */
  protected get serving(): boolean {
    return this.fd >= 0 && this.state === 'mounted';
  }

  /** Posts new shared buffers to every worker, then moves the generation they watch. */
  protected publish(update: TableUpdate): void {
    this.pool.publish(update);
    Atomics.store(this.ctrl, CTRL_TABLE_GEN, update.generation);
  }

  /**
   * Opens /dev/fuse, starts the reader workers, runs util-linux `mount` asynchronously with the
   * descriptor as the child's fd 3, and resolves once INIT has been answered and the mount shows
   * in /proc/self/mountinfo. Mounts fusectl on /sys/fs/fuse/connections when missing (needed to
   * abort the connection later). Throws AwcError E_MOUNT_FAILED / E_TARGET_BUSY / E_PERMISSION.
   */
  mount(): Promise<void> {
    if (this.state !== 'new') return Promise.reject(new AwcError('E_FUSE', `content FUSE already ${this.state}`));
    this.state = 'mounting';
    this.mountPromise = this.doMount();
    return this.mountPromise;
  }

  private async doMount(): Promise<void> {
    try {
      // Never stat/realpath the mount point itself before knowing it is not one of our FUSE mounts:
      // a synchronous stat of a content FUSE served by this event loop deadlocks.
      let mp = resolve(this.mountpoint);
      try {
        mp = join(realpathSync(dirname(mp)), basename(mp));
      } catch {
        /* reported below */
      }
      if (this.session?.resume) return this.resume(mp);
      if (mountsAt(mp, 'fuse.awc').length > 0) {
        throw new AwcError('E_TARGET_BUSY', `a content FUSE is already mounted on ${mp}`, {
          hint: `Unmount it first (umount -l ${mp}); a stale one is left by a daemon that died.`,
        });
      }
      try {
        if (!statSync(mp).isDirectory()) throw new Error('not a directory');
      } catch (err) {
        throw new AwcError('E_MOUNT_FAILED', `content FUSE mount point ${this.mountpoint} is not a directory`, { cause: err });
      }
      ensureFusectl();
      this.openDevice();

      this.mountedPath = mp;
      const initDone = new Promise<void>((resolve, reject) => (this.initWaiter = { resolve, reject }));
      initDone.catch(() => undefined);
      const args = ['-i', '-t', 'fuse.awc', '-o', 'fd=3,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions,ro', 'awc', mp];
      const r = await runCommand('mount', args, [this.fd]);
      if (r.code !== 0) {
        throw new AwcError(
          'E_MOUNT_FAILED',
          `mount of content FUSE on ${mp} failed: ${(r.stderr || r.stdout).trim() || `exit ${r.code ?? r.signal}`}`,
        );
      }
      if (this.session) {
        // INIT waits in the connection's queue: whichever descriptor reads first gets it
        this.serveOnClone();
        this.startWorkers();
      }
      const m = mountsAt(mp, 'fuse.awc').at(-1);
      if (m) this.connId = m.minor;
      const noInit = setTimeout(() => {
        this.initWaiter?.reject(new AwcError('E_MOUNT_FAILED', `content FUSE on ${mp}: the kernel sent no INIT within 10 s`));
      }, 10_000);
      await initDone.finally(() => clearTimeout(noInit));
      if (this.connId === undefined) {
        const m2 = mountsAt(mp, 'fuse.awc').at(-1);
        if (!m2) throw new AwcError('E_MOUNT_FAILED', `content FUSE on ${mp} does not show in /proc/self/mountinfo`);
        this.connId = m2.minor;
      }
      this.settle(mp);
      this.state = 'mounted';
    } catch (err) {
      await (this.unmountPromise ??= this.teardown());
      throw err;
    }
  }

  /**
   * Opens the FUSE connection's descriptor: the session's (served once mounted), else a new
   * /dev/fuse (aborted at exit) with its workers started. @throws E_PERMISSION, E_MOUNT_FAILED
   */
  private openDevice(): void {
    if (this.session) {
      this.fd = this.session.fd;
    } else {
      try {
        this.fd = openSync('/dev/fuse', 'r+');
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new AwcError(
          code === 'EACCES' || code === 'EPERM' ? 'E_PERMISSION' : 'E_MOUNT_FAILED',
          `cannot open /dev/fuse: ${String(err)}`,
          { cause: err },
        );
      }
      // a session's connection outlives this process: only an unsupervised one is aborted at exit
      live.add(this.abortHook);
      installExitHook();
      this.startWorkers();
    }
  }

  /** After INIT: sets the connection's readahead (an error event when it fails) and records a session's state. */
  private settle(mp: string): void {
    if (this.readAheadKb > 0) {
      try {
        writeFileSync(`/sys/class/bdi/0:${this.connId}/read_ahead_kb`, String(this.readAheadKb));
      } catch (err) {
        this.emitError(new AwcError('E_FUSE', `cannot set readahead of content FUSE: ${String(err)}`, { cause: err }));
      }
    }
    if (this.session && this.protoMinor !== undefined && this.connId !== undefined) {
      writeSessionState(this.session.stateFile, {
        v: 1,
        connId: this.connId,
        protoMinor: this.protoMinor,
        mountTime: this.mountTime,
        cloned: this.cloned,
        mountpoint: mp,
      });
    }
  }

  /**
   * Takes over the live connection of the session (see FuseServerOptions.session): checks
   * that it is the one mounted at `mp`, then serves it. @throws E_FUSE when it is not alive
   */
  private resume(mp: string): void {
    const s = this.resumed;
    const m = mountsAt(mp, 'fuse.awc').at(-1);
    if (!s || s.mountpoint !== mp || !m || m.minor !== s.connId || !existsSync(`${FUSECTL_DIR}/${s.connId}`)) {
      throw new AwcError('E_FUSE', `no live content FUSE connection to take over at ${mp}`);
    }
    this.connId = s.connId;
    this.mountedPath = mp;
    this.serveOnClone();
    this.startWorkers();
    writeSessionState(this.session!.stateFile, { ...s, cloned: this.cloned });
    this.state = 'mounted';
  }

  /** Reads requests from a clone of the session descriptor when the kernel lets us (else from it directly). */
  private serveOnClone(): void {
    try {
      this.fd = cloneFuseDevice(this.session!.fd);
      this.cloned = true;
    } catch (err) {
      this.fd = this.session!.fd;
      this.cloned = false;
      this.emitError(err);
    }
  }

  private startWorkers(): void {
    const tables = this.readerTables();
    Atomics.store(this.ctrl, CTRL_TABLE_GEN, tables.generation);
    this.pool.start({
      ...tables,
      fd: this.fd,
      bufSize: READ_BUFFER_SIZE,
      ctrl: this.ctrl.buffer as SharedArrayBuffer,
      mountTime: this.mountTime,
    });
  }

  /**
   * Fails pending requests with EIO, aborts the connection through fusectl, unmounts (lazily if
   * the mount is busy), stops the workers and closes the descriptor. Safe to call twice and
   * concurrently; resolves when everything is released.
   */
  unmount(): Promise<void> {
    if (this.state === 'new' || this.state === 'closed') return this.unmountPromise ?? Promise.resolve();
    if (this.state === 'mounting' && this.mountPromise) {
      // Let the mount settle first (mount(8) may still be running); a failed mount tears itself down.
      const after = this.mountPromise.then(
        () => this.unmount(),
        () => this.unmountPromise ?? Promise.resolve(),
      );
      return after;
    }
    this.unmountPromise ??= this.teardown();
    return this.unmountPromise;
  }

  /**
   * The synchronous part of unmounting, for process 'exit' handlers and signal handlers:
   * aborts the connection of every live server and lazily unmounts it. The daemon should call
   * this from its SIGTERM/SIGINT handlers before exiting (the 'exit' hook runs it too).
   */
  static abortAllSync(): void {
    for (const abort of live) abort();
  }

  private onMessage(msg: ReaderPost): void {
    if (msg instanceof ArrayBuffer) this.dispatch(Buffer.from(msg));
    else if (typeof msg === 'number') this.onServed(msg);
    else if (msg.type === 'error')
      this.emitError(new AwcError('E_FUSE', `content FUSE reader could not reply: ${msg.code} ${msg.message}`));
    else this.emitError(new AwcError('E_FUSE', `content FUSE reader failed: ${msg.code} ${msg.message}`));
  }

  private abortSync(): void {
    if (this.connId !== undefined && this.mountedPath) abortFuseConnection(this.connId, this.mountedPath);
    if (this.mountedPath && this.state !== 'new' && mountsAt(this.mountedPath, 'fuse.awc').length > 0) {
      spawnSync('umount', ['-l', this.mountedPath], { stdio: 'ignore' });
    }
    live.delete(this.abortHook);
  }

  private async teardown(): Promise<void> {
    this.state = 'unmounting';
    this.initWaiter?.reject(new AwcError('E_MOUNT_FAILED', 'content FUSE unmounted during mount'));
    // 1. Unblock every reader waiting on a miss.
    for (const unique of this.pending) this.replyError(unique, Errno.EIO);
    this.pending.clear();
    // 2. Abort the connection: blocked device reads return ENODEV, callers get ENOTCONN.
    Atomics.store(this.ctrl, CTRL_STOP, 1);
    Atomics.notify(this.ctrl, CTRL_STOP);
    const mp = this.mountedPath;
    if (mp && this.connId === undefined) {
      const m = mountsAt(mp, 'fuse.awc').at(-1);
      if (m) this.connId = m.minor;
    }
    if (this.connId !== undefined && mp) abortFuseConnection(this.connId, mp);
    // 3. Unmount, lazily when busy (or when an overlay still holds it).
    if (mp && mountsAt(mp, 'fuse.awc').length > 0) {
      const r = await runCommand('umount', [mp]);
      if (r.code !== 0 && mountsAt(mp, 'fuse.awc').length > 0) {
        const r2 = await runCommand('umount', ['-l', mp]);
        if (r2.code !== 0 && mountsAt(mp, 'fuse.awc').length > 0) {
          this.emitError(new AwcError('E_FUSE', `cannot unmount content FUSE on ${mp}: ${r2.stderr.trim()}`));
        }
      }
    }
    // 4. Workers exit on ENODEV (or EPERM + stop flag when the mount never happened).
    await this.pool.stop();
    // 5. Close the device (and a session's own descriptor: the supervisor keeps its copy).
    for (const fd of new Set([this.fd, this.session?.fd ?? -1])) {
      if (fd < 0) continue;
      try {
        closeSync(fd);
      } catch {
        /* already closed */
      }
    }
    this.fd = -1;
    this.nodeLog?.close();
    live.delete(this.abortHook);
    this.state = 'closed';
  }

  /** Emits `'error'` (as an Error) when anyone listens; never throws. */
  protected emitError(err: unknown): void {
    const self = this as unknown as EventEmitter<FuseServerEvents>;
    if (self.listenerCount('error') > 0) self.emit('error', err instanceof Error ? err : new Error(String(err)));
  }

  /** Answers INIT (fuse-init.ts) and settles the mount's wait for it. */
  protected onInit(b: Buffer, unique: number): void {
    const r = answerInit(b, unique, this.small);
    if ('tooOld' in r) {
      this.replyError(unique, 71 /* EPROTO */);
      const need = `${FUSE_KERNEL_VERSION}.${FUSE_MIN_MINOR_VERSION}`;
      this.initWaiter?.reject(new AwcError('E_MOUNT_FAILED', `kernel FUSE protocol ${r.tooOld} is too old (need ${need})`));
      return;
    }
    this.write(this.small, r.len);
    if ('retry' in r) return; // the kernel will send a new INIT with our major version
    this.protoMinor = r.minor;
    this.initWaiter?.resolve();
    this.initWaiter = undefined;
  }

  // ---- replies ---------------------------------------------------------------------------------------

  /** An empty success reply. */
  protected replyOk(unique: number): void {
    encodeOutHeader(this.hdr, OUT_HEADER_SIZE, 0, unique);
    this.write(this.hdr, OUT_HEADER_SIZE);
  }

  /** An error reply (`errno` positive, e.g. Errno.ENOENT). */
  protected replyError(unique: number, errno: number): void {
    encodeOutHeader(this.hdr, OUT_HEADER_SIZE, -errno, unique);
    this.write(this.hdr, OUT_HEADER_SIZE);
  }

  /** READ reply: header + data (at most `max` bytes) in one writev, no copy. */
  protected replyData(unique: number, data: Buffer | undefined, max: number): void {
    let n = data ? data.length : 0;
    if (n > max) {
      data = data!.subarray(0, max);
      n = max;
    }
    encodeOutHeader(this.hdr, OUT_HEADER_SIZE + n, 0, unique);
    if (n === 0) return this.write(this.hdr, OUT_HEADER_SIZE);
    if (this.fd < 0) return;
    this.iov[1] = data!;
    try {
      writevSync(this.fd, this.iov);
    } catch (err) {
      this.onWriteError(err);
    } finally {
      this.iov[1] = this.hdr;
    }
  }

  /** Writes the first `len` bytes of `buf` (a whole reply or notification) to the device. */
  protected write(buf: Buffer, len: number): void {
    if (this.fd < 0) return;
    try {
      writeSync(this.fd, buf, 0, len);
    } catch (err) {
      this.onWriteError(err);
    }
  }

  /** A failed write: ENOENT (the request was interrupted and is gone) and ENODEV & co (the connection is aborted) are expected. */
  protected onWriteError(err: unknown): void {
    const code = (err as NodeJS.ErrnoException).code;
    if (code && STALE_REPLY_CODES.has(code)) return;
    this.emitError(err);
  }
}
