import type { Digest } from '../../core/digest.js';
import type { Entry, FileEntry, SymlinkEntry } from '../../core/tree.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import { CapturePolicy, PROJECT_FILE, parseProjectConfig } from '../capture/capture-policy.js';
import type { Change } from '../diff/diff.js';

/**
 * Which of a snapshot diff's changes an export to git writes (docs/explanation/git.md
 * "Paths git would track"): the changes between the base snapshot and the exported one,
 * turned into deletions and writes of git paths, each checked against `.git`, the parent
 * commit's submodules (gitlinks), the secret filter of the exported snapshot's `.awc.json`
 * and, for a path the parent does not track, git's ignore rules (checked later by git).
 */

/** A path the parent commit tracks: its git mode (`100644`, `100755`, `120000`, `160000`) and object id. */
export interface TrackedEntry {
  mode: string;
  oid: string;
}

/** A file or symlink to write at `path` (a hardlink resolved to the file it names). */
export interface GitWrite {
  path: string;
  entry: FileEntry | SymlinkEntry;
  /** Whether the parent commit tracks `path` (then git's ignore rules do not apply to it). */
  tracked: boolean;
}

/** Why a changed path is not in the commit (and, for a deletion, stays as in the parent). */
export type LeftOutReason = 'secret' | 'submodule' | 'special file' | 'gitmodules symlink' | 'scratch';

/** A changed path the commit leaves as in the parent, and why. */
export interface LeftOut {
  path: string;
  reason: LeftOutReason;
}

/** The export's plan before git's ignore check: what to delete, what to write, what is left out. */
export interface GitExportPlan {
  deletes: string[];
  writes: GitWrite[];
  leftOut: LeftOut[];
  /** Changed paths under a `.git` directory (never exported), counted. */
  gitDirPaths: number;
  /** Tracked paths a change would delete but that a checkpoint drops as scratch: kept unless git ignores them (checked later). */
  scratchDeletes: string[];
}

/** Whether a slash path has a `.git` component (any case: git refuses such paths, `git fsck` flags them). */
export function hasGitComponent(path: string): boolean {
  return path.split('/').some((c) => c.toLowerCase() === '.git');
}

/** The gitlink (submodule) path `path` is at or under, if any. */
function underGitlink(path: string, tracked: ReadonlyMap<string, TrackedEntry>): string | undefined {
  const parts = path.split('/');
  for (let i = 1; i <= parts.length; i++) {
    const p = parts.slice(0, i).join('/');
    if (tracked.get(p)?.mode === '160000') return p;
  }
  return undefined;
}

/**
 * What an export to git reads of the store: trees, and file contents by entry. A
 * ContentReader in process; for an ordinary user, reads through the root daemon scoped to
 * the snapshots exported (src/cli/remote-reader.ts, src/daemon/users/user-content.ts).
 */
export interface GitExportReader extends TreeSource {
  readFile(file: FileEntry): AsyncIterable<Buffer>;
}

/** Looks entries up by slash path in one snapshot's tree (tree reads memoised). */
export class TreeLookup {
  private readonly trees = new Map<Digest, Promise<Entry[]>>();

  constructor(
    private readonly reader: GitExportReader,
    private readonly rootTree: Digest,
  ) {}

  /** The entries of the directory at `dir` ('' for the root), or undefined when it is not a directory. */
  async dir(dir: string): Promise<Entry[] | undefined> {
    let tree = this.rootTree;
    if (dir !== '')
      for (const name of dir.split('/')) {
        const e = (await this.read(tree)).find((x) => x.name === name);
        if (e?.type !== 'dir') return undefined;
        tree = e.tree;
      }
    return this.read(tree);
  }

  /** The entry at `path`, or undefined. */
  async get(path: string): Promise<Entry | undefined> {
    const i = path.lastIndexOf('/');
    return (await this.dir(i < 0 ? '' : path.slice(0, i)))?.find((x) => x.name === path.slice(i + 1));
  }

  /** The text of the regular file at `path`, or undefined when there is none. */
  async text(path: string): Promise<string | undefined> {
    const e = await this.get(path);
    return e?.type === 'file' ? (await this.bytes(e)).toString('utf8') : undefined;
  }

