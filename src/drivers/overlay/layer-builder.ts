import { mkdir, rename, readFile, stat } from 'node:fs/promises';
import { mkdirPrivate, writeFilePrivate } from '../../core/private-fs.js';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import type * as Xattr from 'fs-xattr';
import { lazyRequire } from '../../core/lazy-require.js';
import { digestHex, type Digest } from '../../core/digest.js';
import type { ChunkRef, Entry, FileEntry } from '../../core/tree.js';
import { futimesNs, utimesNsAt } from '../../host/sys/utimens.js';
import { AwcError } from '../../core/errors.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import { longContentRedirect, shortContentRedirect } from '../../core/content-name.js';
import { DirFd, fdPath } from '../../core/dir-fd.js';
import { fsPath } from '../../core/raw-name.js';
import { removeTree } from '../../core/remove-tree.js';
import { ContentIndex, contentsLookup, type ContentLookup, type LayerContents } from '../../store/content/content-index.js';
import { writeLayerGitIndex, type LayerGitIndexResult, type LayerGitIndexSource, type LayerPaths } from './layer-git-index.js';

/** fs-xattr (a native addon), loaded on first use. */
const xattr = lazyRequire<typeof Xattr>('fs-xattr');

/** What a layer directory knows about the content objects its placeholders redirect to. */
export interface LayerContent {
  size: number;
  chunks: ChunkRef[];
}

/** Metadata kept next to a layer directory (`meta.json`, host-local, not a durable format). */
export interface LayerMeta {
  v: 1;
  root: Digest;
  files: number;
  dirs: number;
  /** content hex digest → size and chunks (and a sparse file's extents), for the content FUSE server. */
  contents: LayerContents;
  /** Hardlink groups: path of the file entry → further names (paths from the root). */
  hardlinks: Record<string, string[]>;
  /** The workspace's index (src/drivers/overlay/layer-git-index.ts): absent when the layer shows the snapshot's own `.git/index`. */
  gitIndex?: LayerGitIndexResult;
}

/** A built layer: its directory (the overlay lower) and its metadata. */
export interface Layer {
  dir: string;
  meta: LayerMeta;
}

/** Two content objects of one layer share a short name: the layer is built again with long redirects. */
class ShortNameCollision extends Error {}

/** Per build: which redirect form placeholders get, and the short names given so far. */
interface BuildCtx {
  long: boolean;
  shorts: Map<string, string>;
  /** False when another content object on this host already answers to the short name of `hex`. */
  shortNameFree: (hex: string) => boolean;
  /** Every entry gets this owner instead of the snapshot's (a layer built for an ordinary user). */
  owner?: { uid: number; gid: number };
  /** Set when the snapshot's root has a `.git` directory and a git source was given: files, symlinks and hardlinks by path. */
  paths?: LayerPaths;
  git?: LayerGitIndexSource;
}

/** Options of {@link buildLayer}. */
export interface BuildLayerOptions {
  /**
   * Asked for each content object: false when the content FUSE server of this host already
   * knows another object with the same short name (see ContentFuse.shortNameFree); that file
   * then gets the long redirect. Default: every short name is free.
   */
  shortNameFree?: (hex: string) => boolean;
  /**
   * Build the layer for an ordinary user: every entry is owned by this uid and gid (so the
   * user may write their checkout; modes stay the snapshot's). Give such layers their own
   * `layersDir` (`<userLayers>/<uid>`): a layer tree is per (root, owner).
   */
  owner?: { uid: number; gid: number };
  /**
   * Gives the layer's workspaces an index whose stat data matches what they show, where the
   * import proved the content equal (see writeLayerGitIndex). Absent: the snapshot's own index.
   */
  git?: LayerGitIndexSource;
}

/**
 * Builds (once per snapshot per host) the layer directory of a snapshot: real directories,
 * symlinks, fifos and device nodes, and for each regular file an empty sparse placeholder
 * with the file's size, mode, owner and mtime plus `trusted.overlay.metacopy` and
 * `trusted.overlay.redirect=/<short name>` pointing into the content FUSE mount (docs/explanation/design.md#overlay-driver;
 * the format is src/core/content-name.ts). In the astronomically unlikely case that two content
 * objects of the snapshot share a short name, the layer uses the long form `/<aa>/<hex>`.
 * Hardlinked files share one placeholder inode; empty files are plain empty files.
 *
 * Layout: `<layersDir>/<root hex>/tree` (the overlay lower) and `meta.json` (0600).
 * `<layersDir>` and `<root hex>` are 0700: the tree holds the snapshot's own modes, setuid
 * bits and device nodes, so only root may reach it (docs/explanation/security.md). Built in a
 * temporary directory and renamed into place, so a crash never leaves a half layer.
 * Returns the existing layer when present. Cost: O(files), synchronous file system calls, in slices of
 * {@link YIELD_EVERY} entries between turns of the event loop.
 *
 * @throws E_PERMISSION without root (trusted.* xattrs), E_FORMAT on a corrupt tree.
 */
