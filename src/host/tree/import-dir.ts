import { sparseOf } from '../../core/sparse.js';
import { findDataExtents } from '../sys/seek-data.js';
import { closeSync, type BigIntStats } from 'node:fs';
import type { Digest } from '../../core/digest.js';
import { DirFd, fdPath, type Found } from '../../core/dir-fd.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { type Entry, type EntryAttrs, type FileEntry } from '../../core/tree.js';
import { nameFromBytes } from '../../core/raw-name.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import type { CaptureDirFilter, CaptureFilter } from '../../core/capture-filter.js';
import { peekFd, readSmallText } from '../../core/small-file.js';
import { GitProofCollector } from './git-proof.js';
import { readXattrs } from './xattrs.js';
import type { GitIndexProof } from '../../store/content/git-proof-record.js';
import { StatxAt } from '../sys/statx.js';
import { DirCheckBuilder, isSingleFile, PROBE_DIR, probeDir, statxFileStat, type DirProbe, type FileStat } from './dir-check.js';

/**
 * Importing a directory tree as a snapshot (docs/explanation/design.md#fidelity).
 *
 * What is recorded, per entry type (see src/core/tree.ts for the format):
 * - regular files: content via `ContentWriter.writeFile` (chunked, deduplicated), size,
 *   mode (07777 incl. setuid/setgid/sticky), uid, gid, mtime in ns, xattrs;
 * - directories (including empty ones) with the same attributes, written bottom-up;
 * - symlinks: target verbatim (relative, absolute, dangling), attributes, no xattrs;
 * - hardlinks: a regular file with nlink > 1 seen again under another name (same dev+ino)
 *   becomes `{type:'hardlink', target}`; the first name in depth-first, name-sorted
 *   (UTF-8 byte) order carries the file entry;
 * - fifos, character and block devices with their `rdev`;
 * - sockets are skipped with warning `W_SOCKET_SKIPPED` and listed in `skipped`.
 * Xattrs of files and directories: every namespace is recorded (values base64: `user.*`,
 * `security.*`, the ACLs in `system.posix_acl_*`, `trusted.*`), except `trusted.overlay.*`,
 * overlayfs's bookkeeping, which is dropped silently (src/host/tree/xattrs.ts).
 *
 * The resulting digests depend only on the tree's content and metadata, never on the
 * timing of the concurrent file reads.
 */

/** A non-fatal problem found while importing (`code` is a `W_*` code). */
export interface ImportWarning {
  code: string;
  path: string;
  message: string;
}

/** Progress so far: regular files (each inode once) and their bytes. */
export interface ImportProgress {
  files: number;
  bytes: number;
}

/** Result of an import: the snapshot root digest plus counts. */
export interface ImportResult {
  /** Digest of the root object (written through the writer; call `writer.flush()` to persist). */
  root: Digest;
  /** Regular files, each hardlinked inode counted once. */
  fileCount: number;
  /** Sum of those files' sizes in bytes. */
  byteCount: number;
  /** Entries not recorded (sockets), by slash-separated path from the root. */
  skipped: { path: string; reason: string }[];
  /** Files that kept changing while read and were stored as last read (only with `allowChanging`; absent for tar imports). */
  changing?: string[];
  /** With `gitProof`: what the import proved about the root repository's `.git/index` (absent when there is nothing to prove). */
  gitProof?: GitIndexProof;
}

/**
 * A regular file an import stored (see ImportDirOptions.onFile): its slash-separated path from
 * the root, the fstat its attributes were taken from (after the read that stood, or the walk's
 * for a reused file), its entry, and git's blob id (hex) when the git proof asked for it.
 */
export interface StoredFile {
  rel: string;
  /** A BigIntStats, or for a file taken from a statx result (src/host/tree/dir-check.ts), the fields made from it. */
  st: FileStat;
  entry: FileEntry;
  git?: string;
}

/**
 * A directory's tree as an import stored it (see ImportDirOptions.reuseDir): its digest, its
 * number of entries, and (given back by `reuseDir`) its directory check when one was recorded
 * (src/host/tree/dir-check.ts: the sha256 of its entries' names and lstats, made only when
 * every entry is a regular file with one link, stored and outside the racy window, or a directory).
 */
