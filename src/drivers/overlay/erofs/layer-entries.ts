/**
 * The entries of a snapshot's layer, for the EROFS writer (./writer.ts): what buildLayer
 * (../layer-builder.ts) makes on disk, as a list. Directories, symlinks, fifos and device
 * nodes as they are; each regular file a placeholder of its size with
 * `trusted.overlay.metacopy` (empty) and `trusted.overlay.redirect` naming its content
 * object (short form, or the long form for every file when two contents share a short name);
 * hardlinks as further names of their first file; owners replaced when an owner is given.
 */
import { createHash } from 'node:crypto';
import { digestHex, type Digest } from '../../../core/digest.js';
import { longContentRedirect, shortContentRedirect } from '../../../core/content-name.js';
import { hasEscape, nameToBytes } from '../../../core/raw-name.js';
import type { EntryAttrs } from '../../../core/tree.js';
import type { TreeSource } from '../../../store/content/tree-source.js';
import type { ContentIndexSource } from '../../../store/content/content-index.js';
import { major, minor } from '../layer-builder.js';
import type { LayerImage } from '../layer-image.js';
import { imageGitIndex, type LayerGitIndexSource, type LayerPaths } from '../layer-git-index.js';
import type { ErofsEntry } from './tree.js';
import { erofsImage, writeImageFile } from './writer.js';

/** Options of {@link layerImageEntries}, as buildLayer's (BuildLayerOptions). */
export interface LayerEntriesOptions {
  /** False when this host's content FUSE server already knows another object of `hex`'s short name: the file gets the long redirect. */
  shortNameFree?: (hex: string) => boolean;
  /** Every entry gets this owner instead of the snapshot's. */
  owner?: { uid: number; gid: number };
  /**
   * Where the image finds the root's git proof and the snapshot's `.git/index`: when the import
   * proved the index, the image holds a rewritten copy whose stat data are its own (../layer-git-index.ts,
   * imageGitIndex). Absent: `.git/index` is a placeholder of the snapshot's bytes.
   */
  git?: LayerGitIndexSource;
}

class ShortNameCollision extends Error {}

interface Ctx {
  long: boolean;
  shorts: Map<string, string>;
  opts: LayerEntriesOptions;
  out: ErofsEntry[];
  /** Entries by path (not directories), kept when the root has a git proof (for imageGitIndex). */
  paths?: LayerPaths;
  /** The `.git/index` entry of the image and the snapshot's own xattrs of it. */
  gitIndex?: { entry: ErofsEntry; own: [string, Buffer][] };
  /** What buildLayer's meta.json would say: counts, contents, hardlink groups (for the content index). */
  meta: ContentIndexSource;
  /** Entries listed since the walk last let the event loop run (see {@link YIELD_EVERY}). */
  sinceYield: number;
}

/**
 * Entries the walk lists before it lets the event loop run: tree reads served from memory
 * resolve without one, and in the host daemon the same loop serves the content FUSE server's
 * requests, which other workspaces' cold reads wait on (as buildLayer's YIELD_EVERY).
 */
const YIELD_EVERY = 1024;

/** The entries of a layer and what its content index is made from. */
export interface LayerImageSource {
  entries: ErofsEntry[];
  meta: ContentIndexSource;
  /** The rewritten `.git/index` the image holds (entries in the index, entries whose stat data were set), when it holds one. */
  gitIndex?: { entries: number; rewritten: number };
}

/**
 * The layer entries of snapshot `root`, parents before children (the root first), each
 * directory's entries in tree order. Cost: one read per tree object, O(entries) memory.
 * @throws E_FORMAT on a corrupt tree (from the source)
 */
export async function layerImageEntries(src: TreeSource, root: Digest, opts: LayerEntriesOptions = {}): Promise<ErofsEntry[]> {
  return (await layerImageSource(src, root, opts)).entries;
}

