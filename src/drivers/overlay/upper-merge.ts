import * as fs from 'node:fs';
import type * as Xattr from 'fs-xattr';
import { lazyRequire } from '../../core/lazy-require.js';
import { digestHex, isDigest, type Digest } from '../../core/digest.js';
import { DirFd, fdPath } from '../../core/dir-fd.js';
import { AwcError } from '../../core/errors.js';
import { compareNames, type ChunkRef, type DirEntry, type Entry, type EntryAttrs, type FileEntry } from '../../core/tree.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import { parseContentRedirect, shortContentName } from '../../core/content-name.js';
import type { CaptureDirFilter, CaptureFilter } from '../../core/capture-filter.js';
import { peekFd, SMALL_FILE_BYTES } from '../../core/small-file.js';
import { readXattrs } from '../../host/tree/xattrs.js';
import { nameFromBytes } from '../../core/raw-name.js';
import { sparseOf, type Extent } from '../../core/sparse.js';
import { findDataExtents } from '../../host/sys/seek-data.js';
import type { FindExtents } from '../../store/content/content-writer.js';
import { contentsLookup, type ContentLookup, type LayerContents } from '../../store/content/content-index.js';

/** fs-xattr (a native addon), loaded on first use. */
const xattr = lazyRequire<typeof Xattr>('fs-xattr');

/** The content writer's part the merge needs (see src/store/content/content-writer.ts). */
export interface MergeWriter {
  writeFileFd(
    fd: number,
    opts: { path: string; allowChanging?: boolean; findExtents?: FindExtents },
  ): Promise<{ digest: Digest; size: number; chunks: ChunkRef[]; extents?: Extent[]; st: fs.BigIntStats; changing: boolean }>;
  writeTree(entries: readonly Entry[]): Promise<Digest>;
  writeRoot(root: Omit<EntryAttrs, never> & { tree: Digest }): Promise<Digest>;
}

/** A directory of the merged view held in memory; untouched subtrees stay as their DirEntry. */
interface MDir {
  type: 'mdir';
  name: string;
  attrs: EntryAttrs;
  children: Map<string, MEntry>;
}
type MEntry = Entry | MDir;

/** The data part of a file entry: what a metadata-only copy keeps of its lower. */
type FileData = Pick<FileEntry, 'digest' | 'size' | 'chunks' | 'extents'>;

/** Result of a merge: the new root digest and what the upper held. */
export interface MergeResult {
  root: Digest;
  /** Files whose data was read from the upper (full copies) and their bytes. */
  filesRead: number;
  bytesRead: number;
  /** Entries skipped (sockets) with the reason. */
  skipped: { path: string; reason: string }[];
  /** The stat cache of the upper's full-copy files as this merge saw them (persist it only once their chunks are committed). */
  statCache: UpperStatCache;
  /** Files that kept changing while read, stored as last read (only with `allowChanging`). */
  changing: string[];
}

/** An upper full-copy file as the last checkpoint stored it: its stat then and its content. */
export interface UpperStatEntry {
  /** Inode, size (bytes), mtime and ctime (ns), as decimal strings: the file is read again when any differs. */
  ino: string;
  size: string;
  mtimeNs: string;
  ctimeNs: string;
  /** The content's digest and chunks. */
  digest: Digest;
  chunks: ChunkRef[];
  /** A sparse file's extents. */
  extents?: Extent[];
}

/**
 * Stat cache of an upper directory's full-copy files, by path in the workspace. A checkpoint
 * re-merges the whole (cumulative) upper; a file whose inode, size, mtime and ctime are
 * unchanged since the last checkpoint is not read again. Only written after a checkpoint
 * commits, so every digest in it is stored (on disk: upper-stat-cache.ts).
 */
export type UpperStatCache = Record<string, UpperStatEntry>;

/** True when the upper file's stat `st` is the one `hit` was stored with (inode, size, mtime, ctime). */
function sameStat(hit: UpperStatEntry, st: fs.BigIntStats): boolean {
  return (
    hit.ino === st.ino.toString() &&
    hit.size === st.size.toString() &&
    hit.mtimeNs === st.mtimeNs.toString() &&
    hit.ctimeNs === st.ctimeNs.toString()
  );
}

