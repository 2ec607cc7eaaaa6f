/**
 * The shared layer image of an imported snapshot, built before the import returns (issue 26;
 * docs/explanation/layer-images.md#sharing-images): written from the trees the import just
 * wrote (src/drivers/overlay/erofs/), uploaded with its content index and recorded in the
 * catalog, so the first mount of the snapshot on any host is a download and a mount, not a
 * walk of every tree. The import never fails for it: an image that cannot be made is reported
 * as skipped, with a reason, and the first host that builds the layer shares it later.
 */
import type { Digest } from '../../core/digest.js';
import { toAwcError } from '../../core/errors.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { AwcConfig } from '../../config/config.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { layerImageSupport, type LayerImageSupport } from '../../drivers/overlay/layer-image-mount.js';
import { publishesImages, shareLayerImage } from '../../drivers/overlay/shared-image.js';
import { layerGitSource } from '../../drivers/overlay/layer-git-index.js';

/** The shared image of an imported snapshot (`ImportResult.image`), as the catalog records it. */
export interface ImportImage {
  /** sha256 of the stored image object (lz4 of the EROFS image), the digest every host checks before it mounts. */
  digest: Digest;
  /** Size of the stored image object, in bytes. */
  bytes: number;
  /** sha256 and stored size (bytes) of the content index object. */
  index: Digest;
  indexBytes: number;
  /** Time the import spent on the image (write, lz4, uploads, record), in ms. */
  ms: number;
  /** False when the catalog already recorded an image of this root (an earlier import of the same tree, or another host's): nothing was built. */
  built: boolean;
}

/**
 * Why an import made no image (`ImportResult.imageSkipped`): `off` (`layerImages: off`),
 * `not-shared` (`layerImages: auto` with a catalog that is not PostgreSQL: no other host to
 * share with), `copy` (`mountDriver: copy`), `kernel` (this host cannot mount file-backed EROFS:
 * Linux < 6.12, and the fleet is taken to be the same), `failed` (the build, an upload or the
 * record failed: `code` says how; the import stands all the same). A snapshot whose import
 * proved `.git/index` gets an image like any other, holding a rewritten index of its own.
 */
export interface ImportImageSkip {
  reason: 'off' | 'not-shared' | 'copy' | 'kernel' | 'failed';
  message: string;
  /** The AwcError code of a `failed` build. */
  code?: string;
}

/** What the import reports of its image: the image, or null and why not. */
export type ImportImageOutcome = { image: ImportImage; imageSkipped?: undefined } | { image: null; imageSkipped: ImportImageSkip };

/** What {@link importImage} needs. */
export interface ImportImageDeps {
  config: Pick<AwcConfig, 'layerImages' | 'catalog' | 'mountDriver' | 'host'>;
  catalog: Catalog;
  store: ObjectStore;
  /** What this host can do (default: layerImageSupport()). */
  support?: LayerImageSupport;
}

/**
 * Builds, uploads and records the shared layer image of snapshot `root` of `ns`, read through
 * `src` (the import's trees, still in its writer's memory; its `.git/index`, when the import
 * proved it, for the image's rewritten index), when images are shared
 * ({@link skipReason}). Never throws: a failure is returned as `imageSkipped` (reason `failed`
 * and the error's code). Cost: O(entries), about 3 s of CPU at 117k entries, plus two uploads.
 */
export async function importImage(deps: ImportImageDeps, ns: string, root: Digest, src: ContentReader): Promise<ImportImageOutcome> {
  const t0 = performance.now();
  try {
    const skip = skipReason(deps);
    if (skip) return { image: null, imageSkipped: skip };
    const git = layerGitSource(src, deps.store);
    const r = await shareLayerImage({ catalog: deps.catalog, store: deps.store, host: deps.config.host }, ns, root, src, git);
    const { image, imageBytes, index, indexBytes } = r.record;
    return { image: { digest: image, bytes: imageBytes, index, indexBytes, ms: performance.now() - t0, built: r.built !== undefined } };
  } catch (err) {
    const e = toAwcError(err);
    return { image: null, imageSkipped: { reason: 'failed', code: e.code, message: `the layer image was not shared: ${e.message}` } };
  }
}

/** Why an import makes no image, or undefined when it makes one. */
export function skipReason(deps: ImportImageDeps): ImportImageSkip | undefined {
  const { config } = deps;
  if ((config.layerImages ?? 'auto') === 'off') return { reason: 'off', message: 'layer images are off (layerImages: off)' };
  if (!publishesImages(config))
    return {
      reason: 'not-shared',
      message: 'layer images are shared only with a PostgreSQL catalog (layerImages: auto); set layerImages: on to share them anyway',
    };
  if (config.mountDriver === 'copy') return { reason: 'copy', message: 'the copy driver mounts no layers (mountDriver: copy)' };
  const support = deps.support ?? layerImageSupport();
  if (!support.mount) return { reason: 'kernel', message: `this host cannot mount layer images: ${support.why ?? 'unknown'}` };
  return undefined;
}
