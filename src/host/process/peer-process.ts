import { readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { AwcError } from '../../core/errors.js';
import { requireLibc as libc } from '../sys/libc.js';

const SOL_SOCKET = 1;
const SO_PEERCRED = 17;
/** RLIMIT_CPU (0) … RLIMIT_RTTIME (15): every resource limit Linux has. */
const RLIMITS = 16;

/**
 * The process at the other end of the connected Unix socket `fd`, as the kernel recorded it
 * when it connected (SO_PEERCRED: pid in this process's pid namespace, uid, gid).
 * @throws E_UNSUPPORTED (no libc through koffi), E_IO (the call failed)
 */
export function peerCredentials(fd: number): { pid: number; uid: number; gid: number } {
  const buf = Buffer.alloc(12);
  const len = [12];
  if (libc().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, buf, len) !== 0 || len[0] !== 12)
    throw new AwcError('E_IO', `SO_PEERCRED failed on descriptor ${fd}`);
  return { pid: buf.readInt32LE(0), uid: buf.readUInt32LE(4), gid: buf.readUInt32LE(8) };
}

/** `/proc/<pid>/status` lines that say who a process is and how it is confined. */
const STATUS_FIELDS = ['Uid', 'Gid', 'Groups', 'NoNewPrivs', 'Seccomp', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'];
const NAMESPACES = ['mnt', 'net', 'pid', 'user', 'ipc', 'uts', 'cgroup', 'time'];

/** The fields of /proc/<pid>/status by name. @throws when it cannot be read */
export function statusOf(pid: number | 'self'): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out.set(line.slice(0, i), line.slice(i + 1).trim());
  }
  return out;
}

function readOr(path: string, read: (p: string) => string): string {
  try {
    return read(path);
  } catch {
    return '';
  }
}