export interface StoredDir {
  tree: Digest;
  entries: number;
  check?: string;
}

/** What `onDir` hears of a directory scanned. */
export interface ScannedDirInfo extends StoredDir {
  /** Slash path from the root ('' the root). */
  rel: string;
  /** Its lstat (the walk's). */
  st: BigIntStats;
  /** True when its tree is the one `reuseDir` gave (not encoded again). */
  reused: boolean;
  /**
   * Its entries, when they were looked at one by one (absent when the directory check took
   * the directory whole: then `unread` says how many regular files it holds, none of them
   * given to `onFile`).
   */
  children?: readonly Entry[];
  unread?: number;
}

/** Options of `importDir`. */
export interface ImportDirOptions {
  /**
   * Stat cache: called for every regular file (first name of an inode) with its
   * slash-separated path from the root, its fstat (bigint) and whether the git proof wants
   * the file's git blob id. Return a previous `file` entry (or `{entry, git}`, git's blob id
   * in hex) to reuse its content (`digest`, `size`, `chunks`) without reading the file; the
   * attributes are always taken from the current fstat/xattrs. A returned entry whose
   * size differs from `st.size`, or that is not a `file`, is ignored; so is one without
   * `git` when the proof wants it. One that also gives `xattrs` (null: none) is taken from the
   * walk's lstat alone: the file is not even opened (unless the filter peeks at it).
   */
  reuse?: (
    relPath: string,
    st: FileStat,
    wantsGit: boolean,
  ) => Entry | { entry: Entry; git?: string; xattrs?: Record<string, string> | null } | undefined;
  /** Called for each regular file stored (read, or reused through `reuse`), except those stored while they kept changing. */
  onFile?: (f: StoredFile) => void;
  /**
   * Directory cache (git's cache-tree), with `reuse`: called for every directory scanned with
   * its slash-separated path from the root ('' for the root) and its lstat. Return what an
   * earlier import recorded for it (`onDir`) when that record may stand for this directory
   * (the lstat is the one recorded, outside the racy window): when every entry of the
   * directory is then taken unchanged (each regular file through `reuse`'s unopened fast path,
   * each subdirectory through this, none left out) and their number is the recorded one, the
   * directory's tree is that record's `tree`, not encoded or written again (it is content of
   * the earlier import's snapshot).
   */
  reuseDir?: (relPath: string, st: BigIntStats) => StoredDir | undefined;
  /**
   * Called for each directory scanned (after its tree is known; `reused`: taken from
   * `reuseDir`): what `reuseDir` may be given back next time. A record with a `check` lets the
   * next import take the directory whole when the check made from a statx of each entry is the
   * same (src/host/tree/dir-check.ts): no entry is then looked up, rebuilt or given to `onFile`.
   */
  onDir?: (d: ScannedDirInfo) => void;
  /**
   * With the directory check: the content recorded for the unchanged file at `relPath`, for
   * the git proof (its digest and git's blob id); undefined when not recorded (the directory
   * is then scanned entry by entry).
   */
  recorded?: (relPath: string) => { digest: Digest; git?: string } | undefined;
  /**
   * With the directory check: the filter's `verdictsKey` when the checks `reuseDir` gives were
   * recorded. When the filter's key is the same, a file a check finds unchanged (same path,
   * same lstat) keeps its verdict (`store`) and the filter is not asked again.
   */
  verdictsKey?: string;
  /** Called after each regular file with cumulative counts. */
  onProgress?: (p: ImportProgress) => void;
  /** Called for each non-fatal problem (skipped socket, skipped xattr namespace, …). */
  onWarning?: (w: ImportWarning) => void;
  /** Regular files read at the same time (default 8). */
  concurrency?: number;
  /** Store a file that keeps changing as last read (listed in `changing`) instead of failing with E_CHANGED_DURING_READ. */
  allowChanging?: boolean;
  /** Leaves out a path (and, for a directory, all below it): called with its slash-separated path from the root. */
  skip?: (relPath: string) => boolean;
  /** The capture filter (docs/explanation/capture-classes.md): secrets and scratch it names are left out and reported to it. */
  filter?: CaptureFilter;
  /**
   * When the root holds a git repository: also compute git's blob id of every file its
   * `.git/index` tracks, in the same read pass, and return what that proves as `gitProof`
   * (src/host/tree/git-proof.ts). Files reused through `reuse` are not read, so not proven.
   */
  gitProof?: boolean;
}

