import { existsSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import type { DoctorCheck } from '../port/mount-driver.js';

/** Kernel version as [major, minor] from `uname -r` (e.g. "6.18.44-x" → [6, 18]). */
export function kernelVersion(rel: string = release()): [number, number] {
  const m = /^(\d+)\.(\d+)/.exec(rel);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

/**
 * What the overlay driver needs of this host, each with its outcome: root (trusted.*
 * xattrs, mount(2)), /dev/fuse, FUSE and overlayfs in the kernel, and Linux ≥ 6.5
 * (data-only lower layers).
 */
export function overlayChecks(): DoctorCheck[] {
  const fsList = safeRead('/proc/filesystems');
  const [maj, min] = kernelVersion();
  return [
    { name: 'root', ok: process.getuid?.() === 0, detail: `uid ${process.getuid?.()}` },
    { name: '/dev/fuse', ok: existsSync('/dev/fuse'), detail: existsSync('/dev/fuse') ? 'present' : 'missing' },
    {
      name: 'fuse',
      ok: /\tfuse\n/.test(fsList),
      detail: /\tfuse\n/.test(fsList) ? 'in /proc/filesystems' : 'not in /proc/filesystems (modprobe fuse)',
    },
    {
      name: 'overlay',
      ok: /\toverlay\n/.test(fsList),
      detail: /\toverlay\n/.test(fsList) ? 'in /proc/filesystems' : 'not in /proc/filesystems (modprobe overlay)',
    },
    { name: 'kernel >= 6.5', ok: maj > 6 || (maj === 6 && min >= 5), detail: release() },
  ];
}

function safeRead(p: string): string {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}