/**
 * Merges a snapshot's tree (the overlay lower) with an overlayfs upper directory, by the
 * kernel's rules (Documentation/filesystems/overlayfs.rst): a char 0/0 device is a
 * whiteout; `trusted.overlay.opaque=y` hides the lower directory; a directory's
 * `trusted.overlay.redirect` names its lower directory (relative to the parent's lower
 * directory, or absolute from the root); a file with `trusted.overlay.metacopy` has only
 * its metadata in the upper and its data in the lower (at its redirect if any, or at the
 * same path; a redirect into the content lower names the data's digest directly); any
 * other upper file is a full copy and is chunked. Xattrs of every namespace are kept but
 * `trusted.overlay.*`, which are dropped (src/host/tree/xattrs.ts).
 * Reads the upper directly, never the merged mount (that could deadlock on our own FUSE),
 * and only through directory descriptors (src/core/dir-fd.ts): a directory swapped for a
 * symlink while the merge runs is recorded as that symlink, never followed; an entry that
 * vanishes is taken as absent; a file that keeps changing is E_CHANGED_DURING_READ naming
 * its path in the workspace, or with `allowChanging` stored as last read and listed.
 *
 * Hardlink groups of the base (`hardlinks`: first path → further names) whose first name
 * was changed are re-rooted on their first surviving name, as overlayfs shows them.
 *
 * Cost: O(entries of the upper + bytes of the full copies read + depth of each touched path),
 * never O(base tree): the base is read only along the upper's paths, unchanged subtrees stay
 * as their digests, and only hardlink groups whose first name the upper touches are checked.
 *
 * @param contents content hex → chunks of the base's files (the layer's meta, or a lookup of its content index), for a
 *   redirect into the content lower that names no base file at the same path (a renamed metadata-only copy); a function
 *   is called only then
 * @throws E_CHANGED_DURING_READ when a file keeps changing while it is read (retryable); E_INTEGRITY when a metacopy file's lower is missing; E_SOURCE_NOT_FOUND when the upper is not a directory
 */
export async function mergeUpper(opts: {
  src: TreeSource;
  base: Digest;
  upper: string;
  writer: MergeWriter;
  hardlinks?: Record<string, string[]>;
  contents?: LayerContents | (() => Promise<ContentLookup>);
  /** Content of upper files already stored by an earlier checkpoint, by path (see UpperStatCache). */
  statCache?: UpperStatCache;
  /** Store a file that keeps changing as last read (listed in `changing`) instead of failing. */
  allowChanging?: boolean;
  /** The capture filter: full copies it calls secret or scratch are left out and reported to it (metadata-only copies are in the store already). */
  filter?: CaptureFilter;
}): Promise<MergeResult> {
  const contents = opts.contents ?? {};
  const m = new Merger(
    opts.src,
    opts.writer,
    typeof contents === 'function' ? contents : async () => contentsLookup(contents),
    opts.statCache ?? {},
    opts.allowChanging ?? false,
    opts.filter,
  );
  const baseRoot = await opts.src.readRoot(opts.base);
  m.baseRootTree = baseRoot.tree;
  const children = await m.loadChildren(baseRoot.tree);
  const opened = DirFd.openRoot(opts.upper);
  if (!opened) throw new AwcError('E_SOURCE_NOT_FOUND', `the upper directory ${opts.upper} is missing`);
  let rootAttrs: EntryAttrs;
  try {
    const f = await opts.filter?.root((n) => m.textOf(opened.dir, children, n));
    await m.mergeDir(opened.dir, children, '', f);
    rootAttrs = keepBaseTime(attrsFromStat(opened.st, readXattrs(opened.dir.self)), baseRoot);
  } finally {
    opened.dir.close();
  }
  await m.fixHardlinks(children, opts.hardlinks ?? {});
  const tree = await m.writeDir(children);
  const root = await opts.writer.writeRoot({ ...rootAttrs, tree });
  return { root, filesRead: m.filesRead, bytesRead: m.bytesRead, skipped: m.skipped, statCache: m.nextCache, changing: m.changing };
}

class Merger {
  baseRootTree!: Digest;
  filesRead = 0;
  bytesRead = 0;
  skipped: { path: string; reason: string }[] = [];
  changing: string[] = [];
  private inodes = new Map<bigint, string>();
  nextCache: UpperStatCache = {};
  /** Every path of the upper the merge visited (a base hardlink group is re-rooted only when its first name is under one). */
  private touched = new Set<string>();

