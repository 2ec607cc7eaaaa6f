/**
 * The content FUSE server: a read-only, flat namespace of file contents named by digest,
 *
 *     /<aa>/<64 hex>        aa = the first two hex characters
 *
 * served by speaking the kernel protocol directly over /dev/fuse (no libfuse), to be used as an
 * overlayfs data-only lower layer (`lowerdir=LAYER::CONTENT`, DESIGN §2).
 *
 * Threads: `readers` worker threads do blocking reads of the device and post each request to the
 * main thread, which answers it with a synchronous write. Cache hits are answered synchronously
 * inside the message handler; misses (a Promise from the source) are answered when they settle,
 * while other requests keep flowing.
 *
 * The namespace is fixed: the root holds the 256 directories `00`..`ff`; a directory resolves a
 * 64-hex name through {@link ContentSource.lookup}. The root also resolves the short name of
 * every content object {@link ContentFuse.announce}d (`/<23 base64url chars>`, src/core/content-name.ts),
 * the form layer placeholders use. Node ids are stable for the life of the mount (never
 * recycled, FORGET is ignored), entries and attributes are valid for a day, and OPEN, OPENDIR
 * and FLUSH are answered ENOSYS so the kernel stops sending them and keeps page caches.
 *
 * Access: everything is root-owned, directories 0500 and files 0400, and the mount has
 * `default_permissions` (the kernel checks those modes) besides `allow_other` (overlayfs
 * reads its lowers with the mounter's, root's, credentials): no other user reads a byte here
 * even if they reached the mount point, which sits under a 0700 directory anyway. Users read
 * contents only through a workspace's overlay, which checks the snapshot's own modes.
 *
 * LOOKUPs of announced content are answered by the reader workers themselves, from a shared
 * table (content-table.ts), and so are READs of content {@link ContentFuse.offer}ed to the hot
 * arena (content-arena.ts): a cold file read ahead into memory then never waits for the main
 * thread.
 */
