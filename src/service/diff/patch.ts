import { sparseOf, type Extent } from '../../core/sparse.js';
import { createHash } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { deflateSync } from 'node:zlib';
import type * as Diff from 'diff';
import { lazyRequire } from '../../core/lazy-require.js';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import type { ChunkRef, Entry, FileEntry, TreeObject } from '../../core/tree.js';
import type { TreeSource } from '../../store/content/tree-source.js';
import type { Change } from './diff.js';
import { nameToBytes } from '../../core/raw-name.js';

/** jsdiff, loaded when a patch is first made. */
const diff = lazyRequire<typeof Diff>('diff');

/**
 * Renders a snapshot diff as a git-style patch (`git diff` format) that `git apply` accepts.
 *
 * What a git patch can hold is smaller than what a snapshot holds, so:
 * - regular files become mode `100644`, or `100755` when the owner-execute bit (0100) is set;
 *   other permission bits, owners, mtimes and xattrs are not representable and are dropped;
 * - symlinks become mode `120000` with the target as content (no trailing newline);
 * - a hardlink is rendered as the regular file it points to (its target's content and mode);
 * - directories produce nothing themselves (their files and symlinks do); fifos and device
 *   nodes cannot be represented and are skipped (reported through `onSkipped`);
 * - a type change (e.g. file → symlink) is a deletion followed by an addition of the same
 *   path, as git does; file ↔ hardlink is rendered as a modification of a regular file;
 * - a `renamed` change (src/service/diff/diff-renames.ts) is git's exact rename: `similarity
 *   index 100%`, `rename from`/`rename to` (with `old mode`/`new mode` when the mode changed);
 *   a renamed directory produces nothing itself, each file below it is a rename;
 * - a binary file (a NUL byte in its first 8000 bytes, as git decides; also any file that is
 *   not valid UTF-8, and any symlink whose target is not, since the patch is a string) is `Binary files a/p and b/p differ` by
 *   default, which `git apply` refuses; `{ binary: 'full' }` emits a `GIT binary patch`
 *   (literal, zlib + base85) with full index lines instead, which `git apply` applies.
 *
 * Known limit: a hardlink whose own entry did not change is not in the diff even when the
 * content of the file it points to changed (the diff never reads unchanged subtrees), so
 * the patch does not update that second name.
 */

/** What {@link renderPatch} passes to its `read` callback: enough to load one file's content. */
export interface PatchFileRef {
  size: number;
  chunks: ChunkRef[];
  digest: Digest;
  /** A sparse file's data ranges (src/core/sparse.ts): the holes read as zeros. */
  extents?: Extent[];
}

/** Loads the whole content of a file (e.g. by concatenating `ContentReader.readFile`). */
export type ReadFileContent = (file: PatchFileRef) => Promise<Buffer>;

/** Options of {@link renderPatch}. */
export interface PatchOptions {
  /** Lines of context around each hunk (default 3, as git). */
  context?: number;
  /**
   * How to render binary files: `summary` (default) prints `Binary files … differ`, as
   * `git diff` does; `full` emits a `GIT binary patch` as `git diff --binary` does.
   */
  binary?: 'summary' | 'full';
  /** Called for each changed entry that a git patch cannot represent (fifo, device node). */
  onSkipped?: (path: string, reason: string) => void;
  /** Maximum number of files being read at once (default 8). */
  concurrency?: number;
}

/** Git's file modes for the three kinds of blob a patch can carry. */
type GitMode = '100644' | '100755' | '120000';

/** One side of a file-level patch: git mode and how to get the content. */
interface Side {
  mode: GitMode;
  /** Identity of the content: a file's digest, or `symlink:<target>`. Same key = same bytes. */
  key: string;
  file?: FileEntry;
  inline?: Buffer;
}

/** The git blob name of `content`: sha1 of `blob <size>\0<content>` in hex. */
export function gitBlobSha1(content: Uint8Array): string {
  return createHash('sha1').update(`blob ${content.length}\0`).update(content).digest('hex');
}

