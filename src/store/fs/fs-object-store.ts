import { randomBytes } from 'node:crypto';
import { killPoint } from '../../core/kill-point.js';
import { constants as fsc } from 'node:fs';
import { link, lstat, open, opendir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join, sep } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { mkdirPrivate, PRIVATE_FILE_MODE } from '../../core/private-fs.js';
import type { ListedObject, ObjectStore } from '../object/object-store.js';

/**
 * The object store over a local directory (the embedded default). An object with key
 * `a/b/c` is the file `<root>/a/b/c`.
 *
 * - Directories are created 0700 and objects 0600 (whatever the umask): nobody but the
 *   owner reads the store.
 * - `put` is create-only and idempotent: the body is written to a temporary file in the
 *   target directory (`.tmp-<random>`), fsynced, then hard-linked into place (link fails
 *   when the name exists, so an existing object is never replaced; on file systems without
 *   hard links it is renamed instead), and the directory is fsynced.
 * - `get` with a range reads at the offset with one positioned read; a range past the end
 *   returns the bytes that exist (as S3 does), possibly none.
 * - Keys are `/`-separated relative paths of `[A-Za-z0-9._-]` segments; `.`/`..`/empty
 *   segments and names starting with `.tmp-` are refused with E_PATH_TRAVERSAL.
 */
export class FsObjectStore implements ObjectStore {
  /** @param root directory holding the objects (created on first put). */
  constructor(readonly root: string) {}

