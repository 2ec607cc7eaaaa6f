import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import type { MountDriverChoice } from '../config/config.js';

/** One check `awc doctor` ran and its outcome. */
export interface DoctorCheck {
  name: string;
  ok: boolean;
  detail: string;
}

/** The mount driver this host will use and why. */
export interface DriverReport {
  driver: 'overlay' | 'copy';
  reason: string;
  checks: DoctorCheck[];
}

/** Kernel version as [major, minor] from `uname -r` (e.g. "6.18.44-x" → [6, 18]). */
export function kernelVersion(rel: string = release()): [number, number] {
  const m = /^(\d+)\.(\d+)/.exec(rel);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

/**
 * Decides the mount driver: overlay needs root (trusted.* xattrs, mount(2)), /dev/fuse,
 * overlayfs and FUSE in the kernel, and Linux ≥ 6.5 (data-only lower layers). Otherwise,
 * or when `choice` is `copy`, the copy driver. `choice = overlay` on a host that cannot is
 * still reported as copy with the failing checks (the caller decides whether to refuse).
 */
export function detectDriver(choice: MountDriverChoice = 'auto'): DriverReport {
  const fsList = safeRead('/proc/filesystems');
  const [maj, min] = kernelVersion();
  const checks: DoctorCheck[] = [
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
  if (choice === 'copy')
    return { driver: 'copy', reason: 'the copy driver was chosen by configuration (mountDriver/AWC_MOUNT_DRIVER)', checks };
  const failed = checks.filter((c) => !c.ok);
  if (failed.length === 0)
    return {
      driver: 'overlay',
      reason:
        'root, /dev/fuse, FUSE, overlayfs and Linux >= 6.5 are present: overlayfs over a layer directory and a lazy FUSE content lower',
      checks,
    };
  return {
    driver: 'copy',
    reason: `overlay is not possible here (${failed.map((c) => `${c.name}: ${c.detail}`).join('; ')}): snapshots are materialised into the target directory`,
    checks,
  };
}

function safeRead(p: string): string {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

/**
 * What `awc doctor` says about the home: missing (commands other than `snapshot import`
 * answer E_NO_HOME), read-only, not writable, or writable. Creates nothing.
 */
export function checkHome(home: string): DoctorCheck {
  const name = 'home';
  if (!existsSync(join(home, 'catalog.sqlite')))
    return { name, ok: false, detail: `${home}: no AWC home yet (\`awc snapshot import <dir>\` creates it)` };
  try {
    accessSync(home, constants.W_OK);
    return { name, ok: true, detail: `${home}: writable` };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { name, ok: false, detail: `${home}: ${code === 'EROFS' ? 'on a read-only file system' : `not writable (${code})`}` };
  }
}
