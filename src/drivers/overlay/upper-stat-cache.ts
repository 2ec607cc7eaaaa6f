import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { replaceFilePrivate } from '../../core/private-fs.js';
import type { Digest } from '../../core/digest.js';
import type { Extent } from '../../core/sparse.js';
import type { UpperStatCache, UpperStatEntry } from './upper-merge.js';

/** The upper stat cache of a workspace, in its host directory `dir` (see mergeUpper's `statCache`). */
const FILE = 'upper-cache.json';

/**
 * One entry as the file holds it (the format caches of earlier versions were written in):
 * [ino, size, mtimeNs, ctimeNs, content digest, [[chunk digest, chunk size], …], extents of a sparse file?].
 */
type StoredEntry = [string, string, string, string, Digest, [Digest, number][], Extent[]?];

/** The entry a stored row holds, or undefined when it is not of that shape (left out: it is only a cache). */
function entryOf(row: unknown): UpperStatEntry | undefined {
  if (!Array.isArray(row) || row.length < 6 || row.length > 7 || !Array.isArray(row[5])) return undefined;
  if (!row.slice(0, 5).every((x) => typeof x === 'string')) return undefined;
  const [ino, size, mtimeNs, ctimeNs, digest, chunks, extents] = row as StoredEntry;
  if (!chunks.every((c) => Array.isArray(c) && typeof c[0] === 'string' && typeof c[1] === 'number')) return undefined;
  if (extents !== undefined && !Array.isArray(extents)) return undefined;
  return { ino, size, mtimeNs, ctimeNs, digest, chunks: chunks.map(([d, n]) => ({ digest: d, size: n })), ...(extents ? { extents } : {}) };
}

/** The stored row of an entry. */
function rowOf(e: UpperStatEntry): StoredEntry {
  const row: StoredEntry = [e.ino, e.size, e.mtimeNs, e.ctimeNs, e.digest, e.chunks.map((c) => [c.digest, c.size])];
  if (e.extents) row.push(e.extents);
  return row;
}

/** The upper stat cache of a workspace (empty when absent or unreadable, without the entries it cannot read: it is only a cache). */
export async function readUpperCache(dir: string): Promise<UpperStatCache> {
  let stored: unknown;
  try {
    stored = JSON.parse(await readFile(join(dir, FILE), 'utf8'));
  } catch {
    return {};
  }
  if (typeof stored !== 'object' || stored === null || Array.isArray(stored)) return {};
  const read = Object.entries(stored).map(([path, row]) => [path, entryOf(row)] as const);
  return Object.fromEntries(read.filter((r): r is readonly [string, UpperStatEntry] => r[1] !== undefined));
}

/** Writes the upper stat cache atomically (0600; see replaceFilePrivate). */
export async function writeUpperCache(dir: string, cache: UpperStatCache): Promise<void> {
  const stored = Object.fromEntries(Object.entries(cache).map(([path, e]) => [path, rowOf(e)]));
  await replaceFilePrivate(join(dir, FILE), JSON.stringify(stored));
}
