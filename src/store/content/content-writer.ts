import { createHash, type Hash } from 'node:crypto';
import { killPoint } from '../../core/kill-point.js';
import { constants as fsc, fstatSync, type BigIntStats } from 'node:fs';
import { AwcError, toAwcError } from '../../core/errors.js';
import { sha256, type Digest } from '../../core/digest.js';
import { Chunker, chunkBuffer, MAX_SIZE } from '../../core/fastcdc.js';
import { encodeRoot, encodeTree, type ChunkRef, type Entry, type RootObject } from '../../core/tree.js';
import type { ObjectStore } from '../object/object-store.js';
import { PackWriter } from '../pack/pack.js';
import type { BlobIndex, BlobKind, BlobLocation, WrittenPack } from '../pack/pack-types.js';
import { closeFd, fstatBig, openFd, readFully, sameFile, sourceError } from './fd-io.js';
import { captureSparseFd, captureSparseStream } from './sparse-capture.js';
import type { Extent } from '../../core/sparse.js';
import { DEFAULT_HASH_WORKERS, HashPool, type HashedChunk, type HashMode, type HashResult } from './hash-pool.js';
import type { Codec } from '../pack/pack-types.js';

/**
 * A second hash over a file's bytes in the same read pass (e.g. git's blob id): called with
 * the size (bytes) the file has when a read starts, it returns a fresh hash already fed with
 * any header; `writeFileFd` returns its hex digest as `also` (of the read that stood).
 */
export type AlsoHash = ((size: number) => Hash) & {
  /**
   * Set when the hash is git's blob id (`blob <size>\0` then the bytes) with this algorithm
   * (`sha1`, `sha256`): a hash worker can then compute it (src/store/content/hash-pool.ts);
   * a file with another `also` is read in the calling thread.
   */
  readonly gitAlgo?: string;
};

/**
 * The content of one file as written: sha256 of the whole content, its size in bytes, and its chunks in order. A sparse
 * file (src/core/sparse.ts) also has `extents`: its chunks cover only the data, its digest is `sparseDigest`.
 */
export interface FileContent {
  digest: Digest;
  size: number;
  chunks: ChunkRef[];
  extents?: Extent[];
}

/** Finds the data extents of the file open at `fd` (fstat `st`): undefined for a dense file (src/host/sys/seek-data.ts). */
export type FindExtents = (fd: number, st: BigIntStats) => Extent[] | undefined;

/**
 * Counters of one writer. `files`/`bytes`/`chunks`: files written and their content bytes
 * and chunk references (duplicates included). `newChunks`/`newBytes`: chunks (and their raw
 * bytes) that were neither in the index nor already written by this writer, i.e. what is
 * (or, in a dry run, would be) stored. `storedBytes`/`packs`: size in bytes and number of
 * the pack objects uploaded (0 in a dry run).
 */
export interface ContentWriterStats {
  files: number;
  bytes: number;
  chunks: number;
  newChunks: number;
  newBytes: number;
  storedBytes: number;
  packs: number;
}

/** Options of a ContentWriter. */
export interface ContentWriterOptions {
  store: ObjectStore;
  index: BlobIndex;
  /** Target pack size in bytes (a pack is uploaded once it reaches it); default 32 MiB. */
  packBytes?: number;
  /** Hash, chunk and build trees but upload nothing (stats still say what would be new). */
  dryRun?: boolean;
  /**
   * Dry run only: keep a copy of every new chunk (one in no store) in memory, served by
   * `sessionBlob`, so that the state scanned can be read back (a patch of a live workspace).
   * Costs as much memory as the new bytes.
   */
  keepChunks?: boolean;
  /**
   * Hash workers (src/store/content/hash-pool.ts, docs/explanation/performance.md#import):
   * once this writer has read `afterFiles` files (default 256) or `afterBytes` bytes (default
   * 64 MiB) through `writeFileFd` in the calling thread, later files are read, chunked,
   * hashed and lz4-encoded by `threads` worker threads (default os.availableParallelism();
   * the default is off on a single core). `false`: never. The content, digests, errors and
   * stats are the same either way; the workers stop after 2 s without work and at `flush()`.
   */
  hashWorkers?: HashWorkerOptions | false;
  /** Test-only fault injection: called after a file's bytes were read and before it is stat'ed again. */
  testHooks?: { afterRead?(path: string, attempt: number): void | Promise<void> };
}

