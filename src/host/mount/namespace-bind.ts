import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { setPriority } from 'node:os';
import { AwcError, toAwcError } from '../../core/errors.js';
import { fdPath } from '../../core/dir-fd.js';
import { requireLibc, type LibcCalls } from '../sys/libc.js';
import { openOwnedDir, type OwnedTarget } from './owned-target.js';
import { DETACH_OTHER_AWC_MOUNTS } from './run-namespace.js';

/**
 * What the root daemon asks of the stage that runs inside an ordinary user's `awc run`
 * namespace (src/host/mount/run-bind-main.ts reads it as JSON from descriptor 3).
 */
export interface BindSpec {
  /** The workspace's mount path (absolute): opened, then proved to be the workspace's overlay by `upper`. */
  source: string;
  /** The workspace's upper directory (absolute): the overlay at `source` must have it as its `upperdir`. */
  upper: string;
  /** The stable path (absolute): walked without symlinks; it must be a directory owned by `uid`. */
  at: string;
  /** The caller: the command runs as them. */
  uid: number;
  gid: number;
  /** Supplementary groups ([] for none). */
  groups: number[];
  /** The command's working directory in the namespace, umask (octal string), command and arguments. */
  cwd: string;
  umask: string;
  command: string;
  args: string[];
  /** The command's whole environment (set by `env -i` after the drop, never seen by a root process). */
  env: Record<string, string>;
  /** The caller's resource limits (soft, hard; decimal strings) by resource number, set on this process just before the exec. */
  limits: [string, string][];
  /** The caller's nice value. */
  nice: number;
}

/** A failure of the stage, as it reports it to the daemon on descriptor 4. */
export interface BindFailure {
  code: string;
  message: string;
  hint?: string;
}

const MS_BIND = 4096;
const F_SETFD = 2;
const FD_CLOEXEC = 1;
/** The programs executed after the bind: absolute paths in root-owned system directories only. */
const SETPRIV = '/usr/bin/setpriv';
const ENV = '/usr/bin/env';
const SH = '/bin/sh';
/** Runs as the caller (after the drop and `env -i`): its working directory and umask, then the command. */
const USER_STAGE = 'cd -- "$1" || exit 125\numask "$2"\nshift 2\nexec "$@"';

/** A path as /proc/self/mountinfo writes it (space, tab, newline and backslash in octal). */
function mountinfoEscape(p: string): string {
  return p.replace(/[ \t\n\\]/g, (ch) => `\\${ch.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/**
 * Checks that descriptor `fd` lies on the overlay whose upper directory is `upper`: its mount
 * (`mnt_id` of /proc/self/fdinfo) is found in /proc/self/mountinfo with type overlay and that
 * `upperdir`. A path the caller swapped for another directory, or a workspace unmounted and
 * something else put there, is refused: only the caller's own workspace is ever bound.
 * @throws E_NOT_MOUNTED
 */
function checkWorkspaceMount(fd: number, upper: string, source: string): void {
  const info = fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
  const id = /^mnt_id:\s*(\d+)$/m.exec(info)?.[1];
  const want = `upperdir=${mountinfoEscape(upper)}`;
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f[0] !== id) continue;
    const dash = f.indexOf('-');
    const type = f[dash + 1];
    const superOpts = (f[dash + 3] ?? '').split(',');
    if (type === 'overlay' && superOpts.includes(want)) return;
    break;
  }
  throw new AwcError('E_NOT_MOUNTED', `${source} is not the workspace's mount any more`, {
    hint: 'Mount the workspace again (`awc mount`), then run `awc run` again.',
  });
}

