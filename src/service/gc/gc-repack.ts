import type { Catalog } from '../../catalog/port/catalog.js';
import { killPoint } from '../../core/kill-point.js';
import type { GcPack } from '../../catalog/port/gc-catalog.js';
import { MemoryBlobIndex } from '../../store/pack/memory-blob-index.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { ContentWriter } from '../../store/content/content-writer.js';
import { decodeBlob, PACK_ENTRY_SIZE, PACK_FOOTER_SIZE } from '../../store/pack/pack.js';
import type { BlobLocation } from '../../store/pack/pack-types.js';

/** Default repack threshold: a live pack whose live blobs would fill less than half of it is repacked. */
export const DEFAULT_REPACK_BELOW = 0.5;

/** A pack a repack copies out of: its row, the live blobs in it, and the size in bytes a pack of only those would have. */
export interface RepackCandidate {
  pack: GcPack;
  live: BlobLocation[];
  liveBytes: number;
}

/** What a repack did (or, in a dry run, would do): packs copied out of, their bytes, and the bytes of the live blobs copied. */
export interface RepackCount {
  count: number;
  /** Sum of the sizes of the packs copied out of (bytes). */
  bytes: number;
  /** Sum over those packs of the size a pack of only their live blobs would have (bytes): about what the copies take. */
  liveBytes: number;
}

/**
 * The size in bytes of a pack that held only `live`: their stored bytes plus one index entry
 * each and the footer (src/store/pack/pack.ts). A pack written by a repack is 100 % live by this
 * measure, so it is not repacked again until some of it dies.
 */
export function liveSize(live: readonly BlobLocation[]): number {
  let n = PACK_FOOTER_SIZE;
  for (const b of live) n += b.storedLength + PACK_ENTRY_SIZE;
  return n;
}

/**
 * The packs to repack (docs/explanation/gc.md#repack): of `packs`, those `live` (at the
 * listing before the mark) that still hold live blobs and whose live size is below `below`
 * (a fraction, 0..1; 0 repacks nothing) of their stored size.
 */
export function planRepack(packs: readonly GcPack[], locations: ReadonlyMap<string, BlobLocation[]>, below: number): RepackCandidate[] {
  const out: RepackCandidate[] = [];
  if (!(below > 0)) return out;
  for (const pack of packs) {
    const live = locations.get(pack.key);
    if (pack.state !== 'live' || !live || live.length === 0) continue;
    const liveBytes = liveSize(live);
    if (liveBytes < below * pack.size) out.push({ pack, live, liveBytes });
  }
  return out;
}

/** Totals of a plan. */
export function countRepack(c: readonly RepackCandidate[]): RepackCount {
  return { count: c.length, bytes: c.reduce((n, x) => n + x.pack.size, 0), liveBytes: c.reduce((n, x) => n + x.liveBytes, 0) };
}

/** Options of {@link repack}. */
export interface RepackOptions {
  catalog: Catalog;
  store: ObjectStore;
  owner: string;
  lockTtlMs: number;
  /** Target size in bytes of the packs written (default: the writer's, 32 MiB). */
  packBytes?: number;
  /** Test-only injection point: after a namespace's copies were uploaded, before their commit. */
  beforeCommit?(namespace: string): void | Promise<void>;
}

/**
 * Repacks `candidates` (docs/explanation/gc.md#repack), namespace by namespace: reads each
 * old pack whole from the store, decodes and verifies every live blob against its digest
 * (decodeBlob), writes them with the normal pack writer (ContentWriter, no dedup: the index
 * still names the old pack), then commits in one transaction (GcCatalog.commitRepack): the
 * old packs condemned, the copies inserted, the blob rows moved. Kopia's and restic's
 * repack are the references (restic `prune`: rewrite packs whose unused share is high;
 * kopia: rewrite short or mostly-deleted packs, then let the old ones expire).
 * A namespace whose commit is refused (a pack moved on meanwhile) keeps its old packs; its
 * copies stay in the store without a row (gc's sweep of packs without a row takes them).
 * @returns the candidates that were repacked.
 * @throws E_OBJECT_NOT_FOUND / E_INTEGRITY / E_FORMAT when a live blob cannot be read
 *   (nothing of that namespace is committed), E_GC_LOCK_LOST, the store's errors on upload
 */
export async function repack(candidates: readonly RepackCandidate[], opts: RepackOptions): Promise<RepackCandidate[]> {
  const byNs = new Map<string, RepackCandidate[]>();
  for (const c of candidates) byNs.set(c.pack.namespace, [...(byNs.get(c.pack.namespace) ?? []), c]);
  const done: RepackCandidate[] = [];
  const gc = opts.catalog.gc();
  for (const [namespace, list] of byNs) {
    const startedAtMs = await opts.catalog.nowMs();
    const writer = new ContentWriter({ store: opts.store, index: new MemoryBlobIndex(), packBytes: opts.packBytes });
    for (const c of list) {
      const bytes = await opts.store.get(c.pack.key);
      for (const loc of [...c.live].sort((a, b) => a.offset - b.offset)) {
        const raw = decodeBlob(bytes.subarray(loc.offset, loc.offset + loc.storedLength), loc);
        await writer.copyBlob(loc.kind, loc.digest, raw);
      }
      await gc.renewLock(opts.owner, opts.lockTtlMs);
    }
    const packs = await writer.flush();
    const from = list.map((c) => c.pack.key);
    await opts.beforeCommit?.(namespace);
    killPoint('gc.repack.commit.before');
    if (await gc.commitRepack(opts.owner, opts.lockTtlMs, { namespace, from, packs, startedAtMs })) done.push(...list);
    killPoint('gc.repack.commit.after');
  }
  return done;
}
