import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { AwcError, toAwcError } from './errors.js';
import { fsPath, nameFromBytes } from './raw-name.js';

/**
 * Walking and writing directory trees through directory descriptors, never by a path that
 * could be swapped (why: docs/decisions.md "Trees are walked through directory descriptors").
 *
 * Node has no openat(2), but on Linux `/proc/self/fd/<N>/<name>` resolves `<name>` inside
 * the directory object descriptor N refers to (the magic link jumps to the object, not to
 * a path), so `open`, `lstat`, `readlink`, `readdir`, `mkdir`, `symlink`, `link`, `rename`,
 * `lutimes` and `lchown` on it act like their `*at(N, name, …)` forms, and (as for any
 * path) they do not follow a last component that is a symlink. Every component is opened
 * relative to its parent's descriptor with O_NOFOLLOW; every opened object is fstat'ed and
 * its device, inode and type compared with what the walk's lstat saw, so a directory
 * swapped for a symlink (or anything else) between the lstat and the open is noticed and
 * the entry taken as it is now. Paths stay short, so trees deeper than PATH_MAX work.
 */

/** O_PATH (Linux, every architecture Node runs on): a descriptor that names an object without opening it. */
export const O_PATH = 0o10000000;
const C = fs.constants;
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
/** Opens a regular file for reading once its O_PATH descriptor was checked (a fifo must not block, a tty must not become ours). */
const READ_FLAGS = C.O_RDONLY | C.O_NONBLOCK | C.O_NOCTTY;
/** How often an entry is looked at again when the object opened is not the one lstat saw. */
const OPEN_TRIES = 5;

/** What `DirFd.open` found at a name: the checked object and its fstat (bigint). */
export type Found =
  | { type: 'dir'; st: BigIntStats; dir: DirFd }
  | { type: 'file'; st: BigIntStats; fd: number }
  | { type: 'symlink'; st: BigIntStats; target: Buffer }
  | { type: 'other'; st: BigIntStats };

/**
 * Test-only injection points: `beforeOpen(rel)` runs between a walk's lstat of an entry and
 * its open (`rel` is the slash path from the walk's root); `export --dir` calls it right
 * after it created a directory and before it opens it. `onLstat(rel)` runs at each
 * `DirFd.lstat` of a child. Production code never sets them.
 */
export const dirFdTestHooks: { beforeOpen?: (rel: string) => void; onLstat?: (rel: string) => void } = {};