function attrsOf(st: FileStat, xattrs?: Record<string, string>): EntryAttrs {
  const a: EntryAttrs = { mode: Number(st.mode & 0o7777n), uid: Number(st.uid), gid: Number(st.gid), mtimeNs: st.mtimeNs.toString() };
  if (xattrs) a.xattrs = xattrs;
  return a;
}

/** A bounded pool of concurrent jobs; the first failure stops further submissions. */
class Pool {
  private running = 0;
  private readonly waiters: (() => void)[] = [];
  private readonly inflight = new Set<Promise<unknown>>();
  error: unknown;

  constructor(private readonly limit: number) {}

  /** Waits for a free slot, starts `fn`, and returns its promise boxed (so that awaiting this call does not await the job). */
  async submit<T>(fn: () => Promise<T>): Promise<{ job: Promise<T> }> {
    while (this.running >= this.limit) await new Promise<void>((r) => this.waiters.push(r));
    if (this.error !== undefined) throw this.error;
    this.running++;
    const job = fn().finally(() => {
      this.running--;
      this.inflight.delete(job);
      this.waiters.shift()?.();
    });
    this.inflight.add(job);
    job.catch((err) => {
      this.error ??= err;
    });
    return { job };
  }

  /** Waits until no job runs (failures ignored: they are reported through `error`). */
  async drain(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }
}

/**
 * Imports the directory `dir` as a snapshot through `writer` and returns its root digest.
 *
 * Walks through directory descriptors (src/core/dir-fd.ts: every entry lstat'ed, opened
 * relative to its parent's descriptor with O_NOFOLLOW and checked against the lstat, file
 * bytes and xattrs read only through the opened descriptor), in depth-first order with
 * names sorted by their raw bytes; reads up to `concurrency` regular files at the same
 * time. The root object carries `dir`'s own attributes. Nothing is persisted until the
 * caller runs `writer.flush()`.
 *
 * Concurrent changes: an entry that vanishes before it is opened is left out; a directory
 * renamed or swapped for a symlink is taken as the walk finds it (a symlink is recorded,
 * never followed); a file that changes while it is read is read again (4 reads in all)
 * and, with `allowChanging`, stored as last read and listed in `changing`.
 *
 * @throws AwcError E_SOURCE_NOT_FOUND when `dir` does not exist or is not a directory;
 *   E_CHANGED_DURING_READ (retryable, `details.path` relative to `dir`) when a file keeps
 *   changing while it is read (unless `allowChanging`);
 *   E_PERMISSION when something cannot be read.
 */
export async function importDir(dir: string, writer: ContentWriter, opts: ImportDirOptions = {}): Promise<ImportResult> {
  const opened = DirFd.openRoot(dir);
  if (!opened) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
  const { dir: root, st: rootSt } = opened;
  const im = new DirImporter(writer, opts, opts.gitProof ? GitProofCollector.open(root) : undefined);
  try {
    const rootXattrs = readXattrs(root.self);
    const rootFilter = await opts.filter?.root(async (n) => readSmallText(root, n));
    im.keepVerdicts = opts.verdictsKey !== undefined && opts.filter?.verdictsKey?.() === opts.verdictsKey;
    const scanned = await im.scanDir(root, rootFilter, rootSt);
    const tree = await scanned.tree;
    const rootDigest = await writer.writeRoot({ ...attrsOf(rootSt, rootXattrs), tree });
    const gitProof = im.proof?.finish();
    const { progress, skipped, changing } = im;
    return { root: rootDigest, fileCount: progress.files, byteCount: progress.bytes, skipped, changing, ...(gitProof && { gitProof }) };
  } catch (err) {
    await im.pool.drain();
    throw toAwcError(err);
  } finally {
    root.close();
  }
}

