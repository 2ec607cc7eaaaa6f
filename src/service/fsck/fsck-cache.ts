import { constants, type Dirent } from 'node:fs';
import { open, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import type { Digest } from '../../core/digest.js';
import { toAwcError } from '../../core/errors.js';
import { MAX_BLOB_SIZE } from '../../store/pack/pack.js';
import type { FsckProblem } from './fsck-report.js';

const HEX2 = /^[0-9a-f]{2}$/;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * Reads every file of this host's chunk cache (`dir`, the layout of src/host/read-path/chunk-files.ts:
 * `<aa>/<64 hex>`) and checks that it holds the chunk its name gives (SHA-256 of its bytes).
 * Never follows a symlink (O_NOFOLLOW) and reads only regular files (checked on the open
 * file, which is opened without blocking: a fifo cannot hang it), in pieces (bounded memory,
 * however large a file); temporary files of a writer are skipped. A file that fails is a `cache-corrupt` problem; with `drop` it is
 * unlinked (the cache treats a missing file as a miss and fetches the chunk again). A missing
 * directory is an empty cache.
 * @returns how many files were read, and how many were dropped.
 * @throws E_PERMISSION / E_IO when the directory cannot be read
 */
export async function checkCacheFiles(dir: string, problems: FsckProblem[], drop: boolean): Promise<{ files: number; dropped: number }> {
  let files = 0;
  let dropped = 0;
  let subs: Dirent[];
  try {
    subs = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { files, dropped };
    throw toAwcError(err);
  }
  for (const sub of subs) {
    if (!sub.isDirectory() || !HEX2.test(sub.name)) continue;
    let names: Dirent[];
    try {
      names = await readdir(join(dir, sub.name), { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // emptied and removed meanwhile
      throw toAwcError(err);
    }
    for (const f of names) {
      if (!f.isFile() || !HEX64.test(f.name) || !f.name.startsWith(sub.name)) continue;
      const path = join(dir, sub.name, f.name);
      const digest: Digest = `sha256:${f.name}`;
      let got: Digest | undefined;
      try {
        got = await hashFile(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // evicted meanwhile
        throw toAwcError(err);
      }
      if (got === undefined) continue; // replaced by something other than a regular file meanwhile
      files++;
      if (got === digest) continue;
      problems.push({
        kind: 'cache-corrupt',
        code: 'E_INTEGRITY',
        message: `the chunk cache file ${path} does not hold chunk ${digest}`,
        key: path,
        digest,
        snapshots: [],
      });
      if (drop) {
        await unlink(path).catch(() => undefined);
        dropped++;
      }
    }
  }
  return { files, dropped };
}

/**
 * The SHA-256 of the regular file at `path`, read in pieces (bounded memory whatever its size);
 * undefined when it is not a regular file (opened without following a symlink and without
 * blocking, so a fifo swapped in after the listing cannot hang the check). A file longer than
 * MAX_BLOB_SIZE holds no chunk: its digest is not computed (`sha256:` of nothing is returned,
 * which matches no chunk name).
 * @throws the errno of open or read (ENOENT when it is gone)
 */
async function hashFile(path: string): Promise<Digest | undefined> {
  const h = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = await h.stat();
    if (!st.isFile()) return undefined;
    if (st.size > MAX_BLOB_SIZE) return 'sha256:';
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const { bytesRead } = await h.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      hash.update(buf.subarray(0, bytesRead));
    }
    return `sha256:${hash.digest('hex')}`;
  } finally {
    await h.close();
  }
}
