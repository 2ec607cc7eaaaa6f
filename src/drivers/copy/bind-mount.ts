import { AwcError } from '../../core/errors.js';
import { run, runCommand, unmount } from '../../host/mount/mount-commands.js';

/**
 * Exposes the directory `src` at `target` through a bind mount that carries `nosuid,nodev`
 * from its first moment: `src` is first bound onto itself and remounted `nosuid,nodev`
 * (where only root can reach it, under the 0700 home), that mount is bound at `target`
 * (a bind copies the mount's flags), and the self-bind is removed. Nothing is ever
 * reachable at `target` without the flags. On failure nothing stays mounted. `targetFd` (a
 * directory an ordinary user owns, opened without following symlinks: openOwnedDir): the
 * last bind goes onto `/proc/self/fd/3` of mount(8), never canonicalised (`-c`), so a path
 * swapped since the check cannot redirect it; `target` then only names it in messages.
 * @throws E_MOUNT_FAILED
 */
export async function bindMountNoSuid(src: string, target: string, targetFd?: number): Promise<void> {
  try {
    await run('mount', ['--bind', src, src], { what: `bind mount of ${src}` });
    await run('mount', ['-o', 'remount,bind,nosuid,nodev', src], { what: `remount of ${src} nosuid,nodev` });
    if (targetFd === undefined) await run('mount', ['--bind', src, target], { what: `bind mount at ${target}` });
    else {
      const r = await runCommand('mount', ['-c', '--bind', src, '/proc/self/fd/3'], [targetFd]);
      if (r.code !== 0) throw new AwcError('E_MOUNT_FAILED', `bind mount at ${target} failed: ${r.stderr.trim() || `exit ${r.code}`}`);
    }
  } catch (err) {
    await unmount(target, true).catch(() => undefined);
    await unmount(src, true).catch(() => undefined);
    throw err;
  }
  await unmount(src, true);
}

/**
 * Detaches (lazily) the mount whose root `fd` is open on: `umount -l` of `/proc/self/fd/3`
 * resolves to exactly that mount, whatever its path has become since (a user's worktree).
 * @throws E_MOUNT_FAILED
 */
export async function detachMountFd(fd: number, shown: string): Promise<void> {
  const r = await runCommand('umount', ['-c', '-l', '/proc/self/fd/3'], [fd]);
  if (r.code !== 0) throw new AwcError('E_MOUNT_FAILED', `umount ${shown} failed: ${r.stderr.trim() || `exit ${r.code}`}`);
}
