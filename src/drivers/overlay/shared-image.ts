/**
 * Layer images shared through the object store (issue 26: the first mount of a snapshot on a
 * host that never saw it; docs/explanation/layer-images.md, "Sharing images"). The composefs
 * model: a snapshot's layer is written as an EROFS image straight from its trees (our own writer,
 * src/drivers/overlay/erofs/: no layer directory, no mkfs.erofs) and uploaded with the layer's
 * content index; the catalog records both digests (first writer wins). An import does this
 * before it returns (src/service/import/snapshot-image.ts); a checkpoint's image, and the image
 * of any layer a host builds that has none yet, follow in the background of the host daemon.
 * Every other host fetches the two objects, checks their digests, mounts the image file-backed
 * as the layer's tree and serves the index's contents, instead of walking every tree of the snapshot.
 */
import { EventEmitter } from 'node:events';
import { mkdir, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import type * as Lz4 from 'lz4-napi';
import { lazyRequire } from '../../core/lazy-require.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { digestHex, sha256, type Digest } from '../../core/digest.js';
import type { Logger, LogRecord } from '../../core/log.js';
import { mkdirPrivate, writeFilePrivate } from '../../core/private-fs.js';
import { removeTree } from '../../core/remove-tree.js';
import type { Catalog, LayerImageRecord } from '../../catalog/port/catalog.js';
import type { AwcConfig } from '../../config/config.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { imageObjectKey } from '../../store/content/image-object.js';
import { ContentIndex } from '../../store/content/content-index.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { unmount } from '../../host/mount/mount-commands.js';
import { INDEX_FILE, LINKS_FILE, type Layer } from './layer-builder.js';
import { layerImageBytes } from './erofs/layer-entries.js';
import type { LayerGitIndexSource } from './layer-git-index.js';
import { layerImageSupport, mountLayerImage, type LayerImageSupport } from './layer-image-mount.js';

/** lz4-napi, loaded on first use: images and content indexes are stored lz4-compressed (block format with the size prepended, as packs' blobs). */
const lz4 = lazyRequire<typeof Lz4>('lz4-napi');

/** `<base>/image.json`: marks a layer whose tree is a mounted image, and the image file's own sha256 (checked at each mount). */
const IMAGE_MARK = 'image.json';
/** `<base>/image.erofs`: the image file (uncompressed, 0600). */
const IMAGE_FILE = 'image.erofs';

/**
 * A layer whose tree is a mounted shared image. Its content index is looked up lazily (at the
 * content FUSE server's first LOOKUP of each object), never registered whole.
 */
export interface ImageLayer {
  /** The mounted image: the overlay's lower. */
  dir: string;
  index: ContentIndex;
}

/** A layer as a host loads it: a layer directory built here, or a shared image. */
export type LoadedLayer = Layer | ImageLayer;

/** One use of a shared image, for the daemon's metrics (`awc_layer_images_total`). */
export interface LayerImageEvent {
  /**
   * `published`: built and shared; `mounted`: a layer taken from a shared image; `built`: a
   * layer built here as an image (nothing shared); `fallback`: an image could not be used or
   * built, the layer is a directory built here; `failed`: a background build or upload failed.
   */
  outcome: 'published' | 'mounted' | 'built' | 'fallback' | 'failed';
  /** Why a fallback or a failure happened: the AwcError code (E_INTEGRITY, E_FORMAT, E_LAYER_IMAGE_UNSUPPORTED, …). */
  reason?: string;
}

/** Events of {@link SharedLayerImages}. */
export interface SharedLayerImagesEvents {
  image: [LayerImageEvent];
  log: [LogRecord];
}

/** What {@link SharedLayerImages} works with. */
export interface SharedLayerImagesOptions {
  catalog: Catalog;
  store: ObjectStore;
  /** This host's name (recorded as the builder). */
  host: string;
  /** Where builds of earlier versions (mkfs.erofs) left their files: emptied before this daemon's first build (images are now built in memory). */
  workDir: string;
  /** Whether this host builds and shares images of the layers it builds and of checkpoints (it always uses shared ones it can mount). */
  publish: boolean;
  /** The trees of a namespace: images are written from them. */
  reader: (ns: string) => TreeSource;
  /** Where images of a namespace find git proofs and `.git/index` (see layerImageSource's `git`); absent: the snapshot's own index. */
  gitIndex?: (ns: string) => LayerGitIndexSource;
  /** What this host can do (default: {@link layerImageSupport}). */
  support?: LayerImageSupport;
  logger?: Logger;
}

/**
 * The shared layer images of one host daemon: reopens image-backed layers after a restart,
 * fetches and mounts images other hosts shared, and shares the images of layers this host
 * built (one build at a time, in the background, once per root). Emits `image` events; logs
 * to its logger (default: its `log` event); never prints.
 */
export class SharedLayerImages extends EventEmitter<SharedLayerImagesEvents> {
  private readonly support: LayerImageSupport;
  private readonly log: Logger;
  /** Layer directories whose file system cannot back an EROFS mount (buildHere builds no image there again). */
  private readonly unmountable = new Set<string>();
  /** Roots whose image this daemon shared or tried to (never twice). */
  private readonly tried = new Set<Digest>();
  /** The builds, one at a time; the first empties the work directory of what an earlier daemon's builds left. */
  private queue: Promise<void> = Promise.resolve();
  private cleaned = false;
  /** Aborted by {@link stop}: the build under way is killed, none is started after. */
  private readonly stopping = new AbortController();

  constructor(private readonly opts: SharedLayerImagesOptions) {
    super();
    this.support = opts.support ?? layerImageSupport();
    this.log = opts.logger ?? ((l) => void this.emit('log', l));
  }

  /**
   * The image-backed layer of `root` in `layersDir` when there is one, its image mounted (again,
   * after a reboot: checked against the digest kept beside it); undefined for a layer directory
   * or no layer. An image that no longer mounts is removed, so the caller builds the layer.
   * @throws what reading the layer's files throws
   */
  async reopen(root: Digest, layersDir: string): Promise<ImageLayer | undefined> {
    const base = join(layersDir, digestHex(root));
    let mark: { v: 1; image: Digest };
    try {
      mark = JSON.parse(await readFile(join(base, IMAGE_MARK), 'utf8')) as typeof mark;
    } catch {
      return undefined;
    }
    const tree = join(base, 'tree');
    if (!isMounted(tree)) {
      try {
        await mountLayerImage(join(base, IMAGE_FILE), tree, mark.image);
      } catch (err) {
        this.log({ level: 'warn', msg: 'a layer image no longer mounts: the layer is built again', root, error: (err as Error).message });
        await dropLayerDir(base);
        return undefined;
      }
    }
    return { dir: tree, index: ContentIndex.parse(await readFile(join(base, INDEX_FILE)), root) };
  }

  /**
   * The layer of `root` from the image another host shared, when the catalog records one and
   * this host can mount it: both objects fetched, their digests checked, the image mounted at
   * `<layersDir>/<root hex>/tree` and the content index written beside it. Undefined when there
   * is none or it cannot be used (a `fallback` event and a log line say why): the caller builds
   * the layer. `shortNameFree` is the content FUSE server's (a short name another object holds
   * on this host makes the image unusable here). Never throws for a bad image.
   */
  async fetch(ns: string, root: Digest, layersDir: string): Promise<ImageLayer | undefined> {
    if (!this.support.mount) return undefined;
    const rec = await this.opts.catalog.layerImage(ns, root);
    if (!rec) return undefined;
    try {
      const layer = await this.fetchRecord(rec, layersDir);
      if (layer) this.emit('image', { outcome: 'mounted' });
      return layer;
    } catch (err) {
      const e = toAwcError(err);
      this.emit('image', { outcome: 'fallback', reason: e.code });
      this.log({
        level: 'warn',
        msg: 'a shared layer image cannot be used: the layer is built here',
        root,
        code: e.code,
        error: e.message,
      });
      return undefined;
    }
  }

  /** The layer from `rec`'s objects, or undefined when a layer of the root appeared meanwhile. @throws E_INTEGRITY, E_FORMAT, the store's and the mount's errors */
  private async fetchRecord(rec: LayerImageRecord, layersDir: string): Promise<ImageLayer | undefined> {
    const t = [performance.now()];
    const lap = (): void => void t.push(performance.now());
    const [image, index] = await Promise.all([fetchImageObject(this.opts.store, rec.image), fetchImageObject(this.opts.store, rec.index)]);
    lap();
    const parsed = ContentIndex.parse(index, rec.root);
    lap();
    const layer = await placeImageLayer(layersDir, rec.root, image, index, parsed, lap);
    lap();
    const [fetchMs, parseMs, writeMs, mountMs] = t.slice(1).map((x, i) => Math.round(x - t[i]!));
    if (layer) this.log({ level: 'info', msg: 'mounted a shared layer image', root: rec.root, fetchMs, parseMs, writeMs, mountMs });
    return layer;
  }

  /**
   * Builds the layer of `root` here as an image, from the snapshot's trees (our writer: no layer
   * directory, nothing uploaded), mounted file-backed at `<layersDir>/<root hex>/tree` with its
   * content index beside it: what a layer directory would be, at a fraction of the cost (one
   * in-memory write, about 1.6 s of CPU at 117k files, against a system call or more per entry;
   * docs/explanation/layer-images.md#built-here). `opts` as buildLayer's: `owner` (an ordinary
   * user's layer, every entry theirs), `shortNameFree` (the content FUSE server's). A root whose
   * import proved `.git/index` gets the rewritten index (as a shared image). Undefined, with a
   * `fallback` event, when this host cannot mount images, the tree cannot be written as one
   * (E_UNSUPPORTED: an xattr EROFS cannot hold) or `layersDir`'s file system cannot back an
   * EROFS mount (E_LAYER_IMAGE_UNSUPPORTED, e.g. tmpfs; not tried there again by this daemon):
   * the caller builds a layer directory. Another
   * build of the root that won the race is returned in place of this one.
   * @throws what reading the trees and mounting the image throw (E_FORMAT on a corrupt tree)
   */
  async buildHere(
    ns: string,
    root: Digest,
    layersDir: string,
    opts: { owner?: { uid: number; gid: number }; shortNameFree?: (hex: string) => boolean } = {},
  ): Promise<ImageLayer | undefined> {
    if (!this.support.mount || this.unmountable.has(layersDir)) return undefined;
    const t0 = performance.now();
    let img;
    try {
      img = await layerImageBytes(this.opts.reader(ns), root, { ...opts, git: this.opts.gitIndex?.(ns) });
    } catch (err) {
      const e = toAwcError(err);
      if (e.code !== 'E_UNSUPPORTED') throw err;
      this.emit('image', { outcome: 'fallback', reason: e.code });
      this.log({ level: 'warn', msg: 'the layer cannot be an image: it is built as a directory', root, code: e.code, error: e.message });
      return undefined;
    }
    const index = ContentIndex.encode(img.meta);
    let layer: ImageLayer | undefined;
    try {
      layer = await placeImageLayer(layersDir, root, img.img, index, ContentIndex.parse(index, root), () => undefined);
    } catch (err) {
      // the kernel could mount images, yet not one from this file system (tmpfs: ENOTBLK): never again in this directory
      if (toAwcError(err).code !== 'E_LAYER_IMAGE_UNSUPPORTED') throw err;
      this.unmountable.add(layersDir);
      this.emit('image', { outcome: 'fallback', reason: 'E_LAYER_IMAGE_UNSUPPORTED' });
      this.log({
        level: 'warn',
        msg: 'layer images do not mount here: layers are built as directories',
        layersDir,
        error: (err as Error).message,
      });
      return undefined;
    }
    if (!layer) return this.reopen(root, layersDir); // built meanwhile (as an image, or a directory: undefined)
    this.emit('image', { outcome: 'built' });
    const [buildMs, ms] = [Math.round(img.ms), Math.round(performance.now() - t0)];
    this.log({ level: 'info', msg: 'built a layer image here', root, imageBytes: img.img.length, buildMs, ms });
    return layer;
  }

  /**
   * Shares the image of snapshot `root` of `ns` in the background (written from its trees), once
   * per root and one build at a time, when this host publishes and can mount images and no host
   * shared one yet: after this host built the root's layer, or after a checkpoint made the root.
   * A root whose import proved its `.git/index` gets an image holding a rewritten index of its
   * own (see {@link shareLayerImage}). Never throws: a failure is logged.
   */
  publishLater(ns: string, root: Digest): void {
    if (!this.opts.publish || !this.support.mount || this.tried.has(root)) return;
    if (this.stopping.signal.aborted) return;
    this.tried.add(root);
    this.queue = this.queue.then(() =>
      this.publish(ns, root).catch((err) => {
        const e = toAwcError(err);
        if (e.code === 'E_CANCELLED')
          return this.log({ level: 'info', msg: 'the layer image build was cancelled: the daemon stops', root });
        this.emit('image', { outcome: 'failed', reason: e.code });
        this.log({ level: 'warn', msg: 'the layer image was not shared', root, code: e.code, error: e.message });
      }),
    );
  }

  /** Cancels the image build under way (at its next step) and the ones queued; resolves once none runs. Never rejects. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.queue;
  }

  private async publish(ns: string, root: Digest): Promise<void> {
    if (this.stopping.signal.aborted) return;
    if (!this.cleaned) {
      this.cleaned = true;
      await removeTree(this.opts.workDir);
    }
    const r = await shareLayerImage(
      { ...this.opts, signal: this.stopping.signal },
      ns,
      root,
      this.opts.reader(ns),
      this.opts.gitIndex?.(ns),
    );
    if (!r.built) return; // another host (or the import) shared it first
    this.emit('image', { outcome: 'published' });
    const { imageBytes, indexBytes } = r.record;
    this.log({ level: 'info', msg: 'shared a layer image', root, imageBytes, indexBytes, buildMs: Math.round(r.built.buildMs) });
  }
}

/**
 * Whether hosts of `config` build and share layer images (`layerImages`: `on`; `auto`, the
 * default, with a PostgreSQL catalog, a fleet: on one host there is nobody to share with).
 */
export function publishesImages(config: Pick<AwcConfig, 'layerImages' | 'catalog'>): boolean {
  const policy = config.layerImages ?? 'auto';
  return policy === 'on' || (policy === 'auto' && config.catalog.startsWith('postgres'));
}

/** What {@link shareLayerImage} did: the record that stands, and what this call built. */
export interface SharedImage {
  /** The catalog's record of the root's image (this call's, or the one recorded first). */
  record: LayerImageRecord;
  /**
   * What this call built: the image file's sha256 and size (uncompressed), the time to write it
   * from the trees and the whole time (write, lz4, two uploads, the record), in ms. Absent when
   * the catalog had a record before it started (nothing was built).
   */
  built?: { digest: Digest; bytes: number; buildMs: number; ms: number };
}

/**
 * Writes the EROFS image of snapshot `root` from its trees (`src`: no layer directory, no
 * mkfs.erofs; src/drivers/overlay/erofs/), uploads it and the layer's content index
 * (src/store/content/content-index.ts), both lz4-compressed and named by the SHA-256 of their
 * stored bytes, then records both in the catalog for `ns`. Nothing is built when the catalog
 * already records an image of the root. First wins: when another host recorded one meanwhile,
 * that record is returned (the objects uploaded here are left for gc). Cost: O(entries), about
 * 3 s of CPU and 250 MB of memory at 117k entries, plus two uploads (about 5 MB and a few MB at
 * 100k files). The same trees give the same image bytes on any host. With `git` (the proofs
 * and file reads of the namespace), a root whose import proved `.git/index` gets an image that
 * holds a rewritten index whose stat data are the image's own (layerImageSource), so a
 * workspace over it trusts the index as over a layer built here.
 * `opts.signal` cancels the build between its steps (E_CANCELLED).
 * @returns the record that stands, and what was built
 * @throws E_CANCELLED, E_UNSUPPORTED (an xattr the format cannot hold), E_FORMAT (a corrupt
 *   tree), what the store and the catalog throw
 */
export async function shareLayerImage(
  opts: Pick<SharedLayerImagesOptions, 'catalog' | 'store' | 'host'> & { signal?: AbortSignal },
  ns: string,
  root: Digest,
  src: TreeSource,
  git?: LayerGitIndexSource,
): Promise<SharedImage> {
  const t0 = performance.now();
  const existing = await opts.catalog.layerImage(ns, root);
  if (existing) return { record: existing };
  const cancelled = (): void => {
    if (opts.signal?.aborted) throw new AwcError('E_CANCELLED', `the image build of ${root} was cancelled`);
  };
  cancelled();
  const img = await layerImageBytes(src, root, { git });
  cancelled();
  const imageLz = await lz4().compress(img.img);
  const indexLz = await lz4().compress(ContentIndex.encode(img.meta));
  const image = sha256(imageLz);
  const index = sha256(indexLz);
  await opts.store.put(imageObjectKey(image), imageLz);
  await opts.store.put(imageObjectKey(index), indexLz);
  const record = await opts.catalog.recordLayerImage(ns, {
    root,
    image,
    imageBytes: imageLz.length,
    index,
    indexBytes: indexLz.length,
    builtBy: opts.host,
  });
  return { record, built: { digest: img.digest, bytes: img.img.length, buildMs: img.ms, ms: performance.now() - t0 } };
}

/**
 * Writes the image (0600) and its content index into a temporary layer directory beside
 * `<layersDir>/<root hex>`, mounts the image on its `tree` (checked against the image's own
 * digest) and renames the directory into place; `lap` is called once the files are written.
 * Undefined when a layer of the root appeared meanwhile (its directory is then left as it is).
 * @throws the mount's errors (nothing is left then)
 */
async function placeImageLayer(
  layersDir: string,
  root: Digest,
  image: Buffer,
  index: Buffer,
  parsed: ContentIndex,
  lap: () => void,
): Promise<ImageLayer | undefined> {
  await mkdirPrivate(layersDir);
  const base = join(layersDir, digestHex(root));
  const tmp = `${base}.tmp-${process.pid}-${Date.now()}`;
  await mkdirPrivate(tmp);
  try {
    const imageDigest = sha256(image);
    await writeFilePrivate(join(tmp, IMAGE_FILE), image);
    await writeFilePrivate(join(tmp, INDEX_FILE), index);
    await writeFilePrivate(join(tmp, LINKS_FILE), JSON.stringify(parsed.hardlinks));
    await writeFilePrivate(join(tmp, IMAGE_MARK), JSON.stringify({ v: 1, image: imageDigest }));
    await mkdir(join(tmp, 'tree'), { mode: 0o700 });
    lap();
    await mountLayerImage(join(tmp, IMAGE_FILE), join(tmp, 'tree'), imageDigest);
    await rename(tmp, base);
  } catch (err) {
    await dropLayerDir(tmp);
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTEMPTY' || code === 'EEXIST') return undefined; // a layer was built meanwhile: the caller takes it
    throw err;
  }
  return { dir: join(base, 'tree'), index: parsed };
}

/** Reads the object stored with sha256 `d` and checks its bytes, then decompresses them (lz4). @throws E_INTEGRITY, E_FORMAT, what the store throws */
export async function fetchImageObject(store: ObjectStore, d: Digest): Promise<Buffer> {
  const key = imageObjectKey(d);
  const body = await store.get(key);
  const got = sha256(body);
  if (got !== d)
    throw new AwcError('E_INTEGRITY', `object ${key} has digest ${got}, expected ${d}: it is not used`, {
      details: { key, expected: d, actual: got },
    });
  try {
    return await lz4().uncompress(body);
  } catch (err) {
    throw new AwcError('E_FORMAT', `object ${key} is not lz4: ${(err as Error).message}`, { cause: err });
  }
}

/** Unmounts the image of the layer directory `base` when its tree is one (lazily: nothing may use it by now). */
export async function unmountLayerTree(base: string): Promise<void> {
  const tree = join(base, 'tree');
  if (isMounted(tree)) await unmount(tree, true);
}

/** Unmounts a layer's image (when mounted) and removes the layer directory `base`. */
export async function dropLayerDir(base: string): Promise<void> {
  await unmountLayerTree(base);
  await removeTree(base);
}
