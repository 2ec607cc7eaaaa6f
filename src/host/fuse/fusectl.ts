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
 * Aborts a FUSE connection through fusectl: every pending and future request fails
 * (ENOTCONN for callers), and the server's blocked device reads return ENODEV.
 * Returns false when the connection directory does not exist (already gone, or no fusectl).
 */
export function abortFuseConnection(connectionId: number): boolean {
  try {
    writeFileSync(`${FUSECTL_DIR}/${connectionId}/abort`, '1');
    return true;
  } catch {
    return false;
  }
}
