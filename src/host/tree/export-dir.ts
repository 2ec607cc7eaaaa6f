import * as fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { lchown, link, open, symlink } from 'node:fs/promises';
import type * as Xattr from 'fs-xattr';
import { lazyRequire } from '../../core/lazy-require.js';
import type { Digest } from '../../core/digest.js';
import { DirFd, fdPath } from '../../core/dir-fd.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { fsPath, hasEscape } from '../../core/raw-name.js';
import { splitDev, type DirEntry, type Entry, type EntryAttrs, type FileEntry, type HardlinkEntry } from '../../core/tree.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { writeDense, writeExtents } from './write-content.js';
import { ReadWindow, type ReadWindowOptions, type TreeContentSource } from '../../store/content/read-window.js';
import { checkTarget, moveInPlace, openExportPlace, userError } from './export-dir-guard.js';
import { runWithDir, setTreeTimes } from './export-times.js';
import { isPrivilegeXattr } from './xattrs.js';

/** fs-xattr (a native addon), loaded on first use. */
const xattr = lazyRequire<typeof Xattr>('fs-xattr');

/**
 * Exporting a snapshot into a directory on the local file system.
 *
 * Recreates regular files (streamed; a sparse file's data at its extents, its holes
 * unallocated; in a dense file, runs of aligned all-zero 4 KiB blocks under 1 MiB left as
 * holes: src/host/tree/write-content.ts), directories (also empty ones), symlinks (verbatim targets;
 * never followed), hardlinks (`link(2)` to the first name), fifos (`mkfifo`), and device
 * nodes (`mknod`, root only: E_PERMISSION otherwise; with `unprivileged` they are left
 * out, and setuid/setgid bits of non-directories cleared, see `leftOut`). Then, in this
 * order, owner (`lchown`, root only; otherwise the files belong to the caller; a chown
 * clears setuid/setgid bits and file capabilities, so it comes first), mode bits incl.
 * setuid/setgid/sticky, xattrs of every namespace (the ACLs of `system.posix_acl_*` after
 * the mode, whose group bits they hold; `security.capability` left out with `unprivileged`;
 * `trusted.*` and `security.*` left out without root, listed in `leftOut`), and last the
 * modification times of everything (directories after their contents, symlinks with
 * `lutimes`; atime is set to the same value).
 *
 * Safety: the tree is written into a new directory beside the target (`.awc-export-<hex>`,
 * mode 0700 until the end) and renamed onto the target only when complete; any failure
 * removes what was written. Everything is created relative to its parent's descriptor
 * (src/core/dir-fd.ts): files with O_CREAT|O_EXCL|O_NOFOLLOW, directories with mkdir and
 * then opened with O_NOFOLLOW|O_DIRECTORY, links with symlink/link, all of which fail
 * rather than follow an existing name, and attributes are set through the descriptors;
 * so nothing is ever written through a symlink that appears in the target. A name that
 * exists anyway is E_PATH_TRAVERSAL when it is a symlink, else E_TARGET_BUSY. Hardlink
 * targets must be regular files exported earlier (a path through a symlink or with `..`
 * is E_PATH_TRAVERSAL).
 *
 * Modification-time precision: Node cannot set nanoseconds. fs.utimes/futimes/lutimes take
 * seconds as a double (numbers, numeric strings and Dates all become a double), and the
 * libuv of Node 20 (1.46) converts it to a timespec and then truncates it to whole
 * microseconds (`uv__fs_to_timespec`; nodejs/node#50859 asks for bigint times, libuv
 * removed the truncation only in late 2025). A double also holds only ~240 ns at today's
 * epoch. So, with `mtimes: 'auto'` (the default), times are set exactly with utimensat(2)
 * called through koffi (src/host/sys/utimens.ts) on the parents' descriptors, never following a
 * symlink; where koffi cannot load, or with `mtimes: 'node'`, they are set with `lutimes` to
 * the exact microsecond (the ns remainder is truncated; the double is biased by +0.5 µs so
 * that it never rounds down a microsecond; times before 1970 may be off by up to 1 µs there). The result
 * says which precision was reached.
 *
 * The target must be missing or an empty directory; with `overwrite`, a non-empty
 * directory is replaced as a whole (renamed aside, the new tree renamed in, the old one
 * removed without ever crossing into another file system). Before anything is written,
 * a target that is, holds or is inside the AWC home (`home`), or that is a mount point or
 * has one below it, is refused (src/host/tree/export-dir-guard.ts). A failure after the old
 * tree was renamed aside puts it back; if even that fails, the error names where it is.
 * Error messages never show the internal `/proc/self/fd/N` paths.
 */

