import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import type { Server } from 'node:http';
import { dirname } from 'node:path';
import { AwcError } from '../../core/errors.js';

/**
 * The daemon's API socket file: who may connect is decided by its mode and group.
 *
 * - Its directory (root: `/run/awc`, see `socketPathOf`) is created 0755 when missing and
 *   must belong to the daemon's user and be writable by nobody else, so no other user can
 *   put a socket of their own there or remove ours.
 * - The socket is created under umask 0177 (0600 from the first moment), then given to
 *   `root:<group>` mode 0660 when a `socketGroup` is configured; without one it stays 0600
 *   (only the daemon's own user, root, may connect).
 */

/**
 * Resolves a group name (through NSS, `getent group`) or number to a gid.
 * @throws E_CONFIG when no such group exists
 */
export function resolveGroup(group: string): number {
  if (/^\d+$/.test(group)) return Number(group);
  let line = '';
  try {
    line = execFileSync('getent', ['group', group], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    // exit 2: no such group
  }
  const gid = Number(line.split(':')[2]);
  if (!line || !Number.isInteger(gid))
    throw new AwcError('E_CONFIG', `no group ${JSON.stringify(group)} on this host (socketGroup)`, {
      hint: 'Create the group, or set socketGroup / AWC_SOCKET_GROUP to an existing one.',
    });
  return gid;
}

/**
 * Makes sure the socket's directory exists (created 0755) and is safe: a directory owned
 * by this process's user and not writable by group or others.
 * @throws E_PERMISSION when it is not
 */
export function prepareSocketDir(socket: string): void {
  const dir = dirname(socket);
  const made = fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  if (made !== undefined) fs.chmodSync(dir, 0o755);
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o022) !== 0) {
    throw new AwcError(
      'E_PERMISSION',
      `the daemon socket's directory ${dir} must be a directory owned by uid ${process.getuid?.()} and writable by nobody else`,
      {
        hint: `Fix its owner and mode (chown root ${dir}; chmod 755 ${dir}), or choose another socket path (socket / AWC_SOCKET).`,
      },
    );
  }
}

/**
 * Listens on `socket` (a stale file there is removed first): 0600, or 0660 with group
 * `gid`. Returns the socket file's inode (to never remove a successor's socket later).
 * @throws E_PERMISSION (see prepareSocketDir), E_CONFIG (something else than a socket is there), the listen error
 */
export async function listenOnSocket(server: Server, socket: string, gid?: number): Promise<number> {
  prepareSocketDir(socket);
  const existing = fs.lstatSync(socket, { throwIfNoEntry: false });
  if (existing && !existing.isSocket())
    throw new AwcError('E_CONFIG', `${socket} exists and is not a socket`, {
      hint: 'Choose another socket path (socket / AWC_SOCKET), or remove that file.',
    });
  fs.rmSync(socket, { force: true });
  const old = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socket, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } finally {
    process.umask(old);
  }
  if (gid !== undefined) {
    fs.chownSync(socket, process.getuid?.() ?? 0, gid);
    fs.chmodSync(socket, 0o660);
  } else {
    fs.chmodSync(socket, 0o600);
  }
  return fs.statSync(socket).ino;
}
