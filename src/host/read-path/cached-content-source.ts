import { AwcError } from '../../core/errors.js';
import type { ChunkRef } from '../../core/tree.js';
import { mapRange, type Extent } from '../../core/sparse.js';
import type { BlobIndex } from '../../store/pack/pack-types.js';
import type { ContentLookup, LayerContent, LayerContents } from '../../store/content/content-index.js';
import type { ChunkFetcher } from './chunk-fetcher.js';
import type { ContentSource, ShortNamed } from '../fuse/content-fuse.js';

export type { LayerContent, LayerContents } from '../../store/content/content-index.js';

/** A registered content object: its size, chunks, and the end offset (bytes) of each chunk; a sparse one's extents. */
interface ContentFile {
  size: number;
  chunks: ChunkRef[];
  /** Data ranges of a sparse file (its chunks cover their concatenation), else undefined. */
  extents?: Extent[];
  /** ends[i] = byte offset just past chunk i (prefix sums of the chunk sizes). */
  ends: number[];
  /** The blob index of the namespace that registered it. */
  index: BlobIndex;
}

const EMPTY = Buffer.alloc(0);
/** Largest scratch buffer kept for synchronous assembly (4 MiB; FUSE reads are at most 1 MiB). */
const MAX_SCRATCH = 4 * 1024 * 1024;

/** Options of a {@link CachedContentSource}. */
export interface CachedContentSourceOptions {
  /**
   * A Buffer that `read` returns synchronously and had to assemble from several chunks is a
   * view of one scratch buffer, overwritten by the next such call: for a caller that consumes
   * the bytes before it calls `read` again (the FUSE server writes them out at once). Saves a
   * fresh allocation (and its page faults) per multi-chunk read. Default false.
   */
  reuseSyncBuffers?: boolean;
}

/**
 * The content FUSE server's source (docs/explanation/design.md#host-read-path), through the host chunk cache: content objects
 * known from the layers mounted on this host (hex digest → size and chunks), each assembled
 * from chunks served by a {@link ChunkFetcher}.
 *
 * `read` answers synchronously (a Buffer, no Promise) when every chunk covering the range is
 * in the cache — the FUSE hit path; a read inside one chunk returns a view of that chunk
 * without copying (and, with reuseSyncBuffers, a read across chunks is assembled in a reused
 * scratch buffer). Otherwise it returns a Promise that the fetcher settles (singleflight,
 * merged ranged reads, verification). Finding the chunks of a range is a binary search over
 * precomputed chunk end offsets.
 *
 * @example
 *   const source = new CachedContentSource(fetcher);
 *   source.register(layer.meta.contents, catalog.blobIndex(ns));
 *   new ContentFuse({ mountpoint, source });
 */
export class CachedContentSource implements ContentSource {
  private readonly files = new Map<string, ContentFile>();
  /** Content indexes read lazily (addIndex), in the order added. */
  private readonly indexes: { contents: ContentLookup; index: BlobIndex }[] = [];
  private readonly reuse: boolean;
  private scratch: Buffer | undefined;
  /** Reads a range of an object from a whole copy on local disk (see {@link readWholeFrom}). */
  private wholeReader: ((hex: string, offset: number, length: number) => Promise<Buffer | undefined> | undefined) | undefined;
  /** Told of every read: the object (64 hex), its size and the bytes asked for (see {@link observeReads}). */
  private observer: ((hex: string, size: number, bytes: number) => void) | undefined;

  /** @param fetcher fetches chunks through the host cache (shared by every namespace). */
  constructor(
    private readonly fetcher: ChunkFetcher,
    opts: CachedContentSourceOptions = {},
  ) {
    this.reuse = opts.reuseSyncBuffers === true;
  }

  /**
   * Registers a layer's content objects, whose chunks are located through `index` (the
   * namespace's blob index). The first registration of a content hex wins: the bytes are the
   * same whoever names them.
   * @returns how many content objects were new.
   */
  register(contents: LayerContents, index: BlobIndex): number {
    let added = 0;
    for (const hex in contents) {
      if (this.files.has(hex)) continue;
      this.files.set(hex, contentFile(contents[hex], index));
      added++;
    }
    return added;
  }

  /**
   * Adds a layer's content index (a shared image's: docs/explanation/layer-images.md), read
   * lazily: an object of it is registered, with `index` (the namespace's blob index), at its
   * first lookup, read or short-name resolution. O(1); each later miss of the registered
   * objects costs a binary search per index added.
   */
  addIndex(contents: ContentLookup, index: BlobIndex): void {
    this.indexes.push({ contents, index });
  }

