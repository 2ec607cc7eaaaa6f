/**
 * FUSE_DEV_IOC_CLONE: a second /dev/fuse descriptor on an existing FUSE connection, with its
 * own queue of requests in processing. The kernel ends the requests a descriptor had read but
 * not answered (ECONNABORTED to the caller) when THAT descriptor is closed, and aborts the
 * connection only when its last descriptor goes (fs/fuse/dev.c, fuse_dev_release). So a daemon
 * that serves on a clone of a descriptor its supervisor keeps can die without taking the mount
 * with it, and without leaving a caller waiting forever on a request it had read.
 *
 * Node has no ioctl(2): it is called through koffi (a maintained FFI package shipping prebuilt
 * binaries), loaded lazily; without it {@link cloneSupported} is false.
 */
import { closeSync, openSync } from 'node:fs';
import { AwcError } from '../../core/errors.js';
import { libcCalls, libcLoadError } from '../sys/libc.js';

/** _IOR(229, 0, uint32_t): include/uapi/linux/fuse.h. */
const FUSE_DEV_IOC_CLONE = 0x8004e500;

/** True when this process can clone /dev/fuse descriptors (koffi and libc load). */
export function cloneSupported(): boolean {
  return libcCalls() !== null;
}

/**
 * Opens /dev/fuse and attaches it to the connection of `sessionFd` (a mounted /dev/fuse
 * descriptor). Returns the new descriptor (the caller closes it).
 * @throws E_FUSE when cloning is not supported here or the kernel refuses (errno in the message)
 */
export function cloneFuseDevice(sessionFd: number): number {
  const c = libcCalls();
  if (!c) throw new AwcError('E_FUSE', `cannot clone /dev/fuse descriptors: koffi did not load (${libcLoadError()})`);
  const fd = openSync('/dev/fuse', 'r+');
  const r = c.ioctl(fd, FUSE_DEV_IOC_CLONE, [sessionFd]);
  if (r !== 0) {
    const errno = c.errno();
    closeSync(fd);
    throw new AwcError('E_FUSE', `FUSE_DEV_IOC_CLONE of descriptor ${sessionFd} failed (errno ${errno})`);
  }
  return fd;
}