  /** Stores `body` (bytes) under `key` if absent; an existing object is left as is. @throws E_PATH_TRAVERSAL for a bad key, E_NO_SPACE / E_READ_ONLY / E_PERMISSION / E_IO on I/O errors. */
  async put(key: string, body: Uint8Array): Promise<void> {
    const path = this.path(key);
    if (await exists(path)) return;
    const dir = dirname(path);
    await mkdirPrivate(dir).catch((err) => {
      throw toAwcError(err);
    });
    const tmp = join(dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
    try {
      const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, PRIVATE_FILE_MODE);
      try {
        let off = 0;
        while (off < body.length) {
          const { bytesWritten } = await fh.write(body, off, body.length - off, off);
          off += bytesWritten;
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      killPoint('object.put.during'); // the body is on disk under its temporary name, not yet in place
      try {
        await link(tmp, path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EEXIST') return; // someone else stored it first: same key, same content
        if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw err;
        await rename(tmp, path);
      }
      await syncDir(dir);
    } catch (err) {
      throw toAwcError(err);
    } finally {
      await unlink(tmp).catch(() => undefined);
    }
  }

  /** Reads the object, or `range.length` bytes from `range.offset` (bytes; fewer past the end). @throws E_OBJECT_NOT_FOUND */
  async get(key: string, range?: { offset: number; length: number }): Promise<Buffer> {
    const path = this.path(key);
    let fh;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      throw notFound(err, key);
    }
    try {
      let offset = 0;
      let length: number;
      if (range) {
        if (!(range.offset >= 0) || !(range.length >= 0))
          throw new AwcError('E_INTERNAL', `bad range ${range.offset}+${range.length} for ${key}`);
        offset = range.offset;
        length = range.length;
      } else {
        length = (await fh.stat()).size;
      }
      const buf = Buffer.allocUnsafe(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await fh.read(buf, got, length - got, offset + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      return got === length ? buf : buf.subarray(0, got);
    } catch (err) {
      throw toAwcError(err);
    } finally {
      await fh.close();
    }
  }

  /** True when the object exists. */
  async has(key: string): Promise<boolean> {
    return exists(this.path(key));
  }

  /** Size in bytes. @throws E_OBJECT_NOT_FOUND */
  async size(key: string): Promise<number> {
    try {
      return (await stat(this.path(key))).size;
    } catch (err) {
      throw notFound(err, key);
    }
  }

  /** Removes the object (GC only); absent is not an error. */
  async delete(key: string): Promise<void> {
    try {
      await unlink(this.path(key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw toAwcError(err);
    }
  }

  /** Lists keys starting with `prefix` (any string, e.g. `packs/` or `packs/a`) with sizes in bytes and mtimes (ms), in no particular order. */
  async *list(prefix: string): AsyncIterable<ListedObject> {
    // Start at the deepest directory the prefix names fully.
    const cut = prefix.lastIndexOf('/');
    const startRel = cut < 0 ? '' : prefix.slice(0, cut);
    if (startRel !== '') checkKey(startRel);
    yield* this.walk(startRel, prefix);
  }

  /**
   * Removes the temporary files (`.tmp-…`) that a `put` killed midway left behind, when
   * their mtime is more than `olderThanMs` milliseconds ago (a younger one may belong to a
   * `put` still running), and never one named by a process of this host that is alive
   * (`.tmp-<pid>-…`: a `put` still running, whatever its age; with `olderThanMs` 0 a gc would
   * otherwise take the file a concurrent writer is about to link). Walks the whole store
   * without following symlinks.
   * @returns how many files were removed and their bytes. @throws E_PERMISSION / E_IO… on I/O errors
   */
  async sweepIncomplete(olderThanMs: number): Promise<{ removed: number; bytes: number }> {
    const before = Date.now() - olderThanMs;
    const out = { removed: 0, bytes: 0 };
    const sweep = async (dir: string): Promise<void> => {
      let entries;
      try {
        entries = await opendir(dir);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' || code === 'ENOTDIR') return;
        throw toAwcError(err);
      }
      for await (const d of entries) {
        const p = join(dir, d.name);
        if (d.isDirectory()) await sweep(p);
        else if (d.isFile() && d.name.startsWith('.tmp-') && !writerAlive(d.name)) {
          const st = await lstat(p).catch(() => undefined);
          if (!st?.isFile() || st.mtimeMs >= before) continue;
          await unlink(p).then(
            () => {
              out.removed++;
              out.bytes += st.size;
            },
            () => undefined, // removed meanwhile
          );
        }
      }
    };
    await sweep(this.root);
    return out;
  }

  private async *walk(rel: string, prefix: string): AsyncGenerator<ListedObject> {
    let dir;
    try {
      dir = await opendir(rel === '' ? this.root : join(this.root, rel));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw toAwcError(err);
    }
    for await (const d of dir) {
      if (d.name.startsWith('.tmp-')) continue;
      const key = rel === '' ? d.name : `${rel}/${d.name}`;
      if (d.isDirectory()) {
        // Descend only where keys under this directory can match the prefix.
        const k = `${key}/`;
        if (k.startsWith(prefix) || prefix.startsWith(k)) yield* this.walk(key, prefix);
      } else if (d.isFile() && key.startsWith(prefix)) {
        try {
          const st = await stat(join(this.root, key));
          yield { key, size: st.size, modifiedMs: st.mtimeMs };
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw toAwcError(err); // deleted meanwhile
        }
      }
    }
  }

  private path(key: string): string {
    checkKey(key);
    return join(this.root, ...key.split('/'));
  }
}

/** Whether the temporary file `name` (`.tmp-<pid>-<random>`) names a live process of this host (EPERM: alive, another user's). */
function writerAlive(name: string): boolean {
  const pid = Number(/^\.tmp-(\d+)-/.exec(name)?.[1]);
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** How old (ms) a temporary file must be before `sweepIncomplete` callers remove it by default: 1 hour (no `put` takes that long). */
export const TEMP_GRACE_MS = 60 * 60 * 1000;

const SEGMENT = /^[A-Za-z0-9._-]+$/;

function checkKey(key: string): void {
  const parts = key.split('/');
  for (const p of parts) {
    if (!SEGMENT.test(p) || p === '.' || p === '..' || p.startsWith('.tmp-')) {
      throw new AwcError('E_PATH_TRAVERSAL', `invalid object key ${JSON.stringify(key)}`);
    }
  }
  if (sep !== '/' && key.includes(sep)) throw new AwcError('E_PATH_TRAVERSAL', `invalid object key ${JSON.stringify(key)}`);
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw toAwcError(err);
  }
}

function notFound(err: unknown, key: string): AwcError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return new AwcError('E_OBJECT_NOT_FOUND', `object ${key} not found`, { cause: err });
  return toAwcError(err);
}

async function syncDir(dir: string): Promise<void> {
  try {
    const fh = await open(dir, 'r');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch {
    // Some file systems refuse fsync on directories; the file itself is already durable.
  }
}