/** Opens the workspace's mount root (a directory; never a device or fifo) and checks it. @throws E_NOT_MOUNTED */
function openWorkspace(spec: BindSpec): number {
  let fd: number;
  try {
    fd = fs.openSync(spec.source, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch {
    throw new AwcError('E_NOT_MOUNTED', `${spec.source} cannot be opened as the workspace's mount`, {
      hint: 'Mount the workspace again (`awc mount`), then run `awc run` again.',
    });
  }
  try {
    checkWorkspaceMount(fd, spec.upper, spec.source);
    return fd;
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
}

/**
 * Gives this process the caller's resource limits, each hard limit no higher than this
 * process's (raising one needs CAP_SYS_RESOURCE: the command then gets less, never more) and
 * each soft limit no higher than its hard one; and the caller's nice value where allowed
 * (a higher priority needs CAP_SYS_NICE; only the timing differs).
 * @throws E_PERMISSION (a limit that cannot be set: the command would run outside the caller's limits)
 */
function takeLimits(c: LibcCalls, spec: BindSpec): void {
  for (let r = 0; r < spec.limits.length; r++) {
    const now = Buffer.alloc(16);
    if (c.prlimit(0, r, null, now) !== 0) throw new AwcError('E_PERMISSION', `cannot read resource limit ${r} (errno ${c.errno()})`);
    const [soft, hard] = spec.limits[r]!.map(BigInt) as [bigint, bigint];
    const h = hard < now.readBigUInt64LE(8) ? hard : now.readBigUInt64LE(8);
    const next = Buffer.alloc(16);
    next.writeBigUInt64LE(soft < h ? soft : h, 0);
    next.writeBigUInt64LE(h, 8);
    if (c.prlimit(0, r, next, null) !== 0)
      throw new AwcError('E_PERMISSION', `cannot give the command the caller's resource limit ${r} (errno ${c.errno()})`);
  }
  try {
    setPriority(spec.nice);
  } catch {
    // a higher priority than this process's needs CAP_SYS_NICE
  }
}

/** The stable path, opened as openOwnedDir does for the caller; a missing one or a file is E_USAGE, as `awc run` says it as root. */
function openStablePath(spec: BindSpec): OwnedTarget {
  try {
    return openOwnedDir(spec.at, spec.uid, { gid: spec.gid, groups: spec.groups });
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_TARGET_BUSY')
      throw new AwcError('E_USAGE', err.message.replace(/^\S+/, `the stable path ${spec.at}`), {
        hint: `Create it (\`mkdir -p ${spec.at}\`), or pass another directory with --at.`,
      });
    throw err;
  }
}

/**
 * The stage inside an ordinary user's `awc run` namespace, as root (docs/explanation/stable-paths.md
 * "The route for ordinary users"): opens the workspace's mount and proves it is the caller's
 * workspace (checkWorkspaceMount); walks the stable path from `/` without following any
 * symlink, through directories the caller may search, and checks it is a directory the
 * caller owns (openOwnedDir), so the bind changes
 * nothing the caller could not change by writing there; binds the first over the second
 * through their descriptors (`/proc/self/fd/N`, as runc mounts, so nothing swapped after the
 * checks is mounted on); the bind keeps the workspace mount's nosuid,nodev. It takes the
 * caller's resource limits and nice value (takeLimits). Then it says `ok`
 * on `report` (which the exec closes) and this process becomes setpriv(1), which drops to the caller
 * (uid, gid, groups; no capabilities; no_new_privs), then `env -i` gives the command exactly
 * `spec.env`. Right after the bind, the namespace's copies of other AWC mounts are detached
 * (DETACH_OTHER_AWC_MOUNTS: sh, awk and umount from the system PATH). Only those and setpriv, env
 * and sh, by absolute path from root-owned system directories, are executed as root after the bind.
 * @throws E_NOT_MOUNTED (not the workspace's mount), E_PERMISSION (a symlink on the stable
 *   path, not the caller's), E_TARGET_BUSY (missing, not a directory), E_MOUNT_FAILED (the bind or the exec failed)
 */
export function bindAndBecomeCaller(spec: BindSpec, report: number): never {
  const c = requireLibc();
  const src = openWorkspace(spec);
  const dst = openStablePath(spec);
  if (c.mount(fdPath(src), fdPath(dst.fd), null, MS_BIND, null) !== 0) {
    throw new AwcError('E_MOUNT_FAILED', `cannot show the workspace at ${spec.at} (errno ${c.errno()})`);
  }
  fs.closeSync(src);
  dst.close();
  // the namespace's copies of other AWC mounts: a long command must not keep them alive (run-namespace.ts)
  spawnSync(SH, ['-c', DETACH_OTHER_AWC_MOUNTS], { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', AWC_KEEP: spec.at }, stdio: 'ignore' });
  // Node opens its stdio close-on-exec: the command gets the caller's stdin, stdout and stderr;
  // the report closes at the exec (a failed exec still writes on it after "ok")
  for (const fd of [0, 1, 2]) c.fcntl(fd, F_SETFD, 'int', 0);
  c.fcntl(report, F_SETFD, 'int', FD_CLOEXEC);
  takeLimits(c, spec);
  fs.writeSync(report, 'ok\n');
  const drop = [
    SETPRIV,
    `--reuid=${spec.uid}`,
    `--regid=${spec.gid}`,
    spec.groups.length > 0 ? `--groups=${spec.groups.join(',')}` : '--clear-groups',
    '--inh-caps=-all',
    '--no-new-privs',
    '--',
  ];
  const user = [ENV, '-i', '--', ...Object.entries(spec.env).map(([k, v]) => `${k}=${v}`), SH, '-c', USER_STAGE, 'awc-run'];
  const argv = [...drop, ...user, spec.cwd, spec.umask, spec.command, ...spec.args];
  c.execve(SETPRIV, [...argv, null], ['PATH=/usr/sbin:/usr/bin:/sbin:/bin', null]);
  throw new AwcError('E_MOUNT_FAILED', `cannot execute ${SETPRIV} (errno ${c.errno()})`, {
    hint: 'awc run for ordinary users needs util-linux setpriv.',
  });
}

/** `err` as the stage reports it (an AwcError's code, message and hint). */
export function bindFailure(err: unknown): BindFailure {
  const e = toAwcError(err);
  return { code: e.code, message: e.message, hint: e.hint };
}