  /** A file's whole content. */
  async bytes(e: FileEntry): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const b of this.reader.readFile(e)) parts.push(b);
    return Buffer.concat(parts);
  }

  private read(tree: Digest): Promise<Entry[]> {
    let p = this.trees.get(tree);
    if (!p) this.trees.set(tree, (p = this.reader.readTree(tree).then((t) => t.entries)));
    return p;
  }
}

/** A leaf entry git can hold (a file or a symlink) on one side of a change, or a special file, or nothing (a directory). */
function leafOf(s: Change['old']): 'leaf' | 'special' | undefined {
  if (!s) return undefined;
  if (s.type === 'file' || s.type === 'symlink' || s.type === 'hardlink') return 'leaf';
  return s.type === 'dir' ? undefined : 'special';
}

/**
 * Plans an export from the changes base → exported snapshot (`target` looks paths up in the
 * exported snapshot). A deletion is planned only for a path the parent tracks; a write for
 * every changed file or symlink. The secret filter is the exported snapshot's (its
 * `.awc.json`, docs/reference/capture-config.md): a secret is never written, and a tracked
 * secret the snapshot lacks is left as in the parent (a checkpoint never stores one, so its
 * absence says nothing).
 * @throws E_CONFIG (an invalid `.awc.json` in the exported snapshot), what the reader throws
 */
export async function planGitExport(
  changes: readonly Change[],
  target: TreeLookup,
  tracked: ReadonlyMap<string, TrackedEntry>,
): Promise<GitExportPlan> {
  const policy = new CapturePolicy(parseProjectConfig(await target.text(PROJECT_FILE)), { dropScratch: true });
  const plan: GitExportPlan = { deletes: [], writes: [], leftOut: [], gitDirPaths: 0, scratchDeletes: [] };
  const secret = async (path: string, e: Entry | undefined): Promise<boolean> => {
    if (policy.allowed.ignores(path)) return false;
    const peek = e?.type === 'file' ? await target.bytes(e) : Buffer.alloc(0);
    return policy.isSecret(path, (max = 64 * 1024) => peek.subarray(0, max));
  };
  const scratch = (path: string): boolean => {
    const parts = path.split('/');
    return parts.some((_, i) => policy.scratch.ignores(i < parts.length - 1 ? `${parts.slice(0, i + 1).join('/')}/` : path));
  };
  for (const c of changes) {
    const del = leafOf(c.old) === 'leaf' && leafOf(c.new) !== 'leaf';
    const put = leafOf(c.new);
    if (!del && put === undefined) continue; // a directory: its entries are changes of their own
    if (hasGitComponent(c.path)) {
      plan.gitDirPaths++;
      continue;
    }
    const sub = underGitlink(c.path, tracked);
    if (sub !== undefined) {
      plan.leftOut.push({ path: c.path, reason: 'submodule' });
      continue;
    }
    if (put === 'special') {
      plan.leftOut.push({ path: c.path, reason: 'special file' });
      if (del && tracked.has(c.path)) plan.deletes.push(c.path); // git cannot hold a fifo or device: the file is gone
      continue;
    }
    if (put === undefined) {
      if (!tracked.has(c.path)) continue;
      if (await secret(c.path, undefined)) plan.leftOut.push({ path: c.path, reason: 'secret' });
      else if (scratch(c.path)) plan.scratchDeletes.push(c.path);
      else plan.deletes.push(c.path);
      continue;
    }
    let entry = await target.get(c.path);
    if (entry?.type === 'hardlink') entry = await target.get(entry.target);
    if (entry?.type !== 'file' && entry?.type !== 'symlink') continue; // vanished between diff and lookup: nothing to write
    if (await secret(c.path, entry)) {
      plan.leftOut.push({ path: c.path, reason: 'secret' });
      continue;
    }
    if (entry.type === 'symlink' && /(^|\/)\.gitmodules$/i.test(c.path)) {
      plan.leftOut.push({ path: c.path, reason: 'gitmodules symlink' });
      continue;
    }
    plan.writes.push({ path: c.path, entry, tracked: tracked.has(c.path) });
  }
  return plan;
}
