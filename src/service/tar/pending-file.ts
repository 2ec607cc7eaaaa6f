import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { constants as fsc, type WriteStream } from 'node:fs';
import { link, open, rename, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { AwcError, toAwcError } from '../../core/errors.js';

/**
 * A file written under a temporary name beside its target, that appears at the target only
 * once it is complete and durable.
 *
 * - `create(target)` opens `<dir of target>/.awc-tmp-<random>` with `O_EXCL|O_NOFOLLOW`,
 *   mode 0600 (never through a symlink, never readable by other users while written).
 * - `commit()` fsyncs the file, hard-links it to the target (a name that appeared meanwhile,
 *   even a dangling symlink, is never replaced: E_TARGET_EXISTS; on file systems without hard
 *   links it is renamed instead), removes the temporary name and fsyncs the directory.
 * - `abort()` removes what was written; it never throws.
 */
export class PendingFile {
  /** Temporary paths of the files not yet committed or aborted in this process. */
  private static readonly live = new Set<string>();
  private done = false;
  private closed = false;

  /**
   * Removes every temporary file not yet committed or aborted, synchronously: for a signal
   * handler (Ctrl-C during an export) that exits right after. Never throws.
   */
  static removeAllSync(): void {
    for (const tmp of PendingFile.live) {
      try {
        fs.unlinkSync(tmp);
      } catch {
        // gone already
      }
    }
    PendingFile.live.clear();
  }

  private constructor(
    /** The final path. */
    readonly target: string,
    /** The temporary path beside it. */
    readonly tmp: string,
    /** The descriptor (a plain fd: a FileHandle's close would wait for the stream made on it). */
    private readonly fd: number,
  ) {}

  /** Opens a new temporary file beside `target` (absolute path). @throws E_NO_SPACE, E_READ_ONLY, E_PERMISSION, E_NAME_TOO_LONG… (mapped errno) */
  static async create(target: string): Promise<PendingFile> {
    const tmp = join(dirname(target), `.awc-tmp-${randomBytes(8).toString('hex')}`);
    try {
      const fd = await promisify(fs.open)(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
      PendingFile.live.add(tmp);
      return new PendingFile(target, tmp, fd);
    } catch (err) {
      throw toAwcError(err);
    }
  }

  /** A write stream on the temporary file; it leaves the descriptor open for `commit`/`abort`. */
  stream(): WriteStream {
    return fs.createWriteStream('', { fd: this.fd, autoClose: false });
  }

  /** Makes the file durable and moves it to the target. @throws E_TARGET_EXISTS (the target exists), mapped errno errors (the file is removed then) */
  async commit(): Promise<void> {
    try {
      await promisify(fs.fsync)(this.fd);
      await this.close();
      try {
        await link(this.tmp, this.target);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EEXIST')
          throw new AwcError('E_TARGET_EXISTS', `${this.target} appeared while it was written`, {
            hint: 'Export to a new file name, or remove the file first.',
          });
        if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw err;
        await rename(this.tmp, this.target);
      }
      this.done = true;
      PendingFile.live.delete(this.tmp);
      await unlink(this.tmp).catch(() => undefined);
      await syncDir(dirname(this.target));
    } catch (err) {
      await this.abort();
      throw toAwcError(err);
    }
  }

  /** Closes and removes the temporary file (after a failure). Never throws. */
  async abort(): Promise<void> {
    await this.close().catch(() => undefined);
    if (!this.done) await unlink(this.tmp).catch(() => undefined);
    PendingFile.live.delete(this.tmp);
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await promisify(fs.close)(this.fd);
  }
}

/** fsyncs a directory (best effort: some file systems refuse it). */
async function syncDir(dir: string): Promise<void> {
  try {
    const fh = await open(dir, fsc.O_RDONLY | fsc.O_DIRECTORY);
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch {
    // the file itself is durable already
  }
}
