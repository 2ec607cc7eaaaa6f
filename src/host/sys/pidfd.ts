import { closeSync, readFileSync } from 'node:fs';
import { AwcError } from '../../core/errors.js';
import { requireLibc as sys } from './libc.js';

/** x86_64 and aarch64 share the numbers of system calls added after 4.20. */
const SYS_PIDFD_SEND_SIGNAL = 424;
const SYS_PIDFD_OPEN = 434;
const SYS_PIDFD_GETFD = 438;
const SOL_SOCKET = 1;
const SO_PEERCRED = 17;
/** Linux 6.5: a pidfd of the process that connected, taken by the kernel at connect(2). */
const SO_PEERPIDFD = 77;

/** The process at the other end of a Unix socket, held by a pidfd (close it when done). */
export interface HeldPeer {
  /** Its pid in this process's pid namespace (for /proc; trust it only while {@link alive} says so). */
  pid: number;
  /** Its uid and gid when it connected (SO_PEERCRED). */
  uid: number;
  gid: number;
  /** A pidfd of that very process: it names it even after its pid is reused. */
  pidfd: number;
  close(): void;
}

/**
 * Holds the process that connected the Unix socket `fd`: SO_PEERPIDFD (Linux 6.5+, the kernel
 * takes the pidfd at connect(2), so no pid reuse can slip in), else pidfd_open(2) of the
 * SO_PEERCRED pid, checked against the credentials (a small window remains on older kernels:
 * docs/explanation/stable-paths.md). The pid is the pidfd's own (/proc/self/fdinfo "Pid:").
 * @throws E_UNSUPPORTED (no libc, or no pidfd_open: Linux 5.3), E_PERMISSION (the caller is gone or cannot be told)
 */
export function holdPeer(fd: number): HeldPeer {
  const c = sys();
  const cred = Buffer.alloc(12);
  const len = [12];
  if (c.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, len) !== 0 || len[0] !== 12)
    throw new AwcError('E_PERMISSION', `cannot tell who is calling (SO_PEERCRED, errno ${c.errno()})`);
  const uid = cred.readUInt32LE(4);
  const gid = cred.readUInt32LE(8);
  const pfd = Buffer.alloc(4);
  const plen = [4];
  let pidfd = c.getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, pfd, plen) === 0 && plen[0] === 4 ? pfd.readInt32LE(0) : -1;
  if (pidfd < 0) {
    pidfd = c.syscall(SYS_PIDFD_OPEN, 'int', cred.readInt32LE(0), 'unsigned int', 0);
    if (pidfd < 0) throw errnoError('pidfd_open', c.errno());
  }
  const pid = pidOf(pidfd);
  if (pid === undefined || uidOf(pid) !== uid || !alive(pidfd)) {
    closeSync(pidfd);
    throw new AwcError('E_PERMISSION', 'the calling process is gone');
  }
  return { pid, uid, gid, pidfd, close: () => closeSync(pidfd) };
}

/**
 * True while the process `pidfd` names still runs (pidfd_send_signal with signal 0). Read
 * /proc/<pid> first, then ask this: a true answer means the pid was still that process's.
 */
export function alive(pidfd: number): boolean {
  return sys().syscall(SYS_PIDFD_SEND_SIGNAL, 'int', pidfd, 'int', 0, 'void *', null, 'unsigned int', 0) === 0;
}

/**
 * Duplicates descriptors `fds` of the process `pidfd` names into this process (pidfd_getfd(2),
 * Linux 5.6+): the same open file descriptions, so offsets, O_APPEND and a terminal stay
 * what the caller has (the way systemd and crun take a client's stdio). Needs
 * PTRACE_MODE_ATTACH over it (root has it). Returns the new descriptors (the caller closes them).
 * @throws E_UNSUPPORTED (a kernel without pidfd_getfd), E_PERMISSION (not allowed), E_NOT_FOUND (no such process or descriptor)
 */
export function takeDescriptors(pidfd: number, fds: readonly number[]): number[] {
  const c = sys();
  const out: number[] = [];
  try {
    for (const fd of fds) {
      const got = c.syscall(SYS_PIDFD_GETFD, 'int', pidfd, 'int', fd, 'unsigned int', 0);
      if (got < 0) throw errnoError(`pidfd_getfd(${fd})`, c.errno());
      out.push(got);
    }
    return out;
  } catch (err) {
    for (const fd of out) closeSync(fd);
    throw err;
  }
}

/** The pid a pidfd names (/proc/self/fdinfo/<fd> "Pid:"; -1 there once it exited), or undefined. */
function pidOf(pidfd: number): number | undefined {
  try {
    const m = /^Pid:\s*(-?\d+)$/m.exec(readFileSync(`/proc/self/fdinfo/${pidfd}`, 'utf8'));
    const pid = m ? Number(m[1]) : NaN;
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The real uid of process `pid` (/proc/<pid>/status), or undefined when it is gone. */
function uidOf(pid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Uid:'));
    return line ? Number(line.split(/\s+/)[1]) : undefined;
  } catch {
    return undefined;
  }
}

function errnoError(call: string, errno: number): AwcError {
  // ENOSYS 38, EPERM 1, ESRCH 3, EBADF 9
  if (errno === 38) return new AwcError('E_UNSUPPORTED', `${call}: this kernel lacks it (Linux 5.6 or later is needed)`);
  if (errno === 1) return new AwcError('E_PERMISSION', `${call}: not permitted`);
  if (errno === 3 || errno === 9) return new AwcError('E_NOT_FOUND', `${call}: no such process or descriptor`);
  return new AwcError('E_IO', `${call} failed (errno ${errno})`);
}
