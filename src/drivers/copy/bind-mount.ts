import { run, unmount } from '../../host/mount-commands.js';

/**
 * Exposes the directory `src` at `target` through a bind mount that carries `nosuid,nodev`
 * from its first moment: `src` is first bound onto itself and remounted `nosuid,nodev`
 * (where only root can reach it, under the 0700 home), that mount is bound at `target`
 * (a bind copies the mount's flags), and the self-bind is removed. Nothing is ever
 * reachable at `target` without the flags. On failure nothing stays mounted.
 * @throws E_MOUNT_FAILED
 */
export async function bindMountNoSuid(src: string, target: string): Promise<void> {
  try {
    await run('mount', ['--bind', src, src], { what: `bind mount of ${src}` });
    await run('mount', ['-o', 'remount,bind,nosuid,nodev', src], { what: `remount of ${src} nosuid,nodev` });
    await run('mount', ['--bind', src, target], { what: `bind mount at ${target}` });
  } catch (err) {
    await unmount(target, true).catch(() => undefined);
    await unmount(src, true).catch(() => undefined);
    throw err;
  }
  await unmount(src, true);
}
