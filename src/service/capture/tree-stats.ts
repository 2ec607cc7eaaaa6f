import type { Digest } from '../../core/digest.js';
import type { Entry } from '../../core/tree.js';
import type { TreeSource } from '../../store/content/tree-source.js';

/** Regular files (each hardlinked inode once) and their logical bytes under a tree. */
export interface TreeCounts {
  files: number;
  bytes: number;
}

/**
 * Counts files and bytes of a snapshot. Subtree counts are memoised by tree digest in
 * `memo`, so counting a checkpoint re-reads only the directories that changed.
 */
export async function countRoot(src: TreeSource, root: Digest, memo: Map<Digest, TreeCounts> = new Map()): Promise<TreeCounts> {
  const r = await src.readRoot(root);
  return countTree(src, r.tree, memo);
}

/** Counts files and bytes under tree `tree` (memoised by digest in `memo`; see countRoot). */
export async function countTree(src: TreeSource, tree: Digest, memo: Map<Digest, TreeCounts>): Promise<TreeCounts> {
  const hit = memo.get(tree);
  if (hit) return hit;
  const t = await src.readTree(tree);
  const c: TreeCounts = { files: 0, bytes: 0 };
  for (const e of t.entries) {
    if (e.type === 'file') {
      c.files++;
      c.bytes += e.size;
    } else if (e.type === 'dir') {
      const s = await countTree(src, e.tree, memo);
      c.files += s.files;
      c.bytes += s.bytes;
    }
  }
  memo.set(tree, c);
  return c;
}

/**
 * The change in files and bytes from tree `before` to tree `after`: reads only the
 * directories whose digests differ (an unchanged subtree keeps its digest, so it is never
 * read), and counts a subtree whole only where it was added, removed or replaced by another
 * type. Cost: O(entries of the changed directories + the added or removed subtrees).
 * `counts(after) = counts(before) + diffCounts(before, after)`. The same pruning as git's
 * tree diff (`diff_tree` skips equal object ids).
 */
export async function diffCounts(
  src: TreeSource,
  before: Digest,
  after: Digest,
  memo: Map<Digest, TreeCounts> = new Map(),
): Promise<TreeCounts> {
  const d: TreeCounts = { files: 0, bytes: 0 };
  if (before === after) return d;
  const [a, b] = await Promise.all([src.readTree(before), src.readTree(after)]);
  const old = new Map(a.entries.map((e) => [e.name, e]));
  const add = async (e: Entry | undefined, sign: 1 | -1): Promise<void> => {
    const c = await entryCounts(src, e, memo);
    d.files += sign * c.files;
    d.bytes += sign * c.bytes;
  };
  for (const n of b.entries) {
    const o = old.get(n.name);
    old.delete(n.name);
    if (o?.type === 'dir' && n.type === 'dir') {
      const s = await diffCounts(src, o.tree, n.tree, memo);
      d.files += s.files;
      d.bytes += s.bytes;
    } else if (!(o?.type === 'file' && n.type === 'file' && o.size === n.size)) {
      await add(o, -1);
      await add(n, 1);
    }
  }
  for (const o of old.values()) await add(o, -1);
  return d;
}

/** Files and bytes an entry adds to its parent's counts (a hardlink, symlink or device: none). */
async function entryCounts(src: TreeSource, e: Entry | undefined, memo: Map<Digest, TreeCounts>): Promise<TreeCounts> {
  if (e?.type === 'file') return { files: 1, bytes: e.size };
  if (e?.type === 'dir') return countTree(src, e.tree, memo);
  return { files: 0, bytes: 0 };
}

/** diffCounts between the trees of two snapshot roots. @throws as readRoot (E_OBJECT_NOT_FOUND, E_FORMAT) */
export async function diffRootCounts(src: TreeSource, before: Digest, after: Digest): Promise<TreeCounts> {
  if (before === after) return { files: 0, bytes: 0 };
  const [a, b] = await Promise.all([src.readRoot(before), src.readRoot(after)]);
  return diffCounts(src, a.tree, b.tree);
}