export async function buildLayer(src: TreeSource, root: Digest, layersDir: string, opts: BuildLayerOptions = {}): Promise<Layer> {
  const shortNameFree = opts.shortNameFree ?? (() => true);
  const { owner, git } = opts;
  try {
    return await buildLayerAs(src, root, layersDir, { long: false, shorts: new Map(), shortNameFree, owner, git });
  } catch (err) {
    if (!(err instanceof ShortNameCollision)) throw err;
    return buildLayerAs(src, root, layersDir, { long: true, shorts: new Map(), shortNameFree, owner, git });
  }
}

async function buildLayerAs(src: TreeSource, root: Digest, layersDir: string, ctx: BuildCtx): Promise<Layer> {
  const base = join(layersDir, digestHex(root));
  const metaPath = join(base, 'meta.json');
  try {
    const meta = JSON.parse(await readFile(metaPath, 'utf8')) as LayerMeta;
    return { dir: join(base, 'tree'), meta };
  } catch {
    // not built yet
  }
  await mkdirPrivate(layersDir);
  const tmp = `${base}.tmp-${process.pid}-${Date.now()}`;
  await removeTree(tmp);
  const treeDir = join(tmp, 'tree');
  await mkdirPrivate(tmp);
  await mkdir(treeDir);
  const meta: LayerMeta = { v: 1, root, files: 0, dirs: 0, contents: {}, hardlinks: {} };
  try {
    const opened = DirFd.openRoot(treeDir);
    if (!opened) throw new AwcError('E_INTERNAL', `the layer's build directory vanished: ${treeDir}`);
    const tree = opened.dir;
    try {
      const r = await src.readRoot(root);
      if (ctx.git && (await src.readTree(r.tree)).entries.some((e) => e.name === '.git' && e.type === 'dir')) ctx.paths = new Map();
      const b: Build = { meta, ctx, tree, buildDir: tmp, deferred: [], sinceYield: 0 };
      await buildDir(src, r.tree, tree, '', b);
      applyAttrs(tree.fd, owned(r, ctx));
      if (ctx.paths && ctx.git) {
        // after every placeholder is final (a hardlink changes its inode's ctime), before `.git`'s time
        const gi = await writeLayerGitIndex(tree, tmp, root, ctx.paths, ctx.git, ctx.owner, BigInt(Date.now()) * 1_000_000n);
        if (gi) meta.gitIndex = gi;
      }
      // `.git` (whose index was just replaced), then the root: each other directory got its time once its children were made
      for (const [name, ns] of b.deferred) utimesNsAt(tree.fd, name, ns);
      futimesNs(tree.fd, r.mtimeNs);
    } finally {
      tree.close();
    }
    await writeFilePrivate(join(tmp, 'meta.json'), JSON.stringify(meta));
    await writeFilePrivate(join(tmp, LINKS_FILE), JSON.stringify(meta.hardlinks));
    try {
      await rename(tmp, base);
    } catch (err) {
      // another builder won the race: use its layer
      if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY' && (err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      await removeTree(tmp);
      const m = JSON.parse(await readFile(metaPath, 'utf8')) as LayerMeta;
      return { dir: join(base, 'tree'), meta: m };
    }
  } catch (err) {
    await removeTree(tmp);
    if ((err as NodeJS.ErrnoException).code === 'EPERM' || (err as NodeJS.ErrnoException).code === 'ENOTSUP') {
      throw new AwcError('E_PERMISSION', `cannot build the layer directory: ${(err as Error).message}`, { cause: err });
    }
    throw err;
  }
  return { dir: join(base, 'tree'), meta };
}

/** One build's state: the layer's tree open as `tree`, its private build directory, and directory times set last. */
interface Build {
  meta: LayerMeta;
  ctx: BuildCtx;
  tree: DirFd;
  /** The build's private temporary directory (holds `tree`; device nodes are made here, then linked in place). */
  buildDir: string;
  /** Top-level directories whose mtime is set after the git index is written (name, ns). */
  deferred: [string, string][];
  /** Entries made since the build last let the event loop run (see {@link YIELD_EVERY}). */
  sinceYield: number;
}

/**
 * Entries a build makes (each a few synchronous system calls) before it lets the event loop
 * run: in the daemon, the same loop serves the content FUSE server's main-thread requests,
 * whose cold reads another workspace waits on (during a first mount of the copy of `/usr`,
 * the slowest such read took 1.07 s without it and 229 ms with it; docs/benchmarks.md).
 */
const YIELD_EVERY = 256;

