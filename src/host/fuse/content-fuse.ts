/**
 * The content file system: a read-only, flat namespace of file contents named by digest,
 *
 *     /<aa>/<64 hex>        aa = the first two hex characters
 *     /<short name>         23 base64url characters of the digest (src/core/content-name.ts)
 *
 * to be used as an overlayfs data-only lower layer (`lowerdir=LAYER::CONTENT`, docs/explanation/design.md#overlay-driver). This
 * file answers the requests (LOOKUP, GETATTR, READ, READDIR, STATFS) and keeps the tables the
 * reader workers answer from; the connection's life cycle (device, mount, INIT, workers,
 * teardown) is fuse-server.ts.
 *
 * The namespace is fixed: the root holds the 256 directories `00`..`ff`; a directory resolves a
 * 64-hex name through {@link ContentSource.lookup}. The root also resolves the short name of
 * every content object {@link ContentFuse.announce}d, the form layer placeholders use. Node ids
 * are stable for the life of the mount (never recycled, FORGET is ignored), entries and
 * attributes are valid for a day, and OPEN, OPENDIR and FLUSH are answered ENOSYS so the kernel
 * stops sending them and keeps page caches.
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
import { writeSync } from 'node:fs';
import { AwcError } from '../../core/errors.js';
import { contentKey, contentKeyIn, shortContentName } from '../../core/content-name.js';
import { AMBIGUOUS, ContentTable, lookupSlot, markSlotSparse, slotHex, slotNode, slotSize } from './content-table.js';
import { ContentArena } from './content-arena.js';
import {
  CTRL_ARENA_RESERVE,
  CTRL_BATCH_FORGET,
  CTRL_FORGET,
  CTRL_INTERRUPT,
  CTRL_WORKER_LOOKUP,
  CTRL_WORKER_READ,
  DAY,
  DIR_BASE,
  FIRST_FILE_ID,
  GENERATION,
  contentFileAttr,
} from './control.js';
import { NodeLog } from './fuse-session.js';
import { encodeContentStatfs, encodeLseekReply } from './content-replies.js';
import { dataBytes, type Extent } from '../../core/sparse.js';
import { FuseServer, type FuseServerEvents, type FuseServerOptions, type ReaderTables } from './fuse-server.js';
import {
  ATTR_OUT_SIZE,
  DT_DIR,
  ENTRY_OUT_SIZE,
  Errno,
  FUSE_ROOT_ID,
  IN_HEADER_SIZE,
  OUT_HEADER_SIZE,
  Op,
  READ_IN_OFFSET,
  READ_IN_SIZE_FIELD,
  S_IFDIR,
  direntSize,
  encodeNotifyInvalEntry,
  encodeAttrOut,
  encodeDirent,
  encodeEntryOut,
  encodeOutHeader,
  opName,
  readCString,
  readU64,
  type Attr,
} from './protocol.js';

/** Where the server gets content from. Both calls are made on the main thread. */
export interface ContentSource {
  /** Size in bytes of the content object named by 64-hex digest (a sparse one's extents), or undefined when unknown (→ ENOENT). Synchronous. */
  lookup(hex: string): { size: number; extents?: Extent[] } | undefined;
  /** Bytes [offset, offset+length) of that content (clamped at EOF). Return a Buffer synchronously on a cache hit, a Promise on a miss. Errors → EIO. */
  read(hex: string, offset: number, length: number): Buffer | Promise<Buffer>;
  /**
   * The content objects the source knows by short name `short` (src/core/content-name.ts)
   * without their having been announced: none or one, unless two share the name. For sources
   * that read a layer's content index lazily (a shared image's), so that nothing need be
   * announced before a mount. Synchronous; optional (without it, a short name resolves only
   * once announced).
   */
  withShortName?(short: string): ShortNamed[];
}

/** A content object found by its short name: its 64-hex digest, size in bytes and a sparse one's extents. */
export interface ShortNamed {
  hex: string;
  size: number;
  extents?: Extent[];
}

/** Options of {@link ContentFuse}: the session's (fuse-server.ts) and the content's. */
export interface ContentFuseOptions extends FuseServerOptions {
  /** The content provider. */
  source: ContentSource;
  /**
   * Size in bytes of the hot content arena the reader workers answer READs from (see
   * {@link ContentFuse.offer}); default 0 = off (every READ goes to the main thread).
   */
  arenaBytes?: number;
}

/** Counters of a {@link ContentFuse}: requests received per opcode name (`lookup`, `read`, …). */
export interface ContentFuseStats {
  ops: Record<string, number>;
}

/** Events of a {@link ContentFuse}: the session's, and `'served'` (content hex) when a worker answered a READ from the arena. */
export type ContentFuseEvents = FuseServerEvents & {
  served: [hex: string];
  /** A short name became ambiguous (two objects answer to it): whatever holds the name elsewhere must let it go. */
  ambiguous: [short: string];
};

