/**
 * Reading the mount table (/proc/self/mountinfo): what is mounted where.
 *
 * Nothing here reads through a FUSE mount: the daemon's event loop serves those mounts, so a
 * synchronous stat of a mount point could deadlock. Mount state is read from mountinfo only.
 */
import { readFileSync } from 'node:fs';

/** One line of /proc/self/mountinfo. */
export interface MountInfo {
  mountId: number;
  parentId: number;
  /** Device number of the mounted filesystem. */
  major: number;
  minor: number;
  /** Mount point, unescaped. */
  mountPoint: string;
  /** Filesystem type, e.g. `fuse.awc`, `overlay`. */
  fsType: string;
  /** Mount source, unescaped. */
  source: string;
  /** Per-superblock options (e.g. `rw,lowerdir=...` for overlay). */
  superOptions: string;
}

/** Undoes the octal escaping of mountinfo fields (`\040` for space, `\011`, `\012`, `\134`). */
export function unescapeMountField(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parses /proc/self/mountinfo (or the given text). */
export function readMountInfo(text?: string): MountInfo[] {
  const src = text ?? readFileSync('/proc/self/mountinfo', 'latin1');
  const out: MountInfo[] = [];
  for (const line of src.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    const sep = f.indexOf('-', 6);
    if (sep < 0 || f.length < sep + 3) continue;
    const [maj, min] = f[2]!.split(':');
    out.push({
      mountId: Number(f[0]),
      parentId: Number(f[1]),
      major: Number(maj),
      minor: Number(min),
      mountPoint: unescapeMountField(f[4]!),
      fsType: f[sep + 1]!,
      source: unescapeMountField(f[sep + 2]!),
      superOptions: f[sep + 3] ?? '',
    });
  }
  return out;
}

/** Mounts at exactly `mountPoint` (absolute, resolved), optionally of one type; last = topmost. */
export function mountsAt(mountPoint: string, fsType?: string, text?: string): MountInfo[] {
  return readMountInfo(text).filter((m) => m.mountPoint === mountPoint && (fsType === undefined || m.fsType === fsType));
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
