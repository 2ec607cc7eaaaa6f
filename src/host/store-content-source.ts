import type { Digest } from '../core/digest.js';
import type { ChunkRef } from '../core/tree.js';
import type { ContentSource } from './fuse/content-fuse.js';

/** Reads a byte range of a file given its chunk list (a ContentReader). */
export interface RangeReader {
  readFileRange(file: { size: number; chunks: readonly ChunkRef[] }, offset: number, length: number): Promise<Buffer>;
}

/**
 * The content FUSE server's source: content objects known from the layers mounted on this
 * host (hex digest → size and chunks), read through the content store on demand.
 */
export class StoreContentSource implements ContentSource {
  private files = new Map<string, { size: number; chunks: ChunkRef[]; reader: RangeReader }>();

  /**
   * Registers a layer's content objects (layer meta `contents`: hex → [size, [[digest, size]…]]),
   * read through `reader` (its namespace's). The first registration of a digest wins: the
   * bytes are the same whoever names them.
   */
  register(contents: Record<string, [number, [Digest, number][]]>, reader: RangeReader): void {
    for (const [hex, [size, chunks]] of Object.entries(contents)) {
      if (!this.files.has(hex)) this.files.set(hex, { size, chunks: chunks.map(([digest, s]) => ({ digest, size: s })), reader });
    }
  }

  /** Number of known content objects. */
  get size(): number {
    return this.files.size;
  }

  lookup(hex: string): { size: number } | undefined {
    return this.files.get(hex);
  }

  read(hex: string, offset: number, length: number): Promise<Buffer> {
    const f = this.files.get(hex);
    if (!f) return Promise.reject(new Error(`unknown content ${hex}`));
    const len = Math.max(0, Math.min(length, f.size - offset));
    if (len === 0) return Promise.resolve(Buffer.alloc(0));
    return f.reader.readFileRange(f, offset, len);
  }
}
