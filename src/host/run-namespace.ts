import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { AwcError } from '../core/errors.js';

/** Who the command runs as when root starts it for an ordinary user (the root daemon's `awc run`). */
export interface RunAsUser {
  uid: number;
  gid: number;
  /** Supplementary groups ([] for none). */
  groups: readonly number[];
}

/** One `awc run`: the workspace's mount, the stable path, and the command. */
export interface NamespaceRun {
  /** The workspace's mount path on this host (absolute). */
  source: string;
  /** The stable path (absolute, an existing directory): in the namespace the workspace shows here. */
  at: string;
  /** The command's working directory in the namespace (absolute). */
  cwd: string;
  command: string;
  args: readonly string[];
  /** The command's whole environment (nothing of this process's is added). */
  env: Readonly<Record<string, string>>;
  /** The command's umask (default: this process's). */
  umask?: number;
  /** Drop to this user with no_new_privs before the command (root only). None: run as this process. */
  asUser?: RunAsUser;
  /** The command's stdin, stdout, stderr: descriptors, or 'inherit'. */
  stdio: readonly [number | 'inherit', number | 'inherit', number | 'inherit'];
  /** A new session and process group (a daemon's child: signals go to the group). Default false: the caller's group and terminal. */
  detached?: boolean;
  /** Hold the command before its mount until {@link RunningCommand.go} (to move it into a cgroup first). */
  gated?: boolean;
}

/** A started `awc run`. */
export interface RunningCommand {
  child: ChildProcess;
  /** Resolves once the namespace is set up and the command is being executed. @throws E_MOUNT_FAILED */
  ready: Promise<void>;
  /** The command's exit: its status, or 128 + the signal's number as a shell reports it. */
  exit: Promise<number>;
  /** Lets a `gated` command go on. */
  go(): void;
}

/**
 * Runs as root in the new mount namespace (made private by unshare): waits for the gate,
 * binds the workspace at the stable path, reports ready on fd 4, then executes the rest of
 * its arguments. Positional arguments only: no path is ever parsed by the shell.
 */
const ROOT_STAGE = [
  'if [ "$3" = gated ]; then IFS= read -r _ <&3 || exit 125; fi',
  'exec 3<&-',
  'mount --bind -- "$1" "$2" || { echo "awc run: cannot show the workspace at $2" >&2; exit 125; }',
  'echo ok >&4; exec 4>&-',
  'shift 3',
  'exec "$@"',
].join('\n');

/** Runs as the command's user: its working directory and umask, then the command. */
const USER_STAGE = 'cd -- "$1" || exit 125\numask "$2"\nshift 2\nexec "$@"';

/** The programs the root stage runs, from the system's own directories only. */
const SYSTEM_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Starts `run.command` with the workspace mounted at `run.at` in a private mount namespace
 * (util-linux `unshare --mount --propagation private`, then `mount --bind`): the host's mount
 * table outside is never changed, and the namespace ends with the command's last process.
 * The root stage runs with a fixed environment; the command gets exactly `run.env`, through
 * `env -i` after the drop to `run.asUser` (setpriv: its uid, gid and groups, no capabilities,
 * no_new_privs, so nothing setuid in the namespace gains privileges). Needs CAP_SYS_ADMIN.
 * Sources: the same steps as `unshare(1)`'s bind examples and bubblewrap's sandbox set-up.
 * @throws E_MOUNT_FAILED (through `ready`: the namespace or the bind could not be made)
 */
export function startInNamespace(run: NamespaceRun): RunningCommand {
  const umask = (run.umask ?? process.umask()).toString(8).padStart(4, '0');
  const envPairs = Object.entries(run.env).map(([k, v]) => `${k}=${v}`);
  const user = ['env', '-i', '--', ...envPairs, '/bin/sh', '-c', USER_STAGE, 'awc-run', run.cwd, umask, run.command, ...run.args];
  const drop = run.asUser
    ? [
        'setpriv',
        `--reuid=${run.asUser.uid}`,
        `--regid=${run.asUser.gid}`,
        ...(run.asUser.groups.length > 0 ? [`--groups=${run.asUser.groups.join(',')}`] : ['--clear-groups']),
        '--inh-caps=-all',
        '--no-new-privs',
        '--',
      ]
    : [];
  const argv = [
    '--mount',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    ROOT_STAGE,
    'awc-run',
    run.source,
    run.at,
    run.gated ? 'gated' : '-',
    ...drop,
    ...user,
  ];
  const stdio: StdioOptions = [...run.stdio, 'pipe', 'pipe'];
  const child = spawn('unshare', argv, { stdio, env: { PATH: SYSTEM_PATH }, detached: run.detached === true });
  const gate = child.stdio[3] as Writable;
  const report = child.stdio[4] as Readable;
  gate.on('error', () => undefined);
  if (!run.gated) gate.end();
  const exit = new Promise<number>((ok, fail) => {
    child.once('error', (err) => fail(new AwcError('E_MOUNT_FAILED', `cannot start unshare(1): ${err.message}`, { cause: err })));
    child.once('exit', (code, signal) => ok(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
  const ready = new Promise<void>((ok, fail) => {
    let said = '';
    report.on('data', (b: Buffer) => (said += b.toString()));
    report.once('end', () => {
      if (said.startsWith('ok')) return ok();
      void exit.then(
        (status) =>
          fail(
            new AwcError('E_MOUNT_FAILED', `awc run could not make the namespace with the workspace at ${run.at} (status ${status})`, {
              hint: 'It needs root (or the root daemon, for an ordinary user) and util-linux unshare and mount; the error above says what failed.',
            }),
          ),
        fail,
      );
    });
  });
  ready.catch(() => undefined);
  return {
    child,
    ready,
    exit,
    go: () => {
      gate.end('go\n');
    },
  };
}
