/**
 * The input of the EROFS writer (./writer.ts): a flat list of entries, turned into a tree of
 * inodes with sorted children, link counts and xattrs in EROFS's form.
 */
import { AwcError } from '../../../core/errors.js';
import { XATTR_PREFIXES, type XattrRecord } from './format.js';

/** Kinds of {@link ErofsEntry}. */
export type ErofsEntryType = 'dir' | 'file' | 'symlink' | 'chardev' | 'blockdev' | 'fifo' | 'socket' | 'hardlink';

/**
 * One entry of a layer image.
 * - `path`: from the root, `/`-separated, no leading slash; the root is `''`. A string is
 *   taken as UTF-8; a Buffer as raw bytes (names that are not UTF-8).
 * - `mode`: permission bits (07777); the type bits come from `type` (a symlink is always 0777).
 * - `mtimeNs`: nanoseconds since the epoch (may be negative).
 * - `size`: a regular file's size in bytes (a placeholder: it gets no data blocks).
 * - `data`: a regular file whose bytes the image holds (not a placeholder: no metacopy): called
 *   once the layout is known, with what each path's inode will report, it returns exactly `size`
 *   bytes. Used for the rewritten `.git/index` (../layer-git-index.ts), whose stat data are the image's own.
 * - `xattrs`: name → value; names in the user., trusted., security. namespaces or the two ACLs.
 * - `target`: a symlink's target; for `hardlink`, the path of a regular file listed earlier
 *   (the new name shares its inode; its other fields are ignored).
 * - `major`/`minor`: a device node's numbers.
 */
export interface ErofsEntry {
  path: string | Buffer;
  type: ErofsEntryType;
  mode: number;
  uid: number;
  gid: number;
  mtimeNs: bigint;
  size?: number;
  data?: ErofsFileData;
  xattrs?: Iterable<[string, Buffer]>;
  target?: string | Buffer;
  major?: number;
  minor?: number;
}

/**
 * What the kernel will report (stat) for the inode a path names in the image: `nid` is its
 * st_ino (EROFS node id; overlayfs reports the lower's for a file it has not copied up), ctime
 * and mtime are both the mtime, `size` is a file's size or a symlink's target length.
 */
export interface ErofsInodeStat {
  nid: number;
  mtimeSec: bigint;
  mtimeNsec: number;
  uid: number;
  gid: number;
  size: number;
}

/** The bytes of a data file of the image ({@link ErofsEntry}`.data`), given each path's inode stat (undefined: no such path). */
export type ErofsFileData = (statOf: (path: string | Buffer) => ErofsInodeStat | undefined) => Buffer;

/** An inode of the image being written (one per entry, hardlinks excepted). */
export interface Node {
  type: Exclude<ErofsEntryType, 'hardlink'>;
  mode: number;
  uid: number;
  gid: number;
  mtimeSec: bigint;
  mtimeNsec: number;
  size: number;
  nlink: number;
  xattrs: XattrRecord[];
  target?: Buffer;
  /** A data file's bytes (see ErofsEntry.data). */
  data?: ErofsFileData;
  major: number;
  minor: number;
  /** A directory's entries, `.` and `..` included, sorted by name bytes. */
  children?: { name: Buffer; node: Node }[];
  /** Set when laid out. */
  nid: number;
  ino: number;
}

const DOT = Buffer.from('.');
const DOTDOT = Buffer.from('..');

/**
 * Builds the tree of `entries`. Each entry's parent must come before it (the root first).
 * @throws E_FORMAT for a missing or non-directory parent, a path twice, a bad hardlink target;
 *   E_UNSUPPORTED for a name over 255 bytes or an xattr EROFS cannot hold
 */
export function buildTree(entries: Iterable<ErofsEntry>): Node {
  return buildTreeWithPaths(entries).root;
}

/**
 * {@link buildTree}, and the inode of each path (keys: the path's bytes as latin1, see
 * {@link pathStat}). @throws as buildTree
 */
export function buildTreeWithPaths(entries: Iterable<ErofsEntry>): { root: Node; byPath: Map<string, Node> } {
  const byPath = new Map<string, Node>();
  let root: Node | undefined;
  for (const e of entries) {
    const key = pathKey(e.path);
    if (byPath.has(key)) bad(`the path ${JSON.stringify(e.path.toString())} is listed twice`);
    if (key === '') {
      if (e.type !== 'dir') bad('the root must be a directory');
      root = newNode(e);
      root.children!.push({ name: DOT, node: root }, { name: DOTDOT, node: root });
      root.nlink = 2;
      byPath.set(key, root);
      continue;
    }
    const slash = key.lastIndexOf('/');
    const parent = byPath.get(slash < 0 ? '' : key.slice(0, slash));
    if (parent?.type !== 'dir') bad(`the parent of ${JSON.stringify(e.path.toString())} is not a directory listed before it`);
    const name = Buffer.from(key.slice(slash + 1), 'latin1');
    if (name.length === 0 || name.length > 255 || name.equals(DOT) || name.equals(DOTDOT) || name.includes(0))
      throw new AwcError('E_UNSUPPORTED', `a layer image cannot hold the name ${JSON.stringify(name.toString())}`);
    const node = e.type === 'hardlink' ? linkTarget(byPath, e) : newNode(e);
    if (e.type === 'hardlink') node.nlink++;
    parent.children!.push({ name, node });
    if (node.type === 'dir') {
      node.children!.push({ name: DOT, node }, { name: DOTDOT, node: parent });
      node.nlink = 2;
      parent.nlink++;
    }
    byPath.set(key, node);
  }
  if (!root) bad('no root entry (path "")');
  for (const n of byPath.values()) if (n.children) n.children.sort((a, b) => Buffer.compare(a.name, b.name));
  return { root, byPath };
}

