/**
 * Mounting a layer image (src/drivers/overlay/layer-image.ts): its digest verified first, then
 * a file-backed EROFS mount (Linux 6.12 or later: the image file itself is the mount's source,
 * no loop device), read-only, nodev, nosuid. docs/explanation/layer-images.md.
 */
import * as fs from 'node:fs';
import { open } from 'node:fs/promises';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import { libcCalls } from '../../host/sys/libc.js';
import { MS_NODEV, MS_NOSUID, MS_RDONLY } from '../../host/mount/mount-syscall.js';
import { unmount } from '../../host/mount/mount-commands.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { findExecutable, hashFd } from './layer-image.js';

/** The first Linux release whose EROFS mounts a regular file directly (CONFIG_EROFS_FS_BACKED_BY_FILE). */
export const FILE_BACKED_EROFS_SINCE: readonly [number, number] = [6, 12];

/**
 * What this host can do with layer images: mount them (kernel), and why not. Images are built
 * in process (src/drivers/overlay/erofs/), so every host can build one; `mkfs` says whether
 * mkfs.erofs is installed, which only the tests and benchmarks that compare with it use.
 */
export interface LayerImageSupport {
  /** Always true: our writer needs nothing of the host. */
  build: true;
  mount: boolean;
  /** mkfs.erofs on PATH (buildLayerImage, src/drivers/overlay/layer-image.ts: kept as a reference for tests). */
  mkfs: boolean;
  /** Why not, when `mount` is false. */
  why?: string;
}