/** When a writer starts its hash workers, and how many (see ContentWriterOptions.hashWorkers). */
export interface HashWorkerOptions {
  /** Worker threads (default DEFAULT_HASH_WORKERS, the cores Node may use). */
  threads?: number;
  /** Files read in the calling thread before the workers start (default 256; 0: from the first file). */
  afterFiles?: number;
  /** Bytes read in the calling thread before the workers start (default 64 MiB). */
  afterBytes?: number;
}

/** Default of HashWorkerOptions.afterFiles. */
export const HASH_WORKERS_AFTER_FILES = 256;
/** Default of HashWorkerOptions.afterBytes (64 MiB). */
export const HASH_WORKERS_AFTER_BYTES = 64 * 1024 * 1024;

/** Default target pack size in bytes (32 MiB). */
export const DEFAULT_PACK_BYTES = 32 * 1024 * 1024;
/** Size in bytes of one read from a file (4 MiB). */
export const READ_SIZE = 4 * 1024 * 1024;
/** Trees/roots queued before their index lookup is done as one batch. */
const META_BATCH = 256;
/** A stream's chunks are looked up in batches of up to this many chunks… */
const STREAM_BATCH_CHUNKS = 64;
/** …or this many bytes. */
const STREAM_BATCH_BYTES = 4 * 1024 * 1024;

interface PendingChunk {
  digest: Digest;
  data: Uint8Array;
}

/**
 * Writes file contents, trees and roots into packs in the object store, deduplicating
 * against the blob index and against what this writer already wrote.
 *
 * Content is cut by FastCDC (src/core/fastcdc.ts), each chunk is addressed by the sha256
 * of its raw bytes, new chunks are appended to the current pack (lz4 when it pays), and a
 * pack is uploaded once it reaches `packBytes` (one upload in flight while the next pack
 * fills). Index lookups are batched (per file for files up to 4 MiB, per ≤ 64 chunks or
 * 4 MiB read otherwise, and those asked in one turn of the event loop go as one; trees and
 * roots in batches of 256). Nothing is durable until
 * `flush()` resolved and the returned packs are committed to the catalog.
 *
 * In a large import the reading, chunking, hashing and lz4 encoding of files run in hash
 * worker threads (ContentWriterOptions.hashWorkers, src/store/content/hash-pool.ts); dedup,
 * packs and uploads stay on the calling thread, and what is written is the same either way.
 *
 * Writes may run concurrently (`Promise.all` over files); call `flush()` after they have
 * all settled. After a failed upload every later call rethrows that failure.
 */
export class ContentWriter {
  /** Counters (see ContentWriterStats); live, updated as the writer works. */
  readonly stats: ContentWriterStats = { files: 0, bytes: 0, chunks: 0, newChunks: 0, newBytes: 0, storedBytes: 0, packs: 0 };

  private readonly store: ObjectStore;
  private readonly index: BlobIndex;
  private readonly packBytes: number;
  private readonly dryRun: boolean;
  private readonly keepChunks: boolean;
  private readonly hooks: ContentWriterOptions['testHooks'];
  /** Digests known to exist: found in the index or written (queued in a pack) by this writer. */
  private readonly known = new Set<Digest>();
  /** Keys of existing packs that index lookups found blobs in (what a commit must find still live). */
  private readonly reused = new Set<string>();
  /** Raw bytes of every tree and root written by this writer (and, with keepChunks, of every new chunk). */
  private readonly session = new Map<Digest, Buffer>();
  /** Trees/roots waiting for their batched index lookup. */
  private readonly pendingMeta = new Map<Digest, { kind: BlobKind; bytes: Buffer }>();
  private pack: PackWriter | undefined;
  private readonly written: WrittenPack[] = [];
  private upload: Promise<void> | undefined;
  private failure: unknown;
  /** Hash workers: their options (undefined: off), the pool once started, and what was read in this thread before. */
  private readonly workerOpts: Required<HashWorkerOptions> | undefined;
  private pool: HashPool | undefined;
  private readonly readHere = { files: 0, bytes: 0 };
  /** The buffer of the last pack uploaded, for the next pack to be built in (see append). */
  private spare: Buffer | undefined;
  /** Resolved once every pooled read asked so far has stored its chunks (see readFdPooled). */
  private packOrder: Promise<void> = Promise.resolve();
  /** Chunk lookups queued in this turn (see lookupUnknown). */
  private lookups: { ask: Digest[]; resolve: (m: Map<Digest, BlobLocation>) => void; reject: (e: unknown) => void }[] = [];