  constructor(
    private src: TreeSource,
    private writer: MergeWriter,
    private loadContents: () => Promise<ContentLookup>,
    private statCache: UpperStatCache,
    private allowChanging: boolean,
    private filter: CaptureFilter | undefined,
  ) {}

  /**
   * The text of a small file `name` of the merged directory: the upper's full copy, else the
   * lower's (`kids`) from the store; undefined when neither has one (or the upper whites it out).
   */
  async textOf(dir: DirFd, kids: Map<string, MEntry>, name: string): Promise<string | undefined> {
    const found = dir.open(name, undefined);
    if (found?.type === 'dir') found.dir.close();
    if (found?.type === 'file') {
      try {
        if (!overlayXattrs(fdPath(found.fd)).metacopy) return peekFd(found.fd, SMALL_FILE_BYTES).toString('utf8');
      } finally {
        fs.closeSync(found.fd);
      }
    } else if (found) return undefined; // a whiteout, a symlink, a device: not a file of the merged view
    const e = kids.get(name);
    return e?.type === 'file' && this.filter ? (await this.filter.readStored(e)).toString('utf8') : undefined;
  }

  /** The layer's contents, loaded on first need. */
  private contents: ContentLookup | undefined;

  /**
   * The data a redirect into the content lower names (`/<aa>/<hex>` or `/<short name>`): the
   * base file at `from` when its content is the one named (a metadata-only copy-up in place),
   * else looked up in the layer's contents (loaded on first need); undefined when the redirect
   * is not of that shape or names no content of the base (or a short name two objects share).
   */
  async contentOfRedirect(redirect: string, from: string | null): Promise<{ digest: Digest; data: FileData } | undefined> {
    const r = parseContentRedirect(redirect);
    if (!r) return undefined;
    const here = from === null ? undefined : await this.lookupBase(from);
    if (here?.type === 'file') {
      const hex = digestHex(here.digest);
      if (r.form === 'short' ? shortContentName(hex) === r.short : hex === r.hex)
        return { digest: here.digest, data: { digest: here.digest, size: here.size, chunks: here.chunks, ...sparseOf(here.extents) } };
    }
    this.contents ??= await this.loadContents();
    const named = r.form === 'short' ? this.contents.withShortName(r.short) : [r.hex];
    const hex = named.length === 1 ? named[0] : undefined;
    const known = hex === undefined ? undefined : this.contents.get(hex);
    const digest = `sha256:${hex}` as Digest;
    if (!known || !isDigest(digest)) return undefined;
    const [size, chunks, extents] = known;
    return { digest, data: { digest, size, chunks: chunks.map(([d, sz]) => ({ digest: d, size: sz })), ...sparseOf(extents) } };
  }

  async loadChildren(tree: Digest): Promise<Map<string, MEntry>> {
    const t = await this.src.readTree(tree);
    return new Map(t.entries.map((e) => [e.name, e as MEntry]));
  }

  /** The base entry at a slash path ('' = root dir as a DirEntry-like), hardlinks resolved to their file. */
  async lookupBase(path: string): Promise<Entry | undefined> {
    let tree = this.baseRootTree;
    const parts = path.split('/').filter((p) => p !== '');
    let entry: Entry | undefined;
    for (let i = 0; i < parts.length; i++) {
      const t = await this.src.readTree(tree);
      entry = t.entries.find((e) => e.name === parts[i]);
      if (!entry) return undefined;
      if (i < parts.length - 1) {
        if (entry.type !== 'dir') return undefined;
        tree = entry.tree;
      }
    }
    if (entry?.type === 'hardlink') {
      const target = await this.lookupBase(entry.target);
      return target ? { ...target, name: entry.name } : undefined;
    }
    return entry;
  }

