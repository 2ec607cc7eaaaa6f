import { EventEmitter } from 'node:events';
import { closeSync, openSync, readSync, utimes } from 'node:fs';
import { mkdir, readdir, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sha256, type Digest } from '../core/digest.js';
import { AwcError, toAwcError } from '../core/errors.js';

/** Options of a {@link ChunkCache}. */
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
   * disk is slower than the backend. Readers should wait on {@link ChunkCache.writable} before
   * fetching more (ChunkFetcher does), so this limit is a safety net. Default 256 MiB.
   */
  maxPendingBytes?: number;
}

/** Payload of the `'hit'`, `'store'` and `'evict'` events: the chunk and its size in bytes. */
export interface ChunkCacheEvent {
  digest: Digest;
  bytes: number;
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

interface Entry {
  /** File size in bytes (= the chunk's raw length). */
  size: number;
  /** Date.now() when the file's mtime was last set. */
  touched: number;
}

const HEX64 = /^[0-9a-f]{64}$/;
const HEX2 = /^[0-9a-f]{2}$/;
const TMP_PREFIX = '.tmp-';

/**
 * The host chunk cache (DESIGN §2): decompressed chunks on local disk, one cache per host,
 * shared by every workspace and snapshot, within a byte budget with LRU eviction.
 *
 * Layout: the chunk with digest `sha256:<hex>` is the file `<dir>/<hex[0..2]>/<hex>` holding
 * its raw bytes (mode 0600). New files are written as `<dir>/<aa>/.tmp-<pid>-<n>` and renamed
 * into place; leftovers of a crash are removed by `open()`.
 *
 * LRU: an in-memory index (a Map in least-recently-used-first order) of every chunk on disk;
 * `open()` rebuilds it from the files' mtimes, which hits refresh (see touchIntervalMs).
 *
 * Budget: `bytes` (files on disk plus writes in progress) never exceeds `budgetBytes`. A write
 * is admitted only after least recently used chunks were evicted to make room, and it starts
 * only once every unlink started so far has completed, so the sum of file sizes under `dir`
 * never exceeds the budget either. A chunk larger than the budget is not cached. (Bytes are
 * file sizes: file-system block rounding and directory entries are not counted.) Writes wait
 * in memory; at most maxPendingBytes of them (see {@link ChunkCache.writable} for backpressure).
 * One process owns the directory at a time.
 *
 * Integrity: `put` verifies the bytes against the digest before caching (E_INTEGRITY), and
 * every `getSync` verifies what it read: a file that fails is deleted, reported with
 * `'corrupt'`, and never served (the caller sees a miss and refetches).
 *
 * Events (payloads above; never prints): `'hit'`, `'miss'` ({digest}), `'store'`, `'evict'`,
 * `'corrupt'`, `'skip'`, `'touch-error'` ({digest, error}: refreshing an mtime failed).
 *
 * @example
 *   const cache = new ChunkCache({ dir: '/var/lib/awc/host/cache', budgetBytes: 10 * 2 ** 30 });
 *   await cache.open();
 *   const hit = cache.getSync(digest) ?? (await fetchAndPut());
 */
export class ChunkCache extends EventEmitter {
  /** The cache directory. */
  readonly dir: string;
  /** The byte budget (see class doc). */
  readonly budgetBytes: number;

  private readonly dirSlash: string;
  private readonly touchIntervalMs: number;
  private readonly maxPendingBytes: number;
  /** Chunks on disk, least recently used first. */
  private readonly index = new Map<Digest, Entry>();
  /** Verified chunks being written (served from memory until they are on disk). */
  private readonly writing = new Map<Digest, { data: Buffer; done: Promise<boolean> }>();
  /** Unlinks of evicted or dropped files still in progress. */
  private readonly unlinks = new Set<Promise<void>>();
  private readonly madeDirs = new Set<string>();
  /** Bytes of the chunks in `index`. */
  private stored = 0;
  /** Bytes of the writes in progress. */
  private reserved = 0;
  private tmpSeq = 0;
  private readonly writableWaiters: (() => void)[] = [];
  private opened = false;
  private opening: Promise<void> | undefined;