/** `[major, minor]` of a kernel release string (`6.18.44-fc-v1272` → [6, 18]); [0, 0] when it does not parse. */
export function kernelVersion(release: string): [number, number] {
  const m = /^(\d+)\.(\d+)/.exec(release);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

/**
 * Whether this host can mount layer images: erofs in `/proc/filesystems` (as the kernel lists
 * it after the module is loaded) and a kernel of {@link FILE_BACKED_EROFS_SINCE} or later; and
 * whether mkfs.erofs is on PATH. A kernel built without file-backed EROFS passes this check;
 * its mount then fails with ENOTBLK, which {@link mountLayerImage} reports the same way.
 * Cost: one read of `/proc/filesystems`, `/proc/sys/kernel/osrelease` and a PATH search.
 */
export function layerImageSupport(): LayerImageSupport {
  const why: string[] = [];
  const mkfs = findExecutable('mkfs.erofs') !== undefined;
  const read = (p: string): string => {
    try {
      return fs.readFileSync(p, 'utf8');
    } catch {
      return '';
    }
  };
  const hasErofs = /\terofs$/m.test(read('/proc/filesystems'));
  const [maj, min] = kernelVersion(read('/proc/sys/kernel/osrelease').trim());
  const [wantMaj, wantMin] = FILE_BACKED_EROFS_SINCE;
  const newEnough = maj > wantMaj || (maj === wantMaj && min >= wantMin);
  if (!hasErofs) why.push('the kernel has no erofs file system (modprobe erofs)');
  if (!newEnough) why.push(`Linux ${maj}.${min} cannot mount a file as EROFS (${wantMaj}.${wantMin} or later can)`);
  const mount = hasErofs && newEnough;
  return why.length === 0 ? { build: true, mount, mkfs } : { build: true, mount, mkfs, why: why.join('; ') };
}

/**
 * Verifies that the image file open as `fd` has sha256 `expected` (its whole bytes).
 * @throws E_INTEGRITY on a mismatch, naming both digests
 */
export async function verifyLayerImageFd(fd: number, expected: Digest, what: string): Promise<void> {
  const { digest } = await hashFd(fd);
  if (digest !== expected)
    throw new AwcError('E_INTEGRITY', `layer image ${what} has digest ${digest}, expected ${expected}: it is not mounted`, {
      details: { path: what, expected, actual: digest },
    });
}

/**
 * Verifies the image at `imageFile` against `expected` (its sha256), then mounts it at
 * `mountDir` (an existing directory) as a file-backed EROFS: read-only, nodev, nosuid. The
 * check and the mount see the same file: it is opened once, hashed through that descriptor,
 * and after the mount its path must still name that inode, unchanged (size and ctime); else the
 * mount is undone. (Images live in root-only directories: this stops a corrupt or tampered
 * download, not root.) mount(2) is called in this thread: EROFS reads only the local image,
 * never a FUSE server of this process. Cost: one read of the image (about 1 ms a MiB) and one
 * mount(2) (a few ms).
 * @throws E_TARGET_BUSY when `mountDir` is a mount point already; E_INTEGRITY on a digest mismatch or a file swapped meanwhile; E_LAYER_IMAGE_UNSUPPORTED when the kernel cannot
 *   mount a file as EROFS; E_PERMISSION without root; E_MOUNT_FAILED otherwise (e.g. a corrupt image), with the errno
 */
export async function mountLayerImage(imageFile: string, mountDir: string, expected: Digest): Promise<void> {
  if (isMounted(mountDir)) throw new AwcError('E_TARGET_BUSY', `${mountDir} is already a mount point`);
  const fh = await open(imageFile, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  try {
    const before = await fh.stat({ bigint: true });
    if (!before.isFile()) throw new AwcError('E_INTEGRITY', `layer image ${imageFile} is not a regular file: it is not mounted`);
    await verifyLayerImageFd(fh.fd, expected, imageFile);
    mountErofsFile(imageFile, mountDir);
    const now = fs.lstatSync(imageFile, { bigint: true });
    const after = await fh.stat({ bigint: true });
    const same = now.ino === before.ino && now.dev === before.dev && after.size === before.size && after.ctimeNs === before.ctimeNs;
    if (!same) {
      await unmount(mountDir, true);
      throw new AwcError('E_INTEGRITY', `layer image ${imageFile} changed while it was verified: it is not mounted`);
    }
  } finally {
    await fh.close();
  }
}

/**
 * mount(2) of the regular file `imageFile` as EROFS at `mountDir`, read-only, nodev, nosuid, in this thread (for errno).
 * @throws E_LAYER_IMAGE_UNSUPPORTED (ENOTBLK: no file-backed EROFS; ENODEV: no EROFS; libc out of reach), E_PERMISSION (EPERM), E_MOUNT_FAILED
 */
export function mountErofsFile(imageFile: string, mountDir: string): void {
  const libc = libcCalls();
  if (!libc) throw new AwcError('E_LAYER_IMAGE_UNSUPPORTED', 'cannot mount a layer image: libc is out of reach (koffi)');
  if (libc.mount(imageFile, mountDir, 'erofs', MS_RDONLY | MS_NOSUID | MS_NODEV, '') === 0) return;
  const errno = libc.errno();
  const what = `mount -t erofs ${imageFile} ${mountDir}`;
  // errno values of Linux (asm-generic/errno-base.h)
  if (errno === 15 /* ENOTBLK */ || errno === 19 /* ENODEV */)
    throw new AwcError(
      'E_LAYER_IMAGE_UNSUPPORTED',
      `${what} failed: this kernel ${errno === 19 ? 'has no EROFS' : 'cannot mount a regular file as EROFS'}`,
    );
  if (errno === 1 /* EPERM */) throw new AwcError('E_PERMISSION', `${what} failed: not permitted (root is needed)`);
  throw new AwcError('E_MOUNT_FAILED', `${what} failed (errno ${errno}${errno === 22 ? ', EINVAL: not an EROFS image?' : ''})`);
}

/** Unmounts a layer image mounted at `mountDir` (nothing when it is not mounted). @throws E_TARGET_BUSY while an overlay uses it */
export async function unmountLayerImage(mountDir: string): Promise<void> {
  await unmount(mountDir);
}
