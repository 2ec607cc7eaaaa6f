import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A new empty directory under the system temp dir, named `<prefix><random>` (e.g. `awc-catalog-`). */
export function makeTempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

/** Removes a directory made by `makeTempDir` with everything in it; absent is fine. */
export function removeTempDir(dir: string): Promise<void> {
  return rm(dir, { recursive: true, force: true });
}

/** A temp directory removed when the test `t` ends. */
export async function tempDirFor(t: { after(fn: () => Promise<void>): void }, prefix: string): Promise<string> {
  const dir = await makeTempDir(prefix);
  t.after(() => removeTempDir(dir));
  return dir;
}