  /** @throws E_USAGE when budgetBytes is not a non-negative safe integer. */
  constructor(opts: ChunkCacheOptions) {
    super();
    if (!Number.isSafeInteger(opts.budgetBytes) || opts.budgetBytes < 0) {
      throw new AwcError('E_USAGE', `invalid cache budget ${opts.budgetBytes} (bytes)`);
    }
    this.dir = opts.dir;
    this.dirSlash = opts.dir.endsWith('/') ? opts.dir : `${opts.dir}/`;
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
    const found: { digest: Digest; size: number; mtimeMs: number }[] = [];
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      for (const aa of await readdir(this.dir)) {
        if (!HEX2.test(aa)) continue;
        const sub = join(this.dir, aa);
        let names: string[];
        try {
          names = await readdir(sub);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') continue;
          throw err;
        }
        this.madeDirs.add(aa);
        await Promise.all(
          names.map(async (name) => {
            const path = join(sub, name);
            if (name.startsWith(TMP_PREFIX)) {
              await unlink(path).catch(() => undefined);
              return;
            }
            if (!HEX64.test(name) || name.slice(0, 2) !== aa) return;
            const st = await stat(path);
            if (st.isFile()) found.push({ digest: `sha256:${name}`, size: st.size, mtimeMs: st.mtimeMs });
          }),
        );
      }
    } catch (err) {
      throw toAwcError(err);
    }
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

  /** True when the chunk is on disk or being written (a later getSync may still find it corrupt). */
  has(digest: Digest): boolean {
    return this.index.has(digest) || this.writing.has(digest);
  }