  /**
   * The content objects of the added indexes whose short name (src/core/content-name.ts) is
   * `short` (ContentSource.withShortName), registered: their digests, sizes and a sparse
   * one's extents. None or one, unless two objects share the name.
   * @throws E_FORMAT when an index entry is malformed
   */
  withShortName(short: string): ShortNamed[] {
    const out: ShortNamed[] = [];
    for (const ix of this.indexes)
      for (const hex of ix.contents.withShortName(short)) {
        const f = out.some((o) => o.hex === hex) ? undefined : this.file(hex);
        if (f) out.push({ hex, size: f.size, ...(f.extents && { extents: f.extents }) });
      }
    return out;
  }

  /** The registered object `hex`, else the first index that has it (registered now), else undefined. */
  private file(hex: string): ContentFile | undefined {
    const f = this.files.get(hex);
    if (f || this.indexes.length === 0) return f;
    for (const ix of this.indexes) {
      const c = ix.contents.get(hex);
      if (!c) continue;
      const added = contentFile(c, ix.index);
      this.files.set(hex, added);
      return added;
    }
    return undefined;
  }

  /**
   * Counts a read of a whole content object that was served elsewhere (the FUSE workers'
   * arena): a use of each of its chunks (ChunkFetcher.noteUse: no disk read), so the cache's
   * LRU order, its memory → disk moves and the fetcher's read-ahead triggers stay as if it
   * had been read here. Chunks no longer cached are skipped (nothing is fetched). Unknown
   * hex: no-op.
   */
  touch(hex: string): void {
    const f = this.file(hex);
    if (!f) return;
    for (const ref of f.chunks) this.fetcher.noteUse(ref);
  }

  /**
   * Calls `fn(hex, size, bytes)` on every read of a known object (before it is served): the
   * object's size and the bytes of the range asked for, clamped at its end (the host object
   * cache counts them to find objects read whole). One observer; a new one replaces it.
   */
  observeReads(fn: (hex: string, size: number, bytes: number) => void): void {
    this.observer = fn;
  }

  /**
   * Serves reads of the objects `fn` has a whole copy of (the host object cache) from that
   * copy: `fn(hex, offset, length)` returns undefined when it has none, else a Promise of the
   * bytes (undefined again when the copy went meanwhile: the chunks serve the read). So a read
   * through FUSE of an object whose chunks left the chunk cache for CACHE (an overlay inode
   * bound to the FUSE mount before the object was filled) costs a local read, not a backend
   * one. One reader; a new one replaces it.
   */
  readWholeFrom(fn: (hex: string, offset: number, length: number) => Promise<Buffer | undefined> | undefined): void {
    this.wholeReader = fn;
  }

  /** The chunks of a known content object (undefined when unknown): their digests and sizes in bytes. */
  chunksOf(hex: string): readonly ChunkRef[] | undefined {
    return this.file(hex)?.chunks;
  }

  /** Number of registered content objects (an added index's objects count once looked up). */
  get size(): number {
    return this.files.size;
  }

  /** Size in bytes of the content object named by 64-hex digest (and a sparse one's extents), or undefined when unknown. */
  lookup(hex: string): { size: number; extents?: Extent[] } | undefined {
    return this.file(hex);
  }

  /**
   * Bytes [offset, offset + length) of a content object, clamped at its end (empty past it);
   * a sparse one's holes read as zeros, and only the chunks of its data in the range are read.
   * @returns a Buffer when every covering chunk is cached (treat it as read-only: it may be a
   *   view of a cached chunk), else a Promise of one.
   * @throws (rejects; never throws synchronously) E_NOT_FOUND for an unknown hex, E_USAGE for
   *   a negative or non-integer offset/length, E_FORMAT when the chunk list does not cover the
   *   size, and whatever ChunkFetcher.fetch rejects with (E_OBJECT_NOT_FOUND, E_INTEGRITY, …).
   */
  read(hex: string, offset: number, length: number): Buffer | Promise<Buffer> {
    let f: ContentFile | undefined;
    try {
      f = this.file(hex);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    if (!f) return Promise.reject(new AwcError('E_NOT_FOUND', `unknown content ${hex}`, { details: { content: hex } }));
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
      return Promise.reject(new AwcError('E_USAGE', `bad content range ${offset}+${length}`));
    }
    const end = Math.min(f.size, offset + length);
    if (end <= offset) return EMPTY;
    this.observer?.(hex, f.size, end - offset);
    const whole = this.wholeReader?.(hex, offset, end - offset);
    if (whole) return whole.then((b) => b ?? this.readChunks(hex, f, offset, end));
    return this.readChunks(hex, f, offset, end);
  }

  /** Bytes [offset, end) of a known object from its chunks (a sparse one's holes as zeros). */
  private readChunks(hex: string, f: ContentFile, offset: number, end: number): Buffer | Promise<Buffer> {
    if (f.extents) return this.readSparse(hex, f, f.extents, offset, end);
    return this.readData(hex, f, offset, end);
  }

