import { randomBytes, createHash } from 'node:crypto';
import { readFile, rename, unlink } from 'node:fs/promises';
import type { BigIntStats } from 'node:fs';
import { join } from 'node:path';
import { isDigest, type Digest } from '../../core/digest.js';
import { mkdirPrivate, writeFilePrivate } from '../../core/private-fs.js';
import type { Extent } from '../../core/sparse.js';
import type { ChunkRef, Entry, FileEntry } from '../../core/tree.js';
import type { ScannedDirInfo, StoredDir, StoredFile } from '../../host/tree/import-dir.js';
import { DirCheckBuilder, type FileStat } from '../../host/tree/dir-check.js';
import { nameToBytes } from '../../core/raw-name.js';

/**
 * The stat cache of directory imports (docs/explanation/incremental-prepare.md), as git's
 * index: after an import of a directory, each regular file's stat (dev, ino, size, mtime and
 * ctime in ns, mode) and the content it was stored with (digest, chunks, extents, git's blob
 * id when the git proof asked for it). The next import of the same source that updates that
 * snapshot (`awc prepare --update`, `awc init claude --update`) takes a file whose stat is
 * unchanged from it without reading the file.
 *
 * Host-local, one file per (namespace, source real path) under the host directory
 * (`<home>/host/import-stats/<sha256 hex>.json`, 0600 in a 0700 directory; one line per
 * directory, so that a directory taken unchanged is copied as it was, not encoded again,
 * and a lookup parses only its own directory's line), bound to the
 * snapshot the import made (its id and root) and the source's real path: it is used only by an
 * import whose parent is that snapshot, of that path. The file starts with the sha256 of the
 * rest: a file that does not check out (corrupt, cut short, edited) is ignored and the import
 * reads every file.
 *
 * Racy timestamps: file timestamps come from a coarse clock, so a file written again within
 * the tick of its last change, after the import read it, can keep its size and times. As
 * git's racy-git rule, an entry is trusted only when its mtime and ctime are strictly older
 * than `racyNs`, the import's start minus {@link RACY_MARGIN_MS} (covering the coarse clock's
 * lag and file systems with whole-second times): a file changed near or after the import
 * began is read again next time.
 */

/**
 * Format version of the cache file (2: one line per directory, with its tree; 3: a directory's
 * row may end with its directory check). Version 2 files are read (their directories have no check).
 */
const VERSION = 3;
/** How much older than the import's start a file's mtime and ctime must be for its entry to be trusted (ms). */
export const RACY_MARGIN_MS = 2000;

/**
 * One file's row: [dev, ino, size, mtimeNs, ctimeNs, mode, digest, chunks, extents, git, xattrs].
 * chunks: 1 for one chunk that is the whole file (digest and size of the file), else [[digest, size], …];
 * extents, git and xattrs (as the tree records them): null when none.
 */
type Row = [
  string,
  string,
  string,
  string,
  string,
  string,
  Digest,
  1 | [Digest, number][],
  Extent[] | null,
  string | null,
  Record<string, string> | null,
];

/**
 * One directory's row (git's cache-tree): [dev, ino, mode, mtimeNs, ctimeNs, tree, entries, check],
 * its lstat as a file's row keeps it, the digest of its tree, its number of entries and its
 * directory check (src/host/tree/dir-check.ts; null when none could be made; absent in version 2).
 */
type DirRow = [string, string, string, string, string, Digest, number, (string | null)?];

/**
 * The cache file's header line. Each line after it is one directory: its slash path from the
 * source's root ('' the root) as a JSON string, a tab, its DirRow (or null), a tab, and its
 * regular files' rows as a JSON object by name.
 */
interface Header {
  v: number;
  namespace: string;
  source: string;
  snapshot: string;
  root: Digest;
  racyNs: string;
  /** The capture filter's verdictsKey when the directory checks were made (absent: none). */
  verdicts?: string;
}

/** A directory's line of a loaded cache: the text after its path, and what was parsed of it (its row, and its files only when asked). */
interface DirLine {
  text: string;
  row?: DirRow | null;
  files?: Record<string, Row>;
}

