import { libcCalls } from '../sys/libc.js';

/** mount(2) flags AWC uses (linux/fs.h). */
export const MS_RDONLY = 1;
export const MS_NOSUID = 2;
export const MS_NODEV = 4;

/**
 * mount(2) through koffi, called on a libuv pool thread (`async`): the overlay's lowers may be
 * served by this very process's FUSE server, which must stay free to answer while the kernel
 * sets the mount up. Saves spawning mount(8) (a fork of the daemon plus libmount's start,
 * ≈ 15 ms a mount on the machine of docs/benchmarks.md). Resolves true once mounted, false
 * when the call failed or libc is out of reach: the caller then runs mount(8), which says why
 * in its own words (errno does not cross threads). Never throws.
 */
export function mountSyscall(source: string, target: string, fstype: string, flags: number, data: string): Promise<boolean> {
  const fn = libcCalls()?.mount;
  if (!fn) return Promise.resolve(false);
  return new Promise((resolve) => fn.async(source, target, fstype, flags, data, (err, res) => resolve(!err && res === 0)));
}
