import type { Catalog, LayerImageRecord } from '../../catalog/port/catalog.js';
import { toAwcError } from '../../core/errors.js';
import { fetchImageObject } from '../../drivers/overlay/shared-image.js';
import { ContentIndex } from '../../store/content/content-index.js';
import { IMAGE_PREFIX, imageObjectKey } from '../../store/content/image-object.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { FsckProblem } from './fsck-report.js';

/** What {@link checkLayerImages} found: records checked, `images/` objects no record names, records dropped by a repair. */
export interface LayerImageCheck {
  checked: number;
  unreferenced: number;
  dropped: number;
}

type Rec = LayerImageRecord & { namespace: string };

/**
 * Checks the shared layer image records (docs/explanation/layer-images.md#sharing-images)
 * against the object store: each record's image and content index must exist at the size it
 * records; with `readData` their stored bytes must hash to their digests, decompress, and the
 * index must open as the content index of the record's root (src/store/content/content-index.ts).
 * A record that fails is an `image-invalid` problem: no snapshot is lost (a host that cannot
 * use an image builds its layer itself), but every new host pays that build. A record that
 * is gone, or was replaced, when it is read again is what a concurrent gc explains: not
 * reported. With `repair` a failing record is deleted (the next host that builds the layer
 * shares a new image; the old objects are left for gc). Lists the catalog first, then the store.
 * @returns records checked, unreferenced `images/` objects, records dropped
 * @throws what the catalog or the store throws for reasons other than a missing or corrupt object
 */
export async function checkLayerImages(
  catalog: Catalog,
  store: ObjectStore,
  readData: boolean,
  repair: boolean,
  problems: FsckProblem[],
): Promise<LayerImageCheck> {
  const records = await catalog.listLayerImages();
  const stored = new Map<string, number>();
  for await (const o of store.list(IMAGE_PREFIX)) stored.set(o.key, o.size);
  const named = new Set(records.flatMap((r) => [imageObjectKey(r.image), imageObjectKey(r.index)]));
  const result: LayerImageCheck = { checked: records.length, unreferenced: 0, dropped: 0 };
  for (const key of stored.keys()) if (!named.has(key)) result.unreferenced++;
  for (const r of records) {
    const found = checkStored(r, stored) ?? (readData ? await checkBytes(store, r) : undefined);
    if (!found) continue;
    const now = await catalog.layerImage(r.namespace, r.root);
    if (!now || now.image !== r.image || now.index !== r.index) continue; // removed by a gc meanwhile
    if (repair) {
      await catalog.deleteLayerImage(r.namespace, r.root);
      result.dropped++;
      continue;
    }
    problems.push({ kind: 'image-invalid', ...found, namespace: r.namespace, digest: r.root, snapshots: [] });
  }
  return result;
}

/** What is wrong with one record: the error code, a message and the key of the object concerned. */
type Finding = Pick<FsckProblem, 'code' | 'message' | 'key'>;

/** Both objects of `r` listed, of the sizes it records; else what is wrong. */
function checkStored(r: Rec, stored: ReadonlyMap<string, number>): Finding | undefined {
  for (const [what, d, bytes] of [['image', r.image, r.imageBytes] as const, ['content index', r.index, r.indexBytes] as const]) {
    const key = imageObjectKey(d);
    const size = stored.get(key);
    if (size === undefined)
      return {
        code: 'E_OBJECT_NOT_FOUND',
        key,
        message: `the layer image of ${r.root} names its ${what} ${key}, which is not in the store`,
      };
    if (size !== bytes)
      return {
        code: 'E_INTEGRITY',
        key,
        message: `the ${what} ${key} of the layer image of ${r.root} is ${size} bytes, its record says ${bytes}`,
      };
  }
  return undefined;
}

/** Both objects of `r` read whole: digests, lz4, and the index opened for its root; else what is wrong. */
async function checkBytes(store: ObjectStore, r: Rec): Promise<Finding | undefined> {
  let key = imageObjectKey(r.image);
  try {
    await fetchImageObject(store, r.image);
    key = imageObjectKey(r.index);
    ContentIndex.parse(await fetchImageObject(store, r.index), r.root);
    return undefined;
  } catch (err) {
    const e = toAwcError(err);
    if (e.code !== 'E_INTEGRITY' && e.code !== 'E_FORMAT' && e.code !== 'E_OBJECT_NOT_FOUND') throw e;
    return { code: e.code, key, message: `the layer image of ${r.root}: ${e.message}` };
  }
}