/** Splits a slash path into its directory's path and its name. */
function splitRel(rel: string): [string, string] {
  const i = rel.lastIndexOf('/');
  return i < 0 ? ['', rel] : [rel.slice(0, i), rel.slice(i + 1)];
}

/** What an import is bound to: its namespace and source real path. */
export interface StatCacheKey {
  namespace: string;
  source: string;
}

/** The cache file of `key` in directory `dir`. */
export function statCachePath(dir: string, key: StatCacheKey): string {
  const h = createHash('sha256').update(`${key.namespace}\0${key.source}`).digest('hex');
  return join(dir, `${h}.json`);
}

/** The stat fields a row keeps, as decimal strings. */
function statOf(st: FileStat): [string, string, string, string, string, string] {
  return [st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs, st.mode].map((x) => x.toString()) as [
    string,
    string,
    string,
    string,
    string,
    string,
  ];
}

/** The stat fields a directory's row keeps, as decimal strings. */
function dirStatOf(st: BigIntStats): [string, string, string, string, string] {
  return [st.dev, st.ino, st.mode, st.mtimeNs, st.ctimeNs].map((x) => x.toString()) as [string, string, string, string, string];
}

function isDirRow(r: unknown): r is DirRow {
  return (
    Array.isArray(r) &&
    (r.length === 7 || (r.length === 8 && (r[7] === null || (typeof r[7] === 'string' && r[7].length === 44)))) &&
    r.slice(0, 5).every((x) => typeof x === 'string' && /^\d+$/.test(x)) &&
    isDigest(r[5]) &&
    Number.isSafeInteger(r[6]) &&
    (r[6] as number) >= 0
  );
}

function isRow(r: unknown): r is Row {
  if (!Array.isArray(r) || r.length !== 11) return false;
  if (!r.slice(0, 6).every((x) => typeof x === 'string' && /^\d+$/.test(x)) || !isDigest(r[6])) return false;
  const chunks = r[7] as unknown;
  if (chunks !== 1 && !(Array.isArray(chunks) && chunks.every((c) => Array.isArray(c) && isDigest(c[0]) && Number.isSafeInteger(c[1]))))
    return false;
  if (r[8] !== null && !(Array.isArray(r[8]) && r[8].every((e) => Array.isArray(e) && e.length === 2 && e.every(Number.isSafeInteger))))
    return false;
  if (r[10] !== null && (typeof r[10] !== 'object' || Array.isArray(r[10]) || !Object.values(r[10]).every((v) => typeof v === 'string')))
    return false;
  return r[9] === null || (typeof r[9] === 'string' && /^[0-9a-f]{40,64}$/.test(r[9]));
}

/** What a loaded cache says of why it is not used (undefined: it is). */
export type StatCacheMiss = 'none' | 'unreadable' | 'corrupt' | 'other-snapshot' | 'other-source' | 'other-version';

/**
 * A loaded stat cache: `reuse` is importDir's `reuse` (an unchanged file's entry, unread).
 * `miss`: why nothing is reused (no file, a file that does not check out, bound to another
 * snapshot or path); `reused` counts the files taken from it.
 */
export class LoadedStatCache {
  reused = 0;
  /** The last row `reuse` gave out and the stat it was asked with (StatCacheRecorder keeps that row as it is). */
  private hit: { rel: string; st: FileStat; row: Row } | undefined;

  private constructor(
    /** The directories' lines by path, parsed when first asked. */
    private readonly dirs: Map<string, DirLine>,
    private readonly racyNs: bigint,
    readonly miss: StatCacheMiss | undefined,
    /** The capture filter's verdictsKey its directory checks were made under (importDir's `verdictsKey`). */
    readonly verdictsKey?: string,
  ) {}

  /** A cache that reuses nothing, for `miss`. */
  static empty(miss: StatCacheMiss): LoadedStatCache {
    return new LoadedStatCache(new Map(), 0n, miss);
  }

