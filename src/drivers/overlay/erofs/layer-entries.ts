/**
 * The entries of a snapshot's layer, for the EROFS writer (./writer.ts): what buildLayer
 * (../layer-builder.ts) makes on disk, as a list. Directories, symlinks, fifos and device
 * nodes as they are; each regular file a placeholder of its size with
 * `trusted.overlay.metacopy` (empty) and `trusted.overlay.redirect` naming its content
 * object (short form, or the long form for every file when two contents share a short name);
 * hardlinks as further names of their first file; owners replaced when an owner is given.
 */
import { digestHex, type Digest } from '../../../core/digest.js';
import { longContentRedirect, shortContentRedirect } from '../../../core/content-name.js';
import { hasEscape, nameToBytes } from '../../../core/raw-name.js';
import type { EntryAttrs } from '../../../core/tree.js';
import type { TreeSource } from '../../../store/content/tree-source.js';
import { major, minor } from '../layer-builder.js';
import type { ErofsEntry } from './tree.js';

/** Options of {@link layerImageEntries}, as buildLayer's (BuildLayerOptions). */
export interface LayerEntriesOptions {
  /** False when this host's content FUSE server already knows another object of `hex`'s short name: the file gets the long redirect. */
  shortNameFree?: (hex: string) => boolean;
  /** Every entry gets this owner instead of the snapshot's. */
  owner?: { uid: number; gid: number };
}

class ShortNameCollision extends Error {}

interface Ctx {
  long: boolean;
  shorts: Map<string, string>;
  opts: LayerEntriesOptions;
  out: ErofsEntry[];
}

/**
 * The layer entries of snapshot `root`, parents before children (the root first), each
 * directory's entries in tree order. Cost: one read per tree object, O(entries) memory.
 * @throws E_FORMAT on a corrupt tree (from the source)
 */
export async function layerImageEntries(src: TreeSource, root: Digest, opts: LayerEntriesOptions = {}): Promise<ErofsEntry[]> {
  try {
    return await entriesAs(src, root, { long: false, shorts: new Map(), opts, out: [] });
  } catch (err) {
    if (!(err instanceof ShortNameCollision)) throw err;
    return entriesAs(src, root, { long: true, shorts: new Map(), opts, out: [] });
  }
}

async function entriesAs(src: TreeSource, root: Digest, ctx: Ctx): Promise<ErofsEntry[]> {
  const r = await src.readRoot(root);
  ctx.out.push({ path: '', type: 'dir', ...attrs(r, ctx) });
  await walk(src, r.tree, '', ctx);
  return ctx.out;
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
    switch (e.type) {
      case 'dir':
        ctx.out.push({ path, type: 'dir', ...attrs(e, ctx) });
        await walk(src, e.tree, relPath, ctx);
        break;
      case 'file': {
        const a = attrs(e, ctx);
        const xattrs = a.xattrs as [string, Buffer][];
        if (e.size > 0)
          xattrs.push(['trusted.overlay.metacopy', Buffer.alloc(0)], ['trusted.overlay.redirect', Buffer.from(redirect(e.digest, ctx))]);
        ctx.out.push({ path, type: 'file', ...a, size: e.size });
        break;
      }
      case 'hardlink':
        ctx.out.push({
          path,
          type: 'hardlink',
          mode: 0,
          uid: 0,
          gid: 0,
          mtimeNs: 0n,
          target: hasEscape(e.target) ? nameToBytes(e.target) : e.target,
        });
        break;
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
