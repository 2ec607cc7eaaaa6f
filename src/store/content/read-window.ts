import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { Semaphore } from '../../core/semaphore.js';
import type { ChunkRef, FileEntry, RootObject, TreeObject } from '../../core/tree.js';
import { BlobDecoder } from '../pack/blob-decoder.js';
import type { ContentReader } from './content-reader.js';
import type { BlobLocation } from '../pack/pack-types.js';
import { DEFAULT_RANGE_LIMITS, LOOKUP_BATCH, RangePlanner, type BlobRange, type RangeLimits } from '../pack/range-plan.js';
import type { TreeSource } from './tree-source.js';
import { withHoles } from './sparse-read.js';

/** What a whole-tree reader (exportDir, exportTar) reads through: a ContentReader, or a ReadWindow in front of one. */
export interface TreeContentSource extends TreeSource {
  /** The whole content of a file, as consecutive Buffers (its chunks, verified; a sparse file's holes as zero Buffers). */
  readFile(file: FileEntry): AsyncIterable<Buffer>;
  /** The stored data of a file (its chunks, verified: a sparse file's extents concatenated). Pairs in walk order as readFile does. */
  readData(file: FileEntry): AsyncIterable<Buffer>;
}

/** Options of a {@link ReadWindow} (bytes; all optional). */
export interface ReadWindowOptions {
  /** Most ranged GETs in flight at once (chunk spans and trees together); default 8. */
  maxInFlight?: number;
  /** Most raw bytes planned but not yet handed to the consumer (fetched or in flight); default 64 MiB. */
  maxBufferedBytes?: number;
  /** Files larger than this are not planned: they are read on their own, as the reader does (default 8 MiB). */
  maxFileBytes?: number;
  /** Most files and most trees the walk may be ahead of the consumer; default 4096 each. */
  maxAhead?: number;
  /** Merge limits of one GET (largest span, largest gap); default DEFAULT_RANGE_LIMITS (8 MiB, 128 KiB). */
  limits?: RangeLimits;
}

/** Counters of a window (for tests and the benchmark). */
export interface ReadWindowStats {
  /** Ranged GETs of chunk spans issued by the window. */
  spans: number;
  /** Files served from the window's plan, and files read on their own (too big, or the plan did not reach them). */
  planned: number;
  direct: number;
  /** Highest number of raw bytes held at once (planned, not yet consumed). */
  peakBufferedBytes: number;
}

/** One chunk being fetched for the window: consumers hold a reference each. */
interface Flight {
  digest: Digest;
  size: number;
  refs: number;
  /** True while it waits in `pending` (not yet located and asked for). */
  queued: boolean;
  promise: Promise<Buffer>;
  resolve(b: Buffer | Promise<Buffer>): void;
  reject(e: unknown): void;
}

/** One planned GET: a span of one pack and the flights read from it. */
type Span = BlobRange<{ loc: BlobLocation; f: Flight }>;

/** One regular file of the walk, in tree order: its chunks' flights, or none when it is read on its own. */
interface Slot {
  file: FileEntry;
  flights?: Flight[];
}

/**
 * The cross-file read window of whole-tree reads (docs/explanation/object-store.md#the-read-window-of-exports):
 * a second walk of the snapshot runs ahead of the consumer in tree order (depth-first,
 * entries by name: the order exportDir and exportTar write in), reading each directory's
 * subtrees in batched, merged GETs (ContentReader.readTrees), and plans the chunk reads of
 * the next files: neighbouring blobs of one pack, across files, share one ranged GET
 * (RangePlanner: gap ≤ 128 KiB, span ≤ 8 MiB), at most `maxInFlight` GETs at once. A chunk
 * that two planned files share is fetched once.
 *
 * The consumer calls {@link readTree} for each directory and {@link readFile} for each
 * regular file in that same order (synchronously at the call: the window pairs the n-th call
 * with the n-th file of its walk, and checks the content digest). When the calls do not
 * match (or the walk failed), the window steps aside and everything is read through the
 * reader as without it, so a mismatch costs speed, never bytes, and every error keeps its
 * code (the reader reports it again).
 *
 * Bounds: raw bytes planned and not yet consumed ≤ maxBufferedBytes (+ one file of at most
 * maxFileBytes); ranged GETs in flight ≤ maxInFlight, each ≤ limits.maxMergeBytes (or one
 * tree); the walk is at most maxAhead files and maxAhead trees ahead of the consumer. Every
 * blob is verified against its digest (ContentReader.readSpan, refetched alone once).
 * {@link close} when done: later reads go through the reader.
 */
