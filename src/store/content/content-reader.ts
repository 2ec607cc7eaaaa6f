import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import { Semaphore } from '../../core/semaphore.js';
import { decodeRoot, decodeTree, type ChunkRef, type RootObject, type TreeObject } from '../../core/tree.js';
import type { ObjectStore } from '../object/object-store.js';
import { BlobDecoder } from '../pack/blob-decoder.js';
import type { BlobIndex, BlobLocation } from '../pack/pack-types.js';
import { RangePlanner, type BlobRange } from '../pack/range-plan.js';
import type { TreeSource } from './tree-source.js';
import { mapRange, type Extent } from '../../core/sparse.js';
import { withHoles } from './sparse-read.js';

/** Options of a ContentReader. */
export interface ContentReaderOptions {
  store: ObjectStore;
  index: BlobIndex;
  /** Blobs to serve without the store, e.g. `writer.sessionBlob` (trees/roots of a live state, trusted as is). */
  extra?: (d: Digest) => Buffer | undefined;
  /** Decoded trees kept in memory (entries); default 1024. */
  treeCacheSize?: number;
}

/** One ranged GET: a span of one pack and the blobs (in request order) read from it, with the sizes the file lists. */
type ReadGroup = BlobRange<{ loc: BlobLocation; size: number }>;

/**
 * Reads blobs, trees, roots and file contents back from packs.
 *
 * Every blob is verified against its digest; a blob that fails (E_INTEGRITY, or a short
 * read) is fetched once more on its own before the error is reported (BlobDecoder). Chunk
 * reads resolve all locations with batched index lookups and merge neighbouring blobs of one
 * pack into one ranged GET of up to MERGE_MAX_BYTES (gaps up to MERGE_GAP_BYTES are read and
 * dropped; RangePlanner, in the order of the file's chunks); the next GET is issued while the
 * current one's chunks are consumed.
 * Decoded trees are kept in a small LRU (treat returned objects as read-only).
 */
export class ContentReader implements TreeSource {
  private readonly store: ObjectStore;
  /** The blob index it locates blobs in. */
  readonly index: BlobIndex;
  private readonly extra?: (d: Digest) => Buffer | undefined;
  private readonly trees: Lru<Digest, TreeObject>;
  private readonly planner = new RangePlanner();
  private readonly decoder: BlobDecoder;

  /** @param opts store and index to read from; see ContentReaderOptions. */
  constructor(opts: ContentReaderOptions) {
    this.store = opts.store;
    this.index = opts.index;
    this.extra = opts.extra;
    this.trees = new Lru(opts.treeCacheSize ?? 1024);
    this.decoder = new BlobDecoder((pack, offset, length) => this.store.get(pack, { offset, length }));
  }

  /**
   * The raw (uncompressed) bytes of a blob, verified.
   * @throws E_OBJECT_NOT_FOUND when the index (or the store) lacks it, E_INTEGRITY when it fails verification (or comes back short) twice.
   */
  async readBlob(digest: Digest): Promise<Buffer> {
    const x = this.extra?.(digest);
    if (x) return x;
    const loc = (await this.index.lookup([digest])).get(digest);
    if (!loc) throw new AwcError('E_OBJECT_NOT_FOUND', `blob ${digest} is not in the index`, { details: { digest } });
    try {
      return await this.decoder.read(loc);
    } catch (err) {
      const again = await this.relocate(err, [loc]);
      return this.decoder.read(again.get(digest)!);
    }
  }

  /** A tree object by digest (cached). @throws as readBlob, and E_FORMAT when it is not a v1 tree. */
  async readTree(digest: Digest): Promise<TreeObject> {
    const hit = this.trees.get(digest);
    if (hit) return hit;
    const t = decodeTree(await this.readBlob(digest));
    this.trees.set(digest, t);
    return t;
  }

  /**
   * Many tree objects at once, in the order of `digests`: those not cached are located with
   * batched index lookups, sorted by pack and offset, and neighbours merged into ranged GETs
   * (`planner`, default the reader's), at most `limit` GETs at a time (default 8). For gc's
   * mark and the read window of exports (src/store/content/read-window.ts).
   * @throws as readTree (E_OBJECT_NOT_FOUND before any GET when one is not in the index).
   */
  async readTrees(digests: readonly Digest[], limit: Semaphore = new Semaphore(8), planner = this.planner): Promise<TreeObject[]> {
    const got = new Map<Digest, TreeObject>();
    const want = new Set<Digest>();
    for (const d of digests) {
      if (got.has(d)) continue;
      const hit = this.trees.get(d);
      const x = hit ? undefined : this.extra?.(d);
      if (hit || x) got.set(d, hit ?? decodeTree(x!));
      else want.add(d);
    }
    const need = [...want];
    const locs = await this.locateAll(need);
    const items = need.map((d) => ({ loc: locs.get(d)! }));
    items.sort((a, b) => (a.loc.pack < b.loc.pack ? -1 : a.loc.pack > b.loc.pack ? 1 : a.loc.offset - b.loc.offset));
    await Promise.all(
      planner.plan(items).map(async (g) => {
        const wait = limit.acquire();
        if (wait) await wait;
        try {
          const raws = await this.readSpan(g);
          for (let i = 0; i < raws.length; i++) {
            const t = decodeTree(await raws[i]);
            this.trees.set(g.items[i].loc.digest, t);
            got.set(g.items[i].loc.digest, t);
          }
        } finally {
          limit.release();
        }
      }),
    );
    return digests.map((d) => got.get(d)!);
  }