/**
 * {@link layerImageEntries}, and the layer's content index source (files, directories below
 * the root, contents by 64-hex digest, hardlink groups) as buildLayer's `meta.json` has it.
 * @throws E_FORMAT on a corrupt tree (from the source)
 */
export async function layerImageSource(src: TreeSource, root: Digest, opts: LayerEntriesOptions = {}): Promise<LayerImageSource> {
  const git = opts.git && (await provenRoot(opts.git, root));
  const ctx = (long: boolean): Ctx => ({
    long,
    shorts: new Map(),
    opts,
    out: [],
    paths: git ? new Map() : undefined,
    meta: { root, files: 0, dirs: 0, contents: {}, hardlinks: {} },
    sinceYield: 0,
  });
  let c = ctx(false);
  let r: LayerImageSource;
  try {
    r = await entriesAs(src, root, c);
  } catch (err) {
    if (!(err instanceof ShortNameCollision)) throw err;
    r = await entriesAs(src, root, (c = ctx(true)));
  }
  if (git && c.paths && c.gitIndex) {
    const gi = await imageGitIndex(root, c.paths, git);
    if (gi) {
      Object.assign(c.gitIndex.entry, { xattrs: c.gitIndex.own, mtimeNs: gi.mtimeNs, data: gi.data });
      r.gitIndex = { entries: gi.entries, rewritten: gi.rewritten };
    }
  }
  return r;
}

/** `git` with the proof of `root` read once, or undefined when there is none (nothing to rewrite). @throws what `git` throws */
async function provenRoot(git: LayerGitIndexSource, root: Digest): Promise<LayerGitIndexSource | undefined> {
  const proof = await git.proof(root);
  return proof && { proof: async (r) => (r === root ? proof : git.proof(r)), read: (f) => git.read(f) };
}

/** The image of a layer in memory ({@link layerImageBytes}): its bytes, their sha256, the time taken (ms), the content index source. */
export interface LayerImageBytes {
  img: Buffer;
  digest: Digest;
  ms: number;
  meta: ContentIndexSource;
  /** The rewritten `.git/index` the image holds, when it holds one (see LayerImageSource). */
  gitIndex?: { entries: number; rewritten: number };
}

/**
 * The EROFS image of snapshot `root`'s layer, in memory, from its trees: what buildLayer
 * (../layer-builder.ts) makes on disk, packed as mkfs.erofs would pack it, in canonical bytes
 * (the same trees give the same bytes on any host). No layer directory, no mkfs.erofs. Cost:
 * one read per tree object, O(entries) time and memory (about 3 s of CPU and 250 MB for 117k
 * entries; the packing itself is synchronous).
 * @throws as {@link layerImageSource} and erofsImage (./writer.ts)
 */
export async function layerImageBytes(src: TreeSource, root: Digest, opts: LayerEntriesOptions = {}): Promise<LayerImageBytes> {
  const t0 = performance.now();
  const { entries, meta, gitIndex } = await layerImageSource(src, root, opts);
  const img = erofsImage(entries);
  const digest: Digest = `sha256:${createHash('sha256').update(img).digest('hex')}`;
  return { img, digest, ms: performance.now() - t0, meta, gitIndex };
}

/**
 * Writes the EROFS image of snapshot `root`'s layer ({@link layerImageBytes}) to `outFile`
 * (0600, written whole, fsynced, then renamed into place).
 * @returns the image's sha256, size and time taken, and the content index source
 * @throws as {@link layerImageBytes}; the file system's errors
 */
export async function writeLayerImage(
  src: TreeSource,
  root: Digest,
  outFile: string,
  opts: LayerEntriesOptions = {},
): Promise<LayerImage & { meta: ContentIndexSource }> {
  const t0 = performance.now();
  const { img, digest, meta } = await layerImageBytes(src, root, opts);
  await writeImageFile(img, outFile);
  return { digest, bytes: img.length, ms: performance.now() - t0, meta };
}