import { EventEmitter } from 'node:events';
import { closeSync, existsSync, openSync, realpathSync, statSync, writeFileSync, writeSync, writevSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { basename, dirname, join, resolve } from 'node:path';
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { AwcError } from '../../core/errors.js';
import { contentKey, contentKeyIn, shortContentName } from '../../core/content-name.js';
import { AMBIGUOUS, ContentTable, lookupSlot, slotHex, slotNode, slotSize } from './content-table.js';
import { ContentArena } from './content-arena.js';
import {
  CTRL_ARENA_RESERVE,
  CTRL_BATCH_FORGET,
  CTRL_FORGET,
  CTRL_INTERRUPT,
  CTRL_SLOTS,
  CTRL_STOP,
  CTRL_TABLE_GEN,
  CTRL_WORKER_LOOKUP,
  CTRL_WORKER_READ,
  DAY,
  DIR_BASE,
  FIRST_FILE_ID,
  GENERATION,
  STALE_REPLY_CODES,
  contentFileAttr,
  type ReaderWorkerData,
  type ReaderWorkerMessage,
  type TableUpdate,
} from './control.js';
import { mountsAt } from '../mount-table.js';
import { runCommand } from '../mount-commands.js';
import { abortFuseConnection, ensureFusectl, FUSECTL_DIR } from './fusectl.js';
import { cloneFuseDevice } from './dev-clone.js';
import { NodeLog, readSessionState, writeSessionState, type FuseSessionState } from './fuse-session.js';
import {
  ATTR_OUT_SIZE,
  DT_DIR,
  ENTRY_OUT_SIZE,
  Errno,
  FUSE_KERNEL_VERSION,
  FUSE_MIN_MINOR_VERSION,
  FUSE_ROOT_ID,
  IN_HEADER_SIZE,
  INIT_OUT_SIZE,
  InitFlag,
  OUT_HEADER_SIZE,
  Op,
  READ_IN_OFFSET,
  READ_IN_SIZE_FIELD,
  S_IFDIR,
  STATFS_OUT_SIZE,
  WRITE_IN_SIZE,
  decodeInitIn,
  direntSize,
  encodeNotifyInvalEntry,
  encodeAttrOut,
  encodeDirent,
  encodeEntryOut,
  encodeInitOut,
  encodeOutHeader,
  encodeStatfsOut,
  opName,
  readCString,
  readU64,
  type Attr,
} from './protocol.js';

/** Where the server gets content from. Both calls are made on the main thread. */
export interface ContentSource {
  /** Size in bytes of the content object named by 64-hex digest, or undefined when unknown (→ ENOENT). Must be synchronous. */
  lookup(hex: string): { size: number } | undefined;
  /** Bytes [offset, offset+length) of that content (clamped at EOF). Return a Buffer synchronously on a cache hit, a Promise on a miss. Errors → EIO. */
  read(hex: string, offset: number, length: number): Buffer | Promise<Buffer>;
}

/** Options of {@link ContentFuse}. */
export interface ContentFuseOptions {
  /** An existing, empty directory to mount on. */
  mountpoint: string;
  /** The content provider. */
  source: ContentSource;
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
   * Size in bytes of the hot content arena the reader workers answer READs from (see
   * {@link ContentFuse.offer}); default 0 = off (every READ goes to the main thread).
   */
  arenaBytes?: number;
  /**
   * Keep-alive session: serve a connection whose /dev/fuse descriptor `fd` a supervisor keeps
   * open (see fuse-session.ts and src/daemon/supervisor.ts). With `resume` false the server
   * mounts with that descriptor; with `resume` true it takes over the live connection recorded
   * in `stateFile` (no mount, no INIT) and answers for the node ids in `nodeLog`. Either way it
   * reads requests from a clone of `fd` when it can (FUSE_DEV_IOC_CLONE), so its death fails
   * only the requests it had read, and it never aborts the connection when the process dies.
   */
  session?: { fd: number; stateFile: string; nodeLog: string; resume: boolean };
}

/** Counters of a {@link ContentFuse}: requests received per opcode name (`lookup`, `read`, …). */
export interface ContentFuseStats {
  ops: Record<string, number>;
}

/** Pages per request: 256 × 4 KiB = 1 MiB reads. */
const MAX_PAGES = 256;
/** We are read-only: a modest max_write keeps the kernel's read-buffer rule small. */
const MAX_WRITE = 128 * 1024;
/**
 * Device read buffer. The kernel refuses reads shorter than
 * max(FUSE_MIN_READ_BUFFER, sizeof(fuse_in_header) + sizeof(fuse_write_in) + max_write);
 * 1 MiB + 4 KiB covers that and any request body the kernel may send.
 */
const READ_BUFFER_SIZE = Math.max(MAX_PAGES * 4096, IN_HEADER_SIZE + WRITE_IN_SIZE + MAX_WRITE) + 4096;
/** Background requests (async reads, readahead) the kernel keeps in flight. */
const MAX_BACKGROUND = 64;
const CONGESTION_THRESHOLD = 48;
/** Longest stretch of synchronous request handling before yielding to the event loop (ms). */
const SPIN_CAP_MS = 2;

const DIR_NAMES: readonly string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

type State = 'new' | 'mounting' | 'mounted' | 'unmounting' | 'closed';

/** Servers with a live connection, for the process 'exit' hook. */
const live = new Set<ContentFuse>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => ContentFuse.abortAllSync());
}

/**
 * A FUSE server for the content namespace. Emits `'op'` (opcode name) for every request the
 * main thread handles, `'served'` (content hex) when a worker answered a READ from the arena,
 * and `'error'` (an Error) for failures it cannot report to the kernel; it never prints.
 *
 * @example
 *   const fuse = new ContentFuse({ mountpoint: '/var/lib/awc/content', source });
 *   await fuse.mount();
 *   // … mount overlays with lowerdir=LAYER::/var/lib/awc/content …
 *   await fuse.unmount();
 */
export class ContentFuse extends EventEmitter {
  private readonly mountpoint: string;
  private readonly source: ContentSource;
  private readonly readerCount: number;

  private state: State = 'new';
  private fd = -1;
  private workers: Worker[] = [];
  private ports: MessagePort[] = [];
  /** Per worker: where a new content table buffer is posted. */
  private tablePorts: MessagePort[] = [];
  private readonly spinMs: number;
  private readonly readAheadKb: number;
  private readonly ctrl = new Int32Array(new SharedArrayBuffer(CTRL_SLOTS * 4));
  private connId: number | undefined;
  private unmountPromise: Promise<void> | undefined;
  private mountPromise: Promise<void> | undefined;
  private initWaiter: { resolve: () => void; reject: (e: Error) => void } | undefined;
  private mountedPath = '';
  private protoMinor: number | undefined;