  /** A root object by digest. @throws as readBlob, and E_FORMAT when it is not a v1 root. */
  async readRoot(digest: Digest): Promise<RootObject> {
    return decodeRoot(await this.readBlob(digest));
  }

  /**
   * The raw bytes of `refs`, one Buffer per ref, in order (each `ref.size` bytes, verified).
   * @throws E_OBJECT_NOT_FOUND when a chunk is unknown (before anything is yielded), E_INTEGRITY when a chunk fails verification twice or has the wrong size.
   */
  async *readChunks(refs: readonly ChunkRef[]): AsyncIterable<Buffer> {
    if (refs.length === 0) return;
    const locs = await this.locate(refs);
    // Plan the GETs: consecutive refs whose blobs sit close together in one pack share one.
    const plan: (ReadGroup | Buffer)[] = [];
    let g: ReadGroup | undefined;
    for (const ref of refs) {
      const x = this.extra?.(ref.digest);
      if (x) {
        plan.push(x);
        g = undefined;
        continue;
      }
      const item = { loc: locs.get(ref.digest)!, size: ref.size };
      if (g && this.planner.fits(g, item.loc)) RangePlanner.extend(g, item);
      else plan.push((g = RangePlanner.start(item)));
    }
    // Fetch with one GET ahead.
    const fetch = (p: ReadGroup | Buffer): Promise<Buffer[]> => {
      const pr = Buffer.isBuffer(p) ? Promise.resolve([p]) : this.fetchGroup(p);
      pr.catch(() => undefined); // a prefetch abandoned by an early return must not be an unhandled rejection
      return pr;
    };
    let next = fetch(plan[0]);
    for (let i = 0; i < plan.length; i++) {
      const bufs = await next;
      if (i + 1 < plan.length) next = fetch(plan[i + 1]);
      for (const b of bufs) yield b;
    }
  }

  /**
   * The whole content of a file, as consecutive Buffers (its chunks; for a sparse file, its data
   * with zero Buffers for the holes, src/store/content/sparse-read.ts). @throws as readChunks
   */
  readFile(file: { size: number; chunks: readonly ChunkRef[]; extents?: Extent[] }): AsyncIterable<Buffer> {
    const data = this.readChunks(file.chunks);
    return file.extents ? withHoles(file.size, file.extents, data) : data;
  }

  /** The stored data of a file, as consecutive Buffers (its chunks: for a sparse file the concatenation of its extents). @throws as readChunks */
  readData(file: { chunks: readonly ChunkRef[] }): AsyncIterable<Buffer> {
    return this.readChunks(file.chunks);
  }

