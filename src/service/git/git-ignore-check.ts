import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TreeLookup } from './git-export-plan.js';
import { GitFailure, runGit } from './git-run.js';

/**
 * Which of `paths` git ignores in the repository at `gitDir`, with the exported snapshot's
 * own `.gitignore` files (docs/explanation/git.md "Paths git would track"). Git itself
 * decides: `git check-ignore --no-index --stdin -z` runs with the repository's git directory
 * (so its `info/exclude` and the configured `core.excludesFile` count) and a work tree `wt`
 * (a new private directory) that holds only the `.gitignore` files of the snapshot on the
 * way to each path, written there as regular files. Git checks every leading directory of
 * a path as a directory (a `build/` rule ignores `build/x`), and a path that is not on disk
 * is not a directory (a `build/` rule does not ignore a file named `build`), as git would
 * decide for a file of that name in a checkout.
 * @throws GitFailure (git failed for another reason than "nothing ignored"), E_GIT_FAILED (no git)
 */
export async function gitIgnored(gitDir: string, wt: string, target: TreeLookup, paths: readonly string[]): Promise<Set<string>> {
  if (paths.length === 0) return new Set();
  await mkdir(wt, { mode: 0o700 });
  const dirs = new Set<string>();
  for (const p of paths) {
    const parts = p.split('/');
    for (let i = 0; i < parts.length; i++) dirs.add(parts.slice(0, i).join('/'));
  }
  for (const d of [...dirs].sort()) {
    const text = await target.text(d === '' ? '.gitignore' : `${d}/.gitignore`);
    if (text === undefined) continue;
    const at = d === '' ? wt : join(wt, ...d.split('/'));
    await mkdir(at, { recursive: true, mode: 0o700 });
    await writeFile(join(at, '.gitignore'), text, { mode: 0o600, flag: 'wx' });
  }
  try {
    const { stdout } = await runGit(['--work-tree', wt, 'check-ignore', '--no-index', '--stdin', '-z'], {
      gitDir,
      cwd: wt,
      input: `${paths.join('\0')}\0`,
    });
    return new Set(stdout.split('\0').filter((s) => s !== ''));
  } catch (err) {
    // status 1 without a message: none of the paths is ignored
    if (err instanceof GitFailure && err.status === 1 && err.stderr.trim() === '') return new Set();
    throw err;
  }
}
