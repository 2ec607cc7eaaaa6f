import { EventEmitter } from 'node:events';
import { constants as C } from 'node:fs';
import { lstat, open, readFile, readdir, rename, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { Extent } from '../../core/sparse.js';
import { isShortContentName, shortContentName } from '../../core/content-name.js';
import { mkdirPrivate, writeFilePrivate } from '../../core/private-fs.js';
import { removeTree } from '../../core/remove-tree.js';
import { runCommand } from '../mount/mount-commands.js';
import { InotifyWatch, IN_OPEN, IN_Q_OVERFLOW } from '../sys/inotify.js';
import { WriteBehind } from './write-behind.js';
import { closeFd, openFd, readFully } from '../../store/content/fd-io.js';
import type * as Xattr from 'fs-xattr';
import type { Digest } from '../../core/digest.js';
import { lazyRequire } from '../../core/lazy-require.js';

/** fs-xattr (a native addon), loaded on first use. */
const xattr = lazyRequire<typeof Xattr>('fs-xattr');
/** The xattr of a CACHE file that names the object's first chunk (the host sweep asks the catalog about it). */
const CHUNK_XATTR = 'user.awc.chunk';

/** What the object cache fills from: the content FUSE server's source (CachedContentSource). */
export interface ObjectCacheSource {
  /** Size in bytes of the content object (64-hex digest) and a sparse one's extents; undefined when unknown here. */
  lookup(hex: string): { size: number; extents?: Extent[] } | undefined;
  /** Bytes [offset, offset + length) of the object, each chunk verified against its digest; a Buffer or a Promise of one. */
  read(hex: string, offset: number, length: number): Buffer | Promise<Buffer>;
  /** The object's chunks (digests, sizes in bytes); undefined when unknown. */
  chunksOf?(hex: string): readonly { digest: Digest }[] | undefined;
}

/** An object in CACHE as the host sweep sees it: its short name, its first chunk (undefined: not recorded) and its allocated bytes. */
export interface CachedObject {
  short: string;
  chunk: Digest | undefined;
  bytes: number;
}

/** Options of an {@link ObjectCache}. */
export interface ObjectCacheOptions {
  /** CACHE: the flat directory of whole objects under their short names (a data-only lower of every overlay). */
  dir: string;
  /** Where fills are written before they get their name (same file system as `dir`). */
  stagingDir: string;
  /** The marker of fills not yet synced (holds the boot id; see docs/explanation/host-cache-lower.md, rule 6). */
  markerFile: string;
  source: ObjectCacheSource;
  /** Bytes the cache may take on disk now (allocated bytes, removed-but-maybe-bound ones included); read before each trim. */
  budgetBytes(): number;
  /** The ids of the workspace mounts live on the host now (their overlays may bind CACHE files). */
  liveMounts(): Iterable<string>;
  /** False when another object answers to `hex`'s short name on this host (never cached: rule 5). */
  nameIsFree(hex: string): boolean;
  /** Largest object filled, in bytes (default 1 GiB). */
  maxObjectBytes?: number;
  /**
   * Fills wait until nothing was queued for this many ms, or 64 MiB of objects wait (default 0:
   * at once, while the object's chunks are still in memory, so the chunk cache's own writes of
   * them, which wait behind a quiet period, are cancelled rather than done twice).
   */
  quietMs?: number;
  /** How often the inotify queue is read for recency, in ms (default 1000). */
  pollMs?: number;
  /** The boot id of this boot (default: /proc/sys/kernel/random/boot_id); tests pass another to act a reboot. */
  bootId?: string;
}

/** Counters of an {@link ObjectCache} (monotonic). */
export interface ObjectCacheStats {
  /** Objects published to CACHE. */
  published: number;
  /** Objects removed to stay within the budget. */
  evicted: number;
  /** Opens of CACHE files by the kernel (overlayfs reading an object without FUSE), from inotify. */
  kernelOpens: number;
  /** Fills that failed (the error is the `'fill-error'` event). */
  fillErrors: number;
  /** Times the inotify queue overflowed (recency events lost). */
  overflows: number;
  /** Fills not done because the budget had no room (every object was possibly bound: rule 4). */
  skipped: number;
}

/** Events of an {@link ObjectCache}. */
export type ObjectCacheEvents = {
  /** An object got its name in CACHE (`bytes`: allocated on disk). */
  publish: [{ hex: string; short: string; bytes: number }];
  /** An object left CACHE (`reason`: the budget, its short name became ambiguous on this host, or the host sweep found it unreachable). */
  evict: [{ short: string; bytes: number; reason: DropReason }];
  'fill-error': [{ hex: string; error: unknown }];
  /** At open, CACHE was emptied (`reason`: fills of another boot were never synced). */
  reset: [{ reason: 'unsynced-boot' }];
};

type DropReason = 'budget' | 'ambiguous' | 'unreachable';

interface Entry {
  /** Allocated bytes (st_blocks × 512). */
  bytes: number;
  /** The kernel opened it (inotify), so an overlay inode may be bound to it (rule 4); true for what a scan found. */
  opened: boolean;
}

/** Bytes read per step of a fill (4 MiB). */
const PIECE = 4 * 1024 * 1024;
/** Objects whose reads are tracked until they are read whole (oldest forgotten beyond it). */
const MAX_TRACKED = 65_536;
/**
 * Fills running at once: a fill is a few file system calls in the thread pool (open, write,
 * xattr, stat, close, link, unlink), so one at a time fell behind a cold read of small files
 * (then the chunks it reads were already written to the chunk cache's disk, to be read back,
 * verified and deleted).
 */
const FILLS_AT_ONCE = 1;
/** Fills are synced (syncfs) this long after the last one (ms). */
const SYNC_AFTER_MS = 2000;

/**
 * The host object cache: CACHE of docs/explanation/host-cache-lower.md, a flat directory of
 * whole content objects under their short names, mounted as the first data-only lower of every
 * overlay (`lowerdir=LAYER::CACHE::CONTENT`), so overlayfs reads an object the host holds from
 * local disk without a FUSE round trip. This class keeps the rules of that page:
 *
 * 1. a name has one content, forever: a fill is written in `stagingDir` and published by
 *    rename(2) (only this daemon writes CACHE, and never over another object's name); nothing
 *    in CACHE is ever written again;
 * 2. adding is always safe;
 * 3. removing is safe while the FUSE server serves the name: it never forgets an object while
 *    the daemon lives, and {@link start} (after the daemon adopted its mounts) enables removal;
 * 4. removal frees space only once no overlay inode is bound to the file: a removed file's
 *    bytes stay charged until every mount live at its removal has ended (`liveMounts`; a
 *    lazily detached mount is no longer counted, so its bound files are undercounted);
 * 5. an ambiguous short name is never filled, and is removed when it becomes so ({@link remove});
 * 6. after an OS crash CACHE is not trusted: fills are synced in batches (syncfs), and a marker
 *    holding the boot id is kept while some are not; a marker of another boot empties CACHE at open.
 *
 * Filled only with whole objects read through the source (each chunk verified against its
 * digest): {@link noteRead} counts reads through FUSE and queues an object read whole;
 * {@link request} queues one at once (an object served whole from the arena, a warm-up).
 * Fills run one at a time behind a quiet period (WriteBehind). Recency: FUSE reads, and the
 * kernel's opens of CACHE files through inotify (IN_OPEN), read every `pollMs`. Least recently
 * used first out, within `budgetBytes()`. Emits typed events; never prints.
 */
export class ObjectCache extends EventEmitter<ObjectCacheEvents> {
  readonly stats: ObjectCacheStats = { published: 0, evicted: 0, kernelOpens: 0, fillErrors: 0, overflows: 0, skipped: 0 };
  /** Short name → entry, least recently used first. */
  private readonly entries = new Map<string, Entry>();
  /** Bytes read through FUSE per object not yet in CACHE (hex → bytes). */
  private readonly reads = new Map<string, number>();
  private readonly queued = new Set<string>();
  /** Opens of CACHE files by readRange whose inotify event is still to come (not the kernel's: not counted as kernelOpens). */
  private readonly ownOpens = new Map<string, number>();
  private readonly ambiguous = new Set<string>();
  /** Removed files' bytes, charged until the mounts live at their removal have ended. */
  private readonly removed: { bytes: number; mounts: Set<string> }[] = [];
  private readonly fills: WriteBehind;
  private readonly maxObject: number;
  private stored = 0;
  private started = false;
  private closed = false;
  private running = 0;
  private tmpSeq = 0;
  private unsynced = false;
  private syncTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private watch: InotifyWatch | undefined;
  private readonly idleWaiters: (() => void)[] = [];

  /** @throws E_USAGE for a non-positive maxObjectBytes */
  constructor(private readonly opts: ObjectCacheOptions) {
    super();
    this.maxObject = opts.maxObjectBytes ?? 2 ** 30;
    if (!(this.maxObject > 0)) throw new AwcError('E_USAGE', `invalid maxObjectBytes ${this.maxObject}`);
    this.fills = new WriteBehind({
      maxWrites: FILLS_AT_ONCE,
      quietMs: opts.quietMs ?? 0,
      maxWaitingBytes: 64 * 2 ** 20,
      writeThrough: () => false,
    });
  }

  /** Allocated bytes of the objects in CACHE. */
  get bytes(): number {
    return this.stored;
  }

  /**
   * Bytes of removed objects still charged (maybe bound by an overlay inode: rule 4): each
   * until none of the mounts that were live at its removal is live any more.
   */
  get removedBytes(): number {
    if (this.removed.length === 0) return 0;
    const live = new Set(this.opts.liveMounts());
    let n = 0;
    for (let i = this.removed.length - 1; i >= 0; i--) {
      const r = this.removed[i];
      for (const m of r.mounts) if (!live.has(m)) r.mounts.delete(m);
      if (r.mounts.size === 0) this.removed.splice(i, 1);
      else n += r.bytes;
    }
    return n;
  }

  /** Fills queued or running. */
  get pendingFills(): number {
    return this.running;
  }

  /** Number of objects in CACHE. */
  get count(): number {
    return this.entries.size;
  }

  /** True when CACHE holds the object with this short name. */
  has(short: string): boolean {
    return this.entries.has(short);
  }

  /**
   * Creates the directories (0700), empties CACHE when the marker names another boot (rule 6),
   * removes staging leftovers, indexes what CACHE holds and starts reading inotify. Call before
   * any overlay is mounted with CACHE.
   * @throws E_PERMISSION / E_IO (the file system's error, mapped) when the directories cannot be made or read
   */
  async open(): Promise<void> {
    try {
      await mkdirPrivate(this.opts.stagingDir);
      await removeTree(this.opts.stagingDir);
      await mkdirPrivate(this.opts.stagingDir);
      await this.resetAfterCrash();
      await mkdirPrivate(this.opts.dir);
      await this.scan();
    } catch (err) {
      throw toAwcError(err);
    }
    this.watch = new InotifyWatch(this.opts.dir, IN_OPEN);
    this.pollTimer = setInterval(() => this.poll(), this.opts.pollMs ?? 1000).unref();
  }

  /** Enables fills and removals (rule 3: call once every overlay this daemon adopted has its layer registered). */
  start(): void {
    this.started = true;
    this.trim();
  }

  /**
   * Counts `bytes` read through FUSE of the object `hex` of `size` bytes (the data bytes of a
   * sparse one); once as many bytes as it has were read, it is queued for a fill. Refreshes
   * the recency of an object already in CACHE. O(1).
   */
  noteRead(hex: string, size: number, bytes: number): void {
    if (this.touch(shortContentName(hex)) || this.queued.has(hex)) return;
    const n = (this.reads.get(hex) ?? 0) + bytes;
    if (n < size) {
      if (this.reads.size >= MAX_TRACKED && !this.reads.has(hex)) this.reads.delete(this.reads.keys().next().value!);
      this.reads.set(hex, n);
      return;
    }
    this.reads.delete(hex);
    this.request(hex);
  }

  /** Queues a fill of the object `hex` (64 hex) unless CACHE has it or it is queued. */
  request(hex: string): void {
    if (!this.started || this.closed || this.queued.has(hex) || this.touch(shortContentName(hex))) return;
    const f = this.opts.source.lookup(hex);
    if (!f || f.size === 0 || f.size > this.maxObject) return;
    this.queued.add(hex);
    this.running++;
    void this.fills.turn(f.size).then(() =>
      this.fill(hex)
        .catch((error: unknown) => {
          this.stats.fillErrors++;
          this.emit('fill-error', { hex, error });
        })
        .finally(() => {
          this.fills.done();
          this.queued.delete(hex);
          if (--this.running === 0) for (const w of this.idleWaiters.splice(0)) w();
        }),
    );
  }

  /** Resolves when no fill is queued or running (fills waiting for a quiet moment start at once). */
  idle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return this.fills.flushing(() => new Promise<void>((r) => this.idleWaiters.push(r)));
  }

  /** Removes the object with this short name, now and for good (rule 5: its name became ambiguous on this host). */
  remove(short: string): void {
    this.ambiguous.add(short);
    this.drop(short, 'ambiguous');
  }

  /**
   * The objects in CACHE for the host sweep (src/service/gc/host-sweep.ts), each with the
   * first chunk recorded at its fill (an object whose first chunk has no blob row any more is
   * reachable from no snapshot: gc deleted the pack). Reads one xattr per object.
   */
  async sweepEntries(): Promise<CachedObject[]> {
    const out: CachedObject[] = [];
    for (const [short, e] of [...this.entries]) {
      const v = await xattr()
        .getAttribute(join(this.opts.dir, short), CHUNK_XATTR)
        .catch(() => undefined);
      out.push({ short, chunk: v?.length === 32 ? (`sha256:${v.toString('hex')}` as Digest) : undefined, bytes: e.bytes });
    }
    return out;
  }

  /**
   * Removes an object the host sweep found reachable from no snapshot (no mount can be reading
   * it; its bytes are charged while a live mount may hold it bound, rule 4).
   * @returns false when CACHE no longer holds it
   */
  dropUnreachable(short: string): boolean {
    if (!this.entries.has(short)) return false;
    this.drop(short, 'unreachable');
    return true;
  }

  /**
   * Bytes [offset, offset + length) of the object `hex` from its file in CACHE (a bound
   * overlay inode's read through FUSE: CachedContentSource.readWholeFrom). Undefined when CACHE
   * does not hold it; a Promise of undefined when the file went meanwhile. Never rejects.
   */
  readRange(hex: string, offset: number, length: number): Promise<Buffer | undefined> | undefined {
    const short = shortContentName(hex);
    // (the name is the object's as the kernel's lookup through CACHE takes it: rule 5 keeps ambiguous names out)
    if (!this.entries.has(short)) return undefined;
    this.ownOpens.set(short, (this.ownOpens.get(short) ?? 0) + 1);
    return readFileRange(join(this.opts.dir, short), offset, length).catch(() => {
      // not opened (it went meanwhile): no event of ours will come
      const n = this.ownOpens.get(short) ?? 0;
      if (n > 1) this.ownOpens.set(short, n - 1);
      else this.ownOpens.delete(short);
      return undefined;
    });
  }

  /** Removes least recently used objects until the budget holds (e.g. after the chunk cache grew). */
  enforceBudget(): void {
    this.trim();
  }

  /** Stops: waits for running fills, syncs, removes the marker, closes the inotify watch. Never rejects. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.pollTimer);
    clearTimeout(this.syncTimer);
    await this.idle();
    this.watch?.close();
    await this.sync().catch(() => undefined);
  }

  /** Moves `short` to the most recent end; false when CACHE does not hold it. */
  private touch(short: string): boolean {
    const e = this.entries.get(short);
    if (!e) return false;
    this.entries.delete(short);
    this.entries.set(short, e);
    return true;
  }

  /** Reads the inotify queue: each kernel open of a CACHE file refreshes its recency. */
  private poll(): void {
    let events;
    try {
      events = this.watch?.drain() ?? [];
    } catch {
      return;
    }
    for (const e of events) {
      if ((e.mask & IN_Q_OVERFLOW) !== 0) {
        // events were lost: any object may have been opened
        this.stats.overflows++;
        this.ownOpens.clear();
        for (const entry of this.entries.values()) entry.opened = true;
      } else if ((e.mask & IN_OPEN) !== 0 && this.touch(e.name)) {
        this.entries.get(e.name)!.opened = true;
        const own = this.ownOpens.get(e.name);
        if (own === undefined) this.stats.kernelOpens++;
        else if (own > 1) this.ownOpens.set(e.name, own - 1);
        else this.ownOpens.delete(e.name);
      }
    }
  }

  /** Writes the object to staging and publishes it under its short name. */
  private async fill(hex: string): Promise<void> {
    const short = shortContentName(hex);
    const f = this.opts.source.lookup(hex);
    if (this.closed || !f || this.entries.has(short) || this.ambiguous.has(short) || !this.opts.nameIsFree(hex)) return;
    if (!this.trim(f.size)) {
      this.stats.skipped++;
      return;
    }
    await this.markUnsynced();
    const tmp = join(this.opts.stagingDir, `${short}.${process.pid}.${++this.tmpSeq}`);
    let renamed = false;
    try {
      const fh = await open(tmp, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
      let blocks: number;
      try {
        blocks = await this.writeObject(fh, tmp, hex, f);
      } finally {
        await fh.close();
      }
      if (this.closed || this.ambiguous.has(short) || this.entries.has(short)) return;
      // rename, not link + unlink: only this daemon writes CACHE (it holds the home), and what it
      // may replace is the same object's file on its way out (dropped, its unlink not done yet):
      // the same bytes, so a name still never changes content (rule 1)
      await rename(tmp, join(this.opts.dir, short));
      renamed = true;
      this.entries.set(short, { bytes: blocks, opened: false });
      this.stored += blocks;
      this.stats.published++;
      this.emit('publish', { hex, short, bytes: blocks });
    } finally {
      if (!renamed) await unlink(tmp).catch(() => undefined);
      this.scheduleSync();
    }
  }

  /**
   * Writes the data extents of the object at their offsets (holes stay holes), sets its size,
   * records its first chunk (CHUNK_XATTR) and checks what the file holds. @returns its allocated bytes.
   * @throws E_INTEGRITY when the source returns fewer bytes than asked or the size differs
   */
  private async writeObject(fh: FileHandle, path: string, hex: string, f: { size: number; extents?: Extent[] }): Promise<number> {
    const size = f.size;
    for (const [offset, length] of f.extents ?? [[0, size]]) {
      for (let at = offset; at < offset + length; at += PIECE) {
        const n = Math.min(PIECE, offset + length - at);
        const r = this.opts.source.read(hex, at, n);
        // a synchronous answer may be a view of a scratch buffer the next read overwrites: copy it
        const b = r instanceof Promise ? await r : Buffer.from(r);
        if (b.length !== n) throw new AwcError('E_INTEGRITY', `object ${hex}: ${b.length} bytes at ${at}, expected ${n}`);
        await fh.write(b, 0, n, at);
      }
    }
    if (f.extents) await fh.truncate(size); // a hole at the end
    // its first chunk, 32 raw bytes (small enough to stay in an ext4 inode: no block per object), for the host sweep;
    // on a file system without user xattrs the sweep keeps the object, and the budget removes it in time
    const first = this.opts.source.chunksOf?.(hex)?.[0];
    if (first)
      await xattr()
        .setAttribute(path, CHUNK_XATTR, Buffer.from(first.digest.slice(7), 'hex'))
        .catch(() => undefined);
    const st = await fh.stat();
    if (st.size !== size) throw new AwcError('E_INTEGRITY', `object ${hex}: ${st.size} bytes written, expected ${size}`);
    return st.blocks * 512;
  }

  /**
   * Removes least recently used objects until `extra` more bytes fit in the budget (only once
   * started: rule 3). While a mount is live, an object the kernel opened frees nothing when
   * removed (rule 4), so only objects never opened are removed then.
   * @returns whether `extra` bytes fit now
   */
  private trim(extra = 0): boolean {
    if (!this.started) return false;
    if (this.stored + this.removedBytes + extra <= this.opts.budgetBytes()) return true;
    this.poll(); // the kernel's latest opens first: an object opened a moment ago may be bound (rule 4)
    const live = new Set(this.opts.liveMounts());
    let over = this.stored + this.removedBytes + extra - this.opts.budgetBytes();
    const victims: string[] = [];
    for (const [short, e] of this.entries) {
      if (over <= 0) break;
      if (e.opened && live.size > 0) continue;
      victims.push(short);
      over -= e.bytes;
    }
    for (const short of victims) this.drop(short, 'budget', live);
    return over <= 0;
  }

  /** Unlinks CACHE/<short>; its bytes stay charged while a mount live now may be bound to it (rule 4). */
  private drop(short: string, reason: DropReason, live = new Set(this.opts.liveMounts())): void {
    const e = this.entries.get(short);
    void unlink(join(this.opts.dir, short)).catch(() => undefined);
    if (!e) return;
    this.entries.delete(short);
    this.stored -= e.bytes;
    if (e.opened && live.size > 0) this.removed.push({ bytes: e.bytes, mounts: live });
    if (reason === 'budget') this.stats.evicted++;
    this.emit('evict', { short, bytes: e.bytes, reason });
  }

  /** Before the first fill of a batch: the marker with this boot's id, synced (rule 6). */
  private async markUnsynced(): Promise<void> {
    if (this.unsynced) return;
    this.unsynced = true;
    await writeFilePrivate(this.opts.markerFile, `${await this.bootId()}\n`);
    const fh = await open(this.opts.markerFile, C.O_RDONLY | C.O_NOFOLLOW);
    await fh.sync().finally(() => fh.close());
  }

  /** Syncs the batch of fills SYNC_AFTER_MS after the last one. */
  private scheduleSync(): void {
    clearTimeout(this.syncTimer);
    if (this.closed) return;
    this.syncTimer = setTimeout(() => void this.sync().catch(() => undefined), SYNC_AFTER_MS).unref();
  }

  /** syncfs of CACHE's file system, then the marker goes (unless a fill started meanwhile). */
  private async sync(): Promise<void> {
    if (!this.unsynced || this.running > 0) return;
    const r = await runCommand('sync', ['-f', this.opts.dir]);
    if (r.code !== 0) throw new AwcError('E_IO', `sync -f ${this.opts.dir} failed: ${r.stderr.trim()}`);
    if (this.running > 0) return;
    await unlink(this.opts.markerFile).catch(() => undefined);
    this.unsynced = false;
  }

  /** A marker of another boot: CACHE is renamed away and removed (nothing is mounted with it yet). */
  private async resetAfterCrash(): Promise<void> {
    const marker = await readFile(this.opts.markerFile, 'utf8').catch(() => undefined);
    if (marker === undefined) return;
    if (marker.trim() !== (await this.bootId())) {
      const stale = `${this.opts.dir}.stale-${process.pid}-${Date.now()}`;
      await rename(this.opts.dir, stale).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
      void removeTree(stale).catch(() => undefined);
      this.emit('reset', { reason: 'unsynced-boot' });
    }
    await unlink(this.opts.markerFile);
  }

  /** Indexes CACHE (oldest mtime first); anything that is not a regular file under a short name is removed. */
  private async scan(): Promise<void> {
    const found: { short: string; bytes: number; mtime: number }[] = [];
    for (const name of await readdir(this.opts.dir)) {
      const path = join(this.opts.dir, name);
      const st = await lstat(path);
      if (!isShortContentName(name) || !st.isFile()) await removeTree(path);
      else found.push({ short: name, bytes: st.blocks * 512, mtime: st.mtimeMs });
    }
    found.sort((a, b) => a.mtime - b.mtime);
    for (const f of found) {
      this.entries.set(f.short, { bytes: f.bytes, opened: true });
      this.stored += f.bytes;
    }
  }

  private async bootId(): Promise<string> {
    return this.opts.bootId ?? (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
  }
}

/** `length` bytes at `offset` of the file at `path` (fewer at its end), never through a symlink. */
async function readFileRange(path: string, offset: number, length: number): Promise<Buffer> {
  const fd = await openFd(path, C.O_RDONLY | C.O_NOFOLLOW);
  try {
    const buf = Buffer.allocUnsafe(length);
    const got = await readFully(fd, buf, offset);
    return got === length ? buf : buf.subarray(0, got);
  } finally {
    await closeFd(fd);
  }
}
