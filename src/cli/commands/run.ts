import type { CliCommand, CliContext } from './command.js';
import { resolve } from 'node:path';
import { Option, type Command } from 'commander';
import type { PrintedRunTarget } from '../warm/front-run.js';
import { AwcError } from '../../core/errors.js';
import { inProcess } from '../remote/through-daemon.js';

/** Signals a terminal sends to its foreground group: the command gets them itself, `awc run` waits on. */
const TERMINAL_SIGNALS = ['SIGINT', 'SIGQUIT', 'SIGTSTP'] as const;
/** Signals sent to `awc run` alone (kill, a supervisor): passed on to the command. */
const PASSED_ON = ['SIGTERM', 'SIGHUP'] as const;

/**
 * Registers `awc run <workspace> [--at PATH] -- <command…>` (docs/reference/run.md): the
 * command runs with the workspace mounted at its stable path (the path its snapshot was
 * imported from, or `--at`) in a private mount namespace, with this process's terminal,
 * environment and umask, in the same place under the stable path when started inside the
 * workspace's mount. The exit status is the command's (128 + a signal's number).
 * An ordinary user's command goes through the root daemon, which starts it as them.
 * @throws E_NOT_MOUNTED, E_USAGE (no stable path), E_MOUNT_FAILED, E_PERMISSION (a user no daemon serves, a sandboxed caller)
 */
export const command: CliCommand = {
  register(program: Command, { withAwc, globals }: CliContext): void {
    program
      .command('run <workspace> <command> [args...]')
      .description(
        'run a command with a mounted workspace shown at its stable path (where its snapshot was imported from, or --at) in a private mount namespace; put -- before the command',
      )
      .option('--at <path>', 'the directory the workspace shows at for the command (default: the path its base snapshot was imported from)')
      // the front's fast route (src/cli/warm/front-run.ts): a warm worker resolves the run and prints it; the front starts it
      .addOption(new Option('--print-target', 'print where the command would run (JSON) and run nothing').hideHelp())
      .action((ref: string, command: string, args: string[], opts: { at?: string; printTarget?: boolean }) =>
        withAwc(async (awc) => {
          if (process.getuid?.() !== 0) {
            if (opts.printTarget) throw new AwcError('E_USAGE', '--print-target is for root');
            return void (process.exitCode = await runThroughDaemon(globals(), ref, command, args, opts.at));
          }
          const [{ runTarget, cwdInNamespace }, { startInNamespace, waitInForeground }] = await Promise.all([
            import('../../service/refs/run-target.js'),
            import('../../host/mount/run-namespace.js'),
          ]);
          const cwd = process.cwd();
          const home = inProcess(awc, 'config');
          const t = await runTarget(home, home.config.host, ref, opts.at, cwd);
          if (opts.printTarget) {
            const printed: PrintedRunTarget = { source: t.source, at: t.at, cwd: cwdInNamespace(t, cwd), command, args };
            return void process.stdout.write(`${JSON.stringify(printed)}\n`);
          }
          const env = ownEnv();
          const r = startInNamespace({
            source: t.source,
            at: t.at,
            cwd: cwdInNamespace(t, cwd),
            command,
            args,
            env,
            stdio: ['inherit', 'inherit', 'inherit'],
          });
          process.exitCode = await waitInForeground(r);
        }),
      );
  },
};

/** The caller's environment as strings. */
function ownEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  return env;
}

/**
 * An ordinary user's `awc run`: the root daemon makes the namespace and starts the command as
 * this user with this process's stdio (src/daemon/users/user-run.ts); signals this process gets are
 * passed on. Returns the command's exit status.
 * @throws E_PERMISSION (no daemon serves this user: only root makes mount namespaces), what the daemon throws
 */
async function runThroughDaemon(
  g: { home?: string; namespace?: string },
  ref: string,
  command: string,
  args: string[],
  at?: string,
): Promise<number> {
  const [{ userSocketFor }, { UserClient }, { randomBytes }] = await Promise.all([
    import('../remote/user-socket.js'),
    import('../../daemon/users/user-client.js'),
    import('node:crypto'),
  ]);
  const socket = userSocketFor(g.home);
  if (socket === undefined)
    throw new AwcError(
      'E_PERMISSION',
      '`awc run` needs a private mount namespace: only root, or the root daemon for a user it serves, makes one',
      {
        hint: 'Use the root daemon (drop --home; see docs/how-to/ordinary-users.md), or run it as root.',
      },
    );
  const client = new UserClient(socket);
  const namespace = g.namespace ?? process.env.AWC_NAMESPACE ?? 'default';
  const id = randomBytes(12).toString('hex');
  const umask = process.umask(0o022);
  process.umask(umask);
  const passOn = (sig: NodeJS.Signals) => void client.runSignal(namespace, id, sig);
  const signals = [...TERMINAL_SIGNALS.filter((s) => s !== 'SIGTSTP'), ...PASSED_ON] as NodeJS.Signals[];
  for (const s of signals) process.on(s, passOn);
  try {
    // a mount path is the caller's: made absolute here, where its working directory is
    const wsRef = ref.includes('/') || ref === '.' ? resolve(ref) : ref;
    return await client.run({ namespace, id, ref: wsRef, at, cwd: process.cwd(), command, args, env: ownEnv(), umask });
  } finally {
    for (const s of signals) process.off(s, passOn);
  }
}
