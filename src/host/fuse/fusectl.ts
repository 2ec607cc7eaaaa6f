/**
 * The kernel's fusectl file system: one directory per FUSE connection, through which a
 * connection is aborted.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { readMountInfo } from '../mount/mount-table.js';

/** Where the kernel's fusectl filesystem exposes one directory per FUSE connection. */
export const FUSECTL_DIR = '/sys/fs/fuse/connections';

/**
 * Makes sure fusectl is mounted at /sys/fs/fuse/connections (systemd usually does it; minimal
 * containers and VMs often do not). Synchronous spawn is safe here: fusectl never calls us.
 * Returns whether the connections directory is usable.
 */
export function ensureFusectl(): boolean {
  if (readMountInfo().some((m) => m.fsType === 'fusectl' && m.mountPoint === FUSECTL_DIR)) return true;
  if (!existsSync(FUSECTL_DIR)) return false;
  const r = spawnSync('mount', ['-t', 'fusectl', 'fusectl', FUSECTL_DIR], { stdio: 'ignore' });
  return r.status === 0;
}

/**
 * Whether connection id `connectionId` may still be the connection mounted at `mountpoint`.
 * Connection ids are minor device numbers, which the kernel hands out again once a connection
 * ends: when a visible mount with that device is somewhere else, the id now belongs to another
 * file system (another AWC home's, or anyone's) and is not ours. When no visible mount has that
 * device (ours detached lazily, or gone), the id may be ours and true is returned.
 */
export function connectionMayBeAt(connectionId: number, mountpoint: string): boolean {
  const same = readMountInfo().filter((m) => m.major === 0 && m.minor === connectionId);
  return same.length === 0 || same.some((m) => m.mountPoint === mountpoint);
}

/**
 * Aborts a FUSE connection through fusectl: every pending and future request fails
 * (ENOTCONN for callers), and the server's blocked device reads return ENODEV.
 * `mountpoint` is where the connection was mounted: a connection id that another mount now
 * uses is left alone (connectionMayBeAt). Returns false when the connection directory does not
 * exist (already gone, or no fusectl) or the id is another's.
 */
export function abortFuseConnection(connectionId: number, mountpoint: string): boolean {
  if (!connectionMayBeAt(connectionId, mountpoint)) return false;
  try {
    writeFileSync(`${FUSECTL_DIR}/${connectionId}/abort`, '1');
    return true;
  } catch {
    return false;
  }
}
