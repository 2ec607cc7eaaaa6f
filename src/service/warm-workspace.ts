import * as fs from 'node:fs';
import { warmDentries, type WarmResult } from '../host/warm-dentries.js';
import { GitFailure, runGit } from './git-run.js';

/** What `warmWorkspace` did: the walk's figures (src/host/warm-dentries.ts), whether git's status warmed it too, and the whole time in ms. */
export interface WarmWorkspaceResult extends WarmResult {
  /** A `git status` ran at the root (it has a `.git` directory) and succeeded. */
  git: boolean;
}

/**
 * Warms a freshly mounted workspace for its first walk (`awc mount --warm`, issue 11 part 1;
 * docs/explanation/git.md "Where the floor comes from"): first every path is looked up once
 * (warmDentries); then, where the root holds a `.git` directory (lstat, never followed), git
 * itself runs `status --porcelain` there once, so that what git's first status touches beyond
 * one lstat of each path is warm too (not the `.gitignore` lookups nor the tree objects:
 * warming those alone did not help; what it is was not found). Measured on a 100 000-file repository: after the
 * walk alone the agent's first `git status` was 1.3–1.6× a warm one in the base; after the
 * walk and git's status, 1.18× (npm run bench:git, docs/benchmarks.md).
 *
 * The status changes nothing and runs nothing of the snapshot's: `GIT_OPTIONAL_LOCKS=0` (git
 * takes no `index.lock` and writes no refreshed index, as editors run it in the background),
 * runGit's settings (no hook, no fsmonitor command, the caller's GIT_* variables removed),
 * `--ignore-submodules=all` (no git runs in a submodule with its own configuration), and it
 * is skipped where the repository's own configuration defines a filter driver (whose clean
 * command a status may run). It runs as the calling process (the user who mounted). A status that fails (not a repository after all, one git refuses)
 * leaves the mount as it is and gives `git: false`.
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
    isRepo = fs.lstatSync(`${root}/.git`).isDirectory();
  } catch {
    // no repository at the root
  }
  if (isRepo && !(await definesFilters(root))) {
    try {
      await runGit(['status', '--porcelain', '--ignore-submodules=all'], { cwd: root, env: { GIT_OPTIONAL_LOCKS: '0' } });
      git = true;
    } catch {
      // best effort: the mount stands, warmed by the walk
    }
  }
  return { ...walk, git, ms: performance.now() - t0 };
}

/**
 * Whether the repository's own configuration (its `config` and `config.worktree`, with what
 * they include) defines a filter driver: `git status` runs a filter's `clean` or `process`
 * command on a file whose stat data does not match the index, so a snapshot could make a
 * warming status run a command of its choosing. `git config` itself only reads. A failure to
 * read counts as yes.
 */
async function definesFilters(root: string): Promise<boolean> {
  try {
    const out = await runGit(['config', '--show-scope', '--get-regexp', '^filter\\.'], { cwd: root });
    return out.stdout.split('\n').some((l) => /^(local|worktree)\t/.test(l));
  } catch (err) {
    // exit 1: no such key anywhere
    return !(err instanceof GitFailure && err.status === 1);
  }
}
