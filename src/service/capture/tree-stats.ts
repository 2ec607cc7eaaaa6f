import type { Digest } from '../../core/digest.js';
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
