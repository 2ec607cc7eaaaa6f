import { closeSync, openSync, readSync, utimes } from 'node:fs';
import { chmod, lstat, readdir, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Digest } from '../../core/digest.js';
import { toAwcError } from '../../core/errors.js';
import { mkdirPrivate, PRIVATE_DIR_MODE } from '../../core/private-fs.js';

const HEX64 = /^[0-9a-f]{64}$/;
const HEX2 = /^[0-9a-f]{2}$/;
const TMP_PREFIX = '.tmp-';

/** A chunk file found by {@link ChunkFiles.scan}: size in bytes, mtime in ms. */
export interface FoundChunkFile {
  digest: Digest;
  size: number;
  mtimeMs: number;
}

/**
 * The on-disk format of the host chunk cache: the chunk with digest `sha256:<hex>` is the
 * file `<dir>/<hex[0..2]>/<hex>` holding its raw bytes (mode 0600, directories 0700). New
 * files are written as `<dir>/<aa>/.tmp-<pid>-<n>` and renamed into place; leftovers of a
 * crash are removed by {@link scan}. Files whose names are not chunk names are left alone.
 * Nothing here verifies bytes or keeps a budget (ChunkCache does).
 */
export class ChunkFiles {
  private readonly dirSlash: string;
  /** The `<aa>` directories known to exist. */
  private readonly madeDirs = new Set<string>();
  private tmpSeq = 0;

  /** @param dir the cache directory (one process at a time). */
  constructor(readonly dir: string) {
    this.dirSlash = dir.endsWith('/') ? dir : `${dir}/`;
  }

  /**
   * Creates the directory if needed (0700; an existing one is made 0700 too), removes temporary leftovers, and lists the chunk files
   * there (in no particular order).
   * @throws E_PERMISSION / E_INTERNAL when the directory cannot be created or read.
   */
  async scan(): Promise<FoundChunkFile[]> {
    const found: FoundChunkFile[] = [];
    try {
      await mkdirPrivate(this.dir);
      // the directory itself too (a configured cacheDir that existed, made 0755): 0700, never through a symlink
      const st = await lstat(this.dir);
      if (st.isDirectory() && (st.mode & 0o7777) !== PRIVATE_DIR_MODE) await chmod(this.dir, PRIVATE_DIR_MODE);
      for (const aa of await readdir(this.dir)) {
        if (!HEX2.test(aa)) continue;
        const sub = join(this.dir, aa);
        let names: string[];
        try {
          names = await readdir(sub);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') continue;
          throw err;
        }
        this.madeDirs.add(aa);
        await Promise.all(
          names.map(async (name) => {
            const path = join(sub, name);
            if (name.startsWith(TMP_PREFIX)) {
              await unlink(path).catch(() => undefined);
              return;
            }
            if (!HEX64.test(name) || name.slice(0, 2) !== aa) return;
            const st = await stat(path);
            if (st.isFile()) found.push({ digest: `sha256:${name}`, size: st.size, mtimeMs: st.mtimeMs });
          }),
        );
      }
    } catch (err) {
      throw toAwcError(err);
    }
    return found;
  }

  /** Path of a chunk's file: `<dir>/<hex[0..2]>/<hex>`. */
  pathOf(digest: Digest): string {
    const hex = digest.slice(7);
    return `${this.dirSlash}${hex.slice(0, 2)}/${hex}`;
  }

  /**
   * Reads a chunk file of `size` bytes synchronously (not verified).
   * @returns its bytes; fewer than `size` when the file is shorter.
   * @throws the file system's error (ENOENT when the file is gone).
   */
  readSync(digest: Digest, size: number): Buffer {
    const fd = openSync(this.pathOf(digest), 'r');
    let got = 0;
    try {
      const data = Buffer.allocUnsafe(size);
      while (got < size) {
        const n = readSync(fd, data, got, size - got, got);
        if (n === 0) break;
        got += n;
      }
      return got === size ? data : data.subarray(0, got);
    } finally {
      closeSync(fd);
    }
  }

  /** Sets a chunk file's mtime to `nowMs` in the background (LRU order across restarts); `onError` for failures other than ENOENT. */
  touch(digest: Digest, nowMs: number, onError: (err: NodeJS.ErrnoException) => void): void {
    const t = nowMs / 1000;
    utimes(this.pathOf(digest), t, t, (err) => {
      if (err && err.code !== 'ENOENT') onError(err);
    });
  }

  /**
   * Writes a chunk file: a temporary file (0600, created exclusively) renamed into place.
   * @throws (rejects) E_PERMISSION / E_INTERNAL / … (toAwcError) when it fails; nothing is left behind.
   */
  async write(digest: Digest, data: Buffer): Promise<void> {
    const hex = digest.slice(7);
    const aa = hex.slice(0, 2);
    const sub = join(this.dir, aa);
    const tmp = join(sub, `${TMP_PREFIX}${process.pid}-${++this.tmpSeq}`);
    try {
      if (!this.madeDirs.has(aa)) {
        await mkdirPrivate(sub);
        this.madeDirs.add(aa);
      }
      await writeFile(tmp, data, { mode: 0o600, flag: 'wx' });
      await rename(tmp, join(sub, hex));
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw toAwcError(err);
    }
  }

  /** Unlinks a chunk file; resolves when done, whatever happened (ENOENT or worse: nothing more to do). */
  unlink(digest: Digest): Promise<void> {
    return unlink(this.pathOf(digest)).then(
      () => undefined,
      () => undefined,
    );
  }
}
