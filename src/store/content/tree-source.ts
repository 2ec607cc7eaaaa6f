import type { Digest } from '../../core/digest.js';
import type { Entry, RootObject, TreeObject } from '../../core/tree.js';

/** Anything that can load tree and root objects by digest (a ContentReader, or a writer's session for a live state). */
export interface TreeSource {
  readTree(digest: Digest): Promise<TreeObject>;
  readRoot(digest: Digest): Promise<RootObject>;
}

/** One visited entry: its slash-separated path from the snapshot root (no leading slash) and the entry. */
export interface WalkItem {
  path: string;
  entry: Entry;
}

/**
 * Walks a snapshot depth-first in tree order (entries sorted by name bytes, a directory
 * before its contents): the order that defines which name of a hardlinked file is first.
 */
export async function* walkTree(src: TreeSource, root: Digest): AsyncGenerator<WalkItem> {
  const r = await src.readRoot(root);
  yield* walkDir(src, r.tree, '');
}

async function* walkDir(src: TreeSource, tree: Digest, prefix: string): AsyncGenerator<WalkItem> {
  const t = await src.readTree(tree);
  for (const entry of t.entries) {
    const path = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
    yield { path, entry };
    if (entry.type === 'dir') yield* walkDir(src, entry.tree, path);
  }
}