/** Counts of an export: regular files (each hardlinked inode once) and their bytes. */
export interface ExportCounts {
  files: number;
  bytes: number;
}

/** Options of `exportDir`. */
export interface ExportDirOptions {
  /** Called after each regular file with cumulative counts (files, bytes). */
  onProgress?: (p: ExportCounts) => void;
  /** `auto` (default): exact ns via utimensat (koffi) when it loads, else µs; `node`: µs via Node only. */
  mtimes?: 'auto' | 'node';
  /** Regular files written at the same time (default 8). */
  concurrency?: number;
  /** Replace a non-empty target directory (default: refuse it with E_TARGET_EXISTS). */
  overwrite?: boolean;
  /**
   * Materialise nothing that grants privileges where no nosuid,nodev mount protects the
   * target: setuid/setgid bits of non-directories are cleared, file capabilities
   * (`security.capability`) are not set and device nodes are not created; each is listed in
   * the result's `leftOut`.
   */
  unprivileged?: boolean;
  /** The AWC home: a target that is, holds or is inside it is refused (E_USAGE). */
  home?: string;
  /**
   * The cross-file read window (src/store/content/read-window.ts): bounds, or `false` to read
   * each file on its own, as the reader does (the benchmark's baseline). Default on.
   */
  readWindow?: ReadWindowOptions | false;
}

/** Result of `exportDir`: counts plus the precision the modification times were set with. */
export interface ExportDirResult extends ExportCounts {
  /** `ns`: exact; `us`: truncated to whole microseconds. */
  mtimePrecision: 'ns' | 'us';
  /** With `unprivileged`: what was not materialised (slash-separated path, reason). */
  leftOut: { path: string; reason: string }[];
}

/** Reasons given in `leftOut`. */
export const LEFT_OUT_SETID = 'setuid/setgid bits not materialised (no nosuid mount)';
export const LEFT_OUT_DEVICE = 'device node not materialised (no nodev mount)';
export const LEFT_OUT_CAPABILITY = 'file capabilities (security.capability) not materialised (no nosuid mount)';
export const LEFT_OUT_ROOT_XATTRS = 'trusted.* and security.* xattrs not materialised (they need root)';

/** Maps a creation failure of `name` in `dir`: an existing name is a symlink (E_PATH_TRAVERSAL) or a concurrent writer (E_TARGET_BUSY). */
function createError(dir: DirFd, name: string, err: unknown): AwcError {
  const code = (err as NodeJS.ErrnoException).code;
  const rel = dir.childRel(name);
  if (code === 'EEXIST' || code === 'ELOOP') {
    if (dir.lstat(name)?.isSymbolicLink()) return new AwcError('E_PATH_TRAVERSAL', `refusing to write through the symlink ${rel}`);
    return new AwcError('E_TARGET_BUSY', `${rel} appeared while exporting`);
  }
  return userError(err);
}

