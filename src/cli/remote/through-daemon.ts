import { AwcError } from '../../core/errors.js';
import type { RemoteAwc } from './remote-awc.js';

/**
 * Whether `awc` is an ordinary user's client of the root daemon (src/cli/remote/remote-awc.ts)
 * rather than an Awc in process: a command that does a step differently for a user asks this.
 */
export function throughDaemon<T extends object>(awc: T): awc is T & RemoteAwc {
  return 'userStatus' in awc;
}

/**
 * E_PERMISSION for a command that is administrative (docs/how-to/ordinary-users.md
 * "What stays with the administrator"): an ordinary user's CLI refuses it at once, naming the
 * command root runs.
 */
export function adminOnly(command: string, why: string): AwcError {
  return new AwcError('E_PERMISSION', `\`awc ${command}\` is administrative: ${why}`, {
    hint: `An administrator runs \`awc ${command}\` as root (docs/how-to/ordinary-users.md); pass --home DIR to use a home of your own.`,
  });
}
