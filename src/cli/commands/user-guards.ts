import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { adminOnly } from '../remote/through-daemon.js';
import type { Output } from '../output/output.js';

/**
 * The commands that stay with the administrator for an ordinary user whose CLI is a client
 * of the root daemon (docs/how-to/ordinary-users.md "What stays with the administrator"),
 * each with why; `awc <name> --help` still works.
 */
export const ADMIN_COMMANDS: Readonly<Record<string, string>> = {
  gc: 'it deletes packs shared by every namespace of the home',
  fsck: 'it reads every namespace of the home and, with --repair, rewrites their blob index',
  'daemon start': 'the host daemon runs as root',
  'daemon stop': "stopping the host daemon unmounts every user's workspaces",
  'daemon run': 'the host daemon runs as root',
  metrics: "the host daemon's metrics cover every user and namespace",
  release: "the host daemon releases idle workspaces (every user's) by itself; unmount yours with `awc unmount`",
  'quota set': "quotas are set by root or the home's owner",
  'quota unset': "quotas are set by root or the home's owner",
  'quota show': 'it reads the catalog of the home itself',
  'demo main': 'a demonstration runs in a home of its own',
  'demo fanout': 'a demonstration runs in a home of its own',
};

/** The command's words below the program (`daemon start`). */
function pathOf(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** The per-user socket this CLI uses, or undefined (root, an own home, or no socket: the command answers as before). */
async function socketOf(home: string | undefined): Promise<string | undefined> {
  const { userSocketFor } = await import('../remote/user-socket.js');
  try {
    return userSocketFor(home);
  } catch {
    return undefined;
  }
}

/**
 * Registers the ordinary user's side of the commands that do not go through `withAwc`
 * (docs/how-to/ordinary-users.md): a hook refuses {@link ADMIN_COMMANDS} with E_PERMISSION
 * and a hint naming the command root runs, when this CLI is a client of the root daemon.
 */
export const command: CliCommand = {
  register(program: Command, { globals: g }: CliContext): void {
    program.hook('preAction', async (_self, action) => {
      const why = ADMIN_COMMANDS[pathOf(action)];
      if (why !== undefined && (await socketOf(g().home)) !== undefined) throw adminOnly(pathOf(action), why);
    });
  },
};

/**
 * `awc doctor` and `awc daemon status` for an ordinary user: answered through their socket
 * (the daemon's driver report; who the daemon takes them for). Resolves false when this CLI
 * is not a client of the root daemon (the command runs as before).
 * @throws E_DAEMON_UNAVAILABLE (the socket is there but the daemon does not answer)
 */
export async function answerForUser(what: 'doctor' | 'status', g: { home?: string; namespace?: string }, o: Output): Promise<boolean> {
  const socket = await socketOf(g.home);
  if (socket === undefined) return false;
  const { UserClient } = await import('../../daemon/users/user-client.js');
  const client = new UserClient(socket);
  const status = await client.status();
  if (what === 'status') {
    o.result(
      { running: true, ...status },
      () => `awcd running (pid ${status.pid}); you are ${status.user} (uid ${status.uid}), namespaces ${status.namespaces.join(', ')}`,
    );
    return true;
  }
  const d = (await client.call(g.namespace ?? process.env.AWC_NAMESPACE ?? 'default', 'doctor', [])) as { driver: string; reason: string };
  const r = { ...d, daemon: { running: true, user: status.user, namespaces: status.namespaces } };
  o.result(r, () =>
    [
      `driver: ${d.driver} (the host daemon's, as root)`,
      `why: ${d.reason}`,
      `daemon: running; you are ${status.user}, namespaces ${status.namespaces.join(', ')}`,
    ].join('\n'),
  );
  return true;
}