  /** Merges the upper directory `dir` (its `rel` is the path in the workspace) into `children`. */
  async mergeDir(dir: DirFd, children: Map<string, MEntry>, lowerPath: string | null, f?: CaptureDirFilter): Promise<void> {
    const names = dir.list().map(nameFromBytes).sort(compareNames);
    for (const name of names) {
      const relPath = dir.childRel(name);
      this.touched.add(relPath);
      const base = children.get(name);
      const found = dir.open(name, undefined);
      if (!found) {
        // vanished since readdir: as absent from the upper (the lower entry, if any, stays)
        continue;
      }
      const st = found.st;
      if (found.type === 'dir') {
        try {
          await this.mergeSubdir(found.dir, found.st, children, name, relPath, lowerPath, f);
        } finally {
          found.dir.close();
        }
        continue;
      }
      if (found.type === 'file') {
        try {
          await this.mergeFiltered(found.fd, st, children, name, relPath, lowerPath, f);
        } finally {
          fs.closeSync(found.fd);
        }
        continue;
      }
      if (found.type === 'symlink') {
        children.set(name, {
          type: 'symlink',
          name,
          ...keepBaseTime(attrsFromStat(st, undefined), base),
          target: nameFromBytes(found.target),
        });
        continue;
      }
      if (st.isCharacterDevice() && st.rdev === 0n) {
        children.delete(name); // whiteout
        continue;
      }
      if (st.isFIFO() || st.isCharacterDevice() || st.isBlockDevice()) {
        const type = st.isFIFO() ? 'fifo' : st.isCharacterDevice() ? 'chardev' : 'blockdev';
        children.set(name, { type, name, ...attrsFromStat(st, undefined), rdev: st.isFIFO() ? 0 : Number(st.rdev) });
        continue;
      }
      this.skipped.push({ path: relPath, reason: 'socket' });
      children.delete(name);
    }
  }

  /**
   * Merges the upper subdirectory `name` of `children` (open at `dir`, stat `st`, `relPath` in the workspace) with its lower
   * directory (at `lowerPath`'s child, or where its redirect names; none when opaque): sets it in
   * `children` as an MDir, or drops it when the capture filter calls it scratch.
   */
  private async mergeSubdir(
    dir: DirFd,
    st: fs.BigIntStats,
    children: Map<string, MEntry>,
    name: string,
    relPath: string,
    lowerPath: string | null,
    f: CaptureDirFilter | undefined,
  ): Promise<void> {
    const base = children.get(name);
    if (f && f.verdict(name, true, () => Buffer.alloc(0)) === 'scratch') {
      this.filter?.scratch(relPath, { dir });
      children.delete(name);
      return;
    }
    const ov = overlayXattrs(dir.self);
    let lowerChild: string | null = null;
    if (ov.opaque !== 'y') {
      if (ov.redirect !== undefined) {
        lowerChild = ov.redirect.startsWith('/') ? ov.redirect.slice(1) : lowerPath === null ? null : joinRel(lowerPath, ov.redirect);
      } else if (lowerPath !== null) {
        lowerChild = joinRel(lowerPath, name);
      }
    }
    let kids = new Map<string, MEntry>();
    let baseDir: Entry | undefined;
    if (lowerChild !== null) {
      // the same path without a redirect is the entry we already hold
      baseDir = ov.redirect === undefined && base && base.type !== 'mdir' ? base : await this.lookupBase(lowerChild);
      if (baseDir?.type === 'dir') kids = await this.loadChildren(baseDir.tree);
      else if (base?.type === 'mdir' && ov.redirect === undefined) kids = base.children;
      else lowerChild = null;
    }
    const childF = await f?.child(name, () => this.textOf(dir, kids, '.gitignore'));
    await this.mergeDir(dir, kids, lowerChild, childF);
    const attrs = keepBaseTime(attrsFromStat(st, readXattrs(dir.self)), baseDir);
    children.set(name, { type: 'mdir', name, attrs, children: kids });
  }

  /**
   * Sets the upper regular file `name` (open at `fd`) in `children`, or drops it when the capture
   * filter calls its full copy secret or scratch (reported to the filter).
   */
  private async mergeFiltered(
    fd: number,
    st: fs.BigIntStats,
    children: Map<string, MEntry>,
    name: string,
    relPath: string,
    lowerPath: string | null,
    f: CaptureDirFilter | undefined,
  ): Promise<void> {
    const verdict = f && !overlayXattrs(fdPath(fd)).metacopy ? f.verdict(name, false, (max) => peekFd(fd, max)) : 'store';
    // as if the upper did not hold it: the base's entry (a registered worktree's `.git` file over the base's `.git`) stays
    if (verdict === 'base') return;
    if (verdict !== 'store') {
      if (verdict === 'secret') this.filter?.secret(relPath, fd, Number(st.size));
      else this.filter?.scratch(relPath, { size: Number(st.size) });
      children.delete(name);
      return;
    }
    children.set(name, await this.mergeFile(fd, relPath, name, st, lowerPath));
  }