/** True when git would treat `content` as binary: a NUL byte among the first 8000 bytes. */
export function isBinaryContent(content: Uint8Array): boolean {
  const n = Math.min(content.length, 8000);
  for (let i = 0; i < n; i++) if (content[i] === 0) return true;
  return false;
}

/**
 * Quotes a patch path (with its `a/`/`b/` prefix) as git does (core.quotePath=true): a name
 * containing `"`, `\`, a control character or a non-ASCII byte is written in double quotes
 * with C escapes, non-ASCII bytes in octal; any other name is written as is (or, with
 * `always`, quoted all the same: fast-import's form). Names are taken as their raw bytes
 * (src/core/raw-name.ts), so a name that is not UTF-8 comes out as the octal of its bytes,
 * `"\351t\351"`, exactly as git writes it.
 */
export function quoteGitPath(name: string, always = false): string {
  const bytes = nameToBytes(name);
  let needs = always;
  for (const b of bytes) if (b < 0x20 || b === 0x22 || b === 0x5c || b >= 0x7f) needs = true;
  if (!needs) return name;
  const esc: Record<number, string> = {
    7: '\\a',
    8: '\\b',
    9: '\\t',
    10: '\\n',
    11: '\\v',
    12: '\\f',
    13: '\\r',
    0x22: '\\"',
    0x5c: '\\\\',
  };
  let out = '"';
  for (const b of bytes) {
    if (esc[b] !== undefined) out += esc[b];
    else if (b < 0x20 || b >= 0x7f) out += '\\' + b.toString(8).padStart(3, '0');
    else out += String.fromCharCode(b);
  }
  return out + '"';
}

/** Loads entries by path from one snapshot, reading each directory's tree at most once. */
class PathLookup {
  private readonly trees = new Map<string, Promise<TreeObject>>();
  private rootTree?: Promise<Digest>;

  constructor(
    private readonly src: TreeSource,
    private readonly root: Digest,
  ) {}

  private tree(d: Digest): Promise<TreeObject> {
    let t = this.trees.get(d);
    if (!t) {
      t = this.src.readTree(d);
      this.trees.set(d, t);
    }
    return t;
  }

  /** The entry at `path`, or undefined when absent. */
  async entry(path: string): Promise<Entry | undefined> {
    this.rootTree ??= this.src.readRoot(this.root).then((r) => r.tree);
    let dir = await this.rootTree;
    const names = path.split('/');
    for (let i = 0; i < names.length; i++) {
      const t = await this.tree(dir);
      const e = t.entries.find((x) => x.name === names[i]);
      if (!e) return undefined;
      if (i === names.length - 1) return e;
      if (e.type !== 'dir') return undefined;
      dir = e.tree;
    }
    return undefined;
  }

  /** Resolves a hardlink to the regular file it names. @throws E_FORMAT when the target is not a file. */
  async hardlinkTarget(path: string, target: string): Promise<FileEntry> {
    const e = await this.entry(target);
    if (!e || e.type !== 'file') {
      throw new AwcError(
        'E_FORMAT',
        `hardlink ${JSON.stringify(path)} points to ${JSON.stringify(target)}, which is not a regular file in the snapshot`,
      );
    }
    return e;
  }
}

function fileSide(f: FileEntry): Side {
  return { mode: f.mode & 0o100 ? '100755' : '100644', key: f.digest, file: f };
}

/** The patch side of an entry, or undefined for entries a git patch cannot hold. */
async function sideOf(e: Entry | undefined, path: string, lookup: PathLookup): Promise<Side | undefined> {
  if (!e) return undefined;
  switch (e.type) {
    case 'file':
      return fileSide(e);
    case 'symlink':
      return { mode: '120000', key: `symlink:${e.target}`, inline: nameToBytes(e.target) };
    case 'hardlink':
      return fileSide(await lookup.hardlinkTarget(path, e.target));
    default:
      return undefined;
  }
}

const GIT_B85 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~';

