/**
 * gc of shared layer images (src/drivers/overlay/shared-image.ts; docs/explanation/gc.md
 * "Shared layer images"): the catalog records of snapshot roots no live snapshot of their
 * namespace holds, and the `images/…` objects that no remaining record names, stored more than
 * the grace ago. An image is a speed-up, never a source of truth: a record or an object removed
 * under a host that was about to use it costs that host a layer build, never a wrong layer.
 */
import type { Catalog } from '../../catalog/port/catalog.js';
import type { GcSnapshot } from '../../catalog/port/gc-catalog.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { IMAGE_PREFIX, imageObjectDigest, imageObjectKey } from '../../store/content/image-object.js';
import type { Digest } from '../../core/digest.js';

/** What one gc run removes of the shared layer images. */
export interface LayerImagePlan {
  /** Records of roots no live snapshot of their namespace holds. */
  records: { namespace: string; root: Digest }[];
  /** `images/…` keys named by no record that stays, stored more than the grace ago. */
  keys: string[];
}

/**
 * Plans the removal: every record (all namespaces) whose root is not the root of a `live`
 * snapshot of its namespace, and every image object no remaining record names whose store time
 * is more than `graceMs` ago (a host uploads its objects before it records them: a younger
 * object may be one still being recorded). Cost: one catalog read and one listing of `images/`.
 * @throws what the catalog and the store throw
 */
export async function planLayerImages(
  catalog: Catalog,
  store: ObjectStore,
  live: readonly GcSnapshot[],
  graceMs: number,
): Promise<LayerImagePlan> {
  const liveRoots = new Set(live.map((s) => `${s.namespace}\0${s.root}`));
  const records: LayerImagePlan['records'] = [];
  const kept = new Set<string>();
  for (const r of await catalog.listLayerImages()) {
    if (liveRoots.has(`${r.namespace}\0${r.root}`)) {
      kept.add(imageObjectKey(r.image));
      kept.add(imageObjectKey(r.index));
    } else records.push({ namespace: r.namespace, root: r.root });
  }
  const before = Date.now() - graceMs;
  const keys: string[] = [];
  for await (const o of store.list(IMAGE_PREFIX))
    if (imageObjectDigest(o.key) && !kept.has(o.key) && o.modifiedMs <= before) keys.push(o.key);
  return { records, keys };
}

/** Removes what {@link planLayerImages} planned: the records first, then the objects (a crash in between leaves objects the next run removes). */
export async function removeLayerImages(catalog: Catalog, store: ObjectStore, plan: LayerImagePlan): Promise<void> {
  for (const r of plan.records) await catalog.deleteLayerImage(r.namespace, r.root);
  for (const key of plan.keys) await store.delete(key);
}