export class ReadWindow implements TreeContentSource {
  /** Counters (live). */
  readonly stats: ReadWindowStats = { spans: 0, planned: 0, direct: 0, peakBufferedBytes: 0 };
  private readonly reader: ContentReader;
  private readonly gets: Semaphore;
  private readonly planner: RangePlanner;
  private readonly maxBuffered: number;
  private readonly maxFile: number;
  private readonly maxAhead: number;
  private readonly rootP: Promise<RootObject>;
  private readonly root: Digest;
  /** Trees and files the walk produced, by position, until the consumer takes them. */
  private readonly trees = new Map<number, { digest: Digest; tree: TreeObject }>();
  private readonly files = new Map<number, Slot>();
  private producedTrees = 0;
  private producedFiles = 0;
  private takenTrees = 0;
  private takenFiles = 0;
  /** Chunks planned and not yet released by every consumer. */
  private readonly flights = new Map<Digest, Flight>();
  private buffered = 0;
  /** Flights not yet located and planned (the walk flushes them in batches). */
  private pending: Flight[] = [];
  private pendingBytes = 0;
  /** Subtrees asked for in batches, not yet walked. */
  private readonly treesAhead = new Map<Digest, Promise<TreeObject>>();
  /** False once the walk ended (done, failed, or closed): what it did not produce is read through the reader. */
  private walking = true;
  private off = false;
  private wake: () => void = () => undefined;
  private changed: Promise<void>;

  /**
   * Starts the walk of snapshot `root` at once.
   * @throws E_USAGE for a bound that is not a positive integer.
   */
  constructor(reader: ContentReader, root: Digest, opts: ReadWindowOptions = {}) {
    this.reader = reader;
    this.root = root;
    const maxInFlight = opts.maxInFlight ?? 8;
    this.maxBuffered = opts.maxBufferedBytes ?? 64 * 1024 * 1024;
    this.maxFile = opts.maxFileBytes ?? DEFAULT_RANGE_LIMITS.maxMergeBytes;
    this.maxAhead = opts.maxAhead ?? 4096;
    for (const [k, v] of Object.entries({
      maxInFlight,
      maxBufferedBytes: this.maxBuffered,
      maxFileBytes: this.maxFile,
      maxAhead: this.maxAhead,
    }))
      if (!Number.isSafeInteger(v) || v < 1) throw new AwcError('E_USAGE', `read window: ${k} must be a positive integer, not ${v}`);
    this.gets = new Semaphore(maxInFlight);
    this.planner = new RangePlanner(opts.limits ?? DEFAULT_RANGE_LIMITS);
    this.changed = new Promise<void>((r) => (this.wake = r));
    this.rootP = reader.readRoot(root);
    this.rootP.catch(() => undefined); // the consumer's readRoot reports it
    void this.walk().finally(() => {
      this.walking = false;
      this.flush();
      this.notify();
    });
  }

  /** The root object (the one the walk started from is read once). @throws as ContentReader.readRoot */
  readRoot(digest: Digest): Promise<RootObject> {
    return digest === this.root ? this.rootP : this.reader.readRoot(digest);
  }

  /** The next directory's tree, in walk order (from the walk when it got there). @throws as ContentReader.readTree */
  async readTree(digest: Digest): Promise<TreeObject> {
    if (this.off) return this.reader.readTree(digest);
    const n = this.takenTrees++;
    this.notify();
    while (this.walking && !this.off && this.producedTrees <= n) await this.changed;
    const t = this.trees.get(n);
    this.trees.delete(n);
    if (t && t.digest === digest) return t.tree;
    if (t || n < this.producedTrees) this.stepAside();
    return this.reader.readTree(digest);
  }

