import { AwcError } from './errors.js';
import { compareNameBytes, hasEscape, isCanonicalName } from './raw-name.js';
import { isDigest, sha256, type Digest } from './digest.js';
import { checkExtents, type Extent } from './sparse.js';

/**
 * Tree objects (format `tree` v1, v2 for directories whose names or link targets hold raw
 * bytes, v3 for directories holding a sparse file) and the root object (format `root` v1): the Merkle description of a filesystem tree.
 * See docs/reference/formats.md.
 *
 * A directory's digest is sha256 of its canonical JSON encoding (entries sorted by the
 * bytes of their names, fixed key order), so an unchanged subtree keeps its digest
 * between snapshots and diff walks only what changed. Names are strings; raw bytes that are
 * not UTF-8 are held escaped (src/core/raw-name.ts).
 */

/** Reference to one chunk of a file: digest of the chunk's raw bytes and its raw length (bytes). */
export interface ChunkRef {
  digest: Digest;
  size: number;
}

/** Attributes every entry carries. `mode` holds the permission bits only (07777, incl. setuid/setgid/sticky). */
export interface EntryAttrs {
  mode: number;
  uid: number;
  gid: number;
  /** Modification time in nanoseconds since the epoch, as a decimal string (exceeds 2^53). */
  mtimeNs: string;
  /** Extended attributes: name → value in base64. Omitted when empty. Never `trusted.overlay.*`. */
  xattrs?: Record<string, string>;
}

/**
 * A regular file. `digest` is sha256 of the whole content (the content object's name); `chunks` cover it in order.
 * A sparse file (tree v3) has `extents`, its data ranges ([offset, length] in bytes, holes of at least 1 MiB between
 * them): its chunks then cover the concatenated data only, and its digest is `sparseDigest` (src/core/sparse.ts).
 */
export interface FileEntry extends EntryAttrs {
  type: 'file';
  name: string;
  size: number;
  digest: Digest;
  chunks: ChunkRef[];
  extents?: Extent[];
}

/** A directory; `tree` is the digest of its tree object. */
export interface DirEntry extends EntryAttrs {
  type: 'dir';
  name: string;
  tree: Digest;
}

/** A symbolic link; `target` is stored verbatim (relative, absolute or dangling). */
export interface SymlinkEntry extends EntryAttrs {
  type: 'symlink';
  name: string;
  target: string;
}

/**
 * A further name of a regular file recorded earlier in the same snapshot (a hardlink).
 * `target` is the slash-separated path, from the snapshot root, of the first name of the
 * file in depth-first, name-sorted order (as tar does).
 */
export interface HardlinkEntry {
  type: 'hardlink';
  name: string;
  target: string;
}

/** A fifo or device node; `rdev` (major/minor as the kernel encodes it) for devices, 0 for fifos. */
export interface SpecialEntry extends EntryAttrs {
  type: 'fifo' | 'chardev' | 'blockdev';
  name: string;
  rdev: number;
}

/** Any entry of a tree object. */
export type Entry = FileEntry | DirEntry | SymlinkEntry | HardlinkEntry | SpecialEntry;

/** A directory's content: its entries sorted by the bytes of their names. */
export interface TreeObject {
  /** 1: every name and link target is UTF-8; 2: some hold raw bytes (src/core/raw-name.ts); 3: some file is sparse (raw names allowed). */
  v: 1 | 2 | 3;
  entries: Entry[];
}

/** Chunker parameters recorded in every root so that a later change stays readable. */
export const CHUNKER_ID = 'fastcdc2020-awc1-16384-65536-262144';

/** The root of a snapshot: the root directory's attributes, its tree, and the chunker used. */
export interface RootObject extends EntryAttrs {
  v: 1;
  type: 'root';
  chunker: string;
  tree: Digest;
}

/** Compares two names by their bytes (the tree's sort order; raw names by src/core/raw-name.ts). */
export function compareNames(a: string, b: string): number {
  return compareNameBytes(a, b);
}