/**
 * Writes the snapshot `root` into `dir`, which must be missing or an empty directory (or,
 * with `overwrite`, any directory: it is replaced). The tree is written beside `dir` under
 * a temporary name and renamed onto it only when complete; on failure nothing is left
 * (see the module docs). The root's own attributes become `dir`'s.
 *
 * @returns regular files (each hardlinked inode once), their bytes, and the precision the
 *   modification times were set with (see the module docs).
 * @throws AwcError E_TARGET_EXISTS (not retryable: dir not empty without `overwrite`, or
 *   not a directory), E_USAGE (the target is, holds or is inside `home`), E_TARGET_BUSY (a
 *   mount point at or below the target), E_PATH_TRAVERSAL (a hardlink target outside the exported files, or
 *   writing through a symlink), E_PERMISSION (device nodes when not root, or a denied
 *   operation), E_UNSUPPORTED (the file system refuses the xattrs),
 *   E_OBJECT_NOT_FOUND/E_INTEGRITY from the reader.
 */
export async function exportDir(reader: ContentReader, root: Digest, dir: string, opts: ExportDirOptions = {}): Promise<ExportDirResult> {
  const { name, parentPath, parent: parentDir, dev, tmp } = openExportPlace(dir, opts.home);
  let top: DirFd | undefined;
  try {
    const existing = checkTarget(parentDir, name, dir, opts.overwrite ?? false);
    if (existing && parentDir.lstat(name)?.dev !== dev)
      throw new AwcError('E_TARGET_BUSY', `${dir} is a mount point`, {
        hint: 'Export to a directory that is not a mount point, or unmount it first.',
      });
    try {
      top = parentDir.mkdirOpen(tmp, 0o700, '');
    } catch (err) {
      throw err instanceof AwcError ? err : createError(parentDir, tmp, err);
    }
    const res = await writeTree(reader, root, top, opts);
    top.close();
    top = undefined;
    moveInPlace(parentDir, { tmp, name, shown: dir, parentPath, overwrite: opts.overwrite ?? false });
    return res;
  } catch (err) {
    const e = userError(err);
    top?.close();
    try {
      parentDir.removeTree(tmp, { dev });
    } catch {
      // best effort: the original failure is what the caller needs
    }
    throw e;
  } finally {
    parentDir.close();
  }
}

/** Writes the tree of `root` into the open directory `top` (new, 0700) and sets every attribute and time. */
async function writeTree(base: ContentReader, root: Digest, top: DirFd, opts: ExportDirOptions): Promise<ExportDirResult> {
  const window = opts.readWindow === false ? undefined : new ReadWindow(base, root, opts.readWindow);
  try {
    return await writeTreeFrom(window ?? base, root, top, opts);
  } finally {
    window?.close();
  }
}

/** writeTree reading through `reader` (a read window calls for files in walk order: the body is asked for first thing). */
async function writeTreeFrom(reader: TreeContentSource, root: Digest, top: DirFd, opts: ExportDirOptions): Promise<ExportDirResult> {
  return new TreeWriter(reader, top, opts).run(root);
}

/** A write started in a directory, boxed (so that awaiting the step that started it does not await the write). */
interface Started {
  done: Promise<void>;
}

/** One run of writeTreeFrom: the walk's steps and what it gathers. */
class TreeWriter {
  private readonly isRoot = process.getuid?.() === 0;
  private readonly counts: ExportCounts = { files: 0, bytes: 0 };
  private readonly leftOut: { path: string; reason: string }[] = [];
  /** (path relative to top, mtimeNs), applied last. */
  private readonly times: [string, string][] = [];
  /** Relative path of each regular file → done. */
  private readonly exported = new Map<string, Promise<void>>();
  private readonly symlinks = new Set<string>();
  private readonly limit: number;
  private running = 0;
  private readonly waiters: (() => void)[] = [];
  private failure: unknown;

  constructor(
    private readonly reader: TreeContentSource,
    private readonly top: DirFd,
    private readonly opts: ExportDirOptions,
  ) {
    this.limit = Math.max(1, opts.concurrency ?? 8);
  }

  /** Writes the tree of `root` into `top`, then its attributes and every time. */
  async run(root: Digest): Promise<ExportDirResult> {
    let all: Promise<void>[] = [];
    try {
      const r = await this.reader.readRoot(root);
      all = await this.walk(r.tree, this.top);
      await Promise.all(all);
      this.applyDirAttrs(this.top, r);
    } catch (err) {
      await Promise.allSettled(all);
      while (this.running > 0) await new Promise<void>((r) => this.waiters.push(r));
      throw toAwcError(err);
    }

    return { ...this.counts, mtimePrecision: await setTreeTimes(this.top, this.times, this.opts.mtimes ?? 'auto'), leftOut: this.leftOut };
  }