  /**
   * `length` bytes of a file from byte `offset` (fewer at the end of the file, empty past
   * it), reading only the chunks that cover the range (of a sparse file, those of the data
   * extents in the range; holes read as zeros).
   * @throws E_USAGE for a negative or non-integer offset/length; as readChunks otherwise.
   */
  async readFileRange(
    file: { size: number; chunks: readonly ChunkRef[]; extents?: Extent[] },
    offset: number,
    length: number,
  ): Promise<Buffer> {
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
      throw new AwcError('E_USAGE', `bad file range ${offset}+${length}`);
    }
    const end = Math.min(file.size, offset + length);
    if (end <= offset) return Buffer.alloc(0);
    if (file.extents) {
      const out = Buffer.alloc(end - offset);
      const dataSize = file.chunks.reduce((a, c) => a + c.size, 0);
      for (const p of mapRange(file.extents, offset, end)) {
        if (p.dataOffset < 0) continue;
        const b = await this.readDataRange(file.chunks, dataSize, p.dataOffset, p.length);
        b.copy(out, p.offset - offset);
      }
      return out;
    }
    return this.readDataRange(file.chunks, file.size, offset, end - offset);
  }

  /** Bytes [offset, offset+length) of the concatenated chunks (of `size` bytes; the range inside it). */
  private async readDataRange(chunks: readonly ChunkRef[], size: number, offset: number, length: number): Promise<Buffer> {
    const end = Math.min(size, offset + length);
    if (end <= offset) return Buffer.alloc(0);
    // First chunk that ends after `offset`, then every chunk until `end`.
    let pos = 0;
    let i = 0;
    while (i < chunks.length && pos + chunks[i].size <= offset) pos += chunks[i++].size;
    const first = pos;
    const want: ChunkRef[] = [];
    while (i < chunks.length && pos < end) {
      want.push(chunks[i]);
      pos += chunks[i++].size;
    }
    const parts: Buffer[] = [];
    for await (const b of this.readChunks(want)) parts.push(b);
    const all = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    return all.subarray(offset - first, Math.min(end - first, all.length));
  }

  // ---------------------------------------------------------------------------------------

  /** The bytes `extra` serves for `digest` (a live state's session blob), or undefined. */
  extraBlob(digest: Digest): Buffer | undefined {
    return this.extra?.(digest);
  }

  /**
   * Locations of `digests` (distinct, none served by `extra`), in batched index lookups.
   * @throws E_OBJECT_NOT_FOUND (details: digest) when one is not in the index; the index's errors.
   */
  async locateAll(digests: readonly Digest[]): Promise<Map<Digest, BlobLocation>> {
    const out = new Map<Digest, BlobLocation>();
    await RangePlanner.locate(this.index, digests, out);
    for (const d of digests) {
      if (!out.has(d)) throw new AwcError('E_OBJECT_NOT_FOUND', `chunk ${d} is not in the index`, { details: { digest: d } });
    }
    return out;
  }

  /**
   * One ranged GET of `[g.start, g.end)` of pack `g.pack`; each blob of `g.items` decoded and
   * verified from it (BlobDecoder: a blob that fails is read again alone once).
   * @returns per item, in order, its raw bytes, or a Promise of them after a refetch (which
   *   rejects E_INTEGRITY when the blob fails twice).
   * @throws (rejects) the GET's errors (E_OBJECT_NOT_FOUND, E_OBJECT_STORE_UNAVAILABLE, …).
   */
  async readSpan(g: BlobRange<{ loc: BlobLocation }>): Promise<(Buffer | Promise<Buffer>)[]> {
    const span = await this.store.get(g.pack, { offset: g.start, length: g.end - g.start });
    return g.items.map(({ loc }) => {
      let raw: Buffer | Promise<Buffer>;
      try {
        raw = this.decoder.fromSpan(span, g.start, loc);
      } catch (err) {
        raw = Promise.reject(err);
      }
      if (raw instanceof Promise) raw.catch(() => undefined); // reported to whoever awaits it; never unhandled
      return raw;
    });
  }

  /** Locations of every digest of `refs` not served by `extra`, in batched lookups. @throws E_OBJECT_NOT_FOUND */
  private locate(refs: readonly ChunkRef[]): Promise<Map<Digest, BlobLocation>> {
    const distinct = new Set<Digest>();
    for (const r of refs) if (!this.extra?.(r.digest)) distinct.add(r.digest);
    return this.locateAll([...distinct]);
  }

  /**
   * After a read at `stale` failed with `err`: when the store says the pack is gone
   * (E_OBJECT_NOT_FOUND), the digests' current locations from the index, each in another
   * pack than before (docs/explanation/gc.md#readers-after-a-repack); else rethrows `err`.
   * @throws `err`, or E_OBJECT_NOT_FOUND naming the digest when the index has it nowhere else
   */
  private async relocate(err: unknown, stale: readonly BlobLocation[]): Promise<Map<Digest, BlobLocation>> {
    if (!(err instanceof AwcError) || err.code !== 'E_OBJECT_NOT_FOUND') throw err;
    const out = new Map<Digest, BlobLocation>();
    await RangePlanner.locate(
      this.index,
      stale.map((l) => l.digest),
      out,
    );
    for (const l of stale) {
      const now = out.get(l.digest);
      if (!now || now.pack === l.pack) {
        throw new AwcError('E_OBJECT_NOT_FOUND', `blob ${l.digest} is in no pack the store has (${l.pack} is gone)`, {
          details: { digest: l.digest, pack: l.pack },
          cause: err,
        });
      }
    }
    return out;
  }

  /** One ranged GET for a group; each blob decoded and verified, refetched alone once if it fails (BlobDecoder). */
  private async fetchGroup(g: ReadGroup): Promise<Buffer[]> {
    let raws: (Buffer | Promise<Buffer>)[];
    try {
      raws = await this.readSpan(g);
    } catch (err) {
      // the pack went (repacked, then deleted) after these locations were looked up: look them up again, once
      const again = await this.relocate(
        err,
        g.items.map((it) => it.loc),
      );
      const out: Buffer[] = [];
      for (const { loc, size } of g.items)
        out.push(BlobDecoder.checkSize(await this.decoder.read(again.get(loc.digest)!), { digest: loc.digest, size }));
      return out;
    }
    const out: Buffer[] = [];
    for (let i = 0; i < raws.length; i++)
      out.push(BlobDecoder.checkSize(await raws[i], { digest: g.items[i].loc.digest, size: g.items[i].size }));
    return out;
  }
}

/** A minimal LRU map (Map keeps insertion order; a hit moves the key to the end). */
class Lru<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly max: number) {}

  get(k: K): V | undefined {
    const v = this.map.get(k);
    if (v !== undefined) {
      this.map.delete(k);
      this.map.set(k, v);
    }
    return v;
  }

  set(k: K, v: V): void {
    this.map.delete(k);
    this.map.set(k, v);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K);
  }
}
