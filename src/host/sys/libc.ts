import { createRequire } from 'node:module';
import { AwcError } from '../../core/errors.js';

/** libc through koffi: declare a function by its C signature, and read errno after a call. */
export interface Libc {
  func(signature: string): unknown;
  errno(): number;
}

let libc: Libc | null | undefined;
let loadError = '';

/**
 * libc.so.6 through koffi (a maintained FFI package shipping prebuilt binaries), loaded once
 * on first use, for the system calls Node has no binding for (ioctl, utimensat…).
 * @returns null when koffi or libc cannot load here (see {@link libcLoadError})
 */
export function loadLibc(): Libc | null {
  if (libc !== undefined) return libc;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as { load(name: string): { func(sig: string): unknown }; errno(): number };
    const lib = koffi.load('libc.so.6');
    libc = { func: (sig) => lib.func(sig), errno: () => koffi.errno() };
  } catch (err) {
    loadError = String(err);
    libc = null;
  }
  return libc;
}

/** Why {@link loadLibc} returned null ('' when it did not). */
export function libcLoadError(): string {
  return loadError;
}

/** mount(2) as bound: called in this thread, or on a libuv pool thread with `async`. */
export type MountFn = ((source: string, target: string, fstype: string | null, flags: number, data: string | null) => number) & {
  async(source: string, target: string, fstype: string, flags: number, data: string, cb: (err: unknown, res: number) => void): void;
};

/**
 * The libc functions AWC calls, as koffi converts their C signatures (LIBC_SIGNATURES): a
 * `Buffer` for an `_Out_`/`const uint8_t *`, a one-element array for an `_Inout_` integer, a
 * type name before each variadic argument. Each returns the C result (-1 and {@link LibcCalls.errno}
 * on failure).
 */
export interface LibcCalls {
  getsockopt(fd: number, level: number, name: number, val: Buffer, len: number[]): number;
  prlimit(pid: number, resource: number, next: Buffer | null, old: Buffer | null): number;
  syscall(nr: number, ...typedArgs: unknown[]): number;
  mount: MountFn;
  /** fcntl(2) with its variadic argument typed (`'int', 1`). */
  fcntl(fd: number, cmd: number, ...typed: unknown[]): number;
  /** fcntl(2) with one int argument. */
  fcntl3(fd: number, cmd: number, arg: number): number;
  execve(path: string, argv: (string | null)[], envp: (string | null)[]): number;
  lseek(fd: number, offset: bigint | number, whence: number): bigint | number;
  utimensat(dirFd: number, path: string | Buffer, times: BigInt64Array, flags: number): number;
  futimens(fd: number, times: BigInt64Array): number;
  ioctl(fd: number, req: number, arg: number[]): number;
  /** inotify_init1(2): a new inotify descriptor, flags IN_NONBLOCK | IN_CLOEXEC…. */
  inotify_init1(flags: number): number;
  /** inotify_add_watch(2): a watch descriptor for `path` (not followed when IN_DONT_FOLLOW is in `mask`). */
  inotify_add_watch(fd: number, path: string, mask: number): number;
  /** statx(2): the stat of `path` (NUL-terminated bytes) relative to directory `dirFd`, into `buf` (256 bytes, struct statx). */
  statx(dirFd: number, path: Uint8Array, flags: number, mask: number, buf: Uint8Array): number;
  /** errno after the last call of this thread. */
  errno(): number;
}

/** The C signature (koffi's syntax) of each function of {@link LibcCalls}. */
const LIBC_SIGNATURES: Record<Exclude<keyof LibcCalls, 'errno'>, string> = {
  getsockopt: 'int getsockopt(int fd, int level, int name, _Out_ uint8_t *val, _Inout_ uint32_t *len)',
  prlimit: 'int prlimit(int pid, int resource, const uint8_t *next, _Out_ uint8_t *old)',
  syscall: 'long syscall(long nr, ...)',
  mount: 'int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const char *data)',
  fcntl: 'int fcntl(int fd, int cmd, ...)',
  fcntl3: 'int fcntl(int fd, int cmd, int arg)',
  execve: 'int execve(const char *path, const char **argv, const char **envp)',
  lseek: 'int64_t lseek(int fd, int64_t offset, int whence)',
  utimensat: 'int utimensat(int dirfd, const char *path, const int64_t *times, int flags)',
  futimens: 'int futimens(int fd, const int64_t *times)',
  ioctl: 'int ioctl(int fd, unsigned long req, _Inout_ uint32_t *arg)',
  inotify_init1: 'int inotify_init1(int flags)',
  inotify_add_watch: 'int inotify_add_watch(int fd, const char *path, uint32_t mask)',
  statx: 'int statx(int dirfd, const uint8_t *path, int flags, uint32_t mask, _Out_ uint8_t *buf)',
};

let calls: LibcCalls | null | undefined;

/**
 * The libc functions AWC calls (the one place they are declared), each bound on first use and
 * then kept for the process.
 * @returns null when koffi or libc cannot load here (see {@link libcLoadError})
 */
export function libcCalls(): LibcCalls | null {
  if (calls !== undefined) return calls;
  const c = loadLibc();
  if (!c) return (calls = null);
  const bound = new Map<string, unknown>();
  const out = { errno: () => c.errno() } as LibcCalls;
  for (const [name, signature] of Object.entries(LIBC_SIGNATURES)) {
    Object.defineProperty(out, name, {
      enumerable: true,
      get: () => {
        if (!bound.has(name)) bound.set(name, c.func(signature));
        return bound.get(name);
      },
    });
  }
  return (calls = out);
}

/**
 * {@link libcCalls}, required.
 * @throws E_UNSUPPORTED `<what>: <why libc did not load>` when koffi or libc cannot load here
 */
export function requireLibc(what = 'cannot reach libc'): LibcCalls {
  const c = libcCalls();
  if (!c) throw new AwcError('E_UNSUPPORTED', `${what}: ${libcLoadError()}`);
  return c;
}