/**
 * An entry still being written, boxed (so that awaiting a step that returns it does not await
 * the entry). `unchanged`: the entry is the earlier import's, taken unread (a stat-cache hit,
 * or a subdirectory whose tree the directory cache gave back).
 */
interface Boxed {
  entry: Promise<Entry>;
  unchanged?: boolean;
}

/** What scanDir gives back (boxed): the directory's tree digest, and whether it is the directory cache's (every entry unchanged). */
interface ScannedDir {
  tree: Promise<Digest>;
  unchanged: boolean;
}

/** One run of importDir: the walk's steps and what it gathers. */
/** True when two stats of one path describe the same file content state (inode, size, times). */
function sameStat(a: BigIntStats, b: BigIntStats): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs && a.mode === b.mode;
}

class DirImporter {
  readonly pool: Pool;
  /** "dev:ino" → path of the inode's first name. */
  private readonly firstNames = new Map<string, string>();
  /** The fast path's `reuse` answer per path and the lstat it was given, until the slow path takes it. */
  private readonly asked = new Map<string, { st: BigIntStats; got: ReturnType<NonNullable<ImportDirOptions['reuse']>> }>();
  readonly skipped: { path: string; reason: string }[] = [];
  readonly changing: string[] = [];
  readonly progress: ImportProgress = { files: 0, bytes: 0 };
  /** The directory check's statx (with `reuseDir`; undefined where statx cannot be called: every directory then scanned entry by entry). */
  private readonly statx: StatxAt | undefined;
  private readonly checker = new DirCheckBuilder();
  /** The directory checks were recorded under the filter's verdicts key: an unchanged file's verdict is kept. */
  keepVerdicts = false;

  constructor(
    private readonly writer: ContentWriter,
    private readonly opts: ImportDirOptions,
    readonly proof: GitProofCollector | undefined,
  ) {
    this.pool = new Pool(Math.max(1, opts.concurrency ?? 8));
    this.statx = opts.reuse && opts.reuseDir ? StatxAt.open() : undefined;
  }

  private warn(w: ImportWarning): void {
    this.opts.onWarning?.(w);
  }

  private countFile(size: number): void {
    this.countFiles(1, size);
  }

  /** `files` regular files of `bytes` bytes in all stored. */
  private countFiles(files: number, bytes: number): void {
    this.progress.files += files;
    this.progress.bytes += bytes;
    this.opts.onProgress?.({ ...this.progress });
  }

  /** Reads one regular file's content through its descriptor (or reuses it) and returns its entry; closes `fd`. */
  private async fileEntry(fd: number, rel: string, name: string, st: BigIntStats, xattrs?: Record<string, string>): Promise<Entry> {
    const { opts, proof } = this;
    try {
      const reused = this.reused(rel, name, st, xattrs);
      if (reused) return reused;
      const c = await this.writer.writeFileFd(fd, {
        path: rel,
        allowChanging: opts.allowChanging,
        also: proof?.also(rel),
        findExtents: findDataExtents,
      });
      if (c.changing) this.changing.push(rel);
      else proof?.record(rel, c.digest, c.also);
      // the attributes of what was read: xattrs again when the inode changed since they were read
      if (c.st.ctimeNs !== st.ctimeNs) xattrs = readXattrs(fdPath(fd));
      this.countFile(c.size);
      const entry: FileEntry = {
        type: 'file',
        name,
        ...attrsOf(c.st, xattrs),
        size: c.size,
        digest: c.digest,
        chunks: c.chunks,
        ...sparseOf(c.extents),
      };
      if (!c.changing) opts.onFile?.({ rel, st: c.st, entry, ...(c.also !== undefined && { git: c.also }) });
      return entry;
    } finally {
      closeSync(fd);
    }
  }