/** Git's base85 encoding of up to 52 bytes (one line of a binary patch, without its length letter). */
function encode85(data: Uint8Array): string {
  let out = '';
  for (let i = 0; i < data.length; i += 4) {
    let acc = 0;
    for (let k = 0; k < 4; k++) acc = acc * 256 + (i + k < data.length ? data[i + k] : 0);
    const group: string[] = [];
    for (let k = 0; k < 5; k++) {
      group.unshift(GIT_B85[acc % 85]);
      acc = Math.floor(acc / 85);
    }
    out += group.join('');
  }
  return out;
}

/** One `literal` block of a git binary patch: the full content, deflated and base85-encoded. */
function binaryLiteral(content: Buffer): string {
  const z = deflateSync(content);
  let out = `literal ${content.length}\n`;
  for (let i = 0; i < z.length; i += 52) {
    const part = z.subarray(i, Math.min(i + 52, z.length));
    const letter = part.length <= 26 ? String.fromCharCode(0x41 + part.length - 1) : String.fromCharCode(0x61 + part.length - 27);
    out += letter + encode85(part) + '\n';
  }
  return out + '\n';
}

/** Formats a hunk range as git does: `start,count`, `start` alone when count is 1, start-1 when count is 0. */
function range(start: number, count: number): string {
  if (count === 0) return `${start - 1},0`;
  return count === 1 ? `${start}` : `${start},${count}`;
}

const NULL_SHA = '0000000000000000000000000000000000000000';

/**
 * Renders one file-level patch between two sides (either may be absent: addition or deletion).
 * Content is read only when it differs.
 */
async function renderFile(
  path: string,
  o: Side | undefined,
  n: Side | undefined,
  read: ReadFileContent,
  opts: PatchOptions,
): Promise<string> {
  const aName = quoteGitPath(`a/${path}`);
  const bName = quoteGitPath(`b/${path}`);
  let out = `diff --git ${aName} ${bName}\n`;
  if (!o && n) out += `new file mode ${n.mode}\n`;
  else if (o && !n) out += `deleted file mode ${o.mode}\n`;
  else if (o && n && o.mode !== n.mode) out += `old mode ${o.mode}\nnew mode ${n.mode}\n`;
  if (o && n && o.key === n.key) return out; // mode-only change: no index line, no hunks

  const load = (s: Side | undefined): Promise<Buffer | undefined> =>
    !s
      ? Promise.resolve(undefined)
      : s.inline
        ? Promise.resolve(s.inline)
        : read({ size: s.file!.size, chunks: s.file!.chunks, digest: s.file!.digest, ...sparseOf(s.file!.extents) });
  const [oc, nc] = await Promise.all([load(o), load(n)]);
  const binary = [oc, nc].some((c) => c !== undefined && (isBinaryContent(c) || !isUtf8(c)));
  const full = binary && opts.binary === 'full';
  const oSha = oc ? gitBlobSha1(oc) : NULL_SHA;
  const nSha = nc ? gitBlobSha1(nc) : NULL_SHA;
  const abbrev = (s: string) => (full ? s : s.slice(0, 7));
  out += `index ${abbrev(oSha)}..${abbrev(nSha)}${o && n && o.mode === n.mode ? ` ${n.mode}` : ''}\n`;

  const aLabel = o ? aName : '/dev/null';
  const bLabel = n ? bName : '/dev/null';
  if (binary) {
    if (!full) return out + `Binary files ${aLabel} and ${bLabel} differ\n`;
    const empty = Buffer.alloc(0);
    return out + 'GIT binary patch\n' + binaryLiteral(nc ?? empty) + binaryLiteral(oc ?? empty);
  }

  const oText = oc ? oc.toString('utf8') : '';
  const nText = nc ? nc.toString('utf8') : '';
  const p = diff().structuredPatch(path, path, oText, nText, undefined, undefined, { context: opts.context ?? 3 });
  if (p.hunks.length === 0) return out; // e.g. an empty file added or deleted
  // git ends a name holding a space with a tab on the ---/+++ lines, so that trailing
  // whitespace in the name is not mistaken for the end of the line.
  out += `--- ${aLabel}${o && path.includes(' ') ? '\t' : ''}\n`;
  out += `+++ ${bLabel}${n && path.includes(' ') ? '\t' : ''}\n`;
  for (const h of p.hunks) {
    out += `@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@\n`;
    // jsdiff already emits git's `\ No newline at end of file` marker after the affected line.
    for (const line of h.lines) out += line + '\n';
  }
  return out;
}