  /** @param opts store and index to write to and dedup against; see ContentWriterOptions. */
  constructor(opts: ContentWriterOptions) {
    this.store = opts.store;
    this.index = opts.index;
    this.packBytes = opts.packBytes ?? DEFAULT_PACK_BYTES;
    this.dryRun = opts.dryRun ?? false;
    this.keepChunks = this.dryRun && (opts.keepChunks ?? false);
    this.hooks = opts.testHooks;
    const w = opts.hashWorkers;
    const threads = w === false ? 0 : (w?.threads ?? (DEFAULT_HASH_WORKERS > 1 ? DEFAULT_HASH_WORKERS : 0));
    this.workerOpts =
      w === false || threads < 1
        ? undefined
        : { threads, afterFiles: w?.afterFiles ?? HASH_WORKERS_AFTER_FILES, afterBytes: w?.afterBytes ?? HASH_WORKERS_AFTER_BYTES };
  }

  /**
   * Reads, chunks and stores a regular file by path, in 4 MiB reads: opens it, then as
   * `writeFileFd` with two reads at most.
   * @throws E_CHANGED_DURING_READ (retryable) when it changed during both reads,
   *   E_SOURCE_NOT_FOUND when it does not exist, E_UNSUPPORTED when it is not a regular file,
   *   E_PERMISSION when it cannot be read.
   */
  async writeFile(path: string): Promise<FileContent> {
    this.check();
    let fd: number;
    try {
      // O_NONBLOCK: opening a fifo must not hang (it is refused as not a regular file).
      fd = await openFd(path, fsc.O_RDONLY | fsc.O_NONBLOCK);
    } catch (err) {
      throw sourceError(err, path);
    }
    try {
      const { digest, size, chunks, extents } = await this.writeFileFd(fd, { path, attempts: 2 });
      return extents ? { digest, size, chunks, extents } : { digest, size, chunks };
    } finally {
      await closeFd(fd);
    }
  }

