import { run, runCommand } from '../../host/mount/mount-commands.js';
import { AwcError } from '../../core/errors.js';
import { MS_NODEV, MS_NOSUID, mountSyscall } from '../../host/mount/mount-syscall.js';

/**
 * Mounts one overlayfs: `lowerdir=LAYER::CONTENT` (CONTENT a data-only lower), or with `cache`
 * `lowerdir=LAYER::CACHE::CONTENT` (CACHE, the host object cache, a first data-only lower that
 * the kernel reads without FUSE: docs/explanation/host-cache-lower.md), private
 * upper and work dirs, `metacopy=on,redirect_dir=on`, and nodev,nosuid by default (docs/explanation/design.md#overlay-driver, #security).
 * mount(2) is called directly (src/host/mount/mount-syscall.ts); when it fails, mount(8) runs the
 * same mount, for its error message. With `fd` (a target opened by openOwnedTarget,
 * src/host/mount/owned-target.ts), the target is `/proc/self/fd/<fd>` of this process (mount(8)
 * gets the descriptor as its fd 3 and mounts on `/proc/self/fd/3` without canonicalising it,
 * `-c`): mount(2) resolves the magic link to the very directory that was checked, so a path
 * swapped meanwhile cannot redirect the mount.
 * @throws E_MOUNT_FAILED
 */
export async function mountOverlay(o: {
  layer: string;
  content: string;
  /** The host object cache's directory (absent: no CACHE lower). */
  cache?: string;
  upper: string;
  work: string;
  target: string;
  fd?: number;
}): Promise<void> {
  const lower = o.cache === undefined ? `${o.layer}::${o.content}` : `${o.layer}::${o.cache}::${o.content}`;
  const opts = `lowerdir=${lower},upperdir=${o.upper},workdir=${o.work},metacopy=on,redirect_dir=on`;
  // the system call first (on a pool thread: see mountSyscall); mount(8) when it fails, for its message
  const at = o.fd === undefined ? o.target : `/proc/self/fd/${o.fd}`;
  if (await mountSyscall('overlay', at, 'overlay', MS_NOSUID | MS_NODEV, opts)) return;
  if (o.fd === undefined) {
    await run('mount', ['-t', 'overlay', 'overlay', '-o', `nodev,nosuid,${opts}`, o.target], { what: `mount overlay at ${o.target}` });
    return;
  }
  const r = await runCommand('mount', ['-c', '-t', 'overlay', 'overlay', '-o', `nodev,nosuid,${opts}`, '/proc/self/fd/3'], [o.fd]);
  if (r.code !== 0) throw new AwcError('E_MOUNT_FAILED', `mount overlay at ${o.target} failed (exit ${r.code}: ${r.stderr.trim()})`);
}