/**
 * An exact rename as git writes it (`git diff -M`, similarity 100%): the `diff --git` line with
 * both names, `old mode`/`new mode` when the mode changed, `similarity index 100%`, then
 * `rename from`/`rename to`; no hunks (the bytes are the same).
 */
function renderRename(from: string, to: string, o: Side, n: Side): string {
  let out = `diff --git ${quoteGitPath(`a/${from}`)} ${quoteGitPath(`b/${to}`)}\n`;
  if (o.mode !== n.mode) out += `old mode ${o.mode}\nnew mode ${n.mode}\n`;
  return out + `similarity index 100%\nrename from ${quoteGitPath(from)}\nrename to ${quoteGitPath(to)}\n`;
}

/** Runs `fn` over `items` with at most `limit` calls in flight; results keep the input order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, limit), items.length) }, worker));
  return results;
}

/**
 * Renders `changes` (from `diffSnapshots(src, fromRoot, toRoot)`) as a git-style patch, in the
 * order of the changes. Full entries (chunk lists) are re-read from both trees through `src`;
 * file contents are loaded through `read` only for files whose content differs.
 * `git apply` (and `git apply --check`) accepts the result when it holds no binary files, or
 * with `{ binary: 'full' }` in any case. Returns `''` when nothing is representable.
 *
 * @throws AwcError E_FORMAT when a hardlink points to something that is not a regular file;
 *   errors of `src` and `read` pass through.
 */
export async function renderPatch(
  src: TreeSource,
  read: ReadFileContent,
  changes: readonly Change[],
  fromRoot: Digest,
  toRoot: Digest,
  opts: PatchOptions = {},
): Promise<string> {
  const oldTree = new PathLookup(src, fromRoot);
  const newTree = new PathLookup(src, toRoot);
  const skipped = (path: string, kind: string): void => opts.onSkipped?.(path, `a ${kind} cannot be represented in a git patch`);

  const parts = await mapLimit(changes, opts.concurrency ?? 8, async (c): Promise<string> => {
    if (c.status === 'metadata-changed') return '';
    if (c.status === 'renamed') {
      if (c.from === undefined || c.kind === 'dir') return ''; // a directory's files carry its rename
      const [oe, ne] = await Promise.all([oldTree.entry(c.from), newTree.entry(c.path)]);
      const [os, ns] = await Promise.all([sideOf(oe, c.from, oldTree), sideOf(ne, c.path, newTree)]);
      return os && ns && os.key === ns.key ? renderRename(c.from, c.path, os, ns) : '';
    }
    const needOld = c.status !== 'added' && c.old !== undefined && c.old.type !== 'dir';
    const needNew = c.status !== 'deleted' && c.new !== undefined && c.new.type !== 'dir';
    const [oe, ne] = await Promise.all([needOld ? oldTree.entry(c.path) : undefined, needNew ? newTree.entry(c.path) : undefined]);
    const [os, ns] = await Promise.all([sideOf(oe, c.path, oldTree), sideOf(ne, c.path, newTree)]);
    for (const e of [oe, ne]) if (e && (e.type === 'fifo' || e.type === 'chardev' || e.type === 'blockdev')) skipped(c.path, e.type);
    if (!os && !ns) return '';
    if (os && ns) {
      // Same kind of blob on both sides (regular ↔ regular incl. hardlinks, symlink ↔ symlink): one modification.
      if ((os.mode === '120000') === (ns.mode === '120000')) {
        if (os.key === ns.key && os.mode === ns.mode) return '';
        return renderFile(c.path, os, ns, read, opts);
      }
      // A type change between a regular file and a symlink: deletion then addition, as git does.
      return (await renderFile(c.path, os, undefined, read, opts)) + (await renderFile(c.path, undefined, ns, read, opts));
    }
    return renderFile(c.path, os, ns, read, opts);
  });
  return parts.join('');
}