  /** The entry of an upper regular file open at `fd` (read through the descriptor only). */
  private async mergeFile(fd: number, relPath: string, name: string, st: fs.BigIntStats, lowerPath: string | null): Promise<Entry> {
    if (st.nlink > 1n) {
      const first = this.inodes.get(st.ino);
      if (first !== undefined) return { type: 'hardlink', name, target: first };
      this.inodes.set(st.ino, relPath);
    }
    const p = fdPath(fd);
    const ov = overlayXattrs(p);
    const attrs0 = attrsFromStat(st, readXattrs(p));
    if (ov.metacopy) {
      let data: FileData | undefined;
      let baseFile: Entry | undefined;
      const samePath = lowerPath === null ? null : joinRel(lowerPath, name);
      // a redirect into the content lower names the data itself; one that names none is a path of the layer
      const content = ov.redirect === undefined ? undefined : await this.contentOfRedirect(ov.redirect, samePath);
      if (content) data = content.data;
      else {
        const from =
          ov.redirect === undefined
            ? samePath
            : ov.redirect.startsWith('/')
              ? ov.redirect.slice(1)
              : lowerPath === null
                ? null
                : joinRel(lowerPath, ov.redirect);
        baseFile = from === null ? undefined : await this.lookupBase(from);
        if (baseFile?.type === 'file')
          data = { digest: baseFile.digest, size: baseFile.size, chunks: baseFile.chunks, ...sparseOf(baseFile.extents) };
      }
      if (!data)
        throw new AwcError('E_INTEGRITY', `metadata-only copy-up ${relPath} has no lower data (redirect ${ov.redirect ?? 'none'})`);
      return { type: 'file', name, ...keepBaseTime(attrs0, baseFile), ...data };
    }
    const hit = this.statCache[relPath];
    if (hit && sameStat(hit, st)) {
      this.nextCache[relPath] = hit;
      return {
        type: 'file',
        name,
        ...attrs0,
        size: Number(st.size),
        digest: hit.digest,
        chunks: hit.chunks.map(({ digest, size }) => ({ digest, size })),
        ...sparseOf(hit.extents),
      };
    }
    const c = await this.writer.writeFileFd(fd, { path: relPath, allowChanging: this.allowChanging, findExtents: findDataExtents });
    this.filesRead++;
    this.bytesRead += c.size;
    const after = c.st;
    if (c.changing) this.changing.push(relPath);
    // a file stored while it kept changing must be read again next time: no stat cache entry
    else
      this.nextCache[relPath] = {
        ino: after.ino.toString(),
        size: after.size.toString(),
        mtimeNs: after.mtimeNs.toString(),
        ctimeNs: after.ctimeNs.toString(),
        digest: c.digest,
        chunks: c.chunks.map((x) => ({ digest: x.digest, size: x.size })),
        ...(c.extents ? { extents: c.extents } : {}),
      };
    const body = { size: c.size, digest: c.digest, chunks: c.chunks, ...sparseOf(c.extents) };
    return { type: 'file', name, ...attrsFromStat(after, readXattrs(p)), ...body };
  }

  /**
   * Re-roots base hardlink groups whose first name no longer holds the shared inode. Only a
   * group whose first name, or a directory above it, is in the upper can have lost it.
   */
  async fixHardlinks(root: Map<string, MEntry>, groups: Record<string, string[]>): Promise<void> {
    for (const [first, others] of Object.entries(groups)) {
      if (!this.touchedAt(first)) continue;
      const baseFirst = await this.lookupBase(first);
      if (!baseFirst || baseFirst.type !== 'file') continue;
      const now = await this.getM(root, first);
      if (now && now.type === 'file' && JSON.stringify(now) === JSON.stringify(baseFirst)) continue;
      const survivors: string[] = [];
      for (const o of others) {
        const e = await this.getM(root, o);
        if (e && e.type === 'hardlink' && e.target === first) survivors.push(o);
      }
      if (survivors.length === 0) continue;
      survivors.sort(comparePaths);
      const [head, ...rest] = survivors;
      await this.setM(root, head, { ...baseFirst, name: basename(head) });
      for (const o of rest) await this.setM(root, o, { type: 'hardlink', name: basename(o), target: head });
    }
  }