  /** The entry of the file at `rel` as the stat cache (`opts.reuse`) gives it, unread; undefined when it gives none that fits. */
  private reused(rel: string, name: string, st: BigIntStats, xattrs?: Record<string, string>): FileEntry | undefined {
    const { opts, proof } = this;
    const wantsGit = proof?.also(rel) !== undefined;
    const asked = this.asked.get(rel);
    this.asked.delete(rel);
    const got = asked && sameStat(asked.st, st) ? asked.got : opts.reuse?.(rel, st, wantsGit);
    const prev = got && 'entry' in got ? got.entry : got;
    const git = got && 'entry' in got ? got.git : undefined;
    if (!prev || prev.type !== 'file' || BigInt(prev.size) !== st.size || (wantsGit && git === undefined)) return undefined;
    return this.reuseEntry(rel, name, st, prev, git, xattrs);
  }

  /** A file stored from the stat cache's entry `prev` (unread): counted, proven, reported to `onFile`; attributes from `st` and `xattrs`. */
  private reuseEntry(
    rel: string,
    name: string,
    st: FileStat,
    prev: FileEntry,
    git: string | undefined,
    xattrs?: Record<string, string>,
  ): FileEntry {
    this.countFile(prev.size);
    this.proof?.record(rel, prev.digest, git);
    const entry: FileEntry = {
      type: 'file',
      name,
      ...attrsOf(st, xattrs),
      size: prev.size,
      digest: prev.digest,
      chunks: prev.chunks,
      ...sparseOf(prev.extents),
    };
    this.opts.onFile?.({ rel, st, entry, ...(git !== undefined && { git }) });
    return entry;
  }

  /**
   * Scans one directory (whose lstat is `dirSt`): metadata sequentially in tree order (so
   * hardlink roles are deterministic), file contents through the pool. Returns (boxed) a
   * promise of the directory's tree digest, resolved once all its entries are written; or,
   * when the directory cache (`reuseDir`) has a record of it and every entry was taken
   * unchanged, that record's digest (nothing encoded or written).
   */
  async scanDir(d: DirFd, f: CaptureDirFilter | undefined, dirSt: BigIntStats): Promise<ScannedDir> {
    const raw = d.list();
    const known = this.opts.reuse ? this.opts.reuseDir?.(d.rel, dirSt) : undefined;
    if (known?.check !== undefined && this.statx) {
      const checked = await this.scanChecked(d, raw, f, dirSt, { ...known, check: known.check });
      if (checked) return checked;
    }
    const pending: Promise<Entry>[] = [];
    let unchanged = known !== undefined; // every name so far an unchanged entry
    for (const rawName of raw) {
      const name = nameFromBytes(rawName); // any bytes: raw ones escaped (src/core/raw-name.ts)
      const boxed = await this.entryOf(d, rawName, name, f);
      if (!boxed?.unchanged) unchanged = false;
      if (!boxed) continue;
      boxed.entry.catch(() => undefined); // handled by Promise.all below; avoid an unhandled rejection meanwhile
      pending.push(boxed.entry);
    }
    // the names are the recorded ones when each is an unchanged entry of the record and their number is the same
    return this.finishDir(d, dirSt, pending, unchanged && known?.entries === pending.length ? known : undefined);
  }

  /**
   * The tree of directory `d` once its entries (`pending`, in name order) are written: `known`'s
   * when given (it stands for them: nothing encoded), else encoded and written; reported to
   * `onDir` with the entries.
   */
  private finishDir(d: DirFd, dirSt: BigIntStats, pending: Promise<Entry>[], known: StoredDir | undefined): ScannedDir {
    const onDir = this.opts.onDir;
    const tree = Promise.all(pending).then(async (children) => {
      const t = known ? known.tree : await this.writer.writeTree(children);
      onDir?.({ rel: d.rel, st: dirSt, tree: t, entries: children.length, reused: known !== undefined, children });
      return t;
    });
    tree.catch(() => undefined); // the caller awaits it
    return { tree, unchanged: known !== undefined };
  }