  /** Content digest → node id and size, shared with the workers; node id - FIRST_FILE_ID → hex / size. */
  private readonly table = new ContentTable();
  private readonly arena: ContentArena | undefined;
  private readonly nodeHex: string[] = [];
  private readonly nodeSize: number[] = [];
  /** Requests waiting on a Promise from the source, by unique id. */
  private readonly pending = new Set<number>();
  private readonly opCounts: number[] = [];

  /** Reusable reply buffers (every reply is written synchronously, so one of each suffices). */
  private readonly hdr = Buffer.alloc(OUT_HEADER_SIZE);
  private readonly small = Buffer.alloc(OUT_HEADER_SIZE + 256);
  private readonly dirBuf = Buffer.alloc(OUT_HEADER_SIZE + 64 * 1024);
  private readonly iov: Buffer[] = [this.hdr, this.hdr];
  private readonly attrScratch: Attr = { ino: 0, size: 0, mode: 0, nlink: 1, uid: 0, gid: 0, blksize: 4096, time: 0 };
  private mountTime = Math.floor(Date.now() / 1000);
  private readonly session: ContentFuseOptions['session'];
  /** The connection this server takes over (session.resume), read at construction. */
  private readonly resumed: FuseSessionState | undefined;
  private readonly nodeLog: NodeLog | undefined;
  /** True when requests are read from a clone of the session descriptor. */
  private cloned = false;

  /** Creates a server; nothing happens until {@link mount}. */
  constructor(opts: ContentFuseOptions) {
    super();
    this.mountpoint = opts.mountpoint;
    this.source = opts.source;
    this.readerCount = Math.max(1, Math.floor(opts.readers ?? 2));
    this.spinMs = Math.max(0, opts.spinUs ?? 0) / 1000;
    this.readAheadKb = Math.max(0, Math.floor(opts.readAheadKb ?? MAX_PAGES * 4));
    const arenaBytes = Math.max(0, Math.floor(opts.arenaBytes ?? 0));
    if (arenaBytes > 0) this.arena = new ContentArena(arenaBytes, (u) => void Atomics.exchange(this.ctrl, CTRL_ARENA_RESERVE, u));
    this.session = opts.session;
    if (this.session?.resume) {
      this.resumed = readSessionState(this.session.stateFile);
      if (this.resumed) {
        this.mountTime = this.resumed.mountTime;
        this.protoMinor = this.resumed.protoMinor;
        // the same node ids, in the same order, as the server before us handed out
        for (const [hex, size] of NodeLog.read(this.session.nodeLog)) this.addNode(hex, size, false);
      }
    }
    if (this.session) this.nodeLog = new NodeLog(this.session.nodeLog, !this.resumed);
  }

  /** True when this server took over a live connection (no mount, no INIT) instead of mounting. */
  get resumedConnection(): boolean {
    return this.resumed !== undefined;
  }

  /** True when requests are read from a clone of the session descriptor (see ContentFuseOptions.session). */
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

  /** Request counters per opcode name, including FORGET/INTERRUPT dropped by the workers. */
  get stats(): ContentFuseStats {
    const ops: Record<string, number> = {};
    for (let i = 0; i < this.opCounts.length; i++) {
      const n = this.opCounts[i];
      if (n) ops[opName(i)] = n;
    }
    const add = (name: string, n: number): void => {
      if (n) ops[name] = (ops[name] ?? 0) + n;
    };
    add('forget', Atomics.load(this.ctrl, CTRL_FORGET));
    add('batch_forget', Atomics.load(this.ctrl, CTRL_BATCH_FORGET));
    add('interrupt', Atomics.load(this.ctrl, CTRL_INTERRUPT));
    add('lookup', Atomics.load(this.ctrl, CTRL_WORKER_LOOKUP));
    add('read', Atomics.load(this.ctrl, CTRL_WORKER_READ));
    return { ops };
  }

  /**
   * Requests the reader workers handled without the main thread (so without an `'op'` event),
   * by opcode name: `lookup` (answered from the content table), `read` (answered from the
   * arena), `forget`, `batch_forget`, `interrupt` (dropped). Monotonic counters for the life
   * of the server.
   */
  get workerOps(): Record<string, number> {
    return {
      lookup: Atomics.load(this.ctrl, CTRL_WORKER_LOOKUP),
      read: Atomics.load(this.ctrl, CTRL_WORKER_READ),
      forget: Atomics.load(this.ctrl, CTRL_FORGET),
      batch_forget: Atomics.load(this.ctrl, CTRL_BATCH_FORGET),
      interrupt: Atomics.load(this.ctrl, CTRL_INTERRUPT),
    };
  }

