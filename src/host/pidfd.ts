import { closeSync, readFileSync } from 'node:fs';
import { AwcError } from '../core/errors.js';
import { libcLoadError, loadLibc } from './libc.js';

/** x86_64 and aarch64 share the numbers of system calls added after 4.20. */
const SYS_PIDFD_OPEN = 434;
const SYS_PIDFD_GETFD = 438;

type Syscall = (nr: number, ...typedArgs: unknown[]) => number;
let syscall: Syscall | undefined;

function sys(): Syscall {
  if (syscall) return syscall;
  const c = loadLibc();
  if (!c) throw new AwcError('E_UNSUPPORTED', `cannot reach libc: ${libcLoadError()}`);
  syscall = c.func('long syscall(long nr, ...)') as Syscall;
  return syscall;
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

/**
 * Duplicates descriptors `fds` of process `pid` into this process (pidfd_open(2) then
 * pidfd_getfd(2), Linux 5.6+): the same open file descriptions, so offsets, O_APPEND and a
 * terminal stay what the caller has (the way systemd and crun take a client's stdio). The
 * caller must hold PTRACE_MODE_ATTACH over `pid` (root does). `uid`: the process must still
 * run as it once its pidfd is held (a pid reused by another user's process is refused).
 * Returns the new descriptors (the caller closes them).
 * @throws E_UNSUPPORTED (no libc, or a kernel without pidfd_getfd), E_PERMISSION (not allowed, or `pid` is not `uid`'s any more),
 *   E_NOT_FOUND (no such process or descriptor)
 */
export function takeDescriptors(pid: number, uid: number, fds: readonly number[]): number[] {
  const call = sys();
  const pidfd = call(SYS_PIDFD_OPEN, 'int', pid, 'unsigned int', 0);
  if (pidfd < 0) throw errnoError(`pidfd_open(${pid})`, loadLibc()!.errno());
  const out: number[] = [];
  try {
    // held pidfd: the pid cannot be reused by another process until it is closed
    if (uidOf(pid) !== uid) throw new AwcError('E_PERMISSION', `process ${pid} is not the caller's any more`);
    for (const fd of fds) {
      const got = call(SYS_PIDFD_GETFD, 'int', pidfd, 'int', fd, 'unsigned int', 0);
      if (got < 0) throw errnoError(`pidfd_getfd(${pid}, ${fd})`, loadLibc()!.errno());
      out.push(got);
    }
    return out;
  } catch (err) {
    for (const fd of out) closeSync(fd);
    throw err;
  } finally {
    closeSync(pidfd);
  }
}

function errnoError(call: string, errno: number): AwcError {
  // ENOSYS 38, EPERM 1, ESRCH 3, EBADF 9
  if (errno === 38) return new AwcError('E_UNSUPPORTED', `${call}: this kernel has no pidfd_getfd (Linux 5.6 or later is needed)`);
  if (errno === 1) return new AwcError('E_PERMISSION', `${call}: not permitted`);
  if (errno === 3 || errno === 9) return new AwcError('E_NOT_FOUND', `${call}: no such process or descriptor`);
  return new AwcError('E_IO', `${call} failed (errno ${errno})`);
}