  /** The mode to give a non-directory (setuid/setgid cleared when unprivileged). */
  private safeMode(rel: string, mode: number): number {
    if (!this.opts.unprivileged || (mode & 0o6000) === 0) return mode;
    this.leftOut.push({ path: rel, reason: LEFT_OUT_SETID });
    return mode & ~0o6000;
  }

  /** Owner, xattrs and mode of a directory just filled, through its descriptor (times come last). */
  private applyDirAttrs(d: DirFd, a: EntryAttrs): void {
    if (this.isRoot) fs.fchownSync(d.fd, a.uid, a.gid);
    fs.fchmodSync(d.fd, a.mode);
    setXattrs(d.self, d.rel, this.xattrsToSet(d.rel, a));
    this.times.push([d.rel, a.mtimeNs]);
  }

  /**
   * The xattrs of `a` to set on `rel`: without root, `trusted.*` and `security.*` (which need
   * it) are left out; with `unprivileged`, file capabilities too. Each leaves a `leftOut` line.
   */
  private xattrsToSet(rel: string, a: EntryAttrs): Record<string, string> | undefined {
    const { isRoot, opts } = this;
    if (!a.xattrs || (isRoot && !opts.unprivileged)) return a.xattrs;
    const out: Record<string, string> = {};
    let cap = false;
    let rooted = false;
    for (const [k, v] of Object.entries(a.xattrs)) {
      if (opts.unprivileged && isPrivilegeXattr(k)) cap = true;
      else if (!isRoot && !k.startsWith('user.') && !k.startsWith('system.')) rooted = true;
      else out[k] = v;
    }
    if (cap) this.leftOut.push({ path: rel, reason: LEFT_OUT_CAPABILITY });
    if (rooted) this.leftOut.push({ path: rel, reason: LEFT_OUT_ROOT_XATTRS });
    return out;
  }

  private async writeFile(d: DirFd, e: FileEntry): Promise<void> {
    const body = e.extents ? this.reader.readData(e) : this.reader.readFile(e); // before any await: a read window pairs files in walk order
    const fh = await open(d.path(e.name), fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600).catch((err) => {
      throw createError(d, e.name, err);
    });
    const rel = d.childRel(e.name);
    try {
      // a sparse file (tree v3): only its data extents are written, its holes stay unallocated
      const pos = e.extents ? await writeExtents(fh, body, e.extents, e.size) : await writeDense(fh, body);
      if (pos !== e.size) throw new AwcError('E_INTEGRITY', `${rel}: content has ${pos} bytes, the tree says ${e.size}`);
      await fh.truncate(e.size); // extends over a trailing hole
      // chown first (it clears setuid/setgid bits and file capabilities), then chmod, then xattrs
      if (this.isRoot) await fh.chown(e.uid, e.gid);
      await fh.chmod(this.safeMode(rel, e.mode));
      setXattrs(fdPath(fh.fd), rel, this.xattrsToSet(rel, e));
    } finally {
      await fh.close();
    }
    this.times.push([rel, e.mtimeNs]);
    this.counts.files++;
    this.counts.bytes += e.size;
    this.opts.onProgress?.({ ...this.counts });
  }

  /** Starts a file write when a slot is free; returns (boxed) its completion. */
  private async submit(fn: () => Promise<void>): Promise<Started> {
    while (this.running >= this.limit) await new Promise<void>((r) => this.waiters.push(r));
    if (this.failure !== undefined) throw this.failure;
    this.running++;
    const done = fn().finally(() => {
      this.running--;
      this.waiters.shift()?.();
    });
    done.catch((err) => {
      this.failure ??= err;
    });
    return { done };
  }

