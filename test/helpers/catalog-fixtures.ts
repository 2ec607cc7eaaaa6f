import { sha256 } from '../../src/core/digest.js';
import type { NewSnapshot } from '../../src/catalog/port/catalog.js';
import type { WrittenPack } from '../../src/store/pack/pack-types.js';

/** The namespace the catalog tests use by default. */
export const NS = 'default';

/** A pack with `n` chunk blobs whose digests derive from `seed`; offsets beyond 2^32 to exercise bigint. */
export function mkPack(key: string, n: number, seed: string): WrittenPack {
  const blobs = Array.from({ length: n }, (_, i) => ({
    digest: sha256(`${seed}/${i}`),
    kind: 'chunk' as const,
    codec: 'lz4' as const,
    offset: 5_000_000_000 + i * 100,
    storedLength: 90,
    rawLength: 100,
    pack: key,
  }));
  return { key, size: 5_000_000_000 + n * 100, blobs };
}

/** A new snapshot of namespace `NS` with a random root, 3 files and 6 GB (past 2^32), no packs, unless `over` says otherwise. */
export function snap(over: Partial<NewSnapshot> = {}): NewSnapshot {
  return { namespace: NS, root: sha256(`root-${Math.random()}`), fileCount: 3, byteCount: 6_000_000_000, packs: [], ...over };
}