  /**
   * The next regular file's content, in walk order (call it in that order; the pairing is
   * made at the call): its chunks from the window's GETs, each `ref.size` bytes, verified.
   * A sparse file's holes come as zero Buffers (src/store/content/sparse-read.ts).
   * @throws (the iterator) E_OBJECT_NOT_FOUND, E_INTEGRITY, the store's errors, as ContentReader.readFile.
   */
  readFile(file: FileEntry): AsyncIterable<Buffer> {
    const data = this.readData(file);
    return file.extents ? withHoles(file.size, file.extents, data) : data;
  }

  /** As readFile, but a sparse file's stored data only (its chunks), without the holes. */
  readData(file: FileEntry): AsyncIterable<Buffer> {
    if (this.off) return this.direct(file);
    const n = this.takenFiles++;
    this.notify();
    return this.body(n, file);
  }

  /** Ends the walk and drops what it holds; reads after it go through the reader. Idempotent. */
  close(): void {
    this.stepAside();
  }

  // ---------------------------------------------------------------------------------------

  private async *body(n: number, file: FileEntry): AsyncGenerator<Buffer> {
    while (this.walking && !this.off && this.producedFiles <= n) await this.changed;
    const slot = this.files.get(n);
    this.files.delete(n);
    if (!slot || slot.file.digest !== file.digest || slot.file.size !== file.size) {
      if (slot || n < this.producedFiles) this.stepAside();
      if (slot) this.release(slot.flights, 0);
      yield* this.direct(file);
      return;
    }
    if (!slot.flights) {
      yield* this.direct(file);
      return;
    }
    this.stats.planned++;
    const flights = slot.flights;
    let next = 0; // flights[next…] are still held
    try {
      while (next < flights.length) {
        if (flights[next].queued) this.flush(); // wanted now: plan what is pending rather than wait for more
        const b = BlobDecoder.checkSize(await flights[next].promise, file.chunks[next]);
        this.release(flights, next, ++next);
        yield b;
      }
    } finally {
      this.release(flights, next);
    }
  }

  private direct(file: FileEntry): AsyncIterable<Buffer> {
    this.stats.direct++;
    return this.reader.readData(file);
  }

  /** The walk: trees depth-first in entry order, planning the files' chunks; stops when closed. Never rejects. */
  private async walk(): Promise<void> {
    try {
      const r = await this.rootP;
      await this.walkDir(r.tree);
    } catch {
      // the consumer reads the rest through the reader, which reports the error itself
    }
  }

  private async walkDir(digest: Digest): Promise<void> {
    const ahead = this.treesAhead.get(digest);
    this.treesAhead.delete(digest);
    const tree = await (ahead ?? this.reader.readTrees([digest], this.gets, this.planner).then((ts) => ts[0]));
    await this.room();
    if (this.off) return;
    this.trees.set(this.producedTrees++, { digest, tree });
    this.notify();
    const subtrees = tree.entries.flatMap((e) => (e.type === 'dir' && !this.treesAhead.has(e.tree) ? [e.tree] : []));
    if (subtrees.length > 0 && this.treesAhead.size + subtrees.length <= this.maxAhead) {
      const all = this.reader.readTrees(subtrees, this.gets, this.planner);
      subtrees.forEach((d, i) => {
        const one = all.then((ts) => ts[i]);
        one.catch(() => undefined); // the walk awaits it (or stops first)
        this.treesAhead.set(d, one);
      });
    }
    for (const e of tree.entries) {
      if (this.off) return;
      if (e.type === 'dir') await this.walkDir(e.tree);
      else if (e.type === 'file') {
        await this.room();
        if (this.off) return;
        this.addFile(e);
      }
    }
  }

  /**
   * Waits while the walk is as far ahead as the bounds allow; once at a bound, until the
   * consumer is well below it (bytes under the low-water mark, half the files or trees), so
   * that the walk goes on in batches that merge, not file by file. What is pending is planned
   * when the consumer asks for it (body) or a batch is full.
   */
  private async room(): Promise<void> {
    const full = () =>
      this.buffered >= this.maxBuffered ||
      this.producedFiles - this.takenFiles >= this.maxAhead ||
      this.producedTrees - this.takenTrees >= this.maxAhead;
    if (this.off || !full()) return;
    const low = this.maxBuffered - Math.min(this.planner.limits.maxMergeBytes, this.maxBuffered >> 1);
    const half = this.maxAhead >> 1;
    while (!this.off && (this.buffered > low || this.producedFiles - this.takenFiles > half || this.producedTrees - this.takenTrees > half))
      await this.changed;
  }

