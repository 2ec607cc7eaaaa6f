import type { Digest } from '../../core/digest.js';
import { compareNames, type Entry, type TreeObject } from '../../core/tree.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import { hasEscape } from '../../core/raw-name.js';

/**
 * Snapshot diff: compares two snapshots by walking both Merkle trees together.
 *
 * A directory whose tree digest is the same on both sides is never read: the walk descends
 * only where digests differ, so the cost is proportional to what changed, not to the size
 * of the snapshots (docs/explanation/design.md#content-store: trees are Merkle).
 */

/** The type of a tree entry (`file`, `dir`, `symlink`, `hardlink`, `fifo`, `chardev`, `blockdev`). */
export type EntryType = Entry['type'];

/**
 * What happened to a path between two snapshots.
 *
 * - `added` / `deleted`: the path exists only in the new / old snapshot. An added or deleted
 *   directory is reported itself and every entry under it is reported too.
 * - `modified`: the content differs: a file's content digest, a symlink's or hardlink's
 *   target, or a device's rdev. A mode change at the same time is still `modified` (both
 *   modes are in `old`/`new`).
 * - `type-changed`: the entry type differs (e.g. file → symlink). When a directory is on
 *   either side, its contents are reported as `deleted` (old side) or `added` (new side).
 * - `mode-changed`: only the permission bits (07777) differ.
 * - `metadata-changed`: only uid, gid, mtime or xattrs differ. Reported only with
 *   `{ metadata: true }`.
 * - `renamed`: a path deleted and another added with the same content (src/service/diff/diff-renames.ts);
 *   `path` is the new name, `from` the old one. Only `detectRenames` makes it (`awc diff` does).
 */
export type ChangeStatus = 'added' | 'deleted' | 'modified' | 'type-changed' | 'mode-changed' | 'metadata-changed' | 'renamed';

/**
 * The parts of an entry a diff reports. Fields that do not apply to the entry type are absent:
 * `size`/`digest` for files, `target` for symlinks and hardlinks, `rdev` for devices and fifos,
 * `tree` (the digest of everything below) for directories.
 * `mode` (permission bits, 07777) is absent only for hardlinks, which carry no attributes of
 * their own. `uid`, `gid`, `mtimeNs` and `xattrs` are filled in only with `{ metadata: true }`.
 */
export interface EntrySummary {
  type: EntryType;
  mode?: number;
  size?: number;
  digest?: Digest;
  target?: string;
  rdev?: number;
  tree?: Digest;
  uid?: number;
  gid?: number;
  mtimeNs?: string;
  xattrs?: Record<string, string>;
}

/**
 * One changed path. `path` is slash-separated from the snapshot root, no leading slash.
 * `kind` is the entry type on the new side (the old side's for `deleted`). `old` is present
 * unless `added`; `new` is present unless `deleted`. `from` is the old path of a `renamed` change.
 */
export interface Change {
  path: string;
  from?: string;
  status: ChangeStatus;
  kind: EntryType;
  old?: EntrySummary;
  new?: EntrySummary;
}

/** Options of {@link diffSnapshots}. */
export interface DiffOptions {
  /** Also report uid/gid/mtime/xattrs-only differences as `metadata-changed` (default false). */
  metadata?: boolean;
  /** Maximum number of tree reads in flight (default 16). */
  concurrency?: number;
}

/**
 * Compares two snapshots given by their root digests and returns every changed path, in tree
 * order (depth-first, entries sorted by the UTF-8 bytes of their names, a directory before
 * its contents). The root object's own attributes are ignored. Subtrees with the same digest
 * on both sides are never read.
 *
 * @param src where tree and root objects are loaded from
 * @param fromRoot root digest of the old snapshot
 * @param toRoot root digest of the new snapshot
 * @throws AwcError from `src` (E_OBJECT_NOT_FOUND, E_FORMAT, E_INTEGRITY)
 */
export async function diffSnapshots(src: TreeSource, fromRoot: Digest, toRoot: Digest, opts: DiffOptions = {}): Promise<Change[]> {
  if (fromRoot === toRoot) return [];
  const [a, b] = await Promise.all([src.readRoot(fromRoot), src.readRoot(toRoot)]);
  if (a.tree === b.tree) return [];
  const w = new DiffWalker(src, opts);
  return w.diffDirs(a.tree, b.tree, '');
}

/** Joins a directory path and an entry name. */
function join(prefix: string, name: string): string {
  return prefix === '' ? name : `${prefix}/${name}`;
}

/** Bounds the number of concurrent tree reads; recursion holds no slot while it waits. */
class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  constructor(private readonly max: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) await new Promise<void>((resolve) => this.queue.push(resolve));
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.queue.shift()?.();
    }
  }
}