const DIR_NAMES: readonly string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

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
export class ContentFuse extends FuseServer<ContentFuseEvents> {
  private readonly source: ContentSource;
  /** Content digest → node id and size, shared with the workers; node id - FIRST_FILE_ID → hex / size. */
  private readonly table = new ContentTable();
  private readonly arena: ContentArena | undefined;
  private readonly nodeHex: string[] = [];
  private readonly nodeSize: number[] = [];
  /** Node ids of sparse content (its extents from the source: st_blocks of its data, LSEEK). */
  private readonly sparseNodes = new Set<number>();
  private readonly opCounts: number[] = [];
  private readonly dirBuf = Buffer.alloc(OUT_HEADER_SIZE + 64 * 1024);
  private readonly attrScratch: Attr = { ino: 0, size: 0, mode: 0, nlink: 1, uid: 0, gid: 0, blksize: 4096, time: 0 };

  /** Creates a server; nothing happens until {@link mount}. */
  constructor(opts: ContentFuseOptions) {
    super(opts);
    this.source = opts.source;
    const arenaBytes = Math.max(0, Math.floor(opts.arenaBytes ?? 0));
    if (arenaBytes > 0) this.arena = new ContentArena(arenaBytes, (u) => void Atomics.exchange(this.ctrl, CTRL_ARENA_RESERVE, u));
    // the same node ids, in the same order, as the server before us handed out
    if (this.resumed) for (const [hex, size] of NodeLog.read(this.session!.nodeLog)) this.addNode(hex, size, false);
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
   * object of a layer before mounting an overlay on it (`sparse`: a sparse file, whose extents
   * the source gives). Announcing a digest twice is a no-op;
   * so is an invalid digest (it is never looked up). Main thread; O(1) per object (amortised).
   */
  announce(contents: Iterable<readonly [hex: string, size: number, sparse?: boolean]>): void {
    for (const [hex, size, sparse] of contents) {
      const key = contentKey(hex);
      if (!key || key.short) continue;
      const known = lookupSlot(this.table.words, key);
      if (known >= 0 && sparse) {
        this.sparseNodes.add(slotNode(this.table.words, known)); // e.g. a node of the server before us
        markSlotSparse(this.table.words, known);
      }
      if (known >= 0) continue;
      const short = shortContentName(hex);
      this.insertNew(hex, short, size, sparse === true, false);
      // an object of a lazily read index with the same short name: the name is ambiguous from now on
      for (const o of this.source.withShortName?.(short) ?? [])
        if (o.hex !== hex) this.insertChecked(o.hex, o.size, o.extents !== undefined);
    }
    this.nodeLog?.flush();
  }

  /**
   * Adds `hex` (64 hex) unless the table has it, and reports a collision when its short name
   * was taken. `inLookup`: called while a LOOKUP in the root is answered, when the kernel holds
   * the root's lock until the answer, so the dentry invalidation must wait (a synchronous one
   * would deadlock); no dentry of the name can be cached then (the table had no object of it).
   */
  private insertChecked(hex: string, size: number, sparse: boolean, inLookup = false): number {
    const known = lookupSlot(this.table.words, contentKey(hex)!);
    if (known >= 0) return slotNode(this.table.words, known);
    return this.insertNew(hex, shortContentName(hex), size, sparse, inLookup);
  }

  /** As insertChecked, for `hex` (whose short name is `short`) known to be absent from the table. */
  private insertNew(hex: string, short: string, size: number, sparse: boolean, inLookup: boolean): number {
    const before = lookupSlot(this.table.words, contentKey(short)!);
    const id = this.addNode(hex, size, true, sparse);
    if (before >= 0 || before === AMBIGUOUS) this.shortNameCollision(short, inLookup);
    return id;
  }

  /**
   * Checks the short names of a lazily read index's objects against the objects announced
   * before it (what `announce` checks for each object it adds): one that another object holds
   * is added too, so the name is ambiguous (EIO) rather than resolved to the wrong object. In
   * slices of 4096 objects between I/O events, off the mount's path. Main thread.
   */
  async guardShortNames(objects: Iterable<readonly [hex: string, size: number, sparse: boolean]>): Promise<void> {
    let n = 0;
    for (const [hex, size, sparse] of objects) {
      if (++n % 4096 === 0) await new Promise((r) => setImmediate(r));
      const slot = lookupSlot(this.table.words, contentKey(shortContentName(hex))!);
      if (slot === AMBIGUOUS || (slot >= 0 && slotHex(this.table.words, slot) !== hex)) this.insertChecked(hex, size, sparse);
    }
    this.nodeLog?.flush();
  }

  /**
   * False when a content object other than `hex` (64 hex) already answers to its short name,
   * so a layer must not use that short name for `hex` (it gets the long redirect). Main thread.
   */
  shortNameFree(hex: string): boolean {
    const short = shortContentName(hex);
    const slot = lookupSlot(this.table.words, contentKey(short)!);
    if (slot === AMBIGUOUS || (slot >= 0 && slotHex(this.table.words, slot) !== hex)) return false;
    return (this.source.withShortName?.(short) ?? []).every((o) => o.hex === hex);
  }

  /**
   * A newly announced digest shares its short name with a known one: the name is ambiguous
   * from now on (lookups answer EIO). The kernel may hold the old resolution in its dentry
   * cache for a day: drop it (FUSE_NOTIFY_INVAL_ENTRY), so no new open gets the other
   * object's bytes. Reported as an error; never expected in practice (138-bit prefixes).
   */
  private shortNameCollision(short: string, deferred = false): void {
    this.emitError(new AwcError('E_INTEGRITY', `content FUSE: short name ${short} matches two content objects`));
    this.emit('ambiguous', short);
    if (deferred) setImmediate(() => this.invalidateRoot(short));
    else this.invalidateRoot(short);
    // A worker that read the table just before the insert may still answer one LOOKUP of the
    // name with the old object, after this invalidation: invalidate again once it is done.
    for (const ms of [100, 1000]) setTimeout(() => this.invalidateRoot(short), ms).unref();
  }

  /** FUSE_NOTIFY_INVAL_ENTRY for `name` in the root (no-op when not mounted or not cached). */
  private invalidateRoot(name: string): void {
    if (!this.serving) return;
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
  private addNode(hex: string, size: number, log = true, sparse = false): number {
    const id = FIRST_FILE_ID + this.nodeHex.length;
    this.nodeHex.push(hex);
    this.nodeSize.push(size);
    if (log) this.nodeLog?.add(hex, size);
    if (sparse) this.sparseNodes.add(id);
    const grewTable = this.table.insert(hex, id, size, sparse);
    const grewNodes = this.arena?.ensureNode(id - FIRST_FILE_ID) ?? false;
    if (grewTable || grewNodes) this.publishTable(grewTable);
    return id;
  }

  /** Posts the table's (and the arena's node array's) new buffers to every worker, then moves the generation they watch. */
  private publishTable(tableMoved = true): void {
    if (!tableMoved) this.table.bump(); // only the node array moved: the workers must still look
    this.publish({ table: this.table.buffer, nodes: this.arena?.nodeBuffer, generation: this.table.generation });
  }

  protected readerTables(): ReaderTables {
    const a = this.arena;
    return {
      table: this.table.buffer,
      generation: this.table.generation,
      arena: a?.buffer,
      arenaUnits: a?.units ?? 0,
      nodes: a?.nodeBuffer,
    };
  }

  protected onServed(nodeid: number): void {
    const hex = this.nodeHex[nodeid - FIRST_FILE_ID];
    if (hex !== undefined && this.listenerCount('served') > 0) this.emit('served', hex);
  }

  // ---- request dispatch ------------------------------------------------------------------------------

  protected dispatch(b: Buffer): void {
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
        case Op.LSEEK:
          return this.onLseek(b, unique);
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

  /** Fills attrScratch for a node id; false when the node is unknown. */
  private attrOf(nodeid: number): boolean {
    const a = this.attrScratch;
    a.ino = nodeid;
    a.time = this.mountTime;
    a.blocks = undefined;
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
      const ext = this.sparseNodes.has(nodeid) ? this.source.lookup(this.nodeHex[i]!)?.extents : undefined;
      if (ext) a.blocks = Math.ceil(dataBytes(ext) / 512); // a sparse file: st_blocks of its data
      return true;
    }
    return false;
  }

  /**
   * A content object the table does not hold, asked of the source: a 64-hex name by digest,
   * a short name in its lazily read indexes (ContentSource.withShortName). Added to the table
   * (and the node log, flushed before the kernel learns the id).
   * @returns its node id; AMBIGUOUS when two objects share the short name (both are added, so
   *   the table answers EIO from now on); undefined when unknown
   */
  private lookupSource(name: string, short: boolean): number | undefined {
    if (!short) {
      const info = this.source.lookup(name);
      if (!info) return undefined;
      const id = this.addNode(name, info.size, true, info.extents !== undefined);
      this.nodeLog?.flush();
      return id;
    }
    const found = this.source.withShortName?.(name) ?? [];
    const ids = found.map((o) => this.insertChecked(o.hex, o.size, o.extents !== undefined, true));
    this.nodeLog?.flush();
    return ids.length === 1 ? ids[0] : ids.length > 1 ? AMBIGUOUS : undefined;
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
        // not announced (yet): the source may know a 64-hex name, or a short name from a lazily read index
        const found = this.lookupSource(name, key.short);
        if (found === undefined) return this.replyError(unique, Errno.ENOENT);
        if (found === AMBIGUOUS) return this.replyError(unique, Errno.EIO);
        nodeid = found;
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

  /** SEEK_DATA / SEEK_HOLE from the content's extents (content-seek.ts). */
  private onLseek(b: Buffer, unique: number): void {
    const i = readU64(b, 16) - FIRST_FILE_ID;
    const hex = this.nodeHex[i];
    if (i < 0 || hex === undefined) return this.replyError(unique, i < 0 ? Errno.EISDIR : Errno.ENOENT);
    this.write(this.small, encodeLseekReply(this.small, b, unique, this.nodeSize[i]!, this.source.lookup(hex)?.extents));
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
    this.write(this.small, encodeContentStatfs(this.small, unique, 1 + 256 + this.nodeHex.length));
  }
}
