import { AwcError } from '../../core/errors.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { RemoteAwc } from './remote-api.js';

/**
 * The service a CLI command runs with: an Awc in process (root, or a user's own home) or, for
 * an ordinary user, the root daemon's client (src/cli/remote/remote-awc.ts). Both are an
 * AwcApi (src/service/workspace/awc-api.ts); what only an Awc has is reached through {@link inProcess}.
 */
export type OpenedAwc = Awc | RemoteAwc;

/**
 * Whether `awc` is an ordinary user's client of the root daemon (src/cli/remote/remote-awc.ts)
 * rather than an Awc in process: a command that does a step differently for a user asks this.
 */
export function throughDaemon(awc: OpenedAwc): awc is RemoteAwc {
  // the client has it as its own property; an Awc has no such member
  return 'userStatus' in awc;
}

/**
 * `awc` as the Awc in process that a command needs for `what` (the catalog, the store, the
 * configuration, gc…). @throws E_USAGE when `awc` is the root daemon's client: what lives in
 * root's home is not handed out through the daemon
 */
export function inProcess(awc: OpenedAwc, what: string): Awc {
  if (throughDaemon(awc)) throw homeOnly(what);
  return awc;
}

/** The E_USAGE of a command that needs `what` of the home itself, asked through the daemon. */
export function homeOnly(what: string): AwcError {
  return new AwcError('E_USAGE', `this command needs the home itself (${what}); it is not available through the daemon`, {
    hint: 'Ask an administrator to run it as root.',
  });
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
