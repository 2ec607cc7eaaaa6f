import { EventEmitter } from 'node:events';
import { sha256, type Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { ChunkFiles } from './chunk-files.js';
import { MemoryTier } from './memory-tier.js';
import { WriteBehind } from './write-behind.js';

/** Options of a `ChunkCache`. */
export interface ChunkCacheOptions {
  /** Directory owned by this cache (created by `open()`); one process at a time. */
  dir: string;
  /** Most bytes of chunk files the cache keeps on disk (sum of file sizes, temporary files included). */
  budgetBytes: number;
  /**
   * A hit refreshes the file's mtime (so LRU order survives a restart) at most once per this
   * many ms per chunk; default 60 000. 0 refreshes on every hit.
   */
  touchIntervalMs?: number;
  /**
   * Most bytes of chunks waiting to be written (held in memory meanwhile); a put beyond it is
   * skipped (`'skip'`, reason `'backlog'`) rather than let memory grow without bound when the
   * disk is slower than the backend. Readers should wait on `ChunkCache.writable` before
   * fetching more (ChunkFetcher does), so this limit is a safety net. Default 256 MiB.
   */
  maxPendingBytes?: number;
  /**
   * Write-behind (see class doc): a chunk put in the cache is written to disk only once no
   * chunk has been put for this many ms (the burst of misses that brought it is over), or
   * once writeBehindBytes wait. Default 50; 0 writes at once.
   */
  writeBehindMs?: number;
  /** Most bytes of chunks waiting for a quiet moment before writes start anyway (write-behind); default maxPendingBytes / 4. */
  writeBehindBytes?: number;
  /** Most chunk files being written at once (each is open, write, close and rename in the thread pool); default 2. */
  maxConcurrentWrites?: number;
  /**
   * Most bytes of chunks kept in the memory tier (see class doc): chunks read ahead of any
   * request (`ChunkCache.remember`), least recently added first out. Default 64 MiB;
   * 0 disables the tier.
   */
  memoryBytes?: number;
}

/** Payload of the `'hit'`, `'store'` and `'evict'` events: the chunk and its size in bytes. */
export interface ChunkCacheEvent {
  digest: Digest;
  bytes: number;
  /** On `'hit'`: served from memory (the memory tier or a write in progress), not read from disk. */
  memory?: boolean;
}

/** Counters of a `ChunkCache` (monotonic). */
export interface ChunkCacheStats {
  /** Hits served from memory (the memory tier or a write in progress). */
  memoryHits: number;
  /** Hits read from disk (and verified). */
  diskHits: number;
  /** Chunks of the memory tier (read ahead) that were asked for, and then queued for disk. */
  readAheadHits: number;
  /** Chunks of the memory tier dropped before anyone asked for them (`'memory-evict'`: read ahead in vain). */
  readAheadWasted: number;
}

/** Payload of the `'corrupt'` event: a cached file that failed verification (or vanished) and was dropped. */
export interface ChunkCacheCorruptEvent {
  digest: Digest;
  /** `'digest'`: bytes do not match; `'size'`: file shorter than recorded; `'missing'`: file gone; `'io'`: read failed. */
  reason: 'digest' | 'size' | 'missing' | 'io';
  error?: unknown;
}

/** Payload of the `'skip'` event: a verified chunk that `put` did not cache, and why. */
export interface ChunkCacheSkipEvent {
  digest: Digest;
  bytes: number;
  /**
   * `'too-big'`: larger than the whole budget; `'no-room'`: the budget is taken by writes in
   * progress; `'backlog'`: maxPendingBytes of writes are already waiting.
   */
  reason: 'too-big' | 'no-room' | 'backlog';
}

/** Payload of the `'miss'` event. */
export interface ChunkCacheMissEvent {
  digest: Digest;
}

/** Payload of the `'touch-error'` and `'write-error'` events: a chunk and the file system's error. */
export interface ChunkCacheErrorEvent {
  digest: Digest;
  error: unknown;
}

/** The events of a `ChunkCache` (typed `EventEmitter` map; payloads above). */
export type ChunkCacheEvents = {
  hit: [ChunkCacheEvent];
  miss: [ChunkCacheMissEvent];
  store: [ChunkCacheEvent];
  evict: [ChunkCacheEvent];
  corrupt: [ChunkCacheCorruptEvent];
  skip: [ChunkCacheSkipEvent];
  'memory-evict': [ChunkCacheEvent];
  'touch-error': [ChunkCacheErrorEvent];
  'write-error': [ChunkCacheErrorEvent];
};

interface Entry {
  /** File size in bytes (= the chunk's raw length). */
  size: number;
  /** Date.now() when the file's mtime was last set. */
  touched: number;
}

/**
 * The host chunk cache (docs/explanation/design.md#chunk-cache): decompressed chunks on local disk, one cache per host,
 * shared by every workspace and snapshot, within a byte budget with LRU eviction.
 *
 * Layout (ChunkFiles): the chunk with digest `sha256:<hex>` is the file `<dir>/<hex[0..2]>/<hex>`
 * holding its raw bytes (mode 0600). New files are written as `<dir>/<aa>/.tmp-<pid>-<n>` and
 * renamed into place; leftovers of a crash are removed by `open()`.
 *
 * LRU: an in-memory index (a Map in least-recently-used-first order) of every chunk on disk;
 * `open()` rebuilds it from the files' mtimes, which hits refresh (see touchIntervalMs).
 *
 * Write-behind (WriteBehind): writing thousands of small files while the misses that brought
 * their chunks keep coming competes with answering them. So `put` admits a chunk at once
 * (budget, evictions, served from memory meanwhile) but its file is written once no chunk
 * has been put for writeBehindMs, or while more than writeBehindBytes wait, or when the
 * writes in progress hold a quarter of the budget (a small cache writes through), or when
 * `idle()` is awaited; maxConcurrentWrites at a time, in the order they were put.
 *
 * Budget: `bytes` (files on disk plus writes in progress) never exceeds `budgetBytes`. A write
 * is admitted only after least recently used chunks were evicted to make room, and it starts
 * only once every unlink started so far has completed, so the sum of file sizes under `dir`
 * never exceeds the budget either. A chunk larger than the budget is not cached. (Bytes are
 * file sizes: file-system block rounding and directory entries are not counted.) Writes wait
 * in memory; at most maxPendingBytes of them (see {@link ChunkCache.writable} for backpressure).
 * One process owns the directory at a time.
 *
 * Memory tier (MemoryTier): verified chunks read ahead of any request ({@link remember}: the rest of a pack
 * window the fetcher read for a miss), at most memoryBytes of them, not on disk. `getSync`
 * serves them synchronously; the first hit moves the chunk to the disk cache (`put`: it is
 * then served from memory until its write completes), so the disk cache only ever holds
 * chunks that were asked for. Chunks never asked for leave, oldest first, when the tier is
 * full (`'memory-evict'`). A chunk is in at most one of: the memory tier, the writes in
 * progress, the disk index. The tier is not counted in `bytes` (the disk budget).
 *
 * Integrity: `put` and `remember` verify the bytes against the digest before keeping them
 * (E_INTEGRITY), unless the caller has just verified them itself, and every `getSync` of a
 * file verifies what it read: a file that fails is deleted, reported with `'corrupt'`, and
 * never served (the caller sees a miss and refetches). Chunks in memory were verified on the
 * way in and are served as they are.
 *
 * Events (payloads above; never prints): `'hit'`, `'miss'` ({digest}), `'store'`, `'evict'`,
 * `'corrupt'`, `'skip'`, `'memory-evict'` (ChunkCacheEvent), `'touch-error'` ({digest, error}: refreshing an
 * mtime failed), `'write-error'` ({digest, error}: a disk write started by `getSync` for a
 * read-ahead chunk failed; nothing was cached).
 *
 * @example
 *   const cache = new ChunkCache({ dir: '/var/lib/awc/host/cache', budgetBytes: 10 * 2 ** 30 });
 *   await cache.open();
 *   const hit = cache.getSync(digest) ?? (await fetchAndPut());
 */
export class ChunkCache extends EventEmitter<ChunkCacheEvents> {
  /** The cache directory. */
  readonly dir: string;
  /** The byte budget (see class doc). */
  readonly budgetBytes: number;
  /** Most bytes held by the memory tier (see class doc). */
  readonly memoryBytes: number;
  /** Counters (see ChunkCacheStats); live. */
  readonly stats: ChunkCacheStats = { memoryHits: 0, diskHits: 0, readAheadHits: 0, readAheadWasted: 0 };

  private readonly files: ChunkFiles;
  private readonly touchIntervalMs: number;
  private readonly maxPendingBytes: number;
  /** Chunks on disk, least recently used first. */
  private readonly index = new Map<Digest, Entry>();
  /** Verified chunks being written (served from memory until they are on disk). */
  private readonly writing = new Map<Digest, { data: Buffer; done: Promise<boolean> }>();
  /** The memory tier (read-ahead chunks), oldest first. */
  private readonly mem: MemoryTier;
  /** Unlinks of evicted or dropped files still in progress. */
  private readonly unlinks = new Set<Promise<void>>();
  /** Writes cancelled by `delete` before their turn came. */
  private readonly cancelled = new Set<Digest>();
  /** Bytes of the chunks in `index`. */
  private stored = 0;
  /** Bytes of the writes in progress. */
  private reserved = 0;
  private readonly writes: WriteBehind;
  private readonly writableWaiters: (() => void)[] = [];
  private opened = false;
  private opening: Promise<void> | undefined;

  /** @throws E_USAGE when budgetBytes or memoryBytes is not a non-negative safe integer. */
  constructor(opts: ChunkCacheOptions) {
    super();
    if (!Number.isSafeInteger(opts.budgetBytes) || opts.budgetBytes < 0) {
      throw new AwcError('E_USAGE', `invalid cache budget ${opts.budgetBytes} (bytes)`);
    }
    const memoryBytes = opts.memoryBytes ?? 64 * 1024 * 1024;
    if (!Number.isSafeInteger(memoryBytes) || memoryBytes < 0) {
      throw new AwcError('E_USAGE', `invalid memory tier size ${memoryBytes} (bytes)`);
    }
    this.memoryBytes = memoryBytes;
    const maxWrites = opts.maxConcurrentWrites ?? 2;
    const writeBehindMs = opts.writeBehindMs ?? 50;
    const writeBehindBytes = opts.writeBehindBytes ?? Math.floor((opts.maxPendingBytes ?? 256 * 1024 * 1024) / 4);
    if (!Number.isSafeInteger(maxWrites) || maxWrites < 1 || !(writeBehindMs >= 0) || !(writeBehindBytes >= 0)) {
      throw new AwcError(
        'E_USAGE',
        `invalid write options (maxConcurrentWrites ${opts.maxConcurrentWrites}, writeBehindMs ${opts.writeBehindMs}, writeBehindBytes ${opts.writeBehindBytes})`,
      );
    }
    this.dir = opts.dir;
    this.files = new ChunkFiles(opts.dir);
    this.mem = new MemoryTier(memoryBytes, (digest, old) => {
      this.stats.readAheadWasted++;
      this.emit('memory-evict', { digest, bytes: old.length });
    });
    // a write starts once the burst is over, or past writeBehindBytes, or at once when the
    // writes in progress hold a quarter of the budget (a small cache writes through)
    this.writes = new WriteBehind({
      maxWrites,
      quietMs: writeBehindMs,
      maxWaitingBytes: writeBehindBytes,
      writeThrough: () => this.reserved * 4 >= this.budgetBytes,
    });
    this.budgetBytes = opts.budgetBytes;
    this.touchIntervalMs = opts.touchIntervalMs ?? 60_000;
    this.maxPendingBytes = opts.maxPendingBytes ?? 256 * 1024 * 1024;
  }

  /**
   * Creates the directory if needed, indexes the chunk files already there (oldest mtime =
   * least recently used), removes temporary leftovers, and evicts until within the budget.
   * Files whose names are not chunk names are left alone and not counted. Idempotent.
   * @throws E_PERMISSION / E_INTERNAL when the directory cannot be created or read.
   */
  open(): Promise<void> {
    this.opening ??= this.scan();
    return this.opening;
  }

  private async scan(): Promise<void> {
    const found = await this.files.scan();
    found.sort((a, b) => a.mtimeMs - b.mtimeMs);
    for (const f of found) {
      this.index.set(f.digest, { size: f.size, touched: f.mtimeMs });
      this.stored += f.size;
    }
    this.opened = true;
    while (this.stored > this.budgetBytes) this.evictOldest();
    await this.idle();
  }

  /** Bytes accounted against the budget: chunk files on disk plus writes in progress. */
  get bytes(): number {
    return this.stored + this.reserved;
  }

  /** Bytes of chunks waiting to be written (held in memory). */
  get pendingBytes(): number {
    return this.reserved;
  }

  /**
   * Backpressure for fetchers: undefined when fewer than maxPendingBytes / 2 bytes wait to be
   * written, else a Promise that resolves once they have drained below that (never rejects).
   */
  writable(): Promise<void> | undefined {
    if (this.reserved < this.maxPendingBytes / 2) return undefined;
    return new Promise<void>((resolve) => this.writableWaiters.push(resolve));
  }

  /** Number of chunks on disk (writes in progress excluded). */
  get count(): number {
    return this.index.size;
  }

  /** Bytes of chunks held by the memory tier (at most memoryBytes; writes in progress excluded). */
  get memoryUsed(): number {
    return this.mem.bytes;
  }

  /** Number of chunks held by the memory tier. */
  get memoryCount(): number {
    return this.mem.count;
  }

  /**
   * Records a use of a chunk whose bytes were served elsewhere (the content FUSE server's
   * arena), without reading it: a chunk of the memory tier moves to disk as on a hit; a chunk
   * on disk becomes most recently used (its file is not read, so not verified: nothing is
   * returned). Counts as a memory hit (`'hit'` with `memory: true`).
   * @returns false when the cache does not hold the chunk (nothing recorded).
   * @throws E_INTERNAL before open().
   */
  markUsed(digest: Digest): boolean {
    this.checkOpen();
    const e = this.index.get(digest);
    if (e !== undefined) {
      this.index.delete(digest);
      this.index.set(digest, e);
      this.stats.memoryHits++;
      this.emit('hit', { digest, bytes: e.size, memory: true });
      return true;
    }
    const m = this.mem.get(digest);
    if (m) {
      this.memHit(digest, m, false);
      return true;
    }
    const w = this.writing.get(digest);
    if (w) {
      this.stats.memoryHits++;
      this.emit('hit', { digest, bytes: w.data.length, memory: true });
      return true;
    }
    return false;
  }

  /**
   * The chunk's bytes when it is in the memory tier, else undefined; no side effect (no hit,
   * no event, no move to disk). For a caller that copies read-ahead chunks elsewhere (the
   * content FUSE server's arena). Treat the Buffer as read-only.
   */
  peekMemory(digest: Digest): Buffer | undefined {
    return this.mem.get(digest);
  }

  /**
   * True when the chunk is on disk, being written, or in the memory tier (a later getSync may
   * still find a file corrupt).
   */
  has(digest: Digest): boolean {
    return this.index.has(digest) || this.writing.has(digest) || this.mem.has(digest);
  }

  /**
   * The chunk's raw bytes when cached, read synchronously and verified against the digest;
   * undefined on a miss. A file that fails verification (or cannot be read) is deleted and
   * reported with `'corrupt'`, then treated as a miss. A hit makes the chunk most recently used.
   * A chunk of the memory tier moves to the disk cache on its first hit (see class doc).
   * The Buffer may be shared with other callers (chunks in memory are served as they are):
   * treat it as read-only.
   * @param opts.quiet emit neither `'hit'` nor `'miss'` (a caller looking again, after a miss it
   *   has already reported, at what a read in flight delivered).
   * @throws E_INTERNAL before open().
   */
  getSync(digest: Digest, opts?: { quiet?: boolean }): Buffer | undefined {
    this.checkOpen();
    const e = this.index.get(digest);
    if (e === undefined) {
      const m = this.mem.get(digest);
      if (m) return this.memHit(digest, m, opts?.quiet === true);
      const w = this.writing.get(digest);
      if (w) {
        this.stats.memoryHits++;
        if (!opts?.quiet) this.emit('hit', { digest, bytes: w.data.length, memory: true });
        return w.data;
      }
      if (!opts?.quiet) this.emit('miss', { digest });
      return undefined;
    }
    let data: Buffer;
    try {
      data = this.files.readSync(digest, e.size);
    } catch (err) {
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      return this.corrupt(digest, e, missing ? 'missing' : 'io', missing ? undefined : err, opts?.quiet);
    }
    if (data.length !== e.size) return this.corrupt(digest, e, 'size', undefined, opts?.quiet);
    if (sha256(data) !== digest) return this.corrupt(digest, e, 'digest', undefined, opts?.quiet);
    this.index.delete(digest);
    this.index.set(digest, e);
    const now = Date.now();
    if (now - e.touched >= this.touchIntervalMs) {
      e.touched = now;
      this.files.touch(digest, now, (error) => this.emit('touch-error', { digest, error }));
    }
    this.stats.diskHits++;
    if (!opts?.quiet) this.emit('hit', { digest, bytes: e.size });
    return data;
  }

  /**
   * Keeps a chunk read ahead of any request in the memory tier (no disk write until it is
   * asked for; see class doc), dropping the oldest ones to fit. Verifies `data` against
   * `digest` first unless `opts.verified`. Nothing happens when the chunk is already held
   * anywhere, or is larger than the tier. `data` must not be modified afterwards.
   * @param opts.verified the caller has itself just verified `data` against `digest` (as
   *   decodeBlob does): skips hashing it a second time. Pass it for nothing else.
   * @returns whether the chunk was added.
   * @throws E_INTEGRITY when `data` does not match `digest` (nothing kept); E_INTERNAL before open().
   */
  remember(digest: Digest, data: Buffer, opts: { verified?: boolean } = {}): boolean {
    this.checkOpen();
    if (!opts.verified) verifyOrThrow(digest, data);
    if (data.length > this.memoryBytes || this.has(digest)) return false;
    this.mem.add(digest, data);
    return true;
  }

  /**
   * Caches a chunk: verifies `data` against `digest`, evicts least recently used chunks until
   * it fits, then writes it (temporary file + rename; when, see write-behind in the class
   * doc). Until the write completes the chunk is served from memory, so `data` must not be
   * modified afterwards. A chunk already cached is only made most recently used.
   * @param opts.verified the caller has itself just verified `data` against `digest` (as
   *   decodeBlob does, in ChunkFetcher): skips hashing it a second time. Pass it for nothing else.
   * @returns true once the chunk is on disk (or was already), false when it was not cached
   *   (larger than the budget, the budget is held by writes in progress, or too many bytes
   *   wait to be written; a `'skip'` event says which).
   * @throws (rejects) E_INTEGRITY when `data` does not match `digest` (nothing cached);
   *   E_PERMISSION / E_INTERNAL when writing fails (nothing cached); E_INTERNAL before open().
   */
  put(digest: Digest, data: Buffer, opts: { verified?: boolean } = {}): Promise<boolean> {
    try {
      this.checkOpen();
      if (!opts.verified) verifyOrThrow(digest, data);
    } catch (err) {
      return Promise.reject(err);
    }
    const e = this.index.get(digest);
    if (e) {
      this.index.delete(digest);
      this.index.set(digest, e);
      return Promise.resolve(true);
    }
    const w = this.writing.get(digest);
    if (w) return w.done;
    const m = this.mem.get(digest);
    if (m) this.mem.remove(digest, m);
    const size = data.length;
    if (size > this.budgetBytes) return this.skip(digest, data, 'too-big');
    if (this.reserved > 0 && this.reserved + size > this.maxPendingBytes) return this.skip(digest, data, 'backlog');
    while (this.stored + this.reserved + size > this.budgetBytes && this.index.size > 0) this.evictOldest();
    if (this.stored + this.reserved + size > this.budgetBytes) return this.skip(digest, data, 'no-room');
    this.reserved += size;
    // Start writing only after every unlink started so far is done: the disk never holds
    // more than the budget, even while evicted files are still being removed.
    const before = this.unlinks.size > 0 ? Promise.all(this.unlinks) : undefined;
    const done = this.write(digest, data, before);
    this.writing.set(digest, { data, done });
    return done;
  }

  /** The chunks on disk as [digest, bytes], least recently used first (writes in progress and the memory tier excluded). */
  diskEntries(): [Digest, number][] {
    return Array.from(this.index, ([d, e]) => [d, e.size]);
  }

  /**
   * Removes one chunk from the cache (its file is unlinked asynchronously) and from the memory
   * tier; a write of it still waiting for its turn (write-behind) is cancelled (its `put`
   * resolves false). @returns whether it was on disk.
   */
  delete(digest: Digest): boolean {
    const m = this.mem.get(digest);
    if (m) this.mem.remove(digest, m);
    if (this.writing.has(digest)) this.cancelled.add(digest);
    const e = this.index.get(digest);
    if (!e) return false;
    this.drop(digest, e);
    return true;
  }

  /**
   * Resolves once every write and unlink in progress has settled (failures are ignored here);
   * writes waiting for a quiet moment (write-behind) start at once.
   */
  idle(): Promise<void> {
    return this.writes.flushing(async () => {
      while (this.writing.size > 0 || this.unlinks.size > 0) {
        await Promise.allSettled([...this.unlinks, ...[...this.writing.values()].map((w) => w.done)]);
      }
    });
  }

  /** Path of a chunk's file: `<dir>/<hex[0..2]>/<hex>`. */
  pathOf(digest: Digest): string {
    return this.files.pathOf(digest);
  }

  // ---------------------------------------------------------------------------------------

  private checkOpen(): void {
    if (!this.opened) throw new AwcError('E_INTERNAL', 'ChunkCache used before open()');
  }

  /** A hit in the memory tier: the chunk moves to the disk cache (served from memory until written). */
  private memHit(digest: Digest, data: Buffer, quiet: boolean): Buffer {
    this.stats.memoryHits++;
    this.stats.readAheadHits++;
    if (!quiet) this.emit('hit', { digest, bytes: data.length, memory: true });
    // put takes it out of the tier (also when it skips the write: it has been served, like any fetched chunk)
    this.put(digest, data, { verified: true }).catch((error: unknown) => this.emit('write-error', { digest, error }));
    return data;
  }

  /** A verified chunk `put` did not write: reported (and not kept). */
  private skip(digest: Digest, data: Buffer, reason: ChunkCacheSkipEvent['reason']): Promise<boolean> {
    this.emit('skip', { digest, bytes: data.length, reason });
    return Promise.resolve(false);
  }

  /**
   * Writes a reserved chunk once a write slot is free (maxConcurrentWrites) and every unlink
   * started before it was admitted is done; moves its bytes from `reserved` to `stored` in
   * one step when it is on disk.
   */
  private async write(digest: Digest, data: Buffer, before: Promise<unknown> | undefined): Promise<boolean> {
    const size = data.length;
    await this.writes.turn(size);
    try {
      if (before) await before;
      if (this.cancelled.delete(digest)) {
        this.unreserve(digest, size);
        return false;
      }
      await this.files.write(digest, data);
    } catch (err) {
      this.unreserve(digest, size);
      throw err;
    } finally {
      this.writes.done();
    }
    this.unreserve(digest, size);
    this.index.set(digest, { size, touched: Date.now() });
    this.stored += size;
    this.emit('store', { digest, bytes: size });
    return true;
  }

  private unreserve(digest: Digest, size: number): void {
    this.reserved -= size;
    this.writing.delete(digest);
    if (this.writableWaiters.length > 0 && this.reserved < this.maxPendingBytes / 2) {
      for (const w of this.writableWaiters.splice(0)) w();
    }
  }

  private evictOldest(): void {
    const [digest, e] = this.index.entries().next().value as [Digest, Entry];
    this.drop(digest, e);
    this.emit('evict', { digest, bytes: e.size });
  }

  /** Forgets a chunk and unlinks its file; later writes wait for the unlink (see put). */
  private drop(digest: Digest, e: Entry): void {
    this.index.delete(digest);
    this.stored -= e.size;
    const p = this.files.unlink(digest); // never rejects: the entry is gone either way
    this.unlinks.add(p);
    void p.then(() => this.unlinks.delete(p));
  }

  private corrupt(digest: Digest, e: Entry, reason: ChunkCacheCorruptEvent['reason'], error?: unknown, quiet = false): undefined {
    this.drop(digest, e);
    this.emit('corrupt', { digest, reason, error });
    if (!quiet) this.emit('miss', { digest });
    return undefined;
  }
}

/** @throws E_INTEGRITY when `data` does not hash to `digest`. */
function verifyOrThrow(digest: Digest, data: Buffer): void {
  const got = sha256(data);
  if (got !== digest) {
    throw new AwcError('E_INTEGRITY', `chunk ${digest} failed verification on its way into the cache (got ${got})`, {
      details: { expected: digest, got },
    });
  }
}