/** The entry's attributes with the build's owner, when it has one. */
function owned<T extends { uid: number; gid: number }>(e: T, ctx: BuildCtx): T {
  return ctx.owner ? { ...e, uid: ctx.owner.uid, gid: ctx.owner.gid } : e;
}

/** Owner, mode and xattrs of the object open as `fd` (a directory's descriptor). */
function applyAttrs(fd: number, e: { mode: number; uid: number; gid: number; xattrs?: Record<string, string> }): void {
  fs.fchownSync(fd, e.uid, e.gid);
  fs.fchmodSync(fd, e.mode);
  const xs = e.xattrs;
  if (xs) setXattrs(fdPath(fd), xs);
}

function setXattrs(obj: string, xattrs: Record<string, string>): void {
  for (const [k, v] of Object.entries(xattrs)) xattr().setAttributeSync(obj, k, Buffer.from(v, 'base64'));
}

async function buildDir(src: TreeSource, tree: Digest, dir: DirFd, rel: string, b: Build): Promise<void> {
  const t = await src.readTree(tree);
  for (const e of t.entries) {
    const relPath = rel === '' ? e.name : `${rel}/${e.name}`;
    if (b.ctx.paths && e.type !== 'dir') b.ctx.paths.set(relPath, e);
    await buildEntry(src, e, dir, relPath, b);
    if (++b.sinceYield >= YIELD_EVERY) {
      b.sinceYield = 0;
      await new Promise((r) => setImmediate(r));
    }
  }
}

/** Makes entry `e` (at `relPath` from the layer's root) inside the directory open as `dir`, by its name there. */
async function buildEntry(src: TreeSource, e: Entry, dir: DirFd, relPath: string, b: Build): Promise<void> {
  const { ctx, meta } = b;
  switch (e.type) {
    case 'dir': {
      const sub = dir.mkdirOpen(e.name, 0o700, relPath);
      try {
        meta.dirs++;
        await buildDir(src, e.tree, sub, relPath, b);
        applyAttrs(sub.fd, owned(e, ctx));
        if (relPath === '.git' && ctx.paths) b.deferred.push([e.name, e.mtimeNs]);
        else futimesNs(sub.fd, e.mtimeNs); // its children are all made: nothing changes it later
      } finally {
        sub.close();
      }
      return;
    }
    case 'file':
      writePlaceholder(dir, e.name, owned(e, ctx), ctx);
      meta.files++;
      if (e.size > 0) {
        const chunks: [Digest, number][] = e.chunks.map((c) => [c.digest, c.size]);
        meta.contents[digestHex(e.digest)] = e.extents ? [e.size, chunks, e.extents] : [e.size, chunks];
      }
      return;
    case 'hardlink':
      linkInLayer(b.tree, e.target, dir, e.name, relPath);
      (meta.hardlinks[e.target] ??= []).push(relPath);
      return;
    case 'symlink': {
      fs.symlinkSync(fsPath(e.target), dir.path(e.name));
      fs.lchownSync(dir.path(e.name), owned(e, ctx).uid, owned(e, ctx).gid);
      utimesNsAt(dir.fd, e.name, e.mtimeNs);
      return;
    }
    case 'fifo':
    case 'chardev':
    case 'blockdev': {
      const kind = e.type === 'fifo' ? 'p' : e.type === 'chardev' ? 'c' : 'b';
      // mknod takes a path argument (as UTF-8, and no longer than PATH_MAX): the node is made
      // under a plain name in the build's private directory beside `tree` (same file system,
      // never seen), then linked in place through the parent's descriptor
      const made = join(b.buildDir, 'node.tmp');
      const args = kind === 'p' ? [made, 'p'] : [made, kind, String(major(e.rdev)), String(minor(e.rdev))];
      execFileSync('mknod', args, { stdio: 'ignore' });
      try {
        fs.linkSync(made, dir.path(e.name));
      } finally {
        fs.unlinkSync(made);
      }
      const o = owned(e, ctx);
      fs.lchownSync(dir.path(e.name), o.uid, o.gid);
      dir.withObject(e.name, (obj) => {
        fs.chmodSync(obj, o.mode);
        if (o.xattrs) setXattrs(obj, o.xattrs);
      });
      utimesNsAt(dir.fd, e.name, e.mtimeNs);
      return;
    }
  }
}

/**
 * Links the regular file at `target` (a slash path from the layer's root) as `name` in `dir`.
 * The target's directories are opened one at a time without following a symlink, so a
 * snapshot whose hardlink names a path through one of its own symlinks (`evil -> /etc`,
 * target `evil/shadow`) cannot link a host file into the layer.
 * @throws AwcError E_PATH_TRAVERSAL when a component is a symlink, `..` or missing, or the target is not a regular file of the layer
 */