/** Every LSM label of `pid` (attr/current and each LSM's attr/<lsm>/current), joined; '' where none is readable. */
export function securityLabels(pid: number | 'self'): string {
  const read = (p: string) => readOr(p, (x) => readFileSync(x, 'utf8')).trim();
  let lsms: string[] = [];
  try {
    lsms = readdirSync(`/proc/${pid}/attr`, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
  } catch {
    // no per-LSM directories on this kernel
  }
  return [read(`/proc/${pid}/attr/current`), ...lsms.map((l) => `${l}=${read(`/proc/${pid}/attr/${l}/current`)}`)].join('\n');
}

/** Another namespace or root directory of `pid` than this process's ('<ns> namespace', 'root directory'), or undefined. @throws when /proc cannot be read */
export function placeDifference(pid: number): string | undefined {
  for (const ns of NAMESPACES) {
    const mine = readOr(`/proc/self/ns/${ns}`, readlinkSync);
    if (mine !== '' && readlinkSync(`/proc/${pid}/ns/${ns}`) !== mine) return `${ns} namespace`;
  }
  const root = statSync(`/proc/${pid}/root`);
  const ownRoot = statSync('/proc/self/root');
  return root.dev !== ownRoot.dev || root.ino !== ownRoot.ino ? 'root directory' : undefined;
}

/**
 * Which of its own confinement a process would compare with another's: the fields of
 * /proc/<pid>/status that must match, and whether the cgroup must too.
 */
export interface DifferenceChecks {
  /** `/proc/<pid>/status` fields compared (in this order). */
  statusFields: readonly string[];
  /** Whether /proc/<pid>/cgroup must match. */
  cgroup: boolean;
}

/**
 * The first difference between process `pid` and this one, checked in this order: namespaces
 * and root directory (placeDifference), the `checks.statusFields` of /proc/<pid>/status, a
 * tracer (TracerPid: a ptrace sandbox, or strace: a command must run where its tracer sees
 * it), every LSM label (securityLabels), and the cgroup when `checks.cgroup`. Returns the
 * difference's name, or undefined when there is none. A process that is gone, or whose /proc
 * this one may not read, differs ('unreadable'). The one algorithm behind
 * confinementDifference (a warm worker's peers) and sandboxDifference (a user's `awc run`).
 */
export function processDifference(pid: number, checks: DifferenceChecks): string | undefined {
  try {
    const where = placeDifference(pid);
    if (where) return where;
    const theirs = statusOf(pid);
    const mine = statusOf('self');
    for (const f of checks.statusFields) if ((theirs.get(f) ?? '') !== (mine.get(f) ?? '')) return f;
    if ((theirs.get('TracerPid') ?? '0') !== '0') return 'a tracer (TracerPid)';
    if (securityLabels(pid) !== securityLabels('self')) return 'security label';
    if (checks.cgroup && readFileSync(`/proc/${pid}/cgroup`, 'utf8') !== readFileSync('/proc/self/cgroup', 'utf8')) return 'cgroup';
    return undefined;
  } catch {
    return 'unreadable';
  }
}

/**
 * What makes process `pid` differ from this one in identity or confinement, as the kernel
 * shows it in /proc: namespaces, root directory, user and group ids (real, effective, saved,
 * filesystem), supplementary groups, capabilities, no_new_privs, seccomp, a tracer, every
 * LSM label (AppArmor, SELinux, each LSM's attr directory) and the cgroup. Returns the first difference's name, or undefined when
 * there is none: then what this process does is what `pid` could have done itself.
 * A process that is gone, or whose /proc this one may not read, differs ('unreadable').
 */
export function confinementDifference(pid: number): string | undefined {
  return processDifference(pid, { statusFields: STATUS_FIELDS, cgroup: true });
}

/**
 * Gives this process the resource limits (every RLIMIT, soft and hard) of process `pid`
 * (prlimit needs the same uid and gid as it, or CAP_SYS_RESOURCE), and its nice value where
 * that is allowed. Returns why it could not (a hard limit of `pid` above this process's:
 * raising it needs privileges this process must not have), or undefined once done.
 */
export function adoptLimits(pid: number): string | undefined {
  const { prlimit } = libc();
  for (let r = 0; r < RLIMITS; r++) {
    const theirs = Buffer.alloc(16);
    const mine = Buffer.alloc(16);
    if (prlimit(pid, r, null, theirs) !== 0 || prlimit(0, r, null, mine) !== 0) return `resource limit ${r} unreadable`;
    if (theirs.equals(mine)) continue;
    if (theirs.readBigUInt64LE(8) > mine.readBigUInt64LE(8)) return `resource limit ${r} above this worker's`;
    if (prlimit(0, r, theirs, null) !== 0) return `resource limit ${r} not settable`;
  }
  try {
    setPriority(getPriority(pid));
  } catch {
    // a higher priority than this worker's needs root: only the timing differs
  }
  return undefined;
}

/** Loads what the checks above call (koffi, libc), ahead of the first connection. @throws E_UNSUPPORTED */
export function preparePeerChecks(): void {
  libc();
}

/**
 * Moves process `pid` into the cgroup (v2) of process `of` (root: writes `pid` to that
 * cgroup's `cgroup.procs`), so what `pid` runs is accounted and limited as `of` is. Returns
 * false when it could not (cgroup v1, a cgroup that does not take processes, no permission).
 */
export function joinCgroupOf(pid: number, of: number): boolean {
  try {
    const line = readFileSync(`/proc/${of}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('0::'));
    if (!line) return false;
    if (
      line ===
      readFileSync(`/proc/${pid}/cgroup`, 'utf8')
        .split('\n')
        .find((l) => l.startsWith('0::'))
    )
      return true;
    const path = line.slice(3);
    if (path.includes('..')) return false;
    writeFileSync(`/sys/fs/cgroup${path}/cgroup.procs`, `${pid}\n`);
    return true;
  } catch {
    return false;
  }
}