  /**
   * The cache of `key` in `dir` when it is bound to snapshot `parent` (id and root); an empty
   * one otherwise (see `miss`). Never throws: it is only a cache.
   */
  static async load(dir: string, key: StatCacheKey, parent: { id: string; root: Digest }): Promise<LoadedStatCache> {
    let bytes: Buffer;
    try {
      bytes = await readFile(statCachePath(dir, key));
    } catch (err) {
      return LoadedStatCache.empty((err as NodeJS.ErrnoException).code === 'ENOENT' ? 'none' : 'unreadable');
    }
    // the digest of the bytes as read (hashing the decoded text would encode it again)
    if (bytes[64] !== 0x0a || createHash('sha256').update(bytes.subarray(65)).digest('hex') !== bytes.toString('latin1', 0, 64))
      return LoadedStatCache.empty('corrupt');
    const lines = bytes.toString('utf8', 65).split('\n');
    let head: Header;
    try {
      head = JSON.parse(lines[0]!) as Header;
    } catch {
      return LoadedStatCache.empty('corrupt');
    }
    if (head?.v !== VERSION && head?.v !== 2) return LoadedStatCache.empty(typeof head?.v === 'number' ? 'other-version' : 'corrupt');
    if (head.namespace !== key.namespace || head.source !== key.source) return LoadedStatCache.empty('other-source');
    if (head.snapshot !== parent.id || head.root !== parent.root) return LoadedStatCache.empty('other-snapshot');
    if (typeof head.racyNs !== 'string' || !/^\d+$/.test(head.racyNs)) return LoadedStatCache.empty('corrupt');
    const dirs = new Map<string, DirLine>();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const tab = line.indexOf('\t');
      if (tab < 0) continue; // the last, empty line
      try {
        const rel: unknown = JSON.parse(line.slice(0, tab));
        if (typeof rel === 'string') dirs.set(rel, { text: line.slice(tab + 1) });
      } catch {
        return LoadedStatCache.empty('corrupt');
      }
    }
    const verdicts = typeof head.verdicts === 'string' ? head.verdicts : undefined;
    return new LoadedStatCache(dirs, BigInt(head.racyNs), undefined, verdicts);
  }

  /** The row of directory `rel`, parsed when first asked (null when it does not parse: the directory's record is not used). */
  private rowOf(rel: string): DirRow | null | undefined {
    const d = this.dirs.get(rel);
    if (!d || d.row !== undefined) return d?.row;
    const tab = d.text.indexOf('\t');
    d.row = null;
    try {
      const row: unknown = tab < 0 ? null : JSON.parse(d.text.slice(0, tab));
      if (isDirRow(row)) d.row = row;
    } catch {
      // not used
    }
    return d.row;
  }

  /** The rows of the files of directory `rel` by name, parsed when first asked (none when they do not parse: none is reused). */
  private filesOf(rel: string): Record<string, Row> | undefined {
    const d = this.dirs.get(rel);
    if (!d || d.files) return d?.files;
    d.files = {};
    try {
      const files: unknown = JSON.parse(this.filesTextOf(rel) ?? '');
      if (typeof files === 'object' && files !== null && !Array.isArray(files)) d.files = files as Record<string, Row>;
    } catch {
      // not reused
    }
    return d.files;
  }

  /** The row `reuse` last gave out for `rel` when it was asked with this very `st` (the same object), else undefined. */
  rowGiven(rel: string, st: FileStat): Row | undefined {
    const h = this.hit;
    return h !== undefined && h.st === st && h.rel === rel ? h.row : undefined;
  }

  /** The JSON text of the files of directory `rel` as loaded (StatCacheRecorder copies it for a directory taken unchanged). */
  filesTextOf(rel: string): string | undefined {
    const text = this.dirs.get(rel)?.text;
    const tab = text?.indexOf('\t') ?? -1;
    return tab < 0 ? undefined : text!.slice(tab + 1);
  }

  /**
   * importDir's `reuseDir`: the recorded tree of directory `rel` when its lstat is the one
   * recorded and not racy (its mtime moves when an entry is added, removed or renamed; its
   * ctime with its mode, owner and xattrs). importDir takes it only when every entry is
   * unchanged too (a file's content changes neither time of its directory).
   */
  readonly reuseDir = (rel: string, st: BigIntStats): StoredDir | undefined => {
    const row = this.rowOf(rel);
    if (!row) return undefined;
    const now = dirStatOf(st);
    for (let i = 0; i < 5; i++) if (row[i] !== now[i]) return undefined;
    if (st.mtimeNs >= this.racyNs || st.ctimeNs >= this.racyNs) return undefined;
    return { tree: row[5], entries: row[6], ...(typeof row[7] === 'string' && { check: row[7] }) };
  };

  /**
   * importDir's `recorded`: the digest and git blob id recorded for the file at `rel`, which
   * the directory check found unchanged (for the git proof); undefined when none is recorded.
   */
  readonly recorded = (rel: string): { digest: Digest; git?: string } | undefined => {
    const [dir, name] = splitRel(rel);
    const files = this.filesOf(dir);
    const row = files && Object.hasOwn(files, name) ? files[name] : undefined;
    if (!row || !isRow(row)) return undefined;
    return { digest: row[6], ...(row[9] !== null && { git: row[9] }) };
  };

  /** importDir's `reuse`: the entry of `rel` when its stat is the one recorded and not racy. */
  readonly reuse = (
    rel: string,
    st: FileStat,
    wantsGit: boolean,
  ): { entry: Entry; git?: string; xattrs: Record<string, string> | null } | undefined => {
    const [dir, name] = splitRel(rel);
    const files = this.filesOf(dir);
    const row = files && Object.hasOwn(files, name) ? files[name] : undefined;
    if (!row || !isRow(row)) return undefined;
    const now = statOf(st);
    for (let i = 0; i < 6; i++) if (row[i] !== now[i]) return undefined;
    if (st.mtimeNs >= this.racyNs || st.ctimeNs >= this.racyNs) return undefined;
    if (wantsGit && row[9] === null) return undefined;
    const [, , size, , , , digest, chunks, extents, git, xattrs] = row;
    const refs: ChunkRef[] = chunks === 1 ? [{ digest, size: Number(size) }] : chunks.map(([d, n]) => ({ digest: d, size: n }));
    const entry: FileEntry = {
      type: 'file',
      name: '',
      mode: 0,
      uid: 0,
      gid: 0,
      mtimeNs: '0',
      size: Number(size),
      digest,
      chunks: refs,
      ...(extents ? { extents } : {}),
    };
    this.reused++;
    this.hit = { rel, st, row };
    return { entry, xattrs, ...(git !== null && { git }) };
  };
}

