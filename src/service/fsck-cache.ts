import { constants, type Dirent } from 'node:fs';
import { open, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { sha256, type Digest } from '../core/digest.js';
import { toAwcError } from '../core/errors.js';
import type { FsckProblem } from './fsck-types.js';

const HEX2 = /^[0-9a-f]{2}$/;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * Reads every file of this host's chunk cache (`dir`, the layout of src/host/chunk-files.ts:
 * `<aa>/<64 hex>`) and checks that it holds the chunk its name gives (SHA-256 of its bytes).
 * Never follows a symlink (O_NOFOLLOW) and opens only regular files; temporary files of a
 * writer are skipped. A file that fails is a `cache-corrupt` problem; with `drop` it is
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
    for (const f of await readdir(join(dir, sub.name), { withFileTypes: true })) {
      if (!f.isFile() || !HEX64.test(f.name) || !f.name.startsWith(sub.name)) continue;
      const path = join(dir, sub.name, f.name);
      const digest: Digest = `sha256:${f.name}`;
      let bytes: Buffer;
      try {
        const h = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
        try {
          bytes = await h.readFile();
        } finally {
          await h.close();
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // evicted meanwhile
        throw toAwcError(err);
      }
      files++;
      if (sha256(bytes) === digest) continue;
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