  /** Writes the entries of `tree` into `d`; returns the writes still under way there. */
  private async walk(tree: Digest, d: DirFd): Promise<Promise<void>[]> {
    const t = await this.reader.readTree(tree);
    const pending: Promise<void>[] = [];
    // On a failure, what was started in this directory settles before its descriptor may be closed.
    try {
      for (const e of t.entries) {
        const started = await this.writeEntry(d, e);
        if (started) pending.push(started.done);
      }
    } catch (err) {
      await Promise.allSettled(pending);
      throw err;
    }
    return pending;
  }

  /** Writes the entry `e` into `d`: done here, or started (a directory's contents, a file, a hardlink to a file still being written). */
  private async writeEntry(d: DirFd, e: Entry): Promise<Started | undefined> {
    const rel = d.childRel(e.name);
    switch (e.type) {
      case 'dir':
        return this.writeDir(d, e);
      case 'file': {
        const started = await this.submit(() => this.writeFile(d, e));
        this.exported.set(rel, started.done);
        return started;
      }
      case 'hardlink':
        return { done: this.linkHard(d, e, rel) };
      case 'symlink':
        await symlink(fsPath(e.target), d.path(e.name)).catch((err) => {
          throw createError(d, e.name, err);
        });
        this.symlinks.add(rel);
        if (this.isRoot) await lchown(d.path(e.name), e.uid, e.gid);
        this.times.push([rel, e.mtimeNs]);
        return undefined;
      case 'fifo':
      case 'chardev':
      case 'blockdev':
        if (this.opts.unprivileged && e.type !== 'fifo') {
          this.leftOut.push({ path: rel, reason: LEFT_OUT_DEVICE });
          return undefined;
        }
        await makeSpecial(d, e, this.isRoot);
        await applySpecialAttrs(d, { ...e, mode: this.safeMode(rel, e.mode), xattrs: this.xattrsToSet(rel, e) }, this.isRoot);
        this.times.push([rel, e.mtimeNs]);
        return undefined;
      default:
        throw new AwcError('E_FORMAT', `${rel}: unknown entry type ${JSON.stringify((e as { type: unknown }).type)}`);
    }
  }

  /** Makes the directory `e` in `d` and walks it; its attributes are set once every write in it has settled. */
  private async writeDir(d: DirFd, e: DirEntry): Promise<Started> {
    let child: DirFd;
    try {
      child = d.mkdirOpen(e.name, 0o700);
    } catch (err) {
      throw err instanceof AwcError ? err : createError(d, e.name, err);
    }
    let inner: Promise<void>[];
    try {
      inner = await this.walk(e.tree, child);
    } catch (err) {
      child.close();
      throw err;
    }
    // the directory's descriptor stays open until every write in it has settled, failed ones included
    const done = Promise.allSettled(inner)
      .then((rs) => {
        const failed = rs.find((r) => r.status === 'rejected');
        if (failed) throw failed.reason;
        this.applyDirAttrs(child, e);
      })
      .finally(() => child.close());
    done.catch(() => undefined);
    return { done };
  }

  /**
   * Links the hardlink `e` in `d` (at `rel`) to its target once that file is written.
   * @throws E_PATH_TRAVERSAL (a target through a symlink, absolute, or with `.`/`..`), E_FORMAT (not an earlier regular file)
   */
  private linkHard(d: DirFd, e: HardlinkEntry, rel: string): Promise<void> {
    const first = this.exported.get(e.target);
    if (!first) {
      const parts = e.target.split('/');
      const escapes =
        e.target.startsWith('/') ||
        parts.includes('..') ||
        parts.includes('.') ||
        parts.some((_, i) => this.symlinks.has(parts.slice(0, i + 1).join('/')));
      throw new AwcError(
        escapes ? 'E_PATH_TRAVERSAL' : 'E_FORMAT',
        `hardlink ${rel} names ${JSON.stringify(e.target)}, which is not an earlier regular file of the snapshot`,
      );
    }
    const done = first.then(async () => {
      const cut = e.target.lastIndexOf('/');
      const from = this.top.openRel(cut < 0 ? '' : e.target.slice(0, cut));
      try {
        await link(from.path(e.target.slice(cut + 1)), d.path(e.name));
      } catch (err) {
        throw createError(d, e.name, err);
      } finally {
        from.close();
      }
    });
    done.catch(() => undefined);
    return done;
  }
}

