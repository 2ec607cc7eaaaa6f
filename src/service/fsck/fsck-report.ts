import type { Digest } from '../../core/digest.js';
import type { ErrorCode } from '../../core/errors.js';

/**
 * What `awc fsck` can find (docs/reference/fsck.md#what-it-finds). Stable names: scripts
 * match on them.
 *
 * - `pack-missing`: a live or condemned pack row whose object is not in the store.
 * - `pack-size`: the object's size differs from the size its row records.
 * - `pack-index`: the pack's own index (footer) cannot be read or fails its checksum.
 * - `pack-digest`: the pack's bytes do not hash to its key (`--read-data`).
 * - `blob-corrupt`: a blob in a pack does not decode to its digest (`--read-data`).
 * - `index-mismatch`: a blob row of the catalog disagrees with the index of the pack it names.
 * - `blob-unindexed`: a blob a snapshot needs has no row in its namespace's blob index.
 * - `blob-size`: a chunk's indexed length differs from the length its file's tree lists.
 * - `blob-lost`: a blob a snapshot needs is located in a pack that is gone or broken.
 * - `tree-unreadable`: a root or tree a snapshot needs cannot be read or decoded.
 * - `gitproof-invalid`: a snapshot's git-index proof record is malformed or claims what
 *   the snapshot's contents do not show.
 * - `image-invalid`: a shared layer image record names an object that is missing, of another
 *   size, or (`--read-data`) does not hash to its digest or is not a content index of its
 *   root. Nothing is lost: hosts build the layer themselves (`--repair` deletes the record).
 * - `cache-corrupt`: a file of this host's chunk cache does not hold its chunk (`--read-data`).
 * - `store-unbound`: the catalog has no identity yet (a home upgraded to 0005) and the store
 *   lacks some of its packs (each a `pack-missing`): every other command refuses to open it.
 */
export type FsckKind =
  | 'pack-missing'
  | 'pack-size'
  | 'pack-index'
  | 'pack-digest'
  | 'blob-corrupt'
  | 'index-mismatch'
  | 'blob-unindexed'
  | 'blob-size'
  | 'blob-lost'
  | 'tree-unreadable'
  | 'gitproof-invalid'
  | 'image-invalid'
  | 'cache-corrupt'
  | 'store-unbound';

/** One thing found: its kind, the error code a read of it gives, and what it touches. */
export interface FsckProblem {
  kind: FsckKind;
  /** E_OBJECT_NOT_FOUND (missing), E_INTEGRITY (bytes or rows disagree), E_FORMAT (unreadable structure). */
  code: ErrorCode;
  message: string;
  namespace?: string;
  /** Object key of the pack (or record) concerned. */
  key?: string;
  digest?: Digest;
  /** Ids of the snapshots that can no longer be read whole because of it (sorted). */
  snapshots: string[];
}

/** A finding that loses nothing (e.g. a git-index proof that proves less than it could). */
export interface FsckWarning {
  kind: 'gitproof-weaker';
  message: string;
  key: string;
  snapshots: string[];
}

/** What `awc fsck` checked and found (`--json`; docs/reference/fsck.md#the-report). Bytes are object sizes. */
export interface FsckReport {
  /** No problem found (warnings do not count). */
  ok: boolean;
  checked: {
    snapshots: number;
    trees: number;
    /** Distinct blobs (roots, trees, chunks) the snapshots need, over all namespaces. */
    blobs: number;
    /** Pack rows live or condemned, whose objects and indexes were checked. */
    packs: number;
    gitProofs: number;
    /** Shared layer image records whose objects were checked. */
    layerImages: number;
  };
  /** With `--read-data`: the packs whose every byte was read, of how many, and their bytes. */
  readData: { packs: number; of: number; bytes: number; cacheFiles: number } | null;
  problems: FsckProblem[];
  warnings: FsckWarning[];
  /** Store objects no catalog row names: uploads of a commit that never happened (or is in flight). */
  unreferenced: { packs: number; bytes: number; gitProofs: number; images: number };
  /**
   * With `--repair`: blob rows written from pack indexes, blob rows dropped with the packs
   * found lost (object gone: now `deleted`), chunk cache files dropped, layer image records
   * deleted (`image-invalid`), and the problems left.
   */
  repaired: { blobRows: number; droppedRows: number; lostPacks: number; cacheFiles: number; layerImages: number; remaining: number } | null;
  /**
   * The catalog–store binding after the check (src/service/doctor/fsck-binding.ts): `checked` (bound
   * before), `created` / `upgraded` (recorded now, e.g. once `--repair` dropped the lost packs
   * that kept an upgraded home unbound), `unbound` (a `store-unbound` problem says why).
   */
  binding?: { outcome: 'checked' | 'created' | 'upgraded' | 'unbound'; catalogId?: string; storeId?: string };
}
