import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { userSocketsDirOf } from '../../config/config.js';

/**
 * Which per-user socket of a root daemon an ordinary user's CLI uses (docs/how-to/ordinary-users.md),
 * or undefined to open a home in process as before. Root: always undefined. With an explicit
 * home (`--home` or `AWC_HOME`): the socket root's daemon made for this uid for that home when
 * it exists, else undefined (an own home). Without one: the socket of the default home
 * `/var/lib/awc` (`/run/awc/users/<uid>.sock`; `AWC_SOCKET` moves it as it moves root's).
 * @throws E_DAEMON_UNAVAILABLE (no explicit home and no socket), with a hint for the administrator
 */
export function userSocketFor(home: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const uid = process.getuid?.();
  if (uid === undefined || uid === 0) return undefined;
  const explicit = home ?? env.AWC_HOME;
  const dir = userSocketsDirOf({ home: explicit ?? '/var/lib/awc', socket: env.AWC_SOCKET || undefined });
  const socket = join(dir, `${uid}.sock`);
  if (lstatSync(socket, { throwIfNoEntry: false })?.isSocket()) return socket;
  if (explicit !== undefined) return undefined;
  throw new AwcError(
    'E_DAEMON_UNAVAILABLE',
    `no AWC socket for uid ${uid} (${socket}): this user may not use the host's AWC daemon, or it is not running`,
    {
      hint: 'An administrator adds the user (or a group of theirs) to "users" in /var/lib/awc/config.json and runs `awc daemon start` as root (see docs/how-to/ordinary-users.md); or pass --home DIR for a home of your own.',
    },
  );
}