/**
 * Checks an entry name: non-empty, no `/`, no NUL, not `.` or `..`; valid UTF-8, or with
 * `raw` any byte string in its canonical escaped form (src/core/raw-name.ts).
 * @throws AwcError E_PATH_TRAVERSAL for `.`/`..`/`/`, E_UNSUPPORTED_NAME for a name that is not
 *   UTF-8 (without `raw`) or not a canonical raw name
 */
export function checkName(name: string, raw = false): void {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new AwcError('E_PATH_TRAVERSAL', `invalid entry name ${JSON.stringify(name)}`);
  }
  if (hasEscape(name) && (!raw || !isCanonicalName(name))) {
    throw new AwcError('E_UNSUPPORTED_NAME', `entry name is not valid UTF-8: ${JSON.stringify(name)}`);
  }
}

/** Whether an entry needs tree format v3: a file with extents (sparse). */
function isSparse(e: Entry): boolean {
  return e.type === 'file' && e.extents !== undefined;
}

/** Whether an entry needs tree format v2: its name, or its link's target, holds raw bytes. */
function needsRaw(e: Entry): boolean {
  return hasEscape(e.name) || ((e.type === 'symlink' || e.type === 'hardlink') && hasEscape(e.target));
}

function attrs(e: EntryAttrs): EntryAttrs {
  const out: EntryAttrs = { mode: e.mode, uid: e.uid, gid: e.gid, mtimeNs: e.mtimeNs };
  if (e.xattrs && Object.keys(e.xattrs).length > 0) {
    out.xattrs = Object.fromEntries(Object.entries(e.xattrs).sort(([a], [b]) => compareNames(a, b)));
  }
  return out;
}

/** Returns the entry with keys in canonical order (the encoding's fixed key order). */
export function canonicalEntry(e: Entry): Entry {
  switch (e.type) {
    case 'file': {
      const f: FileEntry = {
        type: 'file',
        name: e.name,
        ...attrs(e),
        size: e.size,
        digest: e.digest,
        chunks: e.chunks.map((c) => ({ digest: c.digest, size: c.size })),
      };
      if (e.extents) f.extents = e.extents.map(([o, l]) => [o, l]);
      return f;
    }
    case 'dir':
      return { type: 'dir', name: e.name, ...attrs(e), tree: e.tree };
    case 'symlink':
      return { type: 'symlink', name: e.name, ...attrs(e), target: e.target };
    case 'hardlink':
      return { type: 'hardlink', name: e.name, target: e.target };
    case 'fifo':
    case 'chardev':
    case 'blockdev':
      return { type: e.type, name: e.name, ...attrs(e), rdev: e.rdev };
    default:
      throw new AwcError('E_FORMAT', `unknown entry type ${JSON.stringify((e as { type: unknown }).type)}`);
  }
}

/**
 * Encodes a tree object canonically: entries sorted by name bytes, fixed key order; format v3
 * when a file is sparse (has extents), else v1 when every name and link target is UTF-8, else
 * v2 (raw names; docs/reference/formats.md).
 * Input order does not matter. @throws E_FORMAT on duplicate names, E_PATH_TRAVERSAL/E_UNSUPPORTED_NAME on bad names
 *   (a raw name or target not in canonical form).
 */
export function encodeTree(entries: readonly Entry[]): { bytes: Buffer; digest: Digest } {
  const sorted = [...entries].sort((a, b) => compareNames(a.name, b.name));
  for (let i = 0; i < sorted.length; i++) {
    checkName(sorted[i].name, true);
    checkTarget(sorted[i], true);
    if (i > 0 && sorted[i - 1].name === sorted[i].name)
      throw new AwcError('E_FORMAT', `duplicate entry name ${JSON.stringify(sorted[i].name)}`);
    const e = sorted[i];
    if (e.type === 'file' && e.extents) checkExtents(e.name, e.size, e.extents, e.chunks);
  }
  const v = sorted.some(isSparse) ? 3 : sorted.some(needsRaw) ? 2 : 1;
  const obj: TreeObject = { v, entries: sorted.map(canonicalEntry) };
  const bytes = Buffer.from(JSON.stringify(obj), 'utf8');
  return { bytes, digest: sha256(bytes) };
}

