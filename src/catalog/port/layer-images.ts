import { isDigest, type Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';

/**
 * A snapshot root's layer image, shared through the object store (docs/explanation/layer-images.md,
 * "Sharing images"): a host that built the root's layer packs it into an EROFS image
 * and uploads the image and its content index; other hosts find both through this record. One
 * record per (namespace, root): the first recorded wins (migration 0007_layer_images).
 */
export interface LayerImageRecord {
  /** The snapshot root the image shows. */
  root: Digest;
  /** sha256 of the stored (lz4-compressed) EROFS image bytes, the object `images/<aa>/<hex>` (src/store/content/image-object.ts). */
  image: Digest;
  /** The image's size in bytes. */
  imageBytes: number;
  /** sha256 of the stored (lz4-compressed) content index bytes, the object `images/<aa>/<hex>`. */
  index: Digest;
  /** The content index's size in bytes. */
  indexBytes: number;
  /** The host id that built it. */
  builtBy: string;
  /** When it was recorded (ms since the epoch, database clock where the adapter has one). */
  createdAt: number;
}

/** What `Catalog.recordLayerImage` is given: a record without its time (the catalog stamps it). */
export type NewLayerImage = Omit<LayerImageRecord, 'createdAt'>;

/**
 * Checks a new layer image record before any statement: the three digests are `sha256:<64 hex>`,
 * the sizes whole numbers of bytes ≥ 0 (safe integers), `builtBy` a non-empty string.
 * @throws E_USAGE naming the bad field
 */
export function checkNewLayerImage(rec: NewLayerImage): void {
  const bad = (what: string) => new AwcError('E_USAGE', `a layer image record needs ${what}`, { details: { root: rec.root } });
  for (const k of ['root', 'image', 'index'] as const) if (!isDigest(rec[k])) throw bad(`${k} as a sha256:<64 hex> digest`);
  for (const k of ['imageBytes', 'indexBytes'] as const) {
    if (!Number.isSafeInteger(rec[k]) || rec[k] < 0) throw bad(`${k} as a whole number of bytes`);
  }
  if (typeof rec.builtBy !== 'string' || rec.builtBy.length === 0) throw bad('builtBy as a host id');
}
