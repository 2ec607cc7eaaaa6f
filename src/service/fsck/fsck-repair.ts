import type { GcCatalog } from '../../catalog/port/gc-catalog.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { Digest } from '../../core/digest.js';
import { toAwcError } from '../../core/errors.js';
import { decodeBlob } from '../../store/pack/pack.js';
import type { PackIndexEntry } from '../../store/pack/pack-types.js';
import type { PackCheck } from './fsck-packs.js';

/** The blobs of one namespace that need a new location: their digests. */
export type Relocate = Map<string, Set<Digest>>;

/**
 * The re-index of `awc fsck --repair` (restic's `repair index`, kept to the catalog): every
 * pack whose rows disagree with its own index gets its rows rewritten from that index, and
 * every blob in `relocate` (needed, but unindexed or located where it cannot be read) gets a
 * row naming another pack whose index holds it, when one can serve it (its object is there,
 * whole, and that blob decodes to its digest). A row is only ever written from an index entry
 * whose blob was read and decoded (see verifiedEntries): a pack's index is vouched for by its
 * own footer alone, which a rotted or crafted pack can get right. Runs under the gc lock `owner` holds, so no
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
    const entries = await verifiedEntries(store, c, replace);
    const good = new Set(entries.map((e) => e.digest));
    for (const d of replace) if (!good.has(d)) replace.delete(d);
    if (entries.length === 0) continue;
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

/**
 * The entries of `c`'s own index that a row may be written from: its index is only checksummed
 * by its own footer, so an entry is trusted only when its blob was read and decoded to its
 * digest. A pack read whole (`--read-data`) gives every entry that decoded; any other gives
 * the entries of its mismatched rows and of `replace`, each read now with a ranged GET and
 * decoded (blobs of at most MAX_BLOB_SIZE bytes, one at a time). Entries no row needs are not
 * written from an unread pack: a row for them would be offered for dedup.
 * @returns the entries whose bytes decode to their digests. @throws what the store throws for reasons other than a missing or corrupt object
 */
async function verifiedEntries(store: ObjectStore, c: PackCheck, replace: ReadonlySet<Digest>): Promise<PackIndexEntry[]> {
  const all = c.entries ?? [];
  if (c.read) return all.filter((e) => !c.badBlobs.has(e.digest));
  const out: PackIndexEntry[] = [];
  for (const e of all) {
    if (!c.mismatched.has(e.digest) && !replace.has(e.digest)) continue;
    try {
      decodeBlob(await store.get(c.pack.key, { offset: e.offset, length: e.storedLength }), e);
      out.push(e);
    } catch (err) {
      const x = toAwcError(err);
      if (x.code !== 'E_INTEGRITY' && x.code !== 'E_FORMAT' && x.code !== 'E_OBJECT_NOT_FOUND') throw x;
    }
  }
  return out;
}
