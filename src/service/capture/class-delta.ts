import type { Digest } from '../../core/digest.js';
import type { Entry, FileEntry, TreeObject } from '../../core/tree.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { CapturePolicy, PolicyDir } from './capture-policy.js';
import { countTree, diffCounts, type TreeCounts } from './tree-stats.js';

/** Files and bytes per stored class (the part of ClassCounts a snapshot's tree decides). */
export interface StoredClassCounts {
  durable: TreeCounts;
  reconstructible: TreeCounts;
  ignored: TreeCounts;
}

/** All zero. */
export function zeroStoredCounts(): StoredClassCounts {
  return { durable: { files: 0, bytes: 0 }, reconstructible: { files: 0, bytes: 0 }, ignored: { files: 0, bytes: 0 } };
}

/** `a + b` per class. */
export function addStoredCounts(a: StoredClassCounts, b: StoredClassCounts): StoredClassCounts {
  const out = zeroStoredCounts();
  for (const k of ['durable', 'reconstructible', 'ignored'] as const)
    out[k] = { files: a[k].files + b[k].files, bytes: a[k].bytes + b[k].bytes };
  return out;
}

/**
 * The change in per-class counts from snapshot `before` to snapshot `after` under one
 * policy (the same `.awc.json`): walks both trees side by side and reads only the
 * directories whose digests differ, as diffCounts does. A class depends on an entry's path
 * and the `.gitignore` files above it, so an unchanged subtree under unchanged `.gitignore`
 * files keeps its counts. Where a directory's own `.gitignore` changed, its subtree is
 * counted whole on both sides (its files may all have changed class).
 * Returns undefined when the root's `.gitignore` differs (the caller counts `after` whole).
 * Cost: O(entries of the changed directories + subtrees added, removed or re-classed).
 */
export async function diffClasses(
  reader: ContentReader,
  before: Digest,
  after: Digest,
  policy: CapturePolicy,
): Promise<StoredClassCounts | undefined> {
  const d = new ClassDelta(reader);
  const [a, b] = await Promise.all([reader.readRoot(before), reader.readRoot(after)]);
  const [ta, tb] = await Promise.all([reader.readTree(a.tree), reader.readTree(b.tree)]);
  const [ga, gb] = [gitignoreOf(ta), gitignoreOf(tb)];
  if (!sameFile(ga, gb)) return undefined;
  await d.walk(ta, tb, policy.root(await d.textOf(gb)));
  return d.out;
}

/** The `.gitignore` file entry of a tree (a hardlink or symlink by that name is not read, as countClasses does). */
function gitignoreOf(t: TreeObject): FileEntry | undefined {
  const e = t.entries.find((x) => x.name === '.gitignore');
  return e?.type === 'file' ? e : undefined;
}

function sameFile(a: FileEntry | undefined, b: FileEntry | undefined): boolean {
  return a === undefined ? b === undefined : b !== undefined && a.digest === b.digest;
}

/** One diffClasses walk: the counts so far and the memo of whole-subtree counts. */
class ClassDelta {
  readonly out = zeroStoredCounts();
  private readonly memo = new Map<Digest, TreeCounts>();

  constructor(private readonly reader: ContentReader) {}

  async textOf(e: FileEntry | undefined): Promise<string | undefined> {
    if (!e) return undefined;
    const parts: Buffer[] = [];
    for await (const b of this.reader.readFile(e)) parts.push(b);
    return Buffer.concat(parts).toString('utf8');
  }

  /** Adds the change from directory `a` to directory `b` (the same path, seen through `dir`). */
  async walk(a: TreeObject, b: TreeObject, dir: PolicyDir): Promise<void> {
    const old = new Map(a.entries.map((e) => [e.name, e]));
    for (const n of b.entries) {
      const o = old.get(n.name);
      old.delete(n.name);
      if (o?.type === 'dir' && n.type === 'dir') await this.dirPair(o.name, o.tree, n.tree, dir);
      else if (o?.type === 'file' && n.type === 'file' && o.size === n.size)
        continue; // a class depends on the name only
      else {
        if (o) await this.whole(o, dir, -1);
        await this.whole(n, dir, 1);
      }
    }
    for (const o of old.values()) await this.whole(o, dir, -1);
  }

  /** Adds the change of subdirectory `name` from tree `ta` to tree `tb`. */
  private async dirPair(name: string, ta: Digest, tb: Digest, dir: PolicyDir): Promise<void> {
    if (ta === tb) return;
    const cls = dir.classOf(name, true);
    if (cls !== 'durable') {
      const s = await diffCounts(this.reader, ta, tb, this.memo);
      this.add(cls, s, 1);
      return;
    }
    const [a, b] = await Promise.all([this.reader.readTree(ta), this.reader.readTree(tb)]);
    const [ga, gb] = [gitignoreOf(a), gitignoreOf(b)];
    if (sameFile(ga, gb)) return this.walk(a, b, await dir.child(name, () => this.textOf(gb)));
    // its .gitignore changed: every file below may have changed class
    await this.wholeTree(a, await dir.child(name, () => this.textOf(ga)), -1);
    await this.wholeTree(b, await dir.child(name, () => this.textOf(gb)), 1);
  }

  /** Adds `sign` × the counts of entry `e` of the directory seen through `dir` (its subtree whole). */
  private async whole(e: Entry, dir: PolicyDir, sign: 1 | -1): Promise<void> {
    if (e.type === 'file') this.add(dir.classOf(e.name, false), { files: 1, bytes: e.size }, sign);
    else if (e.type === 'dir') {
      const cls = dir.classOf(e.name, true);
      if (cls !== 'durable') this.add(cls, await countTree(this.reader, e.tree, this.memo), sign);
      else {
        const t = await this.reader.readTree(e.tree);
        await this.wholeTree(t, await dir.child(e.name, () => this.textOf(gitignoreOf(t))), sign);
      }
    }
  }

  private async wholeTree(t: TreeObject, dir: PolicyDir, sign: 1 | -1): Promise<void> {
    for (const e of t.entries) await this.whole(e, dir, sign);
  }

  private add(cls: keyof StoredClassCounts, c: TreeCounts, sign: 1 | -1): void {
    this.out[cls].files += sign * c.files;
    this.out[cls].bytes += sign * c.bytes;
  }
}