  /** Number of content objects with a node id (announced or looked up). */
  get contentCount(): number {
    return this.nodeHex.length;
  }

  /**
   * Makes content objects known by 64-hex digest and size in bytes, so that their short names
   * resolve and the reader workers answer their LOOKUPs themselves. Call it with every content
   * object of a layer before mounting an overlay on it. Announcing a digest twice is a no-op;
   * so is an invalid digest (it is never looked up). Main thread; O(1) per object (amortised).
   */
  announce(contents: Iterable<readonly [hex: string, size: number]>): void {
    for (const [hex, size] of contents) {
      const key = contentKey(hex);
      if (!key || key.short || lookupSlot(this.table.words, key) >= 0) continue;
      const short = shortContentName(hex);
      const before = lookupSlot(this.table.words, contentKey(short)!);
      this.addNode(hex, size);
      if (before >= 0) this.shortNameCollision(short);
    }
    this.nodeLog?.flush();
  }

  /**
   * False when a content object other than `hex` (64 hex) already answers to its short name,
   * so a layer must not use that short name for `hex` (it gets the long redirect). Main thread.
   */
  shortNameFree(hex: string): boolean {
    const slot = lookupSlot(this.table.words, contentKey(shortContentName(hex))!);
    if (slot === AMBIGUOUS) return false;
    return slot < 0 || slotHex(this.table.words, slot) === hex;
  }

  /**
   * A newly announced digest shares its short name with a known one: the name is ambiguous
   * from now on (lookups answer EIO). The kernel may hold the old resolution in its dentry
   * cache for a day: drop it (FUSE_NOTIFY_INVAL_ENTRY), so no new open gets the other
   * object's bytes. Reported as an error; never expected in practice (138-bit prefixes).
   */
  private shortNameCollision(short: string): void {
    this.emitError(new AwcError('E_INTEGRITY', `content FUSE: short name ${short} matches two content objects`));
    this.invalidateRoot(short);
    // A worker that read the table just before the insert may still answer one LOOKUP of the
    // name with the old object, after this invalidation: invalidate again once it is done.
    for (const ms of [100, 1000]) setTimeout(() => this.invalidateRoot(short), ms).unref();
  }

  /** FUSE_NOTIFY_INVAL_ENTRY for `name` in the root (no-op when not mounted or not cached). */
  private invalidateRoot(name: string): void {
    if (this.fd < 0 || this.state !== 'mounted') return;
    const len = encodeNotifyInvalEntry(this.small, FUSE_ROOT_ID, name);
    try {
      writeSync(this.fd, this.small, 0, len);
    } catch (err) {
      // ENOENT: the kernel had no such entry cached; anything else is worth reporting
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.onWriteError(err);
    }
  }

  /**
   * Offers the whole bytes of an announced content object (64-hex digest) to the hot arena,
   * from where the reader workers answer its READs without the main thread; each such answer
   * at offset 0 is reported afterwards as a `'served'` event (the hex), for the cache's
   * bookkeeping. The arena keeps the newest objects (a ring): an overwritten one is simply
   * served by the main thread again. Main thread; copies the bytes.
   * @returns false when the arena is off, the content is unknown or not `data.length` bytes
   *   long, or too big for the arena (over a quarter of it), or already there.
   */
  offer(hex: string, data: Uint8Array): boolean {
    if (!this.arena) return false;
    const key = contentKey(hex);
    if (!key || key.short) return false;
    const slot = lookupSlot(this.table.words, key);
    if (slot < 0 || slotSize(this.table.words, slot) !== data.length) return false;
    return this.arena.put(slotNode(this.table.words, slot) - FIRST_FILE_ID, data);
  }

  /**
   * Makes room for `more` content objects beyond those known, in one step (instead of
   * doubling the shared table several times while a large layer is announced: each doubling
   * copies it, and the old copy lingers until the workers drop it). Main thread.
   */
  reserve(more: number): void {
    const moved = this.table.reserve(this.table.size + Math.max(0, Math.floor(more)));
    const grewNodes = this.arena?.ensureNode(this.nodeHex.length + Math.max(0, Math.floor(more)) - 1) ?? false;
    if (moved || grewNodes) this.publishTable(moved);
  }