/** The magic path of descriptor `fd` (for fs-xattr and other path-only APIs): the object itself, never a name. */
export function fdPath(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

/** An open directory and its slash path from the walk's root ('' for the root). Close it when done. */
export class DirFd {
  private closed = false;

  private constructor(
    /** The directory's descriptor (O_RDONLY|O_DIRECTORY, or O_PATH for `openRel`). */
    readonly fd: number,
    /** Slash path from the walk's root; '' for the root itself. */
    readonly rel: string,
  ) {}

  /**
   * Opens the root of a walk. The path is the caller's own (its components are followed,
   * the last one is not unless `follow`).
   * @returns the directory and its fstat (bigint), or undefined when nothing is there
   * @throws AwcError E_SOURCE_NOT_FOUND when it is not a directory (or a symlink without `follow`); E_PERMISSION
   */
  static openRoot(path: string, opts: { follow?: boolean } = {}): { dir: DirFd; st: BigIntStats } | undefined {
    let fd: number;
    try {
      fd = fs.openSync(path, opts.follow ? C.O_RDONLY | C.O_DIRECTORY : DIR_FLAGS);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return undefined;
      if (code === 'ENOTDIR' || code === 'ELOOP') throw new AwcError('E_SOURCE_NOT_FOUND', `not a directory: ${path}`, { cause: err });
      throw toAwcError(err);
    }
    return { dir: new DirFd(fd, ''), st: fs.fstatSync(fd, { bigint: true }) };
  }

  /** The path that names `name` inside this directory object (`/proc/self/fd/<fd>/<name>`). */
  path(name: string): string | Buffer {
    return fsPath(`/proc/self/fd/${this.fd}/${name}`);
  }

  /**
   * Runs `fn` with a path of the child object `name` itself (`/proc/self/fd/<n>` of an
   * O_PATH|O_NOFOLLOW descriptor, closed after): for path-only APIs that take strings (fs-xattr)
   * when the name holds raw bytes, and never through a symlink put there meanwhile.
   * @throws AwcError what opening it throws (E_NOT_FOUND when it is gone)
   */
  withObject<T>(name: string, fn: (objPath: string) => T): T {
    let fd: number;
    try {
      fd = fs.openSync(this.path(name), O_PATH | C.O_NOFOLLOW);
    } catch (err) {
      throw this.named(err, name);
    }
    try {
      return fn(fdPath(fd));
    } finally {
      fs.closeSync(fd);
    }
  }

  /** The path of the directory object itself (for fs-xattr). */
  get self(): string {
    return fdPath(this.fd);
  }

  /** Slash path of a child from the walk's root. */
  childRel(name: string): string {
    return this.rel === '' ? name : `${this.rel}/${name}`;
  }

  /** Names of the entries (raw bytes), sorted by bytes; '.' and '..' excluded. @throws AwcError (E_PERMISSION, …) */
  list(): Buffer[] {
    try {
      return fs.readdirSync(this.self, { encoding: 'buffer' }).sort(Buffer.compare);
    } catch (err) {
      throw toAwcError(err);
    }
  }

  /**
   * Entries with their type as the directory reports it (d_type; Node lstats the entries a
   * file system leaves untyped), sorted by name bytes: for walks that look only at some
   * types, without an lstat per entry. A symlink is `symlink`, never its target's type.
   * @throws AwcError (E_PERMISSION, …)
   */
  listTyped(): { name: Buffer; type: 'dir' | 'file' | 'symlink' | 'other' }[] {
    try {
      return fs
        .readdirSync(this.self, { encoding: 'buffer', withFileTypes: true })
        .map((d) => ({
          name: d.name,
          type: d.isDirectory()
            ? ('dir' as const)
            : d.isFile()
              ? ('file' as const)
              : d.isSymbolicLink()
                ? ('symlink' as const)
                : ('other' as const),
        }))
        .sort((a, b) => Buffer.compare(a.name, b.name));
    } catch (err) {
      throw toAwcError(err);
    }
  }

  /** lstat (bigint) of a child, undefined when it does not exist. */
  lstat(name: string): BigIntStats | undefined {
    dirFdTestHooks.onLstat?.(this.childRel(name));
    try {
      return fs.lstatSync(this.path(name), { bigint: true, throwIfNoEntry: false });
    } catch (err) {
      throw toAwcError(err);
    }
  }

  /**
   * Opens the child `name` that an lstat found as `seen` (the caller's lstat of it, or
   * undefined to lstat it here), without following a symlink, and
   * checks that the object opened is the one seen (device, inode, type). Directories are
   * opened (a new DirFd), regular files opened for reading (a descriptor: close it), symlinks
   * read (their target as bytes); other types are not opened. When the object is not the
   * one seen (swapped, renamed, replaced) the entry is looked at again and taken as it is
   * now. Runs `dirFdTestHooks.beforeOpen` before each open.
   * @returns what is there now, or undefined when it vanished
   * @throws AwcError E_CHANGED_DURING_READ (retryable) when it keeps changing (5 looks), E_PERMISSION
   */
  open(name: string, seen: BigIntStats | undefined): Found | undefined {
    const rel = this.childRel(name);
    let st = seen;
    for (let i = 0; i < OPEN_TRIES; i++, st = undefined) {
      st ??= this.lstat(name);
      if (!st) return undefined;
      if (!st.isDirectory() && !st.isFile() && !st.isSymbolicLink()) return { type: 'other', st };
      dirFdTestHooks.beforeOpen?.(rel);
      const found = st.isDirectory() ? this.tryDir(name, st, rel) : st.isFile() ? this.tryFile(name, st) : this.tryLink(name, st);
      if (found) return found;
    }
    throw new AwcError('E_CHANGED_DURING_READ', `${rel} kept changing while it was read`, { details: { path: rel } });
  }

  private tryDir(name: string, seen: BigIntStats, rel: string): Found | undefined {
    const fd = openOrUndefined(this.path(name), DIR_FLAGS);
    if (fd === undefined) return undefined;
    const st = fs.fstatSync(fd, { bigint: true });
    if (!st.isDirectory() || !same(st, seen)) {
      fs.closeSync(fd);
      return undefined;
    }
    return { type: 'dir', st, dir: new DirFd(fd, rel) };
  }

  private tryFile(name: string, seen: BigIntStats): Found | undefined {
    // O_PATH first: a device or fifo swapped in is never opened for real.
    const pfd = openOrUndefined(this.path(name), O_PATH | C.O_NOFOLLOW);
    if (pfd === undefined) return undefined;
    try {
      const st = fs.fstatSync(pfd, { bigint: true });
      if (!st.isFile() || !same(st, seen)) return undefined;
      const fd = openOrUndefined(fdPath(pfd), READ_FLAGS);
      return fd === undefined ? undefined : { type: 'file', st, fd };
    } finally {
      fs.closeSync(pfd);
    }
  }

  private tryLink(name: string, seen: BigIntStats): Found | undefined {
    let target: Buffer;
    try {
      target = fs.readlinkSync(this.path(name), { encoding: 'buffer' });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EINVAL') return undefined; // gone, or no longer a symlink
      throw toAwcError(err);
    }
    const st = this.lstat(name);
    if (!st || !st.isSymbolicLink() || !same(st, seen)) return undefined;
    return { type: 'symlink', st, target };
  }

  /**
   * Opens a subdirectory by its slash path below this one, one component at a time with
   * O_PATH|O_DIRECTORY|O_NOFOLLOW (no read permission needed; for `path()` lookups and
   * `link`/`lutimes`/`lchown`, not for `list()`). '' opens this directory again.
   * @throws AwcError E_PATH_TRAVERSAL when a component is a symlink, '..', or not a directory
   */
  openRel(relPath: string): DirFd {
    const parts = relPath === '' ? [] : relPath.split('/');
    let cur = fs.openSync(this.self, O_PATH | C.O_DIRECTORY);
    try {
      for (const p of parts) {
        if (p === '' || p === '.' || p === '..') throw new AwcError('E_PATH_TRAVERSAL', `${relPath}: not a plain relative path`);
        let next: number;
        try {
          next = fs.openSync(fsPath(`/proc/self/fd/${cur}/${p}`), O_PATH | C.O_DIRECTORY | C.O_NOFOLLOW);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOTDIR' || code === 'ELOOP' || code === 'ENOENT')
            throw new AwcError('E_PATH_TRAVERSAL', `${relPath}: ${p} is not a directory of the tree`, { cause: err });
          throw toAwcError(err);
        }
        fs.closeSync(cur);
        cur = next;
      }
    } catch (err) {
      fs.closeSync(cur);
      throw err;
    }
    return new DirFd(cur, [this.rel, relPath].filter((x) => x !== '').join('/'));
  }

  /**
   * Creates the subdirectory `name` (mode `mode`, never through an existing name) and opens
   * it, checking that what it opens is a directory (a symlink put there meanwhile is refused).
   * `rel` is the new directory's path from the walk's root (default: the child's; '' starts a new walk).
   * @throws the mkdir error as is (EEXIST, …); AwcError E_PATH_TRAVERSAL when the new name is not a directory when opened
   */
  mkdirOpen(name: string, mode: number, rel = this.childRel(name)): DirFd {
    fs.mkdirSync(this.path(name), mode);
    dirFdTestHooks.beforeOpen?.(rel);
    const fd = openOrUndefined(this.path(name), DIR_FLAGS);
    if (fd === undefined)
      throw new AwcError('E_PATH_TRAVERSAL', `refusing to write through ${rel}: it is no longer the directory just created`);
    return new DirFd(fd, rel);
  }

  /**
   * Removes the child `name` and everything below it, through descriptors (a symlink is
   * removed, never followed). Missing is fine. With `dev`, it never crosses a file-system
   * boundary: an entry whose st_dev differs (a mount point) stops the removal.
   * @throws AwcError E_TARGET_BUSY (an entry on another file system, with `dev`); others on other failures
   */
  removeTree(name: string, opts: { dev?: bigint } = {}): void {
    const st = this.lstat(name);
    if (!st) return;
    if (opts.dev !== undefined && st.dev !== opts.dev) {
      throw new AwcError('E_TARGET_BUSY', `${this.childRel(name)} is on another file system (a mount point): not removed`, {
        details: { path: this.childRel(name) },
      });
    }
    if (st.isDirectory()) {
      const fd = openOrUndefined(this.path(name), DIR_FLAGS);
      if (fd !== undefined) {
        const sub = new DirFd(fd, this.childRel(name));
        try {
          if (opts.dev !== undefined && fs.fstatSync(fd, { bigint: true }).dev !== opts.dev) {
            throw new AwcError('E_TARGET_BUSY', `${sub.rel} is on another file system (a mount point): not removed`, {
              details: { path: sub.rel },
            });
          }
          for (const n of sub.list()) sub.removeTree(nameFromBytes(n), opts);
        } finally {
          sub.close();
        }
        try {
          fs.rmdirSync(this.path(name));
          return;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
          if ((err as NodeJS.ErrnoException).code !== 'ENOTDIR') throw this.named(err, name);
        }
      }
    }
    try {
      fs.unlinkSync(this.path(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw this.named(err, name);
    }
  }

  /** `err` as an AwcError whose message names the child by its slash path from the walk's root, not by its descriptor path. */
  private named(err: unknown, name: string): AwcError {
    const e = toAwcError(err);
    const p = this.path(name);
    const message = e.message.split(typeof p === 'string' ? p : p.toString('utf8')).join(this.childRel(name));
    return message === e.message ? e : new AwcError(e.code, message, { hint: e.hint, details: e.details, cause: err });
  }

  /** Closes the descriptor (idempotent). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    fs.closeSync(this.fd);
  }
}

/** Same object: device and inode. */
function same(a: BigIntStats, b: BigIntStats): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

/** Opens with `flags`; undefined when the name is gone or is not what the flags accept (a symlink, not a directory). */
function openOrUndefined(path: fs.PathLike, flags: number): number | undefined {
  try {
    return fs.openSync(path, flags);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP' || code === 'ENXIO') return undefined;
    throw toAwcError(err);
  }
}
