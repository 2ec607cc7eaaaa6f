import type { Change } from './diff.js';

/**
 * Rename detection for snapshot diffs (docs/reference/diff.md#renames): a path deleted and
 * another added with the same content become one `renamed` change, as `git diff -M` reports
 * an exact rename (similarity 100%).
 *
 * Content is the same when, for a directory, its tree digest (everything below it: names,
 * bytes, modes, owners, times) is; for a regular file, its content digest (and size); for a
 * symlink, its target. Empty files and empty directories are never paired (any empty one
 * would match any other, and git does not pair empty files either); hardlinks, fifos and
 * devices are not paired. A directory renamed with unchanged contents pairs everything below
 * it by relative path, so each of its files is a rename too (what a git patch needs).
 * Among several candidates with the same content, one with the same base name is taken
 * first, then the first in tree order. Only the permission bits or the owner may differ
 * (a file renamed after `chmod` is still a rename; `old` and `new` show both modes).
 */

/** The key that says two entries hold the same content, or undefined when the change cannot pair. */
function contentKey(c: Change, hasChildren: boolean): string | undefined {
  const s = c.status === 'deleted' ? c.old : c.new;
  if (!s) return undefined;
  if (s.type === 'dir') return s.tree !== undefined && hasChildren ? `dir:${s.tree}` : undefined;
  if (s.type === 'file') return s.digest !== undefined && (s.size ?? 0) > 0 ? `file:${s.digest}:${s.size}` : undefined;
  if (s.type === 'symlink') return s.target !== undefined ? `symlink:${s.target}` : undefined;
  return undefined;
}

function baseName(p: string): string {
  return p.slice(p.lastIndexOf('/') + 1);
}

/**
 * Replaces pairs of `deleted` and `added` changes with the same content (see the module
 * docs) by one change `{ status: 'renamed', path: <new path>, from: <old path>, kind, old, new }`
 * at the place of the addition; everything else is returned as it was, in its order.
 * `changes` is not modified.
 */
export function detectRenames(changes: readonly Change[]): Change[] {
  // tree order: the changes below an added or deleted directory follow it at once, with its status
  const below = (i: number): Change[] => {
    const c = changes[i]!;
    const out: Change[] = [];
    for (let j = i + 1; j < changes.length && changes[j]!.path.startsWith(`${c.path}/`); j++)
      if (changes[j]!.status === c.status) out.push(changes[j]!);
    return out;
  };
  const hasBelow = (i: number): boolean => {
    const n = changes[i + 1];
    return n !== undefined && n.status === changes[i]!.status && n.path.startsWith(`${changes[i]!.path}/`);
  };
  const deletedByKey = new Map<string, number[]>();
  changes.forEach((c, i) => {
    if (c.status !== 'deleted') return;
    const key = contentKey(c, c.old?.type === 'dir' && hasBelow(i));
    if (key) deletedByKey.set(key, [...(deletedByKey.get(key) ?? []), i]);
  });
  const renamedFrom = new Map<Change, Change>(); // the added change → the deleted one it pairs with
  const used = new Set<Change>();
  const pair = (added: Change, deleted: Change): void => {
    renamedFrom.set(added, deleted);
    used.add(added);
    used.add(deleted);
  };
  // shallow first (tree order puts a directory before its contents), so a renamed directory claims its children
  changes.forEach((c, i) => {
    if (c.status !== 'added' || used.has(c)) return;
    const isDir = c.new?.type === 'dir';
    const key = contentKey(c, isDir && hasBelow(i));
    if (!key) return;
    const candidates = (deletedByKey.get(key) ?? []).filter((d) => !used.has(changes[d]!));
    if (candidates.length === 0) return;
    const di = candidates.find((x) => baseName(changes[x]!.path) === baseName(c.path)) ?? candidates[0]!;
    const d = changes[di]!;
    pair(c, d);
    if (!isDir) return;
    const olds = new Map(below(di).map((x) => [x.path.slice(d.path.length), x]));
    for (const a of below(i)) {
      const o = olds.get(a.path.slice(c.path.length));
      if (o && !used.has(o) && !used.has(a)) pair(a, o);
    }
  });
  if (renamedFrom.size === 0) return [...changes];
  const out: Change[] = [];
  for (const c of changes) {
    const d = renamedFrom.get(c);
    if (d) out.push({ path: c.path, from: d.path, status: 'renamed', kind: c.kind, old: d.old, new: c.new });
    else if (!used.has(c)) out.push(c);
  }
  return out;
}