class DiffWalker {
  private readonly limiter: Limiter;
  private readonly metadata: boolean;

  constructor(
    private readonly src: TreeSource,
    opts: DiffOptions,
  ) {
    this.metadata = opts.metadata === true;
    this.limiter = new Limiter(Math.max(1, opts.concurrency ?? 16));
  }

  private read(d: Digest): Promise<TreeObject> {
    return this.limiter.run(() => this.src.readTree(d));
  }

  private summary(e: Entry): EntrySummary {
    const s: EntrySummary = { type: e.type };
    if (e.type !== 'hardlink') {
      s.mode = e.mode;
      if (this.metadata) {
        s.uid = e.uid;
        s.gid = e.gid;
        s.mtimeNs = e.mtimeNs;
        if (e.xattrs && Object.keys(e.xattrs).length > 0) s.xattrs = e.xattrs;
      }
    }
    switch (e.type) {
      case 'file':
        s.size = e.size;
        s.digest = e.digest;
        break;
      case 'symlink':
      case 'hardlink':
        s.target = e.target;
        break;
      case 'fifo':
      case 'chardev':
      case 'blockdev':
        s.rdev = e.rdev;
        break;
      case 'dir':
        s.tree = e.tree;
        break;
    }
    return s;
  }

  /** Diffs two directories' trees (digests known to differ) at `prefix`. */
  async diffDirs(from: Digest, to: Digest, prefix: string): Promise<Change[]> {
    const [a, b] = await Promise.all([this.read(from), this.read(to)]);
    const parts: Promise<Change[]>[] = [];
    let i = 0;
    let j = 0;
    while (i < a.entries.length || j < b.entries.length) {
      const ea = a.entries[i];
      const eb = b.entries[j];
      const c = ea === undefined ? 1 : eb === undefined ? -1 : compareNames(ea.name, eb.name);
      if (c < 0) {
        parts.push(this.side(ea, join(prefix, ea.name), 'deleted'));
        i++;
      } else if (c > 0) {
        parts.push(this.side(eb, join(prefix, eb.name), 'added'));
        j++;
      } else {
        parts.push(this.pair(ea, eb, join(prefix, ea.name)));
        i++;
        j++;
      }
    }
    return (await Promise.all(parts)).flat();
  }

  /** An entry present on one side only: itself, plus everything under it when it is a directory. */
  private async side(e: Entry, path: string, status: 'added' | 'deleted'): Promise<Change[]> {
    const s = this.summary(e);
    const own: Change = status === 'added' ? { path, status, kind: e.type, new: s } : { path, status, kind: e.type, old: s };
    if (e.type !== 'dir') return [own];
    return [own, ...(await this.subtree(e.tree, path, status))];
  }

  /** Every entry under a directory present on one side only, reported with `status`. */
  private async subtree(tree: Digest, prefix: string, status: 'added' | 'deleted'): Promise<Change[]> {
    const t = await this.read(tree);
    const parts = t.entries.map((e) => this.side(e, join(prefix, e.name), status));
    return (await Promise.all(parts)).flat();
  }

  /** An entry present on both sides under the same name. */
  private async pair(a: Entry, b: Entry, path: string): Promise<Change[]> {
    if (a.type !== b.type) {
      const out: Change[] = [{ path, status: 'type-changed', kind: b.type, old: this.summary(a), new: this.summary(b) }];
      const [under, over] = await Promise.all([
        a.type === 'dir' ? this.subtree(a.tree, path, 'deleted') : Promise.resolve([]),
        b.type === 'dir' ? this.subtree(b.tree, path, 'added') : Promise.resolve([]),
      ]);
      // Tree order under one path: both lists cannot be non-empty (only one side is a directory).
      return out.concat(under, over);
    }
    const status = this.compare(a, b);
    const out: Change[] = status ? [{ path, status, kind: b.type, old: this.summary(a), new: this.summary(b) }] : [];
    if (a.type === 'dir' && b.type === 'dir' && a.tree !== b.tree) out.push(...(await this.diffDirs(a.tree, b.tree, path)));
    return out;
  }

  /** Status of two entries of the same type, or undefined when nothing reportable differs. */
  private compare(a: Entry, b: Entry): ChangeStatus | undefined {
    if (a.type === 'hardlink' || b.type === 'hardlink') {
      return a.type === 'hardlink' && b.type === 'hardlink' && a.target === b.target ? undefined : 'modified';
    }
    let contentDiffers = false;
    if (a.type === 'file' && b.type === 'file') contentDiffers = a.digest !== b.digest || a.size !== b.size;
    else if (a.type === 'symlink' && b.type === 'symlink') contentDiffers = a.target !== b.target;
    else if ((a.type === 'fifo' || a.type === 'chardev' || a.type === 'blockdev') && a.type === b.type) contentDiffers = a.rdev !== b.rdev;
    if (contentDiffers) return 'modified';
    if ((a.mode & 0o7777) !== (b.mode & 0o7777)) return 'mode-changed';
    if (this.metadata && !sameMetadata(a, b)) return 'metadata-changed';
    return undefined;
  }
}

