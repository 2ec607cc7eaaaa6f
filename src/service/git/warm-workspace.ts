import * as fs from 'node:fs';
import { warmDentries, type WarmResult } from '../../host/tree/warm-dentries.js';
import { runGit } from './git-run.js';
import { withGitSandbox } from './git-sandbox.js';

/** How long the warming `git status` may run (ms) before it is killed and skipped (`git: false`): 60 s. */
export const WARM_GIT_TIMEOUT_MS = 60_000;

/** What `warmWorkspace` did: the walk's figures (src/host/tree/warm-dentries.ts), whether git's status warmed it too, and the whole time in ms. */
export interface WarmWorkspaceResult extends WarmResult {
  /** A `git status` ran at the root (it has a `.git` directory) and succeeded. */
  git: boolean;
}

/**
 * Warms a freshly mounted workspace for its first walk (`awc mount --warm`;
 * docs/explanation/git.md "Where the floor comes from"): first every path is looked up once
 * (warmDentries); then, where the root holds a `.git` directory (lstat, never followed), git
 * itself runs `status --porcelain` there once, so that what git's first status touches beyond
 * one lstat of each path is warm too (more than the `.gitignore` lookups or the tree
 * objects: git.md says what was tried). On a 100 000-file repository the agent's first
 * `git status` is 1.3–1.6× a warm one in the base after the walk alone, 1.18× after the walk
 * and git's status (npm run bench:git, docs/benchmarks.md).
 *
 * The status changes nothing and runs nothing of the snapshot's: it runs in a git sandbox
 * (src/service/git/git-sandbox.ts): the workspace's HEAD, index and objects are read, but the
 * configuration, hooks and `info/attributes` git reads are AWC's, written in a private
 * directory, from an environment AWC builds (so no filter, fsmonitor, hook, pager or lazy
 * fetch of the snapshot's can run, and a missing object is an error, never a fetch).
 * `GIT_OPTIONAL_LOCKS=0` (git takes no `index.lock` and writes no refreshed index) and
 * `--ignore-submodules=all` (no git runs in a submodule). It runs as the calling process
 * (the user who mounted). A status that fails (not a repository after all, a missing
 * object) or runs longer than {@link WARM_GIT_TIMEOUT_MS} (a FIFO in the repository) leaves
 * the mount as it is and gives `git: false`.
 *
 * @param root the mount's directory (absolute)
 * @throws what warmDentries throws (E_NOT_MOUNTED, E_UNSUPPORTED without find…)
 */
export async function warmWorkspace(root: string): Promise<WarmWorkspaceResult> {
  const t0 = performance.now();
  const walk = await warmDentries(root);
  let git = false;
  let isRepo = false;
  try {
    // HEAD, index and config regular files (a fifo there would block a read forever)
    isRepo = fs.lstatSync(`${root}/.git`).isDirectory() && fs.lstatSync(`${root}/.git/HEAD`).isFile();
    isRepo &&= fs.lstatSync(`${root}/.git/index`, { throwIfNoEntry: false })?.isFile() ?? true;
    isRepo &&= fs.lstatSync(`${root}/.git/config`, { throwIfNoEntry: false })?.isFile() ?? true;
  } catch {
    // no repository at the root
  }
  if (isRepo) {
    const dir = `${root}/.git`;
    try {
      await withGitSandbox({ gitDir: dir, commonDir: dir }, { workTree: root }, (sandbox) =>
        runGit(['status', '--porcelain', '--ignore-submodules=all'], {
          cwd: root,
          sandbox,
          env: { GIT_OPTIONAL_LOCKS: '0' },
          timeoutMs: WARM_GIT_TIMEOUT_MS,
        }),
      );
      git = true;
    } catch {
      // best effort: the mount stands, warmed by the walk
    }
  }
  return { ...walk, git, ms: performance.now() - t0 };
}
