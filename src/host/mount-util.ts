import { readMountInfo, runCommand } from './fuse/mount-util.js';
import { AwcError } from '../core/errors.js';

/**
 * Runs a command asynchronously (see {@link runCommand}: mount(2) may wait on our own FUSE
 * server's replies, which the event loop must stay free to send).
 * @returns stdout. @throws E_MOUNT_FAILED with stderr when it exits non-zero.
 */
export async function run(cmd: string, args: string[], opts: { what?: string } = {}): Promise<string> {
  const r = await runCommand(cmd, args);
  if (r.code === 0) return r.stdout;
  const why = r.code === null ? `killed or failed to start: ${r.stderr.trim() || r.signal}` : `exit ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`;
  throw new AwcError('E_MOUNT_FAILED', `${opts.what ?? cmd} failed (${why})`);
}

/** Mount points currently listed in /proc/self/mountinfo (decoded paths). */
export function mountPoints(): Set<string> {
  // readMountInfo keeps bytes as latin1; paths here are UTF-8 strings
  return new Set(readMountInfo().map((m) => Buffer.from(m.mountPoint, 'latin1').toString('utf8')));
}

/** True when `path` is a mount point. */
export function isMounted(path: string): boolean {
  return mountPoints().has(path);
}

/**
 * Mounts one overlayfs: `lowerdir=LAYER::CONTENT` (CONTENT a data-only lower), private
 * upper and work dirs, `metacopy=on,redirect_dir=on`, and nodev,nosuid by default (DESIGN §2, §7).
 * @throws E_MOUNT_FAILED
 */
export async function mountOverlay(o: { layer: string; content: string; upper: string; work: string; target: string }): Promise<void> {
  const opts = `lowerdir=${o.layer}::${o.content},upperdir=${o.upper},workdir=${o.work},metacopy=on,redirect_dir=on`;
  await run('mount', ['-t', 'overlay', 'overlay', '-o', `nodev,nosuid,${opts}`, o.target], { what: `mount overlay at ${o.target}` });
}

/** Unmounts `target`; with `lazy`, detaches even when busy. Absent mounts are not an error. @throws E_TARGET_BUSY */
export async function unmount(target: string, lazy = false): Promise<void> {
  if (!isMounted(target)) return;
  try {
    await run('umount', lazy ? ['-l', target] : [target], { what: `umount ${target}` });
  } catch (err) {
    if (/busy/i.test((err as Error).message)) throw new AwcError('E_TARGET_BUSY', `${target} is busy: ${(err as Error).message}`, { hint: 'Close the shells and programs using it, or pass --force for a lazy unmount.' });
    throw err;
  }
}
