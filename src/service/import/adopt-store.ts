import { AwcError, toAwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import { adoptStoreIdentity, readStoreIdentity } from '../../catalog/open/store-binding.js';
import { ContentReader } from '../../store/content/content-reader.js';
import { MemoryBlobIndex } from '../../store/pack/memory-blob-index.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { PACK_FOOTER_SIZE, packKeyHex, parsePackFooter, parsePackIndex } from '../../store/pack/pack.js';
import type { WrittenPack } from '../../store/pack/pack-types.js';
import { countRoot } from '../capture/tree-stats.js';

/** A snapshot `awc fsck --adopt-store` rebuilt: one per root blob found in the store's packs. */
export interface AdoptedSnapshot {
  id: string;
  name: string;
  root: Digest;
  files: number;
  bytes: number;
}

/** What `awc fsck --adopt-store` did (see {@link adoptStore}). */
export interface AdoptReport {
  /** The catalog's new identity, and the catalog the store named before (if it had an identity). */
  catalogId: string;
  storeId: string;
  previousCatalogId: string | null;
  /** Packs re-indexed from their own index, and the blob rows made from them. */
  packs: number;
  blobs: number;
  snapshots: AdoptedSnapshot[];
  /** Packs or roots that could not be read: left without a row (gc's orphan handling takes such packs). */
  skipped: { what: string; code: string; message: string }[];
}

/** A pack's own index, read with two ranged GETs (footer, then index): a WrittenPack. */
async function readPack(store: ObjectStore, key: string, size: number): Promise<WrittenPack> {
  const tail = await store.get(key, { offset: Math.max(0, size - PACK_FOOTER_SIZE), length: PACK_FOOTER_SIZE });
  const { indexLength } = parsePackFooter(tail);
  const start = size - PACK_FOOTER_SIZE - indexLength;
  if (start < 0) throw new AwcError('E_FORMAT', `pack ${key}: its index (${indexLength} bytes) does not fit in ${size} bytes`);
  const ix = await store.get(key, { offset: start, length: indexLength + PACK_FOOTER_SIZE });
  return { key, size, blobs: parsePackIndex(ix, { packSize: size }).map((e) => ({ ...e, pack: key })) };
}

/**
 * `awc fsck --adopt-store`: the operator's recovery of a home whose catalog was lost, into
 * an EMPTY catalog (docs/how-to/recover-a-catalog.md). Every pack of `store` is re-indexed
 * from its own index (pack v1 carries every blob's digest, kind and place: formats.md) into
 * pack and blob rows of `namespace`, and every root blob (a snapshot's root object) becomes a
 * snapshot named `recovered-<first 12 hex of its digest>` (named, so gc keeps it) with its
 * file and byte counts; then the catalog is bound to the store (a new catalog id, the
 * store's id kept, its identity object rewritten to name the new catalog). What the packs
 * cannot tell is not rebuilt: names, messages, labels, parents, workspaces, namespaces.
 * A pack whose index cannot be read is skipped (no row; gc later adopts it as an orphan).
 * @throws E_USAGE (the catalog is not empty), what the store and catalog throw
 */
export async function adoptStore(input: { catalog: Catalog; store: ObjectStore; namespace: string }): Promise<AdoptReport> {
  const { catalog, store, namespace } = input;
  const content = await catalog.identity().content();
  if (content.snapshots > 0 || content.packs > 0)
    throw new AwcError(
      'E_USAGE',
      `the catalog is not empty (${content.snapshots} snapshots, ${content.packs} packs): --adopt-store rebuilds into an empty catalog only`,
      {
        hint: 'Point AWC_CATALOG at a new, empty catalog (a new SQLite file or PostgreSQL database), then run `awc fsck --adopt-store` again.',
      },
    );
  const previous = await readStoreIdentity(store);
  const skipped: AdoptReport['skipped'] = [];
  const packs: WrittenPack[] = [];
  for await (const o of store.list('packs/')) {
    if (packKeyHex(o.key) === undefined) continue;
    try {
      packs.push(await readPack(store, o.key, o.size));
    } catch (err) {
      const e = toAwcError(err);
      if (e.code !== 'E_FORMAT' && e.code !== 'E_INTEGRITY' && e.code !== 'E_OBJECT_NOT_FOUND') throw e;
      skipped.push({ what: o.key, code: e.code, message: e.message });
    }
  }
  packs.sort((a, b) => (a.key < b.key ? -1 : 1));
  const index = new MemoryBlobIndex();
  index.addPacks(packs);
  const roots = [...new Set(packs.flatMap((p) => p.blobs.filter((b) => b.kind === 'root').map((b) => b.digest)))].sort();
  const reader = new ContentReader({ store, index });
  const snapshots: AdoptedSnapshot[] = [];
  let first = true;
  for (const root of roots) {
    let counts;
    try {
      counts = await countRoot(reader, root);
    } catch (err) {
      const e = toAwcError(err);
      if (e.code === 'E_INTERNAL') throw e;
      skipped.push({ what: root, code: e.code, message: `root ${root}: ${e.message}` });
      continue;
    }
    const name = `recovered-${root.replace(/^sha256:/, '').slice(0, 12)}`;
    const row = await catalog.createSnapshot({
      namespace,
      root,
      name,
      message: `recovered from the object store by awc fsck --adopt-store${previous ? ` (store ${previous.storeId}, catalog ${previous.catalogId})` : ''}`,
      fileCount: counts.files,
      byteCount: counts.bytes,
      packs: first ? packs : [],
    });
    first = false;
    snapshots.push({ id: row.id, name, root, files: counts.files, bytes: counts.bytes });
  }
  const { identity } = await adoptStoreIdentity(catalog, store);
  return {
    catalogId: identity.catalogId,
    storeId: identity.storeId,
    previousCatalogId: previous?.catalogId ?? null,
    packs: first ? 0 : packs.length,
    blobs: first ? 0 : packs.reduce((n, p) => n + p.blobs.length, 0),
    snapshots,
    skipped,
  };
}