/** Sets `xattrs` (name → base64) on the object at `objPath` (a descriptor path); `rel` names it in errors. */
function setXattrs(objPath: string, rel: string, xattrs: Record<string, string> | undefined): void {
  for (const [name, b64] of Object.entries(xattrs ?? {})) {
    if (name.startsWith('trusted.overlay.')) throw new AwcError('E_FORMAT', `${rel}: trees never carry trusted.overlay.* xattrs`);
    try {
      xattr().setAttributeSync(objPath, name, Buffer.from(b64, 'base64'));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTSUP' || code === 'EOPNOTSUPP')
        throw new AwcError('E_UNSUPPORTED', `${rel}: the target file system does not support xattr ${name}`, { cause: err });
      throw toAwcError(err);
    }
  }
}

/** Creates a fifo (`mkfifo`) or, as root, a device node (`mknod`) in `d`, by its descriptor (the tool gets it as fd 3). */
async function makeSpecial(d: DirFd, e: Extract<Entry, { type: 'fifo' | 'chardev' | 'blockdev' }>, isRoot: boolean): Promise<void> {
  const rel = d.childRel(e.name);
  if (e.type !== 'fifo' && !isRoot) throw new AwcError('E_PERMISSION', `${rel}: creating device nodes needs root`);
  if (d.lstat(e.name)) throw createError(d, e.name, Object.assign(new Error('exists'), { code: 'EEXIST' }));
  // the tools take names as UTF-8 arguments: a raw name is made under a plain one, then linked in place (link never replaces)
  const made = hasEscape(e.name) ? `.awc-node-${randomBytes(6).toString('hex')}` : e.name;
  const at = `/proc/self/fd/3/${made}`;
  const [cmd, args] =
    e.type === 'fifo'
      ? ['mkfifo', ['-m', '600', '--', at]]
      : [
          'mknod',
          ['-m', '600', '--', at, e.type === 'chardev' ? 'c' : 'b', String(splitDev(e.rdev).major), String(splitDev(e.rdev).minor)],
        ];
  const r = await runWithDir(cmd as string, args as string[], d);
  if (!r) throw new AwcError('E_UNSUPPORTED', `${cmd} is not installed: cannot create ${rel}`);
  if (r.code === 0) {
    if (made !== e.name) {
      try {
        fs.linkSync(d.path(made), d.path(e.name));
      } catch (err) {
        throw createError(d, e.name, err);
      } finally {
        fs.rmSync(d.path(made), { force: true });
      }
    }
    return;
  }
  if (/exists/i.test(r.stderr)) throw createError(d, e.name, Object.assign(new Error(r.stderr), { code: 'EEXIST' }));
  if (/permission|not permitted/i.test(r.stderr)) throw new AwcError('E_PERMISSION', `${rel}: ${r.stderr.trim()}`);
  throw new AwcError('E_INTERNAL', `${cmd} failed for ${rel}: ${r.stderr.trim() || `exit ${r.code}`}`);
}

/** Owner, xattrs and mode of a fifo or device node just made, through an O_PATH descriptor check (never opened for I/O). */
async function applySpecialAttrs(d: DirFd, e: EntryAttrs & { name: string }, isRoot: boolean): Promise<void> {
  const p = d.path(e.name);
  const rel = d.childRel(e.name);
  const st = d.lstat(e.name);
  if (!st || st.isSymbolicLink())
    throw new AwcError('E_PATH_TRAVERSAL', `refusing to write through ${rel}: it is no longer the node just made`);
  if (isRoot) await lchown(p, e.uid, e.gid);
  fs.chmodSync(p, e.mode);
  d.withObject(e.name, (obj) => setXattrs(obj, rel, e.xattrs));
}
