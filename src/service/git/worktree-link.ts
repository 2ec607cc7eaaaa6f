import { chown, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Who a file written for a worktree belongs to (the user who owns the registration); absent: the caller. */
export interface LinkOwner {
  uid: number;
  gid: number;
}

/**
 * Points the worktree registration `admin` (`<repository>/worktrees/<id>`) at the worktree at
 * `target`: its `gitdir` file names `<target>/.git` (gitrepository-layout(5): "worktrees/<id>/
 * gitdir: a text file containing the absolute path back to the .git file that points to
 * here"), what `git worktree repair <target>` writes, written whole (a temporary file renamed
 * over it) and owned by `owner`. Not git itself: `git worktree repair <path>` also checks every
 * other worktree of the repository (builtin/worktree.c: repair_worktrees after the paths) and
 * fails when one is half-made, which one of several creates at once can be: five Claude Code
 * hooks at once failed E_BRANCH_FAILED now and then.
 * @throws what writing the file throws (ENOENT: no such registration)
 */
export async function pointWorktreeRegistration(admin: string, target: string, owner?: LinkOwner): Promise<void> {
  const file = join(admin, 'gitdir');
  const tmp = `${file}.awc-${process.pid}`;
  await writeFile(tmp, `${join(target, '.git')}\n`, { mode: 0o644 });
  if (owner) await chown(tmp, owner.uid, owner.gid);
  await rename(tmp, file);
}

/**
 * Makes `<target>/.git` the file that links the worktree at `target` to its registration
 * (`gitdir: <admin>`, as `git worktree add` writes it), in place of whatever is there (the
 * snapshot's `.git` directory, removed without following a symlink). The file is created
 * exclusively (O_CREAT | O_EXCL: never written through a symlink made in between), 0644,
 * owned by `owner`.
 * @throws what removing or writing throws (EEXIST: something made `.git` again meanwhile)
 */
export async function writeWorktreeGitFile(target: string, admin: string, owner?: LinkOwner): Promise<void> {
  const file = join(target, '.git');
  await rm(file, { recursive: true, force: true });
  await writeFile(file, `gitdir: ${admin}\n`, { mode: 0o644, flag: 'wx' });
  if (owner) await chown(file, owner.uid, owner.gid);
}