  /**
   * The directory check's fast path (src/host/tree/dir-check.ts): when the check made from a
   * statx of each of the names `raw` is `known`'s, every regular file is the one recorded (and
   * stored: the filter's verdict), and none is looked up; the subdirectories are scanned. When
   * they are all unchanged too, the tree is `known`'s, whole (its files counted, not given to
   * `onFile`); else the entries are made one by one (the files from the stat cache) and the
   * tree written. Undefined, with nothing done, when the check differs: the caller then scans
   * the directory entry by entry.
   */
  private async scanChecked(
    d: DirFd,
    raw: Buffer[],
    f: CaptureDirFilter | undefined,
    dirSt: BigIntStats,
    known: StoredDir & { check: string },
  ): Promise<ScannedDir | undefined> {
    if (raw.length !== known.entries) return undefined;
    const probe = probeDir(this.statx!, this.checker, d.fd, raw);
    if (probe?.check !== known.check || !this.storesAll(d, raw, probe, f)) return undefined;
    const subs = new Map<number, Boxed | undefined>();
    let same = true;
    for (let i = 0; i < raw.length; i++) {
      if (probe.kinds[i] !== PROBE_DIR) continue;
      const name = nameFromBytes(raw[i]!);
      const boxed = await this.childEntry(d, name, d.childRel(name), f);
      boxed?.entry.catch(() => undefined); // awaited below
      if (!boxed?.unchanged) same = false;
      subs.set(i, boxed);
    }
    if (same) {
      this.countFiles(probe.files, probe.bytes);
      const tree = Promise.all([...subs.values()].map((b) => b!.entry)).then(() => {
        this.opts.onDir?.({ rel: d.rel, st: dirSt, ...known, reused: true, unread: probe.files });
        return known.tree;
      });
      tree.catch(() => undefined); // the caller awaits it
      return { tree, unchanged: true };
    }
    const pending: Promise<Entry>[] = [];
    for (let i = 0; i < raw.length; i++) {
      const boxed = probe.kinds[i] === PROBE_DIR ? subs.get(i) : await this.entryOf(d, raw[i]!, nameFromBytes(raw[i]!), f);
      if (!boxed) continue;
      boxed.entry.catch(() => undefined); // handled by finishDir's Promise.all
      pending.push(boxed.entry);
    }
    return this.finishDir(d, dirSt, pending, undefined);
  }

  /**
   * Whether every regular file `probe` found among `raw` in `d` is stored as the stat cache
   * recorded it: not skipped, the filter's verdict `store`, and, when the git proof needs it,
   * its recorded digest and blob id (recorded to the proof here).
   */
  private storesAll(d: DirFd, raw: Buffer[], probe: DirProbe, f: CaptureDirFilter | undefined): boolean {
    // a file's verdict depends on its path, its content and the filter's rules (the check names the first two, verdictsKey the last)
    const { opts, proof } = this;
    const ask = this.keepVerdicts ? undefined : f;
    if (!ask && !opts.skip && !proof) return true;
    for (let i = 0; i < raw.length; i++) {
      if (probe.kinds[i] === PROBE_DIR) continue;
      const name = nameFromBytes(raw[i]!);
      const rel = opts.skip || proof ? d.childRel(name) : '';
      if (opts.skip?.(rel)) return false;
      if (ask && ask.verdict(name, false, (max) => this.peekAt(d, name, max)) !== 'store') return false;
      if (!proof?.needs(rel)) continue;
      const rec = opts.recorded?.(rel);
      const wantsGit = proof.also(rel) !== undefined;
      if (!rec || (wantsGit && rec.git === undefined)) return false;
      proof.record(rel, rec.digest, rec.git);
    }
    return true;
  }

  /** The first bytes of regular file `name` of `d` (none when it is no longer one, or no longer the file `st` says), for a filter's verdict. */
  private peekAt(d: DirFd, name: string, max: number | undefined, st?: BigIntStats): Buffer {
    const o = d.open(name, st);
    if (o?.type === 'dir') o.dir.close();
    if (o?.type !== 'file') return Buffer.alloc(0);
    try {
      return peekFd(o.fd, max);
    } finally {
      closeSync(o.fd);
    }
  }