async function entriesAs(src: TreeSource, root: Digest, ctx: Ctx): Promise<LayerImageSource> {
  const r = await src.readRoot(root);
  ctx.out.push({ path: '', type: 'dir', ...attrs(r, ctx) });
  await walk(src, r.tree, '', ctx);
  return { entries: ctx.out, meta: ctx.meta };
}

function attrs(e: EntryAttrs, ctx: Ctx): Pick<ErofsEntry, 'mode' | 'uid' | 'gid' | 'mtimeNs' | 'xattrs'> {
  const xattrs: [string, Buffer][] = Object.entries(e.xattrs ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')]);
  const owner = ctx.opts.owner ?? e;
  return { mode: e.mode, uid: owner.uid, gid: owner.gid, mtimeNs: BigInt(e.mtimeNs), xattrs };
}

async function walk(src: TreeSource, tree: Digest, rel: string, ctx: Ctx): Promise<void> {
  const t = await src.readTree(tree);
  for (const e of t.entries) {
    const relPath = rel === '' ? e.name : `${rel}/${e.name}`;
    const path = hasEscape(relPath) ? nameToBytes(relPath) : relPath;
    if (ctx.paths && e.type !== 'dir') ctx.paths.set(relPath, e);
    if (++ctx.sinceYield >= YIELD_EVERY) {
      ctx.sinceYield = 0;
      await new Promise((r) => setImmediate(r));
    }
    switch (e.type) {
      case 'dir':
        ctx.out.push({ path, type: 'dir', ...attrs(e, ctx) });
        ctx.meta.dirs++;
        await walk(src, e.tree, relPath, ctx);
        break;
      case 'file': {
        const a = attrs(e, ctx);
        const xattrs = a.xattrs as [string, Buffer][];
        const own = [...xattrs];
        if (e.size > 0)
          xattrs.push(['trusted.overlay.metacopy', Buffer.alloc(0)], ['trusted.overlay.redirect', Buffer.from(redirect(e.digest, ctx))]);
        const entry: ErofsEntry = { path, type: 'file', ...a, size: e.size };
        ctx.out.push(entry);
        if (ctx.paths && relPath === '.git/index') ctx.gitIndex = { entry, own };
        ctx.meta.files++;
        if (e.size > 0) {
          const chunks: [Digest, number][] = e.chunks.map((c) => [c.digest, c.size]);
          ctx.meta.contents[digestHex(e.digest)] = e.extents ? [e.size, chunks, e.extents] : [e.size, chunks];
        }
        break;
      }
      case 'hardlink': {
        const target = hasEscape(e.target) ? nameToBytes(e.target) : e.target;
        ctx.out.push({ path, type: 'hardlink', mode: 0, uid: 0, gid: 0, mtimeNs: 0n, target });
        (ctx.meta.hardlinks[e.target] ??= []).push(relPath);
        break;
      }
      case 'symlink':
        ctx.out.push({ path, type: 'symlink', ...attrs(e, ctx), xattrs: [], target: nameToBytes(e.target) });
        break;
      case 'fifo':
        ctx.out.push({ path, type: 'fifo', ...attrs(e, ctx) });
        break;
      case 'chardev':
      case 'blockdev':
        ctx.out.push({ path, type: e.type, ...attrs(e, ctx), major: major(e.rdev), minor: minor(e.rdev) });
        break;
    }
  }
}

/** The placeholder's redirect: short unless told otherwise; a short name two contents share restarts the walk in long form. */
function redirect(digest: Digest, ctx: Ctx): string {
  const hex = digestHex(digest);
  if (ctx.long || !(ctx.opts.shortNameFree?.(hex) ?? true)) return longContentRedirect(hex);
  const r = shortContentRedirect(hex);
  const seen = ctx.shorts.get(r);
  if (seen === undefined) ctx.shorts.set(r, digest);
  else if (seen !== digest) throw new ShortNameCollision(r);
  return r;
}
