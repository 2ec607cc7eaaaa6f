import type { Digest } from '../../core/digest.js';
import type { Entry } from '../../core/tree.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import { ContentReader } from '../../store/content/content-reader.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { BlobLocation } from '../../store/pack/pack-types.js';

/** What a mark found: the live digests of each namespace and the keys of the packs that hold their indexed locations. */
export interface MarkResult {
  /** Namespace name → live digests (roots, trees, chunks). */
  digests: Map<string, Set<Digest>>;
  /** Keys of packs holding the indexed location of a live blob (any namespace). */
  packs: Set<string>;
  /** Pack key → the indexed locations of the live blobs in it (what a repack copies). */
  locations: Map<string, BlobLocation[]>;
  /** Trees read. */
  trees: number;
}

/** Trees read in one batch by the mark (ContentReader.readTrees). */
const TREE_BATCH = 256;

/**
 * The mark of gc (docs/explanation/gc.md#one-run-of-gc, step 4): walks every given root
 * through its trees (each tree once per namespace, read TREE_BATCH at a time with
 * ContentReader.readTrees: merged ranged GETs, 8 at once) to the chunks of every file, then looks
 * the live digests up in each namespace's blob index (all packs, condemned ones included:
 * they are still readable) to find the live packs. `tick` runs every 256 trees (the caller
 * renews its lock there).
 * @throws E_OBJECT_NOT_FOUND / E_INTEGRITY / E_FORMAT when a live root or tree cannot be read
 *   (an incomplete mark proves nothing: the caller must stop), or what `tick` throws
 */
export async function markLive(
  catalog: Catalog,
  store: ObjectStore,
  roots: readonly { namespace: string; root: Digest }[],
  tick: () => Promise<void> = async () => undefined,
): Promise<MarkResult> {
  const result: MarkResult = { digests: new Map(), packs: new Set(), locations: new Map(), trees: 0 };
  const byNs = new Map<string, Digest[]>();
  for (const r of roots) byNs.set(r.namespace, [...(byNs.get(r.namespace) ?? []), r.root]);
  for (const [ns, nsRoots] of byNs) {
    const live = new Set<Digest>();
    result.digests.set(ns, live);
    const reader = new ContentReader({ store, index: catalog.blobIndex(ns), treeCacheSize: TREE_BATCH });
    await walkTrees(reader, await readRoots(reader, nsRoots, live), live, result, tick);
    const found = await catalog.blobIndex(ns).lookup([...live]);
    for (const loc of found.values()) {
      result.packs.add(loc.pack);
      const list = result.locations.get(loc.pack);
      if (list) list.push(loc);
      else result.locations.set(loc.pack, [loc]);
    }
  }
  return result;
}

/** Reads each root not yet in `live`, adds it and its tree to `live`. @returns the trees to walk */
async function readRoots(reader: ContentReader, roots: readonly Digest[], live: Set<Digest>): Promise<Digest[]> {
  const todo: Digest[] = [];
  for (const root of roots) {
    if (live.has(root)) continue;
    live.add(root);
    const r = await reader.readRoot(root);
    if (!live.has(r.tree)) {
      live.add(r.tree);
      todo.push(r.tree);
    }
  }
  return todo;
}

/**
 * Walks the trees of `todo` (consumed) and every subtree, adding subtrees and file chunks to
 * `live`, a batch at a time (up to TREE_BATCH: located together, neighbours of a pack in one
 * ranged GET, 8 GETs at once); counts trees in `result.trees`, calls `tick` every 256.
 */
async function walkTrees(
  reader: ContentReader,
  todo: Digest[],
  live: Set<Digest>,
  result: MarkResult,
  tick: () => Promise<void>,
): Promise<void> {
  while (todo.length > 0) {
    const batch = todo.splice(Math.max(0, todo.length - TREE_BATCH));
    for (const t of await reader.readTrees(batch)) {
      if (++result.trees % 256 === 0) await tick();
      markEntries(t.entries, live, todo);
    }
  }
}

/** Adds the subtrees of `entries` not yet live to `live` and `todo`, and the chunks of its files to `live`. */
function markEntries(entries: readonly Entry[], live: Set<Digest>, todo: Digest[]): void {
  for (const e of entries) {
    if (e.type === 'dir' && !live.has(e.tree)) {
      live.add(e.tree);
      todo.push(e.tree);
    } else if (e.type === 'file') {
      for (const c of e.chunks) live.add(c.digest);
    }
  }
}
