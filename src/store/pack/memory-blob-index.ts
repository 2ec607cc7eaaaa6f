import type { Digest } from '../../core/digest.js';
import type { BlobIndex, BlobLocation, WrittenPack } from './pack-types.js';

/**
 * An in-memory `BlobIndex` (one namespace): digest → where the blob is stored. Used by
 * tests and dry runs; the catalog provides the durable one. The first location recorded
 * for a digest wins (a blob stored twice stays readable through either copy).
 */
export class MemoryBlobIndex implements BlobIndex {
  private readonly map = new Map<Digest, BlobLocation>();

  /** Locations of the known digests among `digests`; unknown digests are absent from the map. */
  async lookup(digests: readonly Digest[]): Promise<Map<Digest, BlobLocation>> {
    const out = new Map<Digest, BlobLocation>();
    for (const d of digests) {
      const loc = this.map.get(d);
      if (loc) out.set(d, loc);
    }
    return out;
  }

  /** Records blob locations (pack key + index entry, offsets/lengths in bytes); known digests keep their first location. */
  add(locations: Iterable<BlobLocation>): void {
    for (const loc of locations) if (!this.map.has(loc.digest)) this.map.set(loc.digest, loc);
  }

  /** Records every blob of the given packs (as returned by `ContentWriter.flush`). */
  addPacks(packs: Iterable<WrittenPack>): void {
    for (const p of packs) this.add(p.blobs);
  }

  /** Location of one digest, or undefined. */
  get(digest: Digest): BlobLocation | undefined {
    return this.map.get(digest);
  }

  /** Number of known blobs. */
  get size(): number {
    return this.map.size;
  }
}
