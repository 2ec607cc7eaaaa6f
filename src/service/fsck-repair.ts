import type { GcCatalog } from '../catalog/gc-catalog.js';
import type { ObjectStore } from '../store/object-store.js';
import type { Digest } from '../core/digest.js';
import type { PackCheck } from './fsck-packs.js';

/** The blobs of one namespace that need a new location: their digests. */
export type Relocate = Map<string, Set<Digest>>;

/**
 * The re-index of `awc fsck --repair` (restic's `repair index`, kept to the catalog): every
 * pack whose rows disagree with its own index gets its rows rewritten from that index, and
 * every blob in `relocate` (needed, but unindexed or located where it cannot be read) gets a
 * row naming another pack whose index holds it, when one can serve it (its object is there,
 * whole, and that blob decoded when it was read). Runs under the gc lock `owner` holds, so no
 * gc moves or deletes packs meanwhile (`GcCatalog.reindexPack`). Then each pack whose object
 * is gone (looked at again) loses the rows still naming it and becomes `deleted`
 * (`GcCatalog.dropLostPack`): a blob no other pack holds is then unindexed, so the next commit
 * or import holding it uploads it anew instead of deduplicating against nothing (restic's
 * `repair index`, then a backup).
 * @returns blob rows written, blob rows dropped and packs found lost. @throws E_GC_LOCK_LOST
 */
export async function reindexFromPacks(
  gc: GcCatalog,
  store: ObjectStore,
  owner: string,
  ttlMs: number,
  checks: ReadonlyMap<string, PackCheck>,
  relocate: Relocate,
): Promise<{ written: number; dropped: number; lostPacks: number }> {
  let written = 0;
  let dropped = 0;
  let lostPacks = 0;
  for (const c of checks.values()) {
    if (!c.entries || c.broken) continue;
    const wanted = relocate.get(c.pack.namespace);
    const replace = new Set<Digest>();
    for (const e of c.entries) if (wanted?.has(e.digest) && !c.badBlobs.has(e.digest)) replace.add(e.digest);
    if (c.mismatched.size === 0 && replace.size === 0) continue;
    const entries = c.entries.filter((e) => !c.badBlobs.has(e.digest));
    written += await gc.reindexPack(owner, ttlMs, { namespace: c.pack.namespace, key: c.pack.key, entries, replace });
    for (const d of replace) wanted!.delete(d); // one new location is enough
  }
  for (const c of checks.values()) {
    if (!c.missing || (await store.has(c.pack.key))) continue;
    const n = await gc.dropLostPack(owner, ttlMs, c.pack.key);
    if (n < 0) continue;
    dropped += n;
    lostPacks++;
  }
  return { written, dropped, lostPacks };
}