  /**
   * The chunk's raw bytes when cached, read synchronously and verified against the digest;
   * undefined on a miss. A file that fails verification (or cannot be read) is deleted and
   * reported with `'corrupt'`, then treated as a miss. A hit makes the chunk most recently used.
   * The Buffer may be shared with other callers (a chunk still being written is served from
   * memory): treat it as read-only.
   * @throws E_INTERNAL before open().
   */
  getSync(digest: Digest): Buffer | undefined {
    this.checkOpen();
    const e = this.index.get(digest);
    if (e === undefined) {
      const w = this.writing.get(digest);
      if (w) {
        this.emit('hit', { digest, bytes: w.data.length } satisfies ChunkCacheEvent);
        return w.data;
      }
      this.emit('miss', { digest });
      return undefined;
    }
    const path = this.pathOf(digest);
    let data: Buffer;
    let got = 0;
    try {
      const fd = openSync(path, 'r');
      try {
        data = Buffer.allocUnsafe(e.size);
        while (got < e.size) {
          const n = readSync(fd, data, got, e.size - got, got);
          if (n === 0) break;
          got += n;
        }
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      return this.corrupt(digest, e, missing ? 'missing' : 'io', missing ? undefined : err);
    }
    if (got !== e.size) return this.corrupt(digest, e, 'size');
    if (sha256(data) !== digest) return this.corrupt(digest, e, 'digest');
    this.index.delete(digest);
    this.index.set(digest, e);
    const now = Date.now();
    if (now - e.touched >= this.touchIntervalMs) {
      e.touched = now;
      const t = now / 1000;
      utimes(path, t, t, (err) => {
        if (err && err.code !== 'ENOENT') this.emit('touch-error', { digest, error: err });
      });
    }
    this.emit('hit', { digest, bytes: e.size } satisfies ChunkCacheEvent);
    return data;
  }

  /**
   * Caches a chunk: verifies `data` against `digest`, evicts least recently used chunks until
   * it fits, then writes it (temporary file + rename). Until the write completes the chunk is
   * served from memory, so `data` must not be modified afterwards. A chunk already cached is
   * only made most recently used.
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
      if (!opts.verified) {
        const got = sha256(data);
        if (got !== digest) {
          throw new AwcError('E_INTEGRITY', `chunk ${digest} failed verification on its way into the cache (got ${got})`, { details: { expected: digest, got } });
        }
      }
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
    const size = data.length;
    if (size > this.budgetBytes) {
      this.emit('skip', { digest, bytes: size, reason: 'too-big' } satisfies ChunkCacheSkipEvent);
      return Promise.resolve(false);
    }
    if (this.reserved > 0 && this.reserved + size > this.maxPendingBytes) {
      this.emit('skip', { digest, bytes: size, reason: 'backlog' } satisfies ChunkCacheSkipEvent);
      return Promise.resolve(false);
    }
    while (this.stored + this.reserved + size > this.budgetBytes && this.index.size > 0) this.evictOldest();
    if (this.stored + this.reserved + size > this.budgetBytes) {
      this.emit('skip', { digest, bytes: size, reason: 'no-room' } satisfies ChunkCacheSkipEvent);
      return Promise.resolve(false);
    }
    this.reserved += size;
    // Start writing only after every unlink started so far is done: the disk never holds
    // more than the budget, even while evicted files are still being removed.
    const before = this.unlinks.size > 0 ? Promise.all(this.unlinks) : undefined;
    const done = this.write(digest, data, before);
    this.writing.set(digest, { data, done });
    return done;
  }

  /** Removes one chunk from the cache (its file is unlinked asynchronously). @returns whether it was on disk. */
  delete(digest: Digest): boolean {
    const e = this.index.get(digest);
    if (!e) return false;
    this.drop(digest, e);
    return true;
  }

  /** Resolves once every write and unlink in progress has settled (failures are ignored here). */
  async idle(): Promise<void> {
    while (this.writing.size > 0 || this.unlinks.size > 0) {
      await Promise.allSettled([...this.unlinks, ...[...this.writing.values()].map((w) => w.done)]);
    }
  }

  /** Path of a chunk's file: `<dir>/<hex[0..2]>/<hex>`. */
  pathOf(digest: Digest): string {
    const hex = digest.slice(7);
    return `${this.dirSlash}${hex.slice(0, 2)}/${hex}`;
  }

  // ---------------------------------------------------------------------------------------

  private checkOpen(): void {
    if (!this.opened) throw new AwcError('E_INTERNAL', 'ChunkCache used before open()');
  }

  /** Writes a reserved chunk; moves its bytes from `reserved` to `stored` in one step when it is on disk. */
  private async write(digest: Digest, data: Buffer, before: Promise<unknown> | undefined): Promise<boolean> {
    const size = data.length;
    const hex = digest.slice(7);
    const aa = hex.slice(0, 2);
    const sub = join(this.dir, aa);
    const tmp = join(sub, `${TMP_PREFIX}${process.pid}-${++this.tmpSeq}`);
    try {
      if (before) await before;
      if (!this.madeDirs.has(aa)) {
        await mkdir(sub, { recursive: true, mode: 0o700 });
        this.madeDirs.add(aa);
      }
      await writeFile(tmp, data, { mode: 0o600, flag: 'wx' });
      await rename(tmp, join(sub, hex));
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      this.unreserve(digest, size);
      throw toAwcError(err);
    }
    this.unreserve(digest, size);
    this.index.set(digest, { size, touched: Date.now() });
    this.stored += size;
    this.emit('store', { digest, bytes: size } satisfies ChunkCacheEvent);
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
    this.emit('evict', { digest, bytes: e.size } satisfies ChunkCacheEvent);
  }

  /** Forgets a chunk and unlinks its file; later writes wait for the unlink (see put). */
  private drop(digest: Digest, e: Entry): void {
    this.index.delete(digest);
    this.stored -= e.size;
    const p: Promise<void> = unlink(this.pathOf(digest)).then(
      () => undefined,
      () => undefined, // ENOENT or worse: nothing more we can do; the entry is gone either way
    );
    this.unlinks.add(p);
    void p.then(() => this.unlinks.delete(p));
  }

  private corrupt(digest: Digest, e: Entry, reason: ChunkCacheCorruptEvent['reason'], error?: unknown): undefined {
    this.drop(digest, e);
    this.emit('corrupt', { digest, reason, error } satisfies ChunkCacheCorruptEvent);
    this.emit('miss', { digest });
    return undefined;
  }
}