function sameMetadata(a: Exclude<Entry, { type: 'hardlink' }>, b: Exclude<Entry, { type: 'hardlink' }>): boolean {
  if (a.uid !== b.uid || a.gid !== b.gid || a.mtimeNs !== b.mtimeNs) return false;
  const xa = a.xattrs ?? {};
  const xb = b.xattrs ?? {};
  const ka = Object.keys(xa);
  if (ka.length !== Object.keys(xb).length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(xb, k) && xa[k] === xb[k]);
}

/** Letters used by {@link formatChanges}, one per status. */
export const CHANGE_LETTERS: Readonly<Record<ChangeStatus, string>> = {
  added: 'A',
  deleted: 'D',
  modified: 'M',
  'type-changed': 'T',
  'mode-changed': 'P',
  'metadata-changed': 'I',
  renamed: 'R',
};

/** Octal permission bits, at least 4 digits (`0644`, `4755`). */
function octal(mode: number | undefined): string {
  return mode === undefined ? '-' : (mode & 0o7777).toString(8).padStart(4, '0');
}

/**
 * A path as printed: verbatim unless it holds control characters, a quote, a backslash or a
 * byte that is not UTF-8, then JSON-quoted. A raw byte XX shows as `\udcXX` (src/core/raw-name.ts),
 * so `JSON.parse` of the quoted form gives back the path string, and its bytes the name.
 */
export function printable(path: string): string {
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u001f\u007f"\\]/.test(path) || hasEscape(path) ? JSON.stringify(path) : path;
}

function metadataNote(o: EntrySummary, n: EntrySummary): string {
  const parts: string[] = [];
  if (o.uid !== n.uid) parts.push(`uid ${o.uid} → ${n.uid}`);
  if (o.gid !== n.gid) parts.push(`gid ${o.gid} → ${n.gid}`);
  if (o.mtimeNs !== n.mtimeNs) parts.push('mtime');
  if (JSON.stringify(o.xattrs ?? {}) !== JSON.stringify(n.xattrs ?? {})) parts.push('xattrs');
  return parts.join(', ');
}

/**
 * Formats changes one per line, `<letter>  <path>[ (<detail>)]`. Directories get a trailing `/`.
 *
 * | letter | status | detail |
 * |---|---|---|
 * | `A` | added | — |
 * | `D` | deleted | — |
 * | `M` | modified (content, symlink/hardlink target, device number) | `(0644 → 0755)` when the mode changed too |
 * | `T` | type-changed | `(file → symlink)` |
 * | `P` | mode-changed (permission bits only) | `(0644 → 0755)` |
 * | `I` | metadata-changed (inode metadata: owner, mtime, xattrs) | `(uid 0 → 1000, mtime)` |
 * | `R` | renamed (same content under a new path; the line names the new path) | `(from old/path)`, `(from old/path, 0644 → 0700)` |
 *
 * Paths holding control characters, `"`, `\` or bytes that are not UTF-8 are printed JSON-quoted
 * (see {@link printable}). Returns `''` for no
 * changes, otherwise every line ends with `\n`.
 */
export function formatChanges(changes: readonly Change[]): string {
  let out = '';
  for (const c of changes) {
    let line = `${CHANGE_LETTERS[c.status]}  ${printable(c.path)}${c.kind === 'dir' ? '/' : ''}`;
    const o = c.old;
    const n = c.new;
    if (c.status === 'renamed' && c.from !== undefined) {
      const modes = o && n && o.mode !== n.mode ? `, ${octal(o.mode)} → ${octal(n.mode)}` : '';
      line += ` (from ${printable(c.from)}${c.kind === 'dir' ? '/' : ''}${modes})`;
    } else if (c.status === 'type-changed' && o && n) line += ` (${o.type} → ${n.type})`;
    else if ((c.status === 'mode-changed' || c.status === 'modified') && o && n && o.mode !== n.mode)
      line += ` (${octal(o.mode)} → ${octal(n.mode)})`;
    else if (c.status === 'metadata-changed' && o && n) {
      const note = metadataNote(o, n);
      if (note) line += ` (${note})`;
    }
    out += line + '\n';
  }
  return out;
}