  /** True when the upper holds `path` or a directory above it. */
  private touchedAt(path: string): boolean {
    for (let i = path.indexOf('/'); i >= 0; i = path.indexOf('/', i + 1)) if (this.touched.has(path.slice(0, i))) return true;
    return this.touched.has(path);
  }

  private async getM(root: Map<string, MEntry>, path: string): Promise<MEntry | undefined> {
    const parts = path.split('/');
    let dir = root;
    for (let i = 0; i < parts.length - 1; i++) {
      const e = dir.get(parts[i]);
      if (!e) return undefined;
      if (e.type === 'mdir') dir = e.children;
      else if (e.type === 'dir') dir = await this.loadChildren(e.tree);
      else return undefined;
    }
    return dir.get(parts[parts.length - 1]);
  }

  private async setM(root: Map<string, MEntry>, path: string, entry: Entry): Promise<void> {
    const parts = path.split('/');
    let dir = root;
    for (let i = 0; i < parts.length - 1; i++) {
      const e = dir.get(parts[i]);
      if (!e) return;
      if (e.type === 'dir') {
        const { tree: _tree, type: _type, name, ...attrs } = e;
        const m: MDir = { type: 'mdir', name, attrs, children: await this.loadChildren(e.tree) };
        dir.set(parts[i], m);
        dir = m.children;
      } else if (e.type === 'mdir') dir = e.children;
      else return;
    }
    dir.set(parts[parts.length - 1], entry);
  }

  async writeDir(children: Map<string, MEntry>): Promise<Digest> {
    const entries: Entry[] = [];
    for (const e of children.values()) {
      if (e.type === 'mdir') {
        const tree = await this.writeDir(e.children);
        const d: DirEntry = { type: 'dir', name: e.name, ...e.attrs, tree };
        entries.push(d);
      } else entries.push(e);
    }
    return this.writer.writeTree(entries);
  }
}

function joinRel(a: string, b: string): string {
  return a === '' ? b : `${a}/${b}`;
}

function basename(p: string): string {
  return p.slice(p.lastIndexOf('/') + 1);
}

/** Orders slash paths as a depth-first, name-sorted walk visits them. */
export function comparePaths(a: string, b: string): number {
  const pa = a.split('/');
  const pb = b.split('/');
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const c = compareNames(pa[i], pb[i]);
    if (c !== 0) return c;
  }
  return pa.length - pb.length;
}

function overlayXattrs(p: string): { opaque?: string; redirect?: string; metacopy: boolean } {
  let names: string[];
  try {
    names = xattr().listAttributesSync(p);
  } catch {
    return { metacopy: false };
  }
  const out: { opaque?: string; redirect?: string; metacopy: boolean } = { metacopy: false };
  for (const n of names) {
    if (n === 'trusted.overlay.opaque') out.opaque = xattr().getAttributeSync(p, n).toString();
    else if (n === 'trusted.overlay.redirect') out.redirect = xattr().getAttributeSync(p, n).toString();
    else if (n === 'trusted.overlay.metacopy') out.metacopy = true;
  }
  return out;
}

/** Entry attributes from an lstat (bigint) result. */
export function attrsFromStat(st: fs.BigIntStats, xattrs: Record<string, string> | undefined): EntryAttrs {
  const a: EntryAttrs = { mode: Number(st.mode & 0o7777n), uid: Number(st.uid), gid: Number(st.gid), mtimeNs: st.mtimeNs.toString() };
  if (xattrs) a.xattrs = xattrs;
  return a;
}

/**
 * Keeps the base's exact nanosecond mtime when the upper's differs by less than 1 µs:
 * layer placeholders get their mtime through utimes (a double, ~240 ns precision), so a
 * copy-up that did not touch the time must not record a spurious change.
 */
function keepBaseTime(a: EntryAttrs, base: MEntry | { mtimeNs: string } | undefined): EntryAttrs {
  if (!base || !('mtimeNs' in base)) return a;
  const d = BigInt(a.mtimeNs) - BigInt(base.mtimeNs);
  if (d !== 0n && d > -1000n && d < 1000n) return { ...a, mtimeNs: base.mtimeNs };
  return a;
}
