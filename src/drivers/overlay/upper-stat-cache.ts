import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { replaceFilePrivate } from '../../core/private-fs.js';
import type { UpperStatCache } from './upper-merge.js';

/** The upper stat cache of a workspace, in its host directory `dir` (see mergeUpper's `statCache`). */
const FILE = 'upper-cache.json';

/** The upper stat cache of a workspace (empty when absent or unreadable: it is only a cache). */
export async function readUpperCache(dir: string): Promise<UpperStatCache> {
  try {
    return JSON.parse(await readFile(join(dir, FILE), 'utf8')) as UpperStatCache;
  } catch {
    return {};
  }
}

/** Writes the upper stat cache atomically (0600; see replaceFilePrivate). */
export async function writeUpperCache(dir: string, cache: UpperStatCache): Promise<void> {
  await replaceFilePrivate(join(dir, FILE), JSON.stringify(cache));
}
