import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { closeSync, readSync, type BigIntStats } from 'node:fs';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { DirFd, fdPath } from '../../src/core/dir-fd.js';
import { nameFromBytes } from '../../src/core/raw-name.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * Full-fidelity tree comparison for the fidelity matrix (issue 12): everything a capture
 * must keep, read with lstat (bigint, never following a link) and the xattrs of every
 * namespace but overlayfs's own `trusted.overlay.*`. Names are read as bytes: a name that is
 * not UTF-8 holds its raw bytes escaped (src/core/raw-name.ts), as tree names do.
 */

/** One path of a tree as the comparison sees it. */
export interface FullNode {
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'chardev' | 'blockdev' | 'socket';
  /** Permission bits incl. setuid/setgid/sticky (07777); absent for symlinks (always 0777 on Linux). */
  mode?: number;
  uid: number;
  gid: number;
  /** Size in bytes (files and symlinks; directories' sizes depend on the file system). */
  size?: string;
  /** sha256 hex of a regular file's bytes. */
  sha256?: string;
  /** A symlink's target. */
  target?: string;
  /** `major:minor` of a device node. */
  rdev?: string;
  /** Modification time in nanoseconds since the epoch. */
  mtimeNs: string;
  /** name → base64 value, all namespaces but `trusted.overlay.*` (absent for symlinks, whose user xattrs Linux forbids). */
  xattrs: Record<string, string>;
}

/** A tree read by {@link readFullTree}: path → node, plus the groups of paths sharing one inode. */
export interface FullTree {
  nodes: Map<string, FullNode>;
  /** Each group of two or more non-directory paths that are one inode (sorted, groups sorted). */
  links: string[][];
}

/** Options of {@link readFullTree}. */
export interface ReadOptions {
  /** Leaves out a path and everything below it. */
  skip?: (rel: string) => boolean;
  /** Do not read xattrs (e.g. a view whose xattrs are not what is compared). */
  noXattrs?: boolean;
}

function xattrsAt(p: string): Record<string, string> {
  const out: Record<string, string> = {};
  let names: string[];
  try {
    names = xattr.listAttributesSync(p);
  } catch {
    return out;
  }
  for (const n of names.sort()) {
    if (n.startsWith('trusted.overlay.')) continue;
    out[n] = xattr.getAttributeSync(p, n).toString('base64');
  }
  return out;
}

function typeOf(st: BigIntStats): FullNode['type'] {
  if (st.isDirectory()) return 'dir';
  if (st.isFile()) return 'file';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isCharacterDevice()) return 'chardev';
  if (st.isBlockDevice()) return 'blockdev';
  return 'socket';
}

/** Linux major:minor of a dev_t (glibc encoding). */
function devString(rdev: bigint): string {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/** sha256 hex of what descriptor `fd` reads (it is closed after). */
function hashFd(fd: number): string {
  const h = createHash('sha256');
  const buf = Buffer.alloc(1 << 20);
  try {
    for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0;) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

/**
 * Reads `root` (its own attributes as path '.') into a {@link FullTree}, through directory
 * descriptors (src/core/dir-fd.ts), so trees deeper than PATH_MAX read too. Never opens fifos
 * or devices.
 */
export function readFullTree(root: string, opts: ReadOptions = {}): FullTree {
  const nodes = new Map<string, FullNode>();
  const inodes = new Map<string, string[]>();
  const node = (st: BigIntStats, xattrsAtPath: (() => string) | undefined): FullNode => {
    const type = typeOf(st);
    const n: FullNode = { type, uid: Number(st.uid), gid: Number(st.gid), mtimeNs: st.mtimeNs.toString(), xattrs: {} };
    if (type !== 'symlink') n.mode = Number(st.mode & 0o7777n);
    if (type !== 'symlink' && !opts.noXattrs && xattrsAtPath) n.xattrs = xattrsAt(xattrsAtPath());
    if (type === 'chardev' || type === 'blockdev') n.rdev = devString(st.rdev);
    return n;
  };
  const walk = (dir: DirFd, rel: string): void => {
    for (const raw of dir.list()) {
      const name = nameFromBytes(raw);
      const r = rel === '.' ? name : `${rel}/${name}`;
      if (opts.skip?.(r)) continue;
      const found = dir.open(name, undefined);
      if (!found) throw new Error(`${r} vanished while the tree was read`);
      if (found.type === 'dir') {
        try {
          nodes.set(
            r,
            node(found.st, () => found.dir.self),
          );
          walk(found.dir, r);
        } finally {
          found.dir.close();
        }
        continue;
      }
      let n: FullNode;
      if (found.type === 'file') {
        try {
          n = node(found.st, () => fdPath(found.fd));
        } catch (err) {
          closeSync(found.fd);
          throw err;
        }
        n.size = found.st.size.toString();
        n.sha256 = hashFd(found.fd);
      } else if (found.type === 'symlink') {
        n = node(found.st, undefined);
        n.target = nameFromBytes(found.target);
        n.size = found.st.size.toString();
      } else {
        n = dir.withObject(name, (p) => node(found.st, () => p));
      }
      nodes.set(r, n);
      if (found.st.nlink > 1n) {
        const key = `${found.st.dev}:${found.st.ino}`;
        inodes.set(key, [...(inodes.get(key) ?? []), r]);
      }
    }
  };
  const opened = DirFd.openRoot(root);
  if (!opened) throw new Error(`${root}: no such directory`);
  try {
    nodes.set(
      '.',
      node(opened.st, () => opened.dir.self),
    );
    walk(opened.dir, '.');
  } finally {
    opened.dir.close();
  }
  const links = [...inodes.values()]
    .filter((g) => g.length > 1)
    .map((g) => g.sort())
    .sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
  return { nodes, links };
}

/** Fields of a node left out of a comparison for some paths (e.g. the root's mtime of a mount point). */
export type Ignore = (rel: string, node: FullNode) => (keyof FullNode)[];

/** The tree with ignored fields removed, as a plain object (for deepEqual with readable diffs). */
function plain(t: FullTree, ignore?: Ignore): { nodes: Record<string, Partial<FullNode>>; links: string[][] } {
  const nodes: Record<string, Partial<FullNode>> = {};
  for (const [rel, n] of t.nodes) {
    const copy: Partial<FullNode> = { ...n };
    for (const k of ignore?.(rel, n) ?? []) delete copy[k];
    nodes[rel] = copy;
  }
  return { nodes, links: t.links };
}

/**
 * Asserts that two trees are equal in everything a capture keeps: type, mode, owner, size,
 * content, link target, rdev, nanosecond mtime, every xattr, and which paths share an inode.
 * `ignore` names fields to leave out per path; `message` prefixes the failure.
 */
export function assertSameTree(actual: FullTree, expected: FullTree, message: string, ignore?: Ignore): void {
  assert.deepEqual(plain(actual, ignore), plain(expected, ignore), message);
}

/** Reads both directories and asserts {@link assertSameTree}. */
export function assertSameDirs(actual: string, expected: string, message: string, opts: ReadOptions & { ignore?: Ignore } = {}): void {
  assertSameTree(readFullTree(actual, opts), readFullTree(expected, opts), message, opts.ignore);
}
