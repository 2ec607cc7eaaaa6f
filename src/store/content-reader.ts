import { AwcError } from '../core/errors.js';
import type { Digest } from '../core/digest.js';
import { decodeRoot, decodeTree, type ChunkRef, type RootObject, type TreeObject } from '../core/tree.js';
import type { ObjectStore } from './object-store.js';
import { BlobDecoder } from './blob-decoder.js';
import type { BlobIndex, BlobLocation } from './pack-types.js';
import { RangePlanner, type BlobRange } from './range-plan.js';
import type { TreeSource } from './tree-source.js';

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
  private readonly index: BlobIndex;
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

  /** The whole content of a file, as consecutive Buffers (its chunks). @throws as readChunks */
  readFile(file: { chunks: readonly ChunkRef[] }): AsyncIterable<Buffer> {
    return this.readChunks(file.chunks);
  }

  /**
   * `length` bytes of a file from byte `offset` (fewer at the end of the file, empty past
   * it), reading only the chunks that cover the range.
   * @throws E_USAGE for a negative or non-integer offset/length; as readChunks otherwise.
   */
  async readFileRange(file: { size: number; chunks: readonly ChunkRef[] }, offset: number, length: number): Promise<Buffer> {
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
      throw new AwcError('E_USAGE', `bad file range ${offset}+${length}`);
    }
    const end = Math.min(file.size, offset + length);
    if (end <= offset) return Buffer.alloc(0);
    // First chunk that ends after `offset`, then every chunk until `end`.
    const chunks = file.chunks;
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

  /** Locations of every digest of `refs` not served by `extra`, in batched lookups. @throws E_OBJECT_NOT_FOUND */
  private async locate(refs: readonly ChunkRef[]): Promise<Map<Digest, BlobLocation>> {
    const distinct: Digest[] = [];
    const seen = new Set<Digest>();
    for (const r of refs) {
      if (seen.has(r.digest)) continue;
      seen.add(r.digest);
      if (!this.extra?.(r.digest)) distinct.push(r.digest);
    }
    const out = new Map<Digest, BlobLocation>();
    await RangePlanner.locate(this.index, distinct, out);
    for (const d of distinct) {
      if (!out.has(d)) throw new AwcError('E_OBJECT_NOT_FOUND', `chunk ${d} is not in the index`, { details: { digest: d } });
    }
    return out;
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
    let span: Buffer;
    try {
      span = await this.store.get(g.pack, { offset: g.start, length: g.end - g.start });
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
    for (const { loc, size } of g.items) {
      let raw = this.decoder.fromSpan(span, g.start, loc);
      if (raw instanceof Promise) raw = await raw;
      out.push(BlobDecoder.checkSize(raw, { digest: loc.digest, size }));
    }
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