  /** Produces the slot of the next file: its chunks joined to flights planned before, or new ones (pending). */
  private addFile(file: FileEntry): void {
    const slot: Slot = { file };
    if (file.size <= this.maxFile && file.chunks.length > 0) {
      slot.flights = file.chunks.map((ref) => this.flight(ref));
    }
    this.files.set(this.producedFiles++, slot);
    this.notify();
    if (this.pendingBytes >= this.planner.limits.maxMergeBytes || this.pending.length >= LOOKUP_BATCH) this.flush();
  }

  private flight(ref: ChunkRef): Flight {
    const had = this.flights.get(ref.digest);
    if (had) {
      had.refs++;
      return had;
    }
    let resolve!: Flight['resolve'];
    let reject!: Flight['reject'];
    const promise = new Promise<Buffer>((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => undefined); // its consumer gets the error; one that never comes must not leave it unhandled
    const f: Flight = { digest: ref.digest, size: ref.size, refs: 1, queued: false, promise, resolve, reject };
    this.flights.set(ref.digest, f);
    this.buffered += ref.size;
    this.stats.peakBufferedBytes = Math.max(this.stats.peakBufferedBytes, this.buffered);
    const x = this.reader.extraBlob(ref.digest);
    if (x) resolve(x);
    else {
      f.queued = true;
      this.pending.push(f);
      this.pendingBytes += ref.size;
    }
    return f;
  }

  /** Drops the references of `flights[from, to)`; a flight nobody holds any more is forgotten (its bytes no longer count). */
  private release(flights: Flight[] | undefined, from: number, to = flights?.length ?? 0): void {
    if (!flights) return;
    for (let i = from; i < to; i++) {
      const f = flights[i];
      if (--f.refs > 0) continue;
      if (this.flights.get(f.digest) === f) {
        this.flights.delete(f.digest);
        this.buffered -= f.size;
      }
    }
    this.notify();
  }

  /** Locates the pending flights (batched lookups) and issues their GETs, merged in walk order. Never rejects. */
  private flush(): void {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    for (const f of batch) f.queued = false;
    void (async () => {
      const locs = new Map<Digest, BlobLocation>();
      try {
        await RangePlanner.locate(
          this.reader.index,
          batch.map((f) => f.digest),
          locs,
        );
      } catch (err) {
        for (const f of batch) f.reject(err);
        return;
      }
      let g: Span | undefined;
      const groups: Span[] = [];
      for (const f of batch) {
        const loc = locs.get(f.digest);
        if (!loc) {
          f.reject(new AwcError('E_OBJECT_NOT_FOUND', `chunk ${f.digest} is not in the index`, { details: { digest: f.digest } }));
          continue;
        }
        if (g && this.planner.fits(g, loc)) RangePlanner.extend(g, { loc, f });
        else groups.push((g = RangePlanner.start({ loc, f })));
      }
      for (const grp of groups) void this.fetch(grp);
    })();
  }

  /** One ranged GET for a group of flights (waiting for a free slot); settles each flight. Never rejects. */
  private async fetch(g: Span): Promise<void> {
    const wait = this.gets.acquire();
    if (wait) await wait;
    try {
      if (g.items.every((it) => it.f.refs === 0)) return; // every file that wanted these was dropped (closed)
      this.stats.spans++;
      const raws = await this.reader.readSpan(g);
      g.items.forEach((it, i) => it.f.resolve(raws[i]));
    } catch (err) {
      for (const it of g.items) it.f.reject(err);
    } finally {
      this.gets.release();
    }
  }

  /** The window stops planning; what it did not hand out is read through the reader. */
  private stepAside(): void {
    if (this.off) return;
    this.off = true;
    this.trees.clear();
    for (const slot of this.files.values()) this.release(slot.flights, 0);
    this.files.clear();
    this.treesAhead.clear();
    this.pending = [];
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.changed = new Promise<void>((r) => (this.wake = r));
    wake();
  }
}