  /**
   * The entry of child `name` (raw bytes `rawName`) of `d`: {@link fromStatx}'s when it takes
   * the file from its statx result and its row, else {@link childEntry}'s.
   */
  private async entryOf(d: DirFd, rawName: Buffer, name: string, f: CaptureDirFilter | undefined): Promise<Boxed | undefined> {
    const rel = d.childRel(name);
    if (this.opts.skip?.(rel)) return undefined;
    return this.fromStatx(d, rawName, name, rel, f) ?? (await this.childEntry(d, name, rel, f));
  }

  /**
   * The stat cache's fast path from a statx of the entry through the directory's descriptor
   * (src/host/tree/dir-check.ts; AT_SYMLINK_NOFOLLOW, nothing opened): a regular file with one
   * link whose lstat, made from the statx result, is the one its row recorded (outside the
   * racy window: `reuse` checks), becomes its row's entry with the statx's attributes, without
   * a Node lstat, the filter's verdict or an open, when the verdict is kept (the filter's
   * verdictsKey is the one the rows were recorded under) or there is no filter. Undefined
   * for anything else (new, changed, racy, several links, not a regular file, the policy
   * changed, no statx here): the caller then takes the ordinary path.
   */
  private fromStatx(d: DirFd, rawName: Buffer, name: string, rel: string, f: CaptureDirFilter | undefined): Boxed | undefined {
    const sx = this.statx;
    if (!sx || (f && !this.keepVerdicts) || !sx.at(d.fd, rawName) || !isSingleFile(sx.words)) return undefined;
    const st = statxFileStat(sx.words);
    const wantsGit = this.proof?.also(rel) !== undefined;
    const got = this.opts.reuse?.(rel, st, wantsGit);
    if (!got || !('entry' in got) || got.xattrs === undefined) return undefined;
    const prev = got.entry;
    if (prev.type !== 'file' || BigInt(prev.size) !== st.size || (wantsGit && got.git === undefined)) return undefined;
    return { entry: Promise.resolve(this.reuseEntry(rel, name, st, prev, got.git, got.xattrs ?? undefined)), unchanged: true };
  }

  /** The entry of child `name` of `d` (boxed), undefined when it is left out (skipped, vanished, filtered). */
  private async childEntry(d: DirFd, name: string, childRel: string, f: CaptureDirFilter | undefined): Promise<Boxed | undefined> {
    if (this.opts.skip?.(childRel)) return undefined;
    const st = this.opts.reuse ? d.lstat(name) : undefined;
    const cached = st ? this.cachedRegular(d, st, name, childRel, f) : undefined;
    if (cached) return { entry: cached, unchanged: true };
    const found = d.open(name, st);
    if (!found) return undefined; // vanished since readdir: taken as absent
    if (found.type === 'dir') return this.subdirEntry(found.dir, found.st, name, childRel, f);
    if (found.type === 'file') return this.regularEntry(found.fd, found.st, name, childRel, f);
    return this.otherEntry(found, name, childRel);
  }

  /**
   * The stat cache's fast path: a regular file (one name) whose lstat (through the directory's
   * descriptor) is the one recorded, with the filter storing it, becomes its cached entry
   * without being opened (its xattrs are the recorded ones: a change of them moves the ctime).
   * Undefined when it is anything else: the walk then opens and reads it.
   */
  private cachedRegular(d: DirFd, st: BigIntStats, name: string, rel: string, f: CaptureDirFilter | undefined): Promise<Entry> | undefined {
    if (!st.isFile() || st.nlink > 1n) return undefined;
    const { proof } = this;
    const wantsGit = proof?.also(rel) !== undefined;
    const got = this.opts.reuse?.(rel, st, wantsGit);
    // the slow path takes this answer again for the same stat, so `reuse` is asked once per file
    this.asked.set(rel, { st, got });
    if (!got || !('entry' in got) || got.xattrs === undefined) return undefined;
    const prev = got.entry;
    if (prev.type !== 'file' || BigInt(prev.size) !== st.size || (wantsGit && got.git === undefined)) return undefined;
    const peek = (max?: number): Buffer => this.peekAt(d, name, max, st);
    if (f && f.verdict(name, false, peek) !== 'store') return undefined;
    return Promise.resolve(this.reuseEntry(rel, name, st, prev, got.git, got.xattrs ?? undefined));
  }

