import type { Catalog } from '../../catalog/port/catalog.js';
import type { GcSnapshot } from '../../catalog/port/gc-catalog.js';
import type { Digest } from '../../core/digest.js';
import { toAwcError, type AwcError } from '../../core/errors.js';
import type { TreeObject } from '../../core/tree.js';
import { ContentReader } from '../../store/content/content-reader.js';
import type { ObjectStore } from '../../store/object/object-store.js';

/** Trees read in one batch by the walk (as gc's mark). */
const TREE_BATCH = 256;

/** What the snapshots of one namespace need. */
export interface NamespaceNeeds {
  /** Every root, tree and chunk digest reachable; chunks map to the size their files list (bytes), roots and trees to undefined. */
  needed: Map<Digest, number | undefined>;
  /** Roots and trees that could not be read or decoded, with the error. */
  unreadable: Map<Digest, AwcError>;
  /** Digest of each snapshot's root, by snapshot id. */
  roots: Map<string, Digest>;
  reader: ContentReader;
}

/**
 * The reachability walk of `awc fsck` (the mark of docs/explanation/gc.md, made to go on past
 * what it cannot read): from every snapshot root of every namespace through every tree to the
 * chunks of every file, each tree once per namespace, TREE_BATCH trees at a time. A root or
 * tree that cannot be read (every read is verified against its digest) is recorded in
 * `unreadable` and the walk continues with the others. `tick` runs every 256 trees.
 * @returns namespace → what its snapshots need, and the number of trees read.
 * @throws what the catalog or the store throws for reasons other than a missing or corrupt
 *   object (E_CATALOG_UNAVAILABLE, E_OBJECT_STORE_UNAVAILABLE, …)
 */
export async function walkSnapshots(
  catalog: Catalog,
  store: ObjectStore,
  snapshots: readonly GcSnapshot[],
  tick: () => Promise<void> = async () => undefined,
): Promise<{ byNamespace: Map<string, NamespaceNeeds>; trees: number }> {
  const byNamespace = new Map<string, NamespaceNeeds>();
  for (const s of snapshots) {
    let ns = byNamespace.get(s.namespace);
    if (!ns) {
      ns = {
        needed: new Map(),
        unreadable: new Map(),
        roots: new Map(),
        reader: new ContentReader({ store, index: catalog.blobIndex(s.namespace), treeCacheSize: TREE_BATCH }),
      };
      byNamespace.set(s.namespace, ns);
    }
    ns.roots.set(s.id, s.root);
  }
  const count = { trees: 0 };
  for (const ns of byNamespace.values()) await walkNamespace(ns, await readRoots(ns), count, tick);
  return { byNamespace, trees: count.trees };
}

/** Reads the roots of `ns` (recording those that cannot be read). @returns their trees, to walk */
async function readRoots(ns: NamespaceNeeds): Promise<Digest[]> {
  const todo: Digest[] = [];
  for (const root of new Set(ns.roots.values())) {
    ns.needed.set(root, undefined);
    try {
      const r = await ns.reader.readRoot(root);
      if (!ns.needed.has(r.tree)) {
        ns.needed.set(r.tree, undefined);
        todo.push(r.tree);
      }
    } catch (err) {
      ns.unreadable.set(root, objectError(err));
    }
  }
  return todo;
}

/** Walks the trees of `todo` (consumed) and their subtrees, TREE_BATCH at a time, into `ns.needed`; counts trees, calls `tick` every 256. */
async function walkNamespace(ns: NamespaceNeeds, todo: Digest[], count: { trees: number }, tick: () => Promise<void>): Promise<void> {
  while (todo.length > 0) {
    const batch = todo.splice(Math.max(0, todo.length - TREE_BATCH));
    for (const t of await readTreesOrEach(ns, batch)) {
      if (++count.trees % 256 === 0) await tick();
      needEntries(ns, t, todo);
    }
  }
}

/** Adds the subtrees of `t` not yet needed to `ns.needed` and `todo`, and the chunks of its files (with their sizes) to `ns.needed`. */
function needEntries(ns: NamespaceNeeds, t: TreeObject, todo: Digest[]): void {
  for (const e of t.entries) {
    if (e.type === 'dir' && !ns.needed.has(e.tree)) {
      ns.needed.set(e.tree, undefined);
      todo.push(e.tree);
    } else if (e.type === 'file') {
      for (const c of e.chunks) ns.needed.set(c.digest, c.size);
    }
  }
}

/** The trees of `batch` that can be read: all at once, else one by one (recording the failures). */
async function readTreesOrEach(ns: NamespaceNeeds, batch: readonly Digest[]): Promise<TreeObject[]> {
  try {
    return await ns.reader.readTrees(batch);
  } catch (err) {
    objectError(err);
  }
  const out: TreeObject[] = [];
  for (const d of batch) {
    try {
      out.push(await ns.reader.readTree(d));
    } catch (err) {
      ns.unreadable.set(d, objectError(err));
    }
  }
  return out;
}

/** The error of a missing, corrupt or unreadable object as an AwcError; anything else is thrown on. */
function objectError(err: unknown): AwcError {
  const e = toAwcError(err);
  if (e.code === 'E_OBJECT_NOT_FOUND' || e.code === 'E_INTEGRITY' || e.code === 'E_FORMAT') return e;
  throw e;
}

/**
 * Which snapshots reach which of `bad` (digests of blobs that cannot be read): a second walk
 * of the namespace's trees (cached by its reader), each tree once, remembering the bad
 * digests beneath it. A tree that could not be read in the walk is bad itself; a root or tree
 * read in the walk that cannot be read now (a concurrent gc deleted the pack of a snapshot
 * it removed) reaches nothing.
 * @returns bad digest → ids of the snapshots that need it.
 */
export async function attribute(ns: NamespaceNeeds, bad: ReadonlySet<Digest>): Promise<Map<Digest, Set<string>>> {
  const out = new Map<Digest, Set<string>>();
  if (bad.size === 0 && ns.unreadable.size === 0) return out;
  const beneath = new Map<Digest, ReadonlySet<Digest>>();
  const none: ReadonlySet<Digest> = new Set();
  const treeBad = async (d: Digest): Promise<ReadonlySet<Digest>> => {
    const memo = beneath.get(d);
    if (memo) return memo;
    if (ns.unreadable.has(d)) {
      const s = new Set([d]);
      beneath.set(d, s);
      return s;
    }
    let found: Set<Digest> | undefined;
    const add = (x: Digest): void => void (found ??= new Set()).add(x);
    if (bad.has(d)) add(d);
    let t: TreeObject;
    try {
      t = await ns.reader.readTree(d);
    } catch (err) {
      objectError(err); // read in the walk, gone now: a gc removed what needs it (confirm drops those snapshots)
      beneath.set(d, none);
      return none;
    }
    for (const e of t.entries) {
      if (e.type === 'dir') for (const x of await treeBad(e.tree)) add(x);
      else if (e.type === 'file') for (const c of e.chunks) if (bad.has(c.digest)) add(c.digest);
    }
    beneath.set(d, found ?? none);
    return found ?? none;
  };
  for (const [id, root] of ns.roots) {
    let reached: ReadonlySet<Digest>;
    if (ns.unreadable.has(root) || bad.has(root)) reached = new Set([root]);
    else {
      let tree: Digest;
      try {
        tree = (await ns.reader.readRoot(root)).tree;
      } catch (err) {
        objectError(err); // as a tree above
        continue;
      }
      reached = await treeBad(tree);
    }
    for (const d of reached) {
      const s = out.get(d);
      if (s) s.add(id);
      else out.set(d, new Set([id]));
    }
  }
  return out;
}