  /**
   * Reads, chunks and stores the regular file open at `fd` (positional 4 MiB reads; `fd` is
   * neither moved nor closed). The descriptor is fstat'ed before and after each read (size,
   * mtime, ctime, inode, device); when they differ, or the bytes read differ from the size,
   * the file is read again after a short pause (5, 10, 20 … ms), up to `attempts` reads in
   * all (default 4). `path` only names the file in errors and test hooks. `also`: a second
   * hash fed the same bytes in the same pass (see AlsoHash). `findExtents`: where the file's
   * data is; a file it finds holes in is read by its data extents only (the holes are never
   * read) and returned with `extents`, and without `also`.
   * @returns the content, `st` (the fstat after the last read, bigint), `changing`: true
   *   when every read saw a change and `allowChanging` let the last read's bytes stand, and
   *   `also`: the hex digest of the `also` hash over the bytes returned.
   * @throws E_CHANGED_DURING_READ (retryable, details.path = `path`) when every read saw a
   *   change and `allowChanging` is not set; E_UNSUPPORTED when it is not a regular file;
   *   E_PERMISSION when it cannot be read.
   */
  async writeFileFd(
    fd: number,
    opts: { path: string; attempts?: number; allowChanging?: boolean; also?: AlsoHash; findExtents?: FindExtents },
  ): Promise<FileContent & { st: BigIntStats; changing: boolean; also?: string }> {
    this.check();
    const attempts = Math.max(1, opts.attempts ?? 4);
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, 5 * 2 ** (attempt - 1)));
      const pool = this.hashPool(opts.also);
      const r = pool
        ? await this.readFdPooled(pool, fd, opts.path, attempt, opts.also, opts.findExtents)
        : await this.readFdOnce(fd, opts.path, attempt, opts.also, opts.findExtents);
      if (!r.changed) return { ...this.counted(r.content), st: r.st, changing: false, also: r.also };
      if (attempt + 1 >= attempts) {
        if (opts.allowChanging) return { ...this.counted(r.content), st: r.st, changing: true, also: r.also };
        throw new AwcError('E_CHANGED_DURING_READ', `${opts.path} changed while it was read (${attempts} reads)`, {
          details: { path: opts.path },
        });
      }
    }
  }

  /**
   * Chunks and stores a stream of bytes (e.g. a tar entry). The buffers the stream yields are
   * not copied while their chunks wait for an index lookup: do not modify them afterwards
   * (Node streams never do).
   */
  async writeStream(src: AsyncIterable<Uint8Array>): Promise<FileContent> {
    this.check();
    const chunker = new Chunker();
    const whole = createHash('sha256');
    const refs: ChunkRef[] = [];
    let size = 0;
    let batch: PendingChunk[] = [];
    let batchBytes = 0;
    const take = async (chunks: Uint8Array[], force: boolean): Promise<void> => {
      for (const c of chunks) {
        const digest = sha256(c);
        refs.push({ digest, size: c.length });
        batch.push({ digest, data: c });
        batchBytes += c.length;
      }
      if (batch.length > 0 && (force || batch.length >= STREAM_BATCH_CHUNKS || batchBytes >= STREAM_BATCH_BYTES)) {
        const b = batch;
        batch = [];
        batchBytes = 0;
        await this.storeChunks(b);
      }
    };
    for await (const buf of src) {
      if (buf.length === 0) continue;
      whole.update(buf);
      size += buf.length;
      await take(chunker.push(buf), false);
    }
    const last = chunker.finish();
    await take(last ? [last] : [], true);
    return this.counted({ digest: `sha256:${whole.digest('hex')}`, size, chunks: refs });
  }

  /**
   * Chunks and stores the data of a sparse file of `size` bytes whose data ranges are
   * `extents` (recorded form, src/core/sparse.ts), given as a stream of the concatenated
   * data (a GNU sparse tar member's body). Buffers as in writeStream.
   * @throws E_FORMAT when the stream does not hold exactly the extents' bytes
   */
  async writeSparseStream(src: AsyncIterable<Uint8Array>, size: number, extents: readonly Extent[]): Promise<FileContent> {
    this.check();
    const c = await captureSparseStream(src, size, extents, (b) => this.storeChunks(b));
    const data = c.chunks.reduce((a, r) => a + r.size, 0);
    const want = extents.reduce((a, [, l]) => a + l, 0);
    if (data !== want) throw new AwcError('E_FORMAT', `sparse file data has ${data} bytes, its map says ${want}`);
    return this.counted(c);
  }

  /** Chunks and stores bytes held in memory. */
  async writeBuffer(data: Uint8Array): Promise<FileContent> {
    this.check();
    return this.counted(await this.storeBuffer(data));
  }

  /**
   * Stores a tree object (format tree v1, src/core/tree.ts) as a blob of kind `tree`.
   * @returns its digest. @throws E_FORMAT (duplicate names), E_PATH_TRAVERSAL / E_UNSUPPORTED_NAME (bad names).
   */
  async writeTree(entries: readonly Entry[]): Promise<Digest> {
    this.check();
    const { bytes, digest } = encodeTree(entries);
    await this.queueMeta('tree', digest, bytes);
    return digest;
  }

  /** Stores a root object (format root v1, chunker = CHUNKER_ID) as a blob of kind `root`. @returns its digest. */
  async writeRoot(root: Omit<RootObject, 'v' | 'type' | 'chunker'>): Promise<Digest> {
    this.check();
    const { bytes, digest } = encodeRoot(root);
    await this.queueMeta('root', digest, bytes);
    return digest;
  }

  /**
   * Appends one blob as it is, without looking it up in the index: gc's repack
   * (docs/explanation/gc.md#repack) copies live blobs out of a pack whose index rows still
   * name that pack, so the index must not dedup them. The caller has verified `raw` against
   * `digest` (decodeBlob); a digest this writer already holds is stored once.
   * @throws the earlier upload failure, if one failed
   */
  async copyBlob(kind: BlobKind, digest: Digest, raw: Uint8Array): Promise<void> {
    this.check();
    if (this.known.has(digest)) return;
    this.known.add(digest);
    this.stats.newChunks++;
    this.stats.newBytes += raw.length;
    await this.append(kind, digest, raw);
  }

  /** Raw bytes of a tree or root written by this writer (also in a dry run), or of a new chunk kept by `keepChunks`, else undefined. Do not modify them. */
  sessionBlob(digest: Digest): Buffer | undefined {
    return this.session.get(digest);
  }

  /**
   * Keys of the existing packs this writer deduplicated against (blobs found in the index
   * rather than written). A commit passes them as `NewSnapshot.reusedPacks`, and is refused
   * when gc condemned one meanwhile (docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe).
   */
  reusedPacks(): string[] {
    return [...this.reused];
  }

  /**
   * Stores queued trees/roots, uploads the pending pack and waits for all uploads.
   * @returns every pack this writer uploaded so far (key, size in bytes, blob locations); [] in a dry run.
   * @throws the upload failure (AwcError from the store) if one failed.
   */
  async flush(): Promise<WrittenPack[]> {
    this.check();
    await this.flushMeta();
    await this.pool?.close();
    if (this.pack && this.pack.count > 0) await this.rotate();
    await this.upload;
    this.spare = undefined; // a writer kept after its flush holds no pack buffer
    this.check();
    killPoint('writer.flush.after');
    return this.written.slice();
  }

  private check(): void {
    if (this.failure !== undefined) throw toAwcError(this.failure);
  }

  private counted(fc: FileContent): FileContent {
    this.stats.files++;
    this.stats.bytes += fc.size;
    this.stats.chunks += fc.chunks.length;
    return fc;
  }

  /** Chunks, hashes and stores a buffer; does not count it as a file. */
  private async storeBuffer(data: Uint8Array): Promise<FileContent> {
    if (data.length === 0) return { digest: sha256(data), size: 0, chunks: [] };
    const lengths = chunkBuffer(data);
    const batch: PendingChunk[] = [];
    let off = 0;
    for (const len of lengths) {
      const c = data.subarray(off, off + len);
      batch.push({ digest: sha256(c), data: c });
      off += len;
    }
    await this.storeChunks(batch);
    const digest = batch.length === 1 ? batch[0].digest : sha256(data);
    return { digest, size: data.length, chunks: batch.map((b) => ({ digest: b.digest, size: b.data.length })) };
  }

  /** One read of the file at `fd`: its content, the fstat after, and whether it changed meanwhile. */
  private async readFdOnce(
    fd: number,
    path: string,
    attempt: number,
    also?: AlsoHash,
    findExtents?: FindExtents,
  ): Promise<{ content: FileContent; st: BigIntStats; changed: boolean; also?: string }> {
    try {
      const before = await fstatBig(fd);
      if (!before.isFile()) throw new AwcError('E_UNSUPPORTED', `${path} is not a regular file`);
      const size = Number(before.size);
      const extents = findExtents?.(fd, before);
      const h = extents ? undefined : also?.(size);
      let content: FileContent;
      if (extents) {
        content = await captureSparseFd(fd, size, extents, (b) => this.storeChunks(b));
      } else if (size < READ_SIZE) {
        // One read (plus one byte to notice growth), one index lookup.
        const buf = Buffer.allocUnsafe(size + 1);
        const got = await readFully(fd, buf, 0);
        h?.update(buf.subarray(0, got));
        content = await this.storeBuffer(buf.subarray(0, got));
      } else {
        content = await this.streamFile(fd, size + 1, h);
      }
      this.readHere.files++;
      this.readHere.bytes += content.size;
      await this.hooks?.afterRead?.(path, attempt);
      const after = await fstatBig(fd);
      return { content, st: after, changed: content.size !== size || !sameFile(before, after), also: h?.digest('hex') };
    } catch (err) {
      throw err instanceof AwcError ? err : toAwcError(err);
    }
  }

  /** The hash pool for a file read now (started on first need), or undefined: read in this thread. */
  private hashPool(also: AlsoHash | undefined): HashPool | undefined {
    const w = this.workerOpts;
    if (!w || (also && !also.gitAlgo)) return undefined;
    if (!this.pool && this.readHere.files < w.afterFiles && this.readHere.bytes < w.afterBytes) return undefined;
    return (this.pool ??= new HashPool(w.threads));
  }

  /** As readFdOnce, the reading, chunking, hashing and encoding done by a hash worker (fstats here, synchronous: two syscalls). */
  private async readFdPooled(
    pool: HashPool,
    fd: number,
    path: string,
    attempt: number,
    also?: AlsoHash,
    findExtents?: FindExtents,
  ): Promise<{ content: FileContent; st: BigIntStats; changed: boolean; also?: string }> {
    try {
      const before = fstatSync(fd, { bigint: true });
      if (!before.isFile()) throw new AwcError('E_UNSUPPORTED', `${path} is not a regular file`);
      const size = Number(before.size);
      const extents = findExtents?.(fd, before);
      const mode: HashMode = this.dryRun ? (this.keepChunks ? 'raw' : 'none') : 'compress';
      // Chunks reach the packs in the order the reads were asked (the walk's order), whatever
      // order the workers finish in: neighbouring files stay neighbours in the packs, which the
      // read window of exports merges into one ranged read (src/store/content/read-window.ts).
      const prev = this.packOrder;
      let release!: () => void;
      this.packOrder = new Promise<void>((r) => (release = r));
      let r: HashResult;
      try {
        r = await pool.run({ fd, size, extents, gitAlgo: extents ? undefined : also?.gitAlgo, mode }, async (b) => {
          // The index lookup need not wait for the files before: lookups of files finished
          // together go to the index as one (see lookupUnknown). Appending keeps the order.
          await this.lookupUnknown(b);
          await prev;
          await this.appendHashed(b);
        });
      } finally {
        void prev.then(release);
      }
      const content: FileContent = { digest: r.digest, size: r.size, chunks: r.chunks, ...(r.extents && { extents: r.extents }) };
      await this.hooks?.afterRead?.(path, attempt);
      const after = fstatSync(fd, { bigint: true });
      return { content, st: after, changed: content.size !== size || !sameFile(before, after), also: r.also };
    } catch (err) {
      throw err instanceof AwcError ? err : toAwcError(err);
    }
  }

  /**
   * As storeChunks after its lookup, for chunks a hash worker encoded (`stored` is their pack
   * form, or their raw bytes in a dry run): the caller ran lookupUnknown on `batch` before.
   */
  private async appendHashed(batch: readonly HashedChunk[]): Promise<void> {
    for (const b of batch) {
      if (this.known.has(b.digest)) continue;
      this.known.add(b.digest);
      this.stats.newChunks++;
      this.stats.newBytes += b.size;
      if (this.keepChunks) this.session.set(b.digest, Buffer.from(b.stored)); // a copy: not to hold the whole batch
      if (!this.dryRun) await this.append('chunk', b.digest, b.stored, { codec: b.codec, rawLength: b.size });
    }
  }

  /** Streams a large file through the chunker in READ_SIZE reads (at most `limit` bytes), reusing one buffer. */
  private async streamFile(fd: number, limit: number, h?: Hash): Promise<FileContent> {
    const chunker = new Chunker();
    const whole = createHash('sha256');
    const buf = Buffer.allocUnsafe(READ_SIZE);
    const refs: ChunkRef[] = [];
    let pos = 0;
    while (pos < limit) {
      const want = Math.min(READ_SIZE, limit - pos);
      const n = await readFully(fd, want === READ_SIZE ? buf : buf.subarray(0, want), pos);
      if (n === 0) break;
      const view = buf.subarray(0, n);
      whole.update(view);
      h?.update(view);
      pos += n;
      const chunks = chunker.push(view);
      // Chunks are views of `buf`: store them before the next read reuses it.
      const batch = chunks.map((c) => ({ digest: sha256(c), data: c }));
      for (const b of batch) refs.push({ digest: b.digest, size: b.data.length });
      if (batch.length > 0) await this.storeChunks(batch);
      if (n < want) break;
    }
    const last = chunker.finish();
    if (last) {
      const d = sha256(last);
      refs.push({ digest: d, size: last.length });
      await this.storeChunks([{ digest: d, data: last }]);
    }
    return { digest: `sha256:${whole.digest('hex')}`, size: pos, chunks: refs };
  }

  /** Stores the chunks of `batch` that are neither known nor in the index (one index lookup). */
  private async storeChunks(batch: readonly PendingChunk[]): Promise<void> {
    await this.lookupUnknown(batch);
    for (const b of batch) {
      if (this.known.has(b.digest)) continue;
      this.known.add(b.digest);
      this.stats.newChunks++;
      this.stats.newBytes += b.data.length;
      if (this.keepChunks) this.session.set(b.digest, Buffer.from(b.data)); // a copy: read buffers are reused
      if (!this.dryRun) await this.append('chunk', b.digest, b.data);
    }
  }

  /**
   * Looks up the digests of `batch` this writer does not know yet; marks those found known.
   * Lookups asked in the same turn of the event loop (until its check phase: the chunks of
   * the files the hash workers finished meanwhile) go to the index as one (a catalog query
   * costs per query far more than per digest).
   */
  private async lookupUnknown(batch: readonly { digest: Digest }[]): Promise<void> {
    const ask: Digest[] = [];
    const asked = new Set<Digest>();
    for (const b of batch) {
      if (!this.known.has(b.digest) && !asked.has(b.digest)) {
        asked.add(b.digest);
        ask.push(b.digest);
      }
    }
    if (ask.length === 0) return;
    const found = await new Promise<Map<Digest, BlobLocation>>((resolve, reject) => {
      this.lookups.push({ ask, resolve, reject });
      if (this.lookups.length === 1) setImmediate(() => void this.runLookups());
    });
    for (const d of ask) {
      const loc = found.get(d);
      if (!loc) continue;
      this.known.add(d);
      this.reused.add(loc.pack);
    }
  }

  /** One index lookup for every lookup queued (see lookupUnknown); each gets the whole answer. */
  private async runLookups(): Promise<void> {
    const q = this.lookups;
    this.lookups = [];
    try {
      const found = await this.index.lookup(q.length === 1 ? q[0]!.ask : q.flatMap((x) => x.ask));
      for (const x of q) x.resolve(found);
    } catch (err) {
      for (const x of q) x.reject(err);
    }
  }

  private async queueMeta(kind: BlobKind, digest: Digest, bytes: Buffer): Promise<void> {
    if (!this.session.has(digest)) this.session.set(digest, bytes);
    if (this.dryRun || this.known.has(digest) || this.pendingMeta.has(digest)) return;
    this.pendingMeta.set(digest, { kind, bytes });
    if (this.pendingMeta.size >= META_BATCH) await this.flushMeta();
  }

  private async flushMeta(): Promise<void> {
    if (this.pendingMeta.size === 0) return;
    const items = [...this.pendingMeta];
    this.pendingMeta.clear();
    const found = await this.index.lookup(items.filter(([d]) => !this.known.has(d)).map(([d]) => d));
    for (const [d, loc] of found) {
      this.known.add(d);
      this.reused.add(loc.pack);
    }
    for (const [d, { kind, bytes }] of items) {
      if (this.known.has(d)) continue;
      this.known.add(d);
      await this.append(kind, d, bytes);
    }
  }

  /**
   * Adds a blob to the current pack (`bytes` raw, or already encoded when `encoded` gives its
   * codec and raw length); uploads the pack once it reaches packBytes.
   */
  private async append(kind: BlobKind, digest: Digest, bytes: Uint8Array, encoded?: { codec: Codec; rawLength: number }): Promise<void> {
    // With the hash workers started the writer is in a large import: its packs fill, so they start at full size.
    if (!this.pack) {
      this.pack = new PackWriter(Math.min(this.packBytes, 1 << 30) + MAX_SIZE + 65536, this.pool !== undefined, this.spare);
      if (this.pack.buffer === this.spare) this.spare = undefined;
    }
    if (encoded) this.pack.addStored(kind, digest, encoded.codec, bytes, encoded.rawLength);
    else this.pack.add(kind, digest, bytes);
    if (this.pack.size >= this.packBytes) await this.rotate();
  }

  /**
   * Finishes the current pack and queues its upload behind the previous one (uploads stay
   * ordered); returns once the previous upload completed, so at most one pack is in flight
   * while the next one fills.
   */
  private async rotate(): Promise<void> {
    const pw = this.pack;
    if (!pw) return;
    this.pack = undefined;
    const fin = pw.finish();
    const prev = this.upload ?? Promise.resolve();
    this.upload = prev
      .then(async () => {
        if (this.failure !== undefined) return;
        killPoint('pack.upload.before');
        await this.store.put(fin.key, fin.bytes);
        // Stored: the next pack is built in this one's buffer (a new one of tens of MiB costs a page fault per 4 KiB).
        this.spare = pw.buffer;
        killPoint('pack.upload.after');
        this.written.push({ key: fin.key, size: fin.bytes.length, blobs: fin.entries.map((e) => ({ ...e, pack: fin.key })) });
        this.stats.packs++;
        this.stats.storedBytes += fin.bytes.length;
      })
      .catch((err: unknown) => {
        this.failure ??= err;
      });
    await prev;
    this.check();
  }
}
