import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable } from 'node:stream';
import { AwcError } from '../../core/errors.js';

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
  /** The command's stdin, stdout, stderr: descriptors, or 'inherit'. */
  stdio: readonly [number | 'inherit', number | 'inherit', number | 'inherit'];
}

/** A started `awc run`. */
export interface RunningCommand {
  child: ChildProcess;
  /** Resolves once the namespace is set up and the command is being executed. @throws E_MOUNT_FAILED */
  ready: Promise<void>;
  /** The command's exit: its status, or 128 + the signal's number as a shell reports it. */
  exit: Promise<number>;
}

/**
 * The AWC mounts of a mount table that a run's namespace must not keep (awk over
 * /proc/self/mountinfo, proc(5)): every content plane (`fuse.awc`), every overlay whose last
 * data-only lower is one of them (workspaces, and binds of them such as attached directories),
 * and every layer image (erofs) that is such an overlay's first lower; but the mount at
 * `AWC_KEEP` (the stable path's bind) and what is under it. One mount point per line, deepest
 * (last mounted) first, with the table's octal escapes undone; a point holding a newline is
 * left (it cannot be passed on a line).
 */
export const OTHER_AWC_MOUNTS_AWK = String.raw`
function unesc(s) { gsub(/\\040/, " ", s); gsub(/\\011/, "\t", s); gsub(/\\134/, "\\", s); return s }
{ for (i = 7; i <= NF && $i != "-"; i++); type[NR] = $(i + 1); opts[NR] = $(i + 3); at[NR] = $5; if (type[NR] == "fuse.awc") plane[$5] = 1 }
END {
  for (n = 1; n <= NR; n++) if (type[n] == "overlay" && match(opts[n], /lowerdir=[^,]*/)) {
    k = split(substr(opts[n], RSTART + 9, RLENGTH - 9), part, "::")
    if (k > 1 && part[k] in plane) { ours[n] = 1; split(part[1], first, ":"); layer[first[1]] = 1 }
  }
  keep = ENVIRON["AWC_KEEP"]
  for (n = NR; n >= 1; n--) {
    if (!(n in ours) && type[n] != "fuse.awc" && !(type[n] == "erofs" && at[n] in layer)) continue
    if (at[n] ~ /\\012/) continue
    p = unesc(at[n])
    if (p != keep && index(p, keep "/") != 1) print p
  }
}`;

/**
 * Shell (sh, the system PATH): detaches (`umount -l`, paths taken as they are) this mount
 * namespace's copy of every AWC mount OTHER_AWC_MOUNTS_AWK lists but `$AWC_KEEP`. Both routes
 * of `awc run` run it right after their bind: this file's stage for root, and the stage of
 * an ordinary user's run (namespace-bind.ts).
 */
export const DETACH_OTHER_AWC_MOUNTS = `awk '${OTHER_AWC_MOUNTS_AWK}' /proc/self/mountinfo | while IFS= read -r p; do umount -l -c -- "$p" 2>/dev/null || :; done`;

/**
 * Runs in the new mount namespace (made private by unshare), with a fixed environment: binds
 * the workspace at the stable path, then detaches the namespace's copies of every other AWC
 * mount (OTHER_AWC_MOUNTS_AWK: a long command must not keep another workspace, or this one's
 * own mount, alive after the host unmounts it; the bind holds what this run shows), reports
 * ready on fd 3, then executes the rest of its arguments. Positional arguments only: no path
 * is ever parsed by the shell.
 */
const MOUNT_STAGE = [
  'mount --bind -- "$1" "$2" || { echo "awc run: cannot show the workspace at $2" >&2; exit 125; }',
  `AWC_KEEP="$2"; export AWC_KEEP; ${DETACH_OTHER_AWC_MOUNTS}`,
  'echo ok >&3; exec 3>&-',
  'shift 2',
  'exec "$@"',
].join('\n');

/**
 * Runs with the command's environment (after `env -i`): its working directory and umask, then
 * the command (as an argument of the shell, so a name holding "=" is never read by env as a variable).
 */
const COMMAND_STAGE = 'cd -- "$1" || exit 125\numask "$2"\nshift 2\nexec "$@"';

