import { createHash } from 'node:crypto';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { digestHex, type Digest } from '../../core/digest.js';
import { mkdirPrivate, replaceFilePrivate } from '../../core/private-fs.js';
import type { CapturePolicy } from './capture-policy.js';
import type { StoredClassCounts } from './class-delta.js';

const HEX64 = /^[0-9a-f]{64}\.json$/;

/** One cached file: the counts of a root under the policy named by `key`. */
interface CachedCounts {
  v: 1;
  key: string;
  classes: StoredClassCounts;
}

/**
 * What names a policy for class counts: a digest of its `.awc.json` configuration (the
 * options decide what is stored, not the class of what is). Two roots' counts combine only
 * under the same key.
 */
export function policyKey(policy: CapturePolicy): string {
  const text = JSON.stringify({ v: 1, config: policy.config });
  return createHash('sha256').update(text).digest('hex').slice(0, 32);
}

/**
 * The per-class counts of snapshot roots on this host, so a checkpoint counts only what
 * changed since its head (diffClasses) instead of walking the whole tree:
 * `<dir>/<root hex>.json` (0600 in a 0700 directory; host-local, not a durable format).
 * A file that is missing, unreadable or made under another policy is a miss. A write
 * that fails (a full or read-only disk) is dropped: the next checkpoint counts in full.
 * Files of roots that are no snapshot any more go in the host sweep ({@link sweep}).
 */
export class ClassCountCache {
  constructor(private readonly dir: string) {}

  /** The counts of `root` under policy `key`, or undefined. Never throws. */
  async get(root: Digest, key: string): Promise<StoredClassCounts | undefined> {
    try {
      const c = JSON.parse(await readFile(this.fileOf(root), 'utf8')) as CachedCounts;
      return c.v === 1 && c.key === key ? c.classes : undefined;
    } catch {
      return undefined;
    }
  }

  /** Records the counts of `root` under policy `key` (replacing the file atomically). Never throws. */
  async put(root: Digest, key: string, classes: StoredClassCounts): Promise<void> {
    const c: CachedCounts = { v: 1, key, classes };
    try {
      await mkdirPrivate(this.dir);
      await replaceFilePrivate(this.fileOf(root), JSON.stringify(c));
    } catch {
      // a cache: the next count walks in full
    }
  }

  /**
   * Removes the files of roots not in `liveRoots()` (every snapshot root of the catalog, read
   * after the directory is listed, so a file written after a commit is never taken for a
   * dead root's) and leftovers of interrupted writes. Returns how many it removed (or would,
   * in a dry run). @throws what liveRoots throws
   */
  async sweep(liveRoots: () => Promise<ReadonlySet<Digest>>, dryRun = false): Promise<number> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return 0;
    }
    const live = new Set([...(await liveRoots())].map((r) => `${digestHex(r)}.json`));
    let n = 0;
    for (const name of names) {
      if (HEX64.test(name) && live.has(name)) continue;
      n++;
      if (!dryRun) await rm(join(this.dir, name), { force: true, recursive: true });
    }
    return n;
  }

  private fileOf(root: Digest): string {
    return join(this.dir, `${digestHex(root)}.json`);
  }
}