/** Collects the files an import stores (importDir's `onFile`), then writes them as the cache of the snapshot it made. */
export class StatCacheRecorder {
  /** Rows by directory path, then name. */
  private readonly files = new Map<string, Record<string, Row>>();
  private readonly dirs = new Map<string, DirRow>();
  /** The files' JSON text of directories taken unchanged from `loaded` (copied, not encoded again). */
  private readonly copied = new Map<string, string>();
  /** Mtime and ctime must be older than this for a row to be trusted next time (ns since the epoch). */
  private readonly racyNs = BigInt(Date.now() - RACY_MARGIN_MS) * 1_000_000n;
  /**
   * The lstat each file was stored with, by directory then name, until its directory's check is
   * made (`onDir`); null for one no check may stand for (racy, or several links).
   */
  private readonly stats = new Map<string, Map<string, FileStat | null>>();
  private readonly checker = new DirCheckBuilder();
  /** Regular files of directories taken whole by their check (not given to `onFile`). */
  unread = 0;
  /** The capture filter's verdictsKey of this import (set before `save`; recorded with the checks). */
  verdictsKey: string | undefined;

  /** importDir's `onFile`. */
  readonly onFile = (f: StoredFile): void => {
    const [dir, name] = splitRel(f.rel);
    let rows = this.files.get(dir);
    if (!rows) this.files.set(dir, (rows = {}));
    let stats = this.stats.get(dir);
    if (!stats) this.stats.set(dir, (stats = new Map()));
    const st = f.st;
    stats.set(name, st.nlink === 1n && st.mtimeNs < this.racyNs && st.ctimeNs < this.racyNs ? st : null);
    // a file taken unread from its row (the same lstat object): that row, as it is
    const given = this.loaded?.rowGiven(f.rel, f.st);
    if (given) {
      rows[name] = given;
      return;
    }
    const e = f.entry;
    const whole = e.chunks.length === 1 && e.chunks[0]!.digest === e.digest && e.chunks[0]!.size === e.size;
    const chunks: Row[7] = whole ? 1 : e.chunks.map((c) => [c.digest, c.size]);
    rows[name] = [...statOf(f.st), e.digest, chunks, e.extents ?? null, f.git ?? null, e.xattrs ?? null];
  };