  /** A sparse file's [offset, end): zeros, with the data pieces copied in (synchronously when all are cached). */
  private readSparse(hex: string, f: ContentFile, extents: Extent[], offset: number, end: number): Buffer | Promise<Buffer> {
    const out = Buffer.alloc(end - offset);
    const waits: Promise<void>[] = [];
    for (const p of mapRange(extents, offset, end)) {
      if (p.dataOffset < 0) continue;
      const r = this.readData(hex, f, p.dataOffset, p.dataOffset + p.length);
      if (r instanceof Promise) waits.push(r.then((b) => void b.copy(out, p.offset - offset)));
      else r.copy(out, p.offset - offset);
    }
    return waits.length === 0 ? out : Promise.all(waits).then(() => out);
  }

  /** Bytes [offset, end) of the concatenated chunks of `f` (the whole content of a dense file), end inside them. */
  private readData(hex: string, f: ContentFile, offset: number, end: number): Buffer | Promise<Buffer> {
    const ends = f.ends;
    if (ends.length === 0 || ends[ends.length - 1] < end) {
      return Promise.reject(
        new AwcError(
          'E_FORMAT',
          `content ${hex}: its chunks cover ${ends.length ? ends[ends.length - 1] : 0} bytes, its size is ${f.size}`,
        ),
      );
    }
    const first = firstAbove(ends, offset); // first chunk ending after `offset`
    const last = firstAbove(ends, end - 1); // chunk holding byte end-1
    const base = first === 0 ? 0 : ends[first - 1];

    if (first === last) {
      const ref = f.chunks[first];
      const hit = this.fetcher.getSync(ref);
      if (hit) return view(hit, offset - base, end - base);
      return this.fetcher.fetch([ref], f.index).then(([b]) => view(b, offset - base, end - base));
    }

    const parts: (Buffer | undefined)[] = new Array(last - first + 1);
    let missing: ChunkRef[] | undefined;
    let missingAt: number[] | undefined;
    for (let i = first; i <= last; i++) {
      const ref = f.chunks[i];
      const b = this.fetcher.getSync(ref);
      parts[i - first] = b;
      if (!b) {
        (missing ??= []).push(ref);
        (missingAt ??= []).push(i - first);
      }
    }
    if (!missing) return assemble(parts as Buffer[], offset - base, end - offset, this.reuse ? this.scratchOf(end - offset) : undefined);
    const at = missingAt!;
    return this.fetcher.fetch(missing, f.index).then((bufs) => {
      for (let k = 0; k < bufs.length; k++) parts[at[k]] = bufs[k];
      return assemble(parts as Buffer[], offset - base, end - offset);
    });
  }

  /** The scratch buffer for synchronous assembly (see reuseSyncBuffers), or undefined when `length` is over MAX_SCRATCH. */
  private scratchOf(length: number): Buffer | undefined {
    if (length > MAX_SCRATCH) return undefined;
    if (!this.scratch || this.scratch.length < length) this.scratch = Buffer.allocUnsafeSlow(Math.max(length, 1024 * 1024));
    return this.scratch;
  }
}

/** Smallest i with ends[i] > x (ends ascending; caller guarantees one exists). */
function firstAbove(ends: readonly number[], x: number): number {
  let lo = 0;
  let hi = ends.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ends[mid] > x) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** `b[from, to)` without copying (b itself when that is all of it). */
function view(b: Buffer, from: number, to: number): Buffer {
  return from === 0 && to === b.length ? b : b.subarray(from, to);
}

/** `length` bytes starting `skip` bytes into the concatenation of `parts`, in one new Buffer (or at the start of `into`). */
function assemble(parts: Buffer[], skip: number, length: number, into?: Buffer): Buffer {
  const out = into ? into.subarray(0, length) : Buffer.allocUnsafe(length);
  let at = 0;
  for (const p of parts) {
    if (at >= length) break;
    const from = skip > 0 ? Math.min(skip, p.length) : 0;
    skip -= from;
    const n = Math.min(p.length - from, length - at);
    if (n > 0) {
      p.copy(out, at, from, from + n);
      at += n;
    }
  }
  return out;
}

/** A registered object of `c`, its chunks located through `index`: chunk refs and their end offsets. */
function contentFile([size, list, extents]: LayerContent, index: BlobIndex): ContentFile {
  const chunks: ChunkRef[] = new Array(list.length);
  const ends: number[] = new Array(list.length);
  let pos = 0;
  for (let i = 0; i < list.length; i++) {
    const [digest, s] = list[i]!;
    chunks[i] = { digest, size: s };
    pos += s;
    ends[i] = pos;
  }
  return extents ? { size, chunks, ends, index, extents } : { size, chunks, ends, index };
}