  /** The entry of the subdirectory `name` open at `dir` (closed here), scanned; undefined when the filter calls it scratch. */
  private async subdirEntry(
    dir: DirFd,
    st: BigIntStats,
    name: string,
    childRel: string,
    f: CaptureDirFilter | undefined,
  ): Promise<Boxed | undefined> {
    let sub: ScannedDir;
    let xattrs: Record<string, string> | undefined;
    try {
      if (f && f.verdict(name, true, () => Buffer.alloc(0)) === 'scratch') {
        this.opts.filter?.scratch(childRel, { dir });
        return undefined;
      }
      const childF = await f?.child(name, async () => readSmallText(dir, '.gitignore'));
      xattrs = readXattrs(dir.self);
      sub = await this.scanDir(dir, childF, st);
    } finally {
      dir.close();
    }
    // unchanged: its tree is the record's, its attributes those of the recorded lstat (xattrs move the ctime)
    return { entry: sub.tree.then((tree) => ({ type: 'dir', name, ...attrsOf(st, xattrs), tree })), unchanged: sub.unchanged };
  }

  /**
   * The entry of the regular file `name` open at `fd` (closed here or by its read job): a
   * hardlink to an inode's first name, else its content read through the pool; undefined when
   * the filter calls it secret or scratch (reported to it).
   */
  private async regularEntry(
    fd: number,
    st: BigIntStats,
    name: string,
    childRel: string,
    f: CaptureDirFilter | undefined,
  ): Promise<Boxed | undefined> {
    const verdict = f?.verdict(name, false, (max) => peekFd(fd, max)) ?? 'store';
    if (verdict !== 'store') {
      try {
        // `base`: a walk of a whole tree knows no base; the file is left out, unreported
        if (verdict === 'secret') this.opts.filter?.secret(childRel, fd, Number(st.size));
        else if (verdict === 'scratch') this.opts.filter?.scratch(childRel, { size: Number(st.size) });
      } finally {
        closeSync(fd);
      }
      return undefined;
    }
    if (st.nlink > 1n) {
      const key = `${st.dev}:${st.ino}`;
      const first = this.firstNames.get(key);
      if (first !== undefined) {
        closeSync(fd);
        return { entry: Promise.resolve({ type: 'hardlink', name, target: first }) };
      }
      this.firstNames.set(key, childRel);
    }
    try {
      const xattrs = readXattrs(fdPath(fd));
      return { entry: (await this.pool.submit(() => this.fileEntry(fd, childRel, name, st, xattrs))).job };
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /**
   * The entry of a symlink, fifo or device; undefined for a socket (skipped, with a warning).
   * @throws E_UNSUPPORTED for an unknown file type
   */
  private otherEntry(found: Found, name: string, childRel: string): Boxed | undefined {
    const st = found.st;
    if (found.type === 'symlink') {
      if (st.nlink > 1n)
        this.warn({ code: 'W_HARDLINK_COPIED', path: childRel, message: 'a hardlinked symlink is recorded as an independent symlink' });
      return { entry: Promise.resolve({ type: 'symlink', name, ...attrsOf(st), target: nameFromBytes(found.target) }) };
    }
    if (st.isFIFO() || st.isCharacterDevice() || st.isBlockDevice()) {
      const type = st.isFIFO() ? 'fifo' : st.isCharacterDevice() ? 'chardev' : 'blockdev';
      if (st.nlink > 1n)
        this.warn({ code: 'W_HARDLINK_COPIED', path: childRel, message: `a hardlinked ${type} is recorded as an independent ${type}` });
      return { entry: Promise.resolve({ type, name, ...attrsOf(st), rdev: Number(st.rdev) }) };
    }
    if (st.isSocket()) {
      this.skipped.push({ path: childRel, reason: 'socket' });
      this.warn({ code: 'W_SOCKET_SKIPPED', path: childRel, message: 'sockets cannot be recorded; skipped' });
      return undefined;
    }
    throw new AwcError('E_UNSUPPORTED', `${childRel}: unknown file type (mode ${st.mode.toString(8)})`);
  }
}