  /** `loaded`: the cache this import takes unchanged files from (a directory taken whole is copied from it). */
  constructor(private readonly loaded?: LoadedStatCache) {}

  /** Directories whose tree importDir took from the loaded cache (not encoded again). */
  reusedDirs = 0;

  /** importDir's `onDir`. */
  readonly onDir = (d: ScannedDirInfo): void => {
    // taken whole by its check: the same check; else one made from its entries
    const check = d.children ? this.checkOf(d.rel, d.children) : d.reused ? (d.check ?? null) : null;
    this.stats.delete(d.rel);
    this.dirs.set(d.rel, [...dirStatOf(d.st), d.tree, d.entries, check]);
    this.unread += d.unread ?? 0;
    if (!d.reused) return;
    this.reusedDirs++;
    // every file of it was taken unread from its row in `loaded`, and they are all its files: the rows are those
    const text = this.loaded?.filesTextOf(d.rel);
    if (text === undefined) return;
    this.copied.set(d.rel, text);
    this.files.delete(d.rel);
  };

  /**
   * The directory check of directory `rel` whose entries are `children` (src/host/tree/dir-check.ts),
   * or null when one of them is neither a directory nor a regular file stored this import with a
   * trusted lstat (racy, several links, a symlink…).
   */
  private checkOf(rel: string, children: readonly Entry[]): string | null {
    const stats = this.stats.get(rel);
    const items: { name: Buffer; st: FileStat | undefined }[] = [];
    for (const e of children) {
      const st = e.type === 'file' ? stats?.get(e.name) : undefined;
      if (e.type !== 'dir' && !st) return null;
      items.push({ name: nameToBytes(e.name), st: st ?? undefined });
    }
    items.sort((a, b) => Buffer.compare(a.name, b.name));
    const b = this.checker;
    b.reset();
    for (const { name, st } of items) {
      if (st) b.addFileStats(name, st);
      else b.addDir(name);
    }
    return b.digest();
  }

  /**
   * Writes the cache of `key` in `dir`, bound to `snapshot` (made 0700; the file 0600,
   * replaced atomically). Failures are returned, not thrown: the import stands without it.
   */
  async save(dir: string, key: StatCacheKey, snapshot: { id: string; root: Digest }): Promise<Error | undefined> {
    const head: Header = {
      v: VERSION,
      namespace: key.namespace,
      source: key.source,
      snapshot: snapshot.id,
      root: snapshot.root,
      racyNs: this.racyNs.toString(),
      ...(this.verdictsKey !== undefined && { verdicts: this.verdictsKey }),
    };
    const lines = [JSON.stringify(head)];
    for (const rel of new Set([...this.dirs.keys(), ...this.files.keys()])) {
      const files = this.copied.get(rel) ?? JSON.stringify(this.files.get(rel) ?? {});
      lines.push(`${JSON.stringify(rel)}\t${JSON.stringify(this.dirs.get(rel) ?? null)}\t${files}`);
    }
    const rest = Buffer.from(`${lines.join('\n')}\n`);
    const path = statCachePath(dir, key);
    const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      await mkdirPrivate(dir);
      await writeFilePrivate(tmp, Buffer.concat([Buffer.from(`${createHash('sha256').update(rest).digest('hex')}\n`), rest]));
      await rename(tmp, path);
      return undefined;
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      return err as Error;
    }
  }
}