/** A link's target: raw bytes only in canonical form, and only when `raw`. @throws E_UNSUPPORTED_NAME */
function checkTarget(e: Entry, raw: boolean): void {
  if (
    (e.type === 'symlink' || e.type === 'hardlink') &&
    typeof e.target === 'string' &&
    hasEscape(e.target) &&
    (!raw || !isCanonicalName(e.target))
  )
    throw new AwcError('E_UNSUPPORTED_NAME', `the target of ${JSON.stringify(e.name)} is not valid UTF-8`);
}

/**
 * Decodes and validates a tree object of format v1 (UTF-8 names), v2 (raw names, which a v2
 * tree must hold: a tree that does not need v2 is always v1) or v3 (a sparse file, which a v3
 * tree must hold; names may be raw). Extents appear in v3 only.
 * @throws E_FORMAT when it is none of them, or its extents are malformed; E_UNSUPPORTED_NAME for a name not in
 *   canonical form, or raw in v1
 */
export function decodeTree(bytes: Uint8Array): TreeObject {
  let obj: TreeObject;
  try {
    obj = JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch (err) {
    throw new AwcError('E_FORMAT', 'tree object is not JSON', { cause: err });
  }
  if (!obj || (obj.v !== 1 && obj.v !== 2 && obj.v !== 3) || !Array.isArray(obj.entries))
    throw new AwcError('E_FORMAT', 'not a v1, v2 or v3 tree object');
  for (const e of obj.entries) {
    if (typeof e?.name !== 'string') throw new AwcError('E_FORMAT', 'a tree entry has no name');
    checkName(e.name, obj.v !== 1);
    checkTarget(e, obj.v !== 1);
    if (e.type === 'file' && e.extents !== undefined) {
      if (obj.v !== 3) throw new AwcError('E_FORMAT', `tree entry ${JSON.stringify(e.name)} has extents in a v${obj.v} tree`);
      checkExtents(JSON.stringify(e.name), e.size, e.extents, Array.isArray(e.chunks) ? e.chunks : []);
    }
    if ((e.type === 'file' && !isDigest(e.digest)) || (e.type === 'dir' && !isDigest(e.tree))) {
      throw new AwcError('E_FORMAT', `tree entry ${JSON.stringify(e.name)} has a malformed digest`);
    }
  }
  if (obj.v === 2 && !obj.entries.some(needsRaw)) throw new AwcError('E_FORMAT', 'a v2 tree object without a raw name (it must be v1)');
  if (obj.v === 3 && !obj.entries.some(isSparse))
    throw new AwcError('E_FORMAT', 'a v3 tree object without a sparse file (it must be v1 or v2)');
  return obj;
}

/** Encodes a root object canonically. */
export function encodeRoot(root: Omit<RootObject, 'v' | 'type' | 'chunker'> & { chunker?: string }): { bytes: Buffer; digest: Digest } {
  const obj: RootObject = { v: 1, type: 'root', chunker: root.chunker ?? CHUNKER_ID, ...attrs(root), tree: root.tree };
  const bytes = Buffer.from(JSON.stringify(obj), 'utf8');
  return { bytes, digest: sha256(bytes) };
}

/** Decodes a root object. @throws E_FORMAT when it is not a v1 root. */
export function decodeRoot(bytes: Uint8Array): RootObject {
  let obj: RootObject;
  try {
    obj = JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch (err) {
    throw new AwcError('E_FORMAT', 'root object is not JSON', { cause: err });
  }
  if (!obj || obj.v !== 1 || obj.type !== 'root' || !isDigest(obj.tree)) throw new AwcError('E_FORMAT', 'not a v1 root object');
  if (obj.chunker !== CHUNKER_ID) throw new AwcError('E_FORMAT', `root uses unknown chunker ${obj.chunker}`);
  return obj;
}

/** Linux dev_t → major and minor numbers (the inverse of `makedev`). */
export function splitDev(rdev: number): { major: number; minor: number } {
  const d = BigInt(rdev);
  return { major: Number(((d >> 8n) & 0xfffn) | ((d >> 32n) & ~0xfffn)), minor: Number((d & 0xffn) | ((d >> 12n) & ~0xffn)) };
}