  /** Gives a content object the next node id and publishes it in the table (hex not present yet). */
  private addNode(hex: string, size: number, log = true): number {
    const id = FIRST_FILE_ID + this.nodeHex.length;
    this.nodeHex.push(hex);
    this.nodeSize.push(size);
    if (log) this.nodeLog?.add(hex, size);
    const grewTable = this.table.insert(hex, id, size);
    const grewNodes = this.arena?.ensureNode(id - FIRST_FILE_ID) ?? false;
    if (grewTable || grewNodes) this.publishTable(grewTable);
    return id;
  }

  /** Posts the table's (and the arena's node array's) new buffers to every worker, then moves the generation they watch. */
  private publishTable(tableMoved = true): void {
    if (!tableMoved) this.table.bump(); // only the node array moved: the workers must still look

    const update: TableUpdate = { table: this.table.buffer, nodes: this.arena?.nodeBuffer, generation: this.table.generation };
    for (const p of this.tablePorts) p.postMessage(update);
    Atomics.store(this.ctrl, CTRL_TABLE_GEN, this.table.generation);
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
        live.add(this);
        installExitHook();
        this.startWorkers();
      }

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
      await withTimeout(
        initDone,
        10_000,
        () => new AwcError('E_MOUNT_FAILED', `content FUSE on ${mp}: the kernel sent no INIT within 10 s`),
      );
      if (this.connId === undefined) {
        const m2 = mountsAt(mp, 'fuse.awc').at(-1);
        if (!m2) throw new AwcError('E_MOUNT_FAILED', `content FUSE on ${mp} does not show in /proc/self/mountinfo`);
        this.connId = m2.minor;
      }
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
      this.state = 'mounted';
    } catch (err) {
      await (this.unmountPromise ??= this.teardown());
      throw err;
    }
  }

  /**
   * Takes over the live connection of the session (see ContentFuseOptions.session): checks
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
    for (const fuse of live) fuse.abortSync();
  }

  // ---- lifecycle internals ------------------------------------------------------------------------

  private startWorkers(): void {
    const url = new URL('./reader-worker.js', import.meta.url);
    Atomics.store(this.ctrl, CTRL_TABLE_GEN, this.table.generation);
    for (let i = 0; i < this.readerCount; i++) {
      const { port1, port2 } = new MessageChannel();
      const tables = new MessageChannel();
      const data: ReaderWorkerData = {
        fd: this.fd,
        bufSize: READ_BUFFER_SIZE,
        ctrl: this.ctrl.buffer as SharedArrayBuffer,
        port: port2,
        table: this.table.buffer,
        tablePort: tables.port2,
        generation: this.table.generation,
        mountTime: this.mountTime,
        arena: this.arena?.buffer,
        arenaUnits: this.arena?.units ?? 0,
        nodes: this.arena?.nodeBuffer,
      };
      const w = new Worker(url, { workerData: data, transferList: [port2, tables.port2], name: `awc-fuse-reader-${i}` });
      tables.port1.unref();
      this.tablePorts.push(tables.port1);
      port1.on('message', (msg: ArrayBuffer | ReaderWorkerMessage) => {
        this.onMessage(msg);
        this.spin();
      });
      port1.unref(); // the Worker keeps the process alive while mounted, not the port
      w.on('error', (err) => this.emitError(err));
      this.workers.push(w);
      this.ports.push(port1);
    }
  }

  private onMessage(msg: ArrayBuffer | number | ReaderWorkerMessage): void {
    if (msg instanceof ArrayBuffer) this.dispatch(Buffer.from(msg));
    else if (typeof msg === 'number') {
      const hex = this.nodeHex[msg - FIRST_FILE_ID];
      if (hex !== undefined && this.listenerCount('served') > 0) this.emit('served', hex);
    } else if (msg.type === 'error')
      this.emitError(new AwcError('E_FUSE', `content FUSE reader could not reply: ${msg.code} ${msg.message}`));
    else this.emitError(new AwcError('E_FUSE', `content FUSE reader failed: ${msg.code} ${msg.message}`));
  }

  /** Busy-polls the worker ports for up to spinMs after the last request (capped at SPIN_CAP_MS). */
  private spin(): void {
    if (this.spinMs <= 0) return;
    const start = performance.now();
    const cap = start + SPIN_CAP_MS;
    let deadline = start + this.spinMs;
    const ports = this.ports;
    for (;;) {
      let got = false;
      for (let i = 0; i < ports.length; i++) {
        const r = receiveMessageOnPort(ports[i]!);
        if (r) {
          this.onMessage(r.message as ArrayBuffer | ReaderWorkerMessage);
          got = true;
        }
      }
      const now = performance.now();
      if (got) deadline = now + this.spinMs;
      if (now >= deadline || now >= cap || this.state === 'closed') return;
    }
  }

  private abortSync(): void {
    if (this.connId !== undefined) abortFuseConnection(this.connId);
    if (this.mountedPath && this.state !== 'new' && mountsAt(this.mountedPath, 'fuse.awc').length > 0) {
      spawnSync('umount', ['-l', this.mountedPath], { stdio: 'ignore' });
    }
    live.delete(this);
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
    if (this.connId !== undefined) abortFuseConnection(this.connId);
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
    await Promise.all(
      this.workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            if (w.threadId < 0) return resolve();
            const t = setTimeout(() => {
              // Still blocked in read(2): the connection survives (e.g. an overlay holds it and
              // fusectl is missing). Do not keep the process alive for it.
              w.unref();
              this.emitError(new AwcError('E_FUSE', 'content FUSE reader did not stop; connection may still be alive'));
              resolve();
            }, 5_000);
            w.once('exit', () => {
              clearTimeout(t);
              resolve();
            });
          }),
      ),
    );
    this.workers = [];
    for (const p of this.ports) p.close();
    this.ports = [];
    for (const p of this.tablePorts) p.close();
    this.tablePorts = [];
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
    live.delete(this);
    this.state = 'closed';
  }

  private emitError(err: unknown): void {
    if (this.listenerCount('error') > 0) this.emit('error', err instanceof Error ? err : new Error(String(err)));
  }

  // ---- request dispatch ------------------------------------------------------------------------------

  private dispatch(b: Buffer): void {
    const opcode = b.readUInt32LE(4);
    const unique = readU64(b, 8);
    this.opCounts[opcode] = (this.opCounts[opcode] ?? 0) + 1;
    if (this.listenerCount('op') > 0) this.emit('op', opName(opcode));
    try {
      switch (opcode) {
        case Op.READ:
          return this.onRead(b, unique);
        case Op.LOOKUP:
          return this.onLookup(b, unique);
        case Op.GETATTR:
          return this.onGetattr(b, unique);
        case Op.INIT:
          return this.onInit(b, unique);
        case Op.READDIR:
          return this.onReaddir(b, unique);
        case Op.STATFS:
          return this.onStatfs(unique);
        case Op.RELEASE:
        case Op.RELEASEDIR:
        case Op.ACCESS:
        case Op.DESTROY:
          return this.replyOk(unique);
        case Op.FORGET:
        case Op.BATCH_FORGET:
        case Op.INTERRUPT:
          return; // no reply (normally dropped by the workers already)
        // ENOSYS on OPEN/OPENDIR with NO_OPEN(DIR)_SUPPORT: zero-message opens from now on, and the
        // kernel keeps the page cache across opens.
        // ENOSYS on FLUSH: the kernel sets no_flush and stops sending one per close().
        case Op.OPEN:
        case Op.OPENDIR:
        case Op.FLUSH:
        case Op.GETXATTR:
        case Op.LISTXATTR:
        default:
          return this.replyError(unique, Errno.ENOSYS);
      }
    } catch (err) {
      this.emitError(err);
      this.replyError(unique, Errno.EIO);
    }
  }

  private onInit(b: Buffer, unique: number): void {
    const len = b.readUInt32LE(0);
    const init = decodeInitIn(b, IN_HEADER_SIZE, len - IN_HEADER_SIZE);
    const out = this.small;
    if (init.major > FUSE_KERNEL_VERSION) {
      // The kernel will send a new INIT with our major version.
      encodeOutHeader(out, OUT_HEADER_SIZE + 8, 0, unique);
      out.fill(0, OUT_HEADER_SIZE, OUT_HEADER_SIZE + 8);
      out.writeUInt32LE(FUSE_KERNEL_VERSION, OUT_HEADER_SIZE);
      this.write(out, OUT_HEADER_SIZE + 8);
      return;
    }
    if (init.major < FUSE_KERNEL_VERSION || init.minor < FUSE_MIN_MINOR_VERSION) {
      this.replyError(unique, 71 /* EPROTO */);
      this.initWaiter?.reject(
        new AwcError('E_MOUNT_FAILED', `kernel FUSE protocol ${init.major}.${init.minor} is too old (need 7.${FUSE_MIN_MINOR_VERSION})`),
      );
      return;
    }
    const want =
      InitFlag.ASYNC_READ |
      InitFlag.NO_OPEN_SUPPORT |
      InitFlag.NO_OPENDIR_SUPPORT |
      InitFlag.PARALLEL_DIROPS |
      InitFlag.MAX_PAGES |
      InitFlag.BIG_WRITES;
    encodeOutHeader(out, OUT_HEADER_SIZE + INIT_OUT_SIZE, 0, unique);
    encodeInitOut(out, OUT_HEADER_SIZE, {
      major: FUSE_KERNEL_VERSION,
      minor: init.minor,
      maxReadahead: init.maxReadahead,
      flags: (want & init.flags) >>> 0,
      maxBackground: MAX_BACKGROUND,
      congestionThreshold: CONGESTION_THRESHOLD,
      maxWrite: MAX_WRITE,
      timeGran: 1,
      maxPages: MAX_PAGES,
      flags2: 0,
    });
    this.write(out, OUT_HEADER_SIZE + INIT_OUT_SIZE);
    this.protoMinor = init.minor;
    this.initWaiter?.resolve();
    this.initWaiter = undefined;
  }

  /** Fills attrScratch for a node id; false when the node is unknown. */
  private attrOf(nodeid: number): boolean {
    const a = this.attrScratch;
    a.ino = nodeid;
    a.time = this.mountTime;
    if (nodeid === FUSE_ROOT_ID) {
      a.mode = S_IFDIR | 0o500;
      a.nlink = 2 + 256;
      a.size = 0;
      return true;
    }
    if (nodeid >= DIR_BASE && nodeid < FIRST_FILE_ID) {
      a.mode = S_IFDIR | 0o500;
      a.nlink = 2;
      a.size = 0;
      return true;
    }
    const i = nodeid - FIRST_FILE_ID;
    if (i >= 0 && i < this.nodeHex.length) {
      contentFileAttr(a, nodeid, this.nodeSize[i]!, this.mountTime);
      return true;
    }
    return false;
  }

  private onLookup(b: Buffer, unique: number): void {
    const parent = readU64(b, 16);
    const len = b.readUInt32LE(0);
    const name = readCString(b, IN_HEADER_SIZE, len);
    let nodeid: number;
    if (parent === FUSE_ROOT_ID && name.length === 2) {
      const d = parseInt(name, 16);
      if (!(d >= 0) || DIR_NAMES[d] !== name) return this.replyError(unique, Errno.ENOENT);
      nodeid = DIR_BASE + d;
    } else if (parent === FUSE_ROOT_ID || (parent >= DIR_BASE && parent < FIRST_FILE_ID)) {
      const key = contentKeyIn(parent, name, FUSE_ROOT_ID, DIR_BASE);
      if (!key) return this.replyError(unique, Errno.ENOENT);
      const slot = lookupSlot(this.table.words, key);
      if (slot === AMBIGUOUS) {
        // two announced digests share these 138 bits (a short name): never guess which one was meant
        this.emitError(new AwcError('E_INTEGRITY', `content FUSE: short name ${name} matches two content objects`));
        return this.replyError(unique, Errno.EIO);
      }
      if (slot >= 0) {
        nodeid = slotNode(this.table.words, slot);
      } else {
        // a 64-hex name not announced (yet): the source may know it; a short name only resolves once announced
        const info = key.short ? undefined : this.source.lookup(name);
        if (!info) return this.replyError(unique, Errno.ENOENT);
        nodeid = this.addNode(name, info.size);
        this.nodeLog?.flush(); // before the kernel learns the id
      }
    } else {
      return this.replyError(unique, Errno.ENOTDIR);
    }
    this.attrOf(nodeid);
    const out = this.small;
    const total = OUT_HEADER_SIZE + ENTRY_OUT_SIZE;
    encodeOutHeader(out, total, 0, unique);
    encodeEntryOut(out, OUT_HEADER_SIZE, nodeid, GENERATION, DAY, DAY, this.attrScratch);
    this.write(out, total);
  }

  private onGetattr(b: Buffer, unique: number): void {
    const nodeid = readU64(b, 16);
    if (!this.attrOf(nodeid)) return this.replyError(unique, Errno.ENOENT);
    const out = this.small;
    const total = OUT_HEADER_SIZE + ATTR_OUT_SIZE;
    encodeOutHeader(out, total, 0, unique);
    encodeAttrOut(out, OUT_HEADER_SIZE, DAY, this.attrScratch);
    this.write(out, total);
  }

  private onRead(b: Buffer, unique: number): void {
    const i = readU64(b, 16) - FIRST_FILE_ID;
    if (i < 0) return this.replyError(unique, Errno.EISDIR);
    const hex = this.nodeHex[i];
    if (hex === undefined) return this.replyError(unique, Errno.ENOENT);
    const offset = readU64(b, IN_HEADER_SIZE + READ_IN_OFFSET);
    const size = b.readUInt32LE(IN_HEADER_SIZE + READ_IN_SIZE_FIELD);
    const fileSize = this.nodeSize[i]!;
    if (offset >= fileSize || size === 0) return this.replyData(unique, undefined, 0);
    const r = this.source.read(hex, offset, Math.min(size, fileSize - offset));
    if (r instanceof Promise) {
      this.pending.add(unique);
      r.then(
        (data) => {
          if (this.pending.delete(unique)) this.replyData(unique, data, size);
        },
        (err) => {
          if (this.pending.delete(unique)) {
            this.emitError(err);
            this.replyError(unique, Errno.EIO);
          }
        },
      );
      return;
    }
    this.replyData(unique, r, size);
  }

  private onReaddir(b: Buffer, unique: number): void {
    const nodeid = readU64(b, 16);
    if (nodeid >= FIRST_FILE_ID) return this.replyError(unique, Errno.ENOTDIR);
    const start = readU64(b, IN_HEADER_SIZE + READ_IN_OFFSET);
    const size = Math.min(b.readUInt32LE(IN_HEADER_SIZE + READ_IN_SIZE_FIELD), this.dirBuf.length - OUT_HEADER_SIZE);
    const count = nodeid === FUSE_ROOT_ID ? 2 + 256 : 2;
    const out = this.dirBuf;
    let pos = OUT_HEADER_SIZE;
    for (let idx = start; idx < count; idx++) {
      let name: string;
      let ino: number;
      if (idx === 0) {
        name = '.';
        ino = nodeid;
      } else if (idx === 1) {
        name = '..';
        ino = FUSE_ROOT_ID;
      } else {
        name = DIR_NAMES[idx - 2]!;
        ino = DIR_BASE + idx - 2;
      }
      if (pos - OUT_HEADER_SIZE + direntSize(name.length) > size) break;
      pos = encodeDirent(out, pos, ino, idx + 1, name, DT_DIR);
    }
    encodeOutHeader(out, pos, 0, unique);
    this.write(out, pos);
  }

  private onStatfs(unique: number): void {
    const out = this.small;
    const total = OUT_HEADER_SIZE + STATFS_OUT_SIZE;
    encodeOutHeader(out, total, 0, unique);
    encodeStatfsOut(out, OUT_HEADER_SIZE, {
      blocks: 0,
      bfree: 0,
      bavail: 0,
      files: 1 + 256 + this.nodeHex.length,
      ffree: 0,
      bsize: 4096,
      namelen: 255,
      frsize: 4096,
    });
    this.write(out, total);
  }

  // ---- replies ---------------------------------------------------------------------------------------

  private replyOk(unique: number): void {
    encodeOutHeader(this.hdr, OUT_HEADER_SIZE, 0, unique);
    this.write(this.hdr, OUT_HEADER_SIZE);
  }

  private replyError(unique: number, errno: number): void {
    encodeOutHeader(this.hdr, OUT_HEADER_SIZE, -errno, unique);
    this.write(this.hdr, OUT_HEADER_SIZE);
  }

  /** READ reply: header + data (at most `max` bytes) in one writev, no copy. */
  private replyData(unique: number, data: Buffer | undefined, max: number): void {
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

  private write(buf: Buffer, len: number): void {
    if (this.fd < 0) return;
    try {
      writeSync(this.fd, buf, 0, len);
    } catch (err) {
      this.onWriteError(err);
    }
  }

  private onWriteError(err: unknown): void {
    // ENOENT: the request was interrupted and is gone; ENODEV & co: the connection is aborted.
    const code = (err as NodeJS.ErrnoException).code;
    if (code && STALE_REPLY_CODES.has(code)) return;
    this.emitError(err);
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(onTimeout()), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}