function linkInLayer(tree: DirFd, target: string, dir: DirFd, name: string, relPath: string): void {
  const slash = target.lastIndexOf('/');
  const parent = tree.openRel(slash < 0 ? '' : target.slice(0, slash));
  try {
    const base = target.slice(slash + 1);
    const st = base === '' || base === '.' || base === '..' ? undefined : parent.lstat(base);
    if (!st?.isFile())
      throw new AwcError(
        'E_PATH_TRAVERSAL',
        `${relPath}: its hardlink target ${JSON.stringify(target)} is not a regular file of the snapshot`,
        {
          details: { path: relPath, target },
        },
      );
    fs.linkSync(parent.path(base), dir.path(name));
  } finally {
    parent.close();
  }
}

/** Creates the placeholder of file entry `e` as `name` in `dir` (never through an existing name). */
function writePlaceholder(dir: DirFd, name: string, e: FileEntry, ctx: BuildCtx): void {
  const c = fs.constants;
  const fd = fs.openSync(dir.path(name), c.O_CREAT | c.O_EXCL | c.O_WRONLY | c.O_NOFOLLOW, 0o600);
  try {
    if (e.size > 0) fs.ftruncateSync(fd, e.size);
    fs.fchownSync(fd, e.uid, e.gid);
    fs.fchmodSync(fd, e.mode);
    futimesNs(fd, e.mtimeNs);
    // xattrs through the descriptor's own path: fs-xattr takes string paths only, and a raw name is not one
    setPlaceholderXattrs(fdPath(fd), e, ctx);
  } finally {
    fs.closeSync(fd);
  }
}

function setPlaceholderXattrs(obj: string, e: FileEntry, ctx: BuildCtx): void {
  if (e.xattrs) setXattrs(obj, e.xattrs);
  if (e.size > 0) {
    xattr().setAttributeSync(obj, 'trusted.overlay.metacopy', Buffer.alloc(0));
    const hex = digestHex(e.digest);
    let redirect: string;
    if (ctx.long || !ctx.shortNameFree(hex)) {
      redirect = longContentRedirect(hex);
    } else {
      redirect = shortContentRedirect(hex);
      const seen = ctx.shorts.get(redirect);
      if (seen === undefined) ctx.shorts.set(redirect, e.digest);
      else if (seen !== e.digest) throw new ShortNameCollision(redirect);
    }
    xattr().setAttributeSync(obj, 'trusted.overlay.redirect', Buffer.from(redirect));
  }
}

/** Linux dev_t major number (glibc encoding). */
export function major(dev: number): number {
  return ((dev >>> 8) & 0xfff) | (Math.floor(dev / 2 ** 32) & ~0xfff);
}

/** Linux dev_t minor number (glibc encoding). */
export function minor(dev: number): number {
  return (dev & 0xff) | ((dev >>> 12) & 0xfff00);
}

/** The file of a layer's hardlink groups alone (LayerMeta.hardlinks), beside `meta.json`: what a checkpoint needs of a layer. */
export const LINKS_FILE = 'links.json';
/** An image-backed layer's content index (src/store/content/content-index.ts; uncompressed, 0600), in place of `meta.json`. */
export const INDEX_FILE = 'index.bin';

/**
 * What a checkpoint needs of the layer of `root` (src/drivers/overlay/upper-merge.ts): its
 * hardlink groups, read from the small `links.json` alone, and its contents, read only if
 * asked: from `meta.json` (its size follows the snapshot's file count), or for an image-backed
 * layer its content index `index.bin` (looked up, not parsed whole). Undefined when the
 * layer is not built, or was built before `links.json` existed (then use buildLayer).
 * Cost: O(hardlink groups), not O(files).
 */
export async function readLayerLinks(
  root: Digest,
  layersDir: string,
): Promise<{ hardlinks: LayerMeta['hardlinks']; contents: () => Promise<ContentLookup> } | undefined> {
  const base = join(layersDir, digestHex(root));
  let hardlinks: LayerMeta['hardlinks'];
  try {
    hardlinks = JSON.parse(await readFile(join(base, LINKS_FILE), 'utf8')) as LayerMeta['hardlinks'];
  } catch {
    return undefined;
  }
  const contents = async (): Promise<ContentLookup> => {
    const index = await readFile(join(base, INDEX_FILE)).catch(() => undefined);
    if (index) return ContentIndex.parse(index, root);
    return contentsLookup((JSON.parse(await readFile(join(base, 'meta.json'), 'utf8')) as LayerMeta).contents);
  };
  return { hardlinks, contents };
}

/** True when the layer of `root` is already built under `layersDir`. */
export async function hasLayer(root: Digest, layersDir: string): Promise<boolean> {
  try {
    await stat(join(layersDir, digestHex(root), 'meta.json'));
    return true;
  } catch {
    return false;
  }
}