/** What the kernel reports for `path`'s inode in a laid-out image ({@link ErofsInodeStat}), or undefined for a path not in `byPath`. */
export function pathStat(byPath: Map<string, Node>, path: string | Buffer): ErofsInodeStat | undefined {
  const n = byPath.get(pathKey(path));
  if (!n) return undefined;
  const size = n.type === 'symlink' ? n.target!.length : n.size;
  return { nid: n.nid, mtimeSec: n.mtimeSec, mtimeNsec: n.mtimeNsec, uid: n.uid, gid: n.gid, size };
}

/** A char outside printable ASCII (a string without one is its own UTF-8 bytes, one char each). */
const NON_ASCII = /[^ -~]/;

/** A path's bytes as a string of one char per byte (latin1): an ASCII string is that already. */
function pathKey(p: string | Buffer): string {
  if (typeof p !== 'string') return p.toString('latin1');
  return NON_ASCII.test(p) ? Buffer.from(p).toString('latin1') : p;
}

function bad(why: string): never {
  throw new AwcError('E_FORMAT', `cannot write a layer image: ${why}`);
}

function linkTarget(byPath: Map<string, Node>, e: ErofsEntry): Node {
  const t = e.target;
  const node = t && byPath.get(pathKey(t));
  if (!node || node.type !== 'file') bad(`the hardlink ${JSON.stringify(e.path.toString())} names no regular file listed before it`);
  return node;
}

function newNode(e: ErofsEntry): Node {
  if (e.type === 'hardlink') bad('a hardlink has no inode of its own');
  const ns = e.mtimeNs;
  const sec = ns >= 0n ? ns / 1_000_000_000n : -((-ns + 999_999_999n) / 1_000_000_000n);
  const target = e.target === undefined ? undefined : typeof e.target === 'string' ? Buffer.from(e.target) : e.target;
  if (e.type === 'symlink' && (!target || target.length === 0 || target.length >= 4096))
    bad(`the symlink ${JSON.stringify(e.path.toString())} needs a target of 1 to 4095 bytes`);
  const size = e.type === 'file' ? (e.size ?? 0) : 0;
  if (!Number.isSafeInteger(size) || size < 0) bad(`the size of ${JSON.stringify(e.path.toString())} is not a byte count`);
  return {
    type: e.type,
    mode: e.type === 'symlink' ? 0o777 : e.mode & 0o7777,
    uid: checkId(e.uid),
    gid: checkId(e.gid),
    mtimeSec: sec,
    mtimeNsec: Number(ns - sec * 1_000_000_000n),
    size,
    nlink: 1,
    xattrs: xattrRecords(e),
    target: e.type === 'symlink' ? target : undefined,
    data: e.type === 'file' ? e.data : undefined,
    major: e.major ?? 0,
    minor: e.minor ?? 0,
    children: e.type === 'dir' ? [] : undefined,
    nid: 0,
    ino: 0,
  };
}

function checkId(id: number): number {
  if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) bad(`the owner id ${id} does not fit 32 bits`);
  return id;
}

/** An entry's xattrs in EROFS's form (prefix index, suffix, value), sorted by index, suffix bytes, then value. */
function xattrRecords(e: ErofsEntry): XattrRecord[] {
  const out: XattrRecord[] = [];
  for (const [name, value] of e.xattrs ?? []) {
    const hit = XATTR_PREFIXES.find(([p]) => name.startsWith(p));
    const suffix = hit ? Buffer.from(name.slice(hit[0].length)) : undefined;
    const acl = hit && (hit[1] === 2 || hit[1] === 3);
    if (!hit || !suffix || (acl && suffix.length > 0) || suffix.length > 255 || value.length > 0xffff)
      throw new AwcError(
        'E_UNSUPPORTED',
        `a layer image cannot hold the xattr ${JSON.stringify(name)} of ${JSON.stringify(e.path.toString())}`,
      );
    out.push({
      index: hit[1],
      suffix,
      value,
      key: `${String.fromCharCode(hit[1])}${suffix.toString('latin1')}\u0000${value.toString('latin1')}`,
    });
  }
  return out.sort((a, b) => a.index - b.index || Buffer.compare(a.suffix, b.suffix) || Buffer.compare(a.value, b.value));
}