/** The programs the stage runs (unshare, mount, env), from the system's own directories only. */
const SYSTEM_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The status `child` (unshare, and the command it became) ends with: its exit code, or 128 +
 * the number of the signal that ended it, as a shell reports it. @throws E_MOUNT_FAILED (unshare could not start)
 */
export function exitOf(child: ChildProcess): Promise<number> {
  return new Promise<number>((ok, fail) => {
    child.once('error', (err) => fail(new AwcError('E_MOUNT_FAILED', `cannot start unshare(1): ${err.message}`, { cause: err })));
    child.once('exit', (code, signal) => ok(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
}

/**
 * Starts `run.command` with the workspace mounted at `run.at` in a private mount namespace
 * (util-linux `unshare --mount --propagation private`, then `mount --bind`): the host's mount
 * table outside is never changed, and the namespace ends with the command's last process.
 * The stage runs with a fixed environment; the command gets exactly `run.env` (`env -i`).
 * Needs CAP_SYS_ADMIN (root). Source: the steps of `unshare(1)`'s bind-mount examples.
 * An ordinary user's route through the root daemon needs more than this (a bind target
 * checked inside the namespace, a drop with no_new_privs): docs/explanation/stable-paths.md.
 * @throws E_MOUNT_FAILED (through `ready`: the namespace or the bind could not be made)
 */
export function startInNamespace(run: NamespaceRun): RunningCommand {
  const umask = (run.umask ?? process.umask()).toString(8).padStart(4, '0');
  const envPairs = Object.entries(run.env).map(([k, v]) => `${k}=${v}`);
  const argv = [
    '--mount',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    MOUNT_STAGE,
    'awc-run',
    run.source,
    run.at,
    'env',
    '-i',
    '--',
    ...envPairs,
    '/bin/sh',
    '-c',
    COMMAND_STAGE,
    'awc-run',
    run.cwd,
    umask,
    run.command,
    ...run.args,
  ];
  const stdio: StdioOptions = [...run.stdio, 'pipe'];
  const child = spawn('unshare', argv, { stdio, env: { PATH: SYSTEM_PATH } });
  const report = child.stdio[3] as Readable;
  const exit = exitOf(child);
  const ready = new Promise<void>((ok, fail) => {
    let said = '';
    report.on('data', (b: Buffer) => (said += b.toString()));
    report.once('end', () => {
      if (said.startsWith('ok')) return ok();
      void exit.then(
        (status) =>
          fail(
            new AwcError('E_MOUNT_FAILED', `awc run could not make the namespace with the workspace at ${run.at} (status ${status})`, {
              hint: 'It needs root and util-linux unshare and mount; the error above says what failed.',
            }),
          ),
        fail,
      );
    });
  });
  ready.catch(() => undefined);
  return { child, ready, exit };
}

/** Signals a terminal sends to its foreground group: the command gets them itself, `awc run` waits on. */
const TERMINAL_SIGNALS = ['SIGINT', 'SIGQUIT', 'SIGTSTP'] as const;
/** Signals sent to `awc run` alone (kill, a supervisor): passed on to the command. */
const PASSED_ON = ['SIGTERM', 'SIGHUP'] as const;

/**
 * Waits for a command started in this process's terminal and process group: the terminal's
 * signals (Ctrl-C) reach the command directly and are ignored here, SIGTERM and SIGHUP sent to
 * this process alone are passed on. Resolves with the command's status.
 * @throws E_MOUNT_FAILED (the namespace could not be made: nothing ran)
 */
export async function waitInForeground(r: RunningCommand): Promise<number> {
  const ignore = () => undefined;
  const passOn = (sig: NodeJS.Signals) => r.child.kill(sig);
  for (const s of TERMINAL_SIGNALS) process.on(s, ignore);
  for (const s of PASSED_ON) process.on(s, passOn);
  try {
    const status = await r.exit;
    await r.ready;
    return status;
  } finally {
    for (const s of TERMINAL_SIGNALS) process.off(s, ignore);
    for (const s of PASSED_ON) process.off(s, passOn);
  }
}
