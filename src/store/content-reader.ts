import { AwcError } from '../core/errors.js';
import type { Digest } from '../core/digest.js';
import { decodeRoot, decodeTree, type ChunkRef, type RootObject, type TreeObject } from '../core/tree.js';
import type { ObjectStore } from './object-store.js';
import { decodeBlob } from './pack.js';
import type { BlobIndex, BlobLocation } from './pack-types.js';
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

/** Largest merged ranged GET in bytes (8 MiB). */
export const MERGE_MAX_BYTES = 8 * 1024 * 1024;
/** Largest gap in bytes between two blobs of one merged GET (bytes read and discarded). */
export const MERGE_GAP_BYTES = 128 * 1024;
/** Digests per index lookup. */
const LOOKUP_BATCH = 1024;

/** One ranged GET: a span of one pack and the blobs (in request order) read from it. */
interface ReadGroup {
  pack: string;
  start: number;
  end: number;
  items: { loc: BlobLocation; size: number }[];
}

/**
 * Reads blobs, trees, roots and file contents back from packs.
 *
 * Every blob is verified against its digest; a blob that fails (E_INTEGRITY, or a short
 * read) is fetched once more on its own before the error is reported. Chunk reads resolve
 * all locations with batched index lookups and merge neighbouring blobs of one pack into
 * one ranged GET of up to MERGE_MAX_BYTES (gaps up to MERGE_GAP_BYTES are read and
 * dropped); the next GET is issued while the current one's chunks are consumed.
 * Decoded trees are kept in a small LRU (treat returned objects as read-only).
 */
export class ContentReader implements TreeSource {
  private readonly store: ObjectStore;
  private readonly index: BlobIndex;
  private readonly extra?: (d: Digest) => Buffer | undefined;
  private readonly trees: Lru<Digest, TreeObject>;

  /** @param opts store and index to read from; see ContentReaderOptions. */
  constructor(opts: ContentReaderOptions) {
    this.store = opts.store;
    this.index = opts.index;
    this.extra = opts.extra;
    this.trees = new Lru(opts.treeCacheSize ?? 1024);
  }

  /**
   * The raw (uncompressed) bytes of a blob, verified.
   * @throws E_OBJECT_NOT_FOUND when the index (or the store) lacks it, E_INTEGRITY when it fails verification twice, E_FORMAT on a malformed location.
   */
  async readBlob(digest: Digest): Promise<Buffer> {
    const x = this.extra?.(digest);
    if (x) return x;
    const loc = (await this.index.lookup([digest])).get(digest);
    if (!loc) throw new AwcError('E_OBJECT_NOT_FOUND', `blob ${digest} is not in the index`, { details: { digest } });
    try {
      return await this.fetchOne(loc);
    } catch (err) {
      if (!isBadBytes(err)) throw err;
      return this.fetchOne(loc); // refetch once, then report
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
      const loc = locs.get(ref.digest)!;
      const end = loc.offset + loc.storedLength;
      if (
        g &&
        g.pack === loc.pack &&
        loc.offset >= g.start &&
        loc.offset <= g.end + MERGE_GAP_BYTES &&
        Math.max(g.end, end) - g.start <= MERGE_MAX_BYTES
      ) {
        g.end = Math.max(g.end, end);
        g.items.push({ loc, size: ref.size });
      } else {
        g = { pack: loc.pack, start: loc.offset, end, items: [{ loc, size: ref.size }] };
        plan.push(g);
      }
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
    for (let i = 0; i < distinct.length; i += LOOKUP_BATCH) {
      const batch = distinct.slice(i, i + LOOKUP_BATCH);
      const found = await this.index.lookup(batch);
      for (const d of batch) {
        const loc = found.get(d);
        if (!loc) throw new AwcError('E_OBJECT_NOT_FOUND', `chunk ${d} is not in the index`, { details: { digest: d } });
        out.set(d, loc);
      }
    }
    return out;
  }

  /** One ranged GET for exactly one blob, decoded and verified. */
  private async fetchOne(loc: BlobLocation): Promise<Buffer> {
    const stored = await this.store.get(loc.pack, { offset: loc.offset, length: loc.storedLength });
    return decodeBlob(stored, loc);
  }

  /** One ranged GET for a group; each blob decoded and verified, refetched alone once if it fails. */
  private async fetchGroup(g: ReadGroup): Promise<Buffer[]> {
    const span = await this.store.get(g.pack, { offset: g.start, length: g.end - g.start });
    const out: Buffer[] = [];
    for (const { loc, size } of g.items) {
      const from = loc.offset - g.start;
      let raw: Buffer;
      try {
        raw = decodeBlob(span.subarray(from, from + loc.storedLength), loc);
        // Do not let one chunk pin the whole span in memory.
        if (loc.codec === 'none') raw = Buffer.from(raw);
      } catch (err) {
        if (!isBadBytes(err)) throw err;
        raw = await this.fetchOne(loc);
      }
      if (raw.length !== size) {
        throw new AwcError('E_INTEGRITY', `chunk ${loc.digest} has ${raw.length} bytes, the file lists ${size}`);
      }
      out.push(raw);
    }
    return out;
  }
}

/** True for the errors worth one refetch: bytes that failed verification, or a short read. */
function isBadBytes(err: unknown): boolean {
  return err instanceof AwcError && (err.code === 'E_INTEGRITY' || err.code === 'E_FORMAT');
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
