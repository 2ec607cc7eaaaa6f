/**
 * File times to the nanosecond. Node 20's utimes family takes seconds as a double and libuv
 * truncates them to whole microseconds (`uv__fs_to_timespec`), so Node alone cannot give a
 * file the nanosecond mtime a snapshot records. Git compares an index entry's mtime to the
 * nanosecond, so a placeholder a few hundred nanoseconds off makes git re-read the file
 * (docs/explanation/design.md#overlay-driver). utimensat(2) and futimens(2) are called
 * through koffi (a maintained FFI package with prebuilt binaries, as FUSE_DEV_IOC_CLONE is in
 * src/host/fuse/dev-clone.ts), loaded on first use; where it cannot load, the functions fall
 * back to Node's microsecond precision and {@link exactTimesSupported} is false.
 */
import * as fs from 'node:fs';
import { constants as osConstants } from 'node:os';
import { toAwcError } from '../../core/errors.js';
import { libcCalls } from './libc.js';
import { fsPath, hasEscape, nameToBytes } from '../../core/raw-name.js';

const AT_FDCWD = -100;
const AT_SYMLINK_NOFOLLOW = 0x100;

/** True when times are set to the exact nanosecond here (koffi and libc load). */
export function exactTimesSupported(): boolean {
  return libcCalls() !== null;
}

/** `struct timespec[2]` (atime, mtime) both set to `ns` (nanoseconds since the epoch, a decimal string; negative allowed). */
function timespecs(ns: string): BigInt64Array {
  const n = BigInt(ns);
  let sec = n / 1_000_000_000n;
  let rem = n % 1_000_000_000n;
  if (rem < 0n) {
    sec -= 1n;
    rem += 1_000_000_000n;
  }
  return new BigInt64Array([sec, rem, sec, rem]);
}

/** Seconds as a double for Node's utimes family that libuv turns into exactly the microsecond of `ns` (the remainder below 1 µs is lost). */
export function microSeconds(ns: string): number {
  const t = timespecs(ns);
  return Number(t[0]) + (Number(t[1] / 1000n) + 0.5) / 1e6;
}

/** An errno of a failed call as the error Node would have thrown (for toAwcError's mapping). */
function errnoError(call: string, errno: number, path?: string): NodeJS.ErrnoException {
  const name = Object.entries(osConstants.errno).find(([, v]) => v === errno)?.[0] ?? `errno ${errno}`;
  const e: NodeJS.ErrnoException = new Error(`${name}: ${call} failed${path ? ` (${path})` : ''}`);
  e.code = name;
  e.errno = -errno;
  e.syscall = call;
  if (path) e.path = path;
  return e;
}

/**
 * Sets the access and modification times of the file open as `fd` to `ns` (nanoseconds since
 * the epoch, decimal string), exactly where supported, else to the microsecond.
 * @throws AwcError by errno (E_PERMISSION, E_NO_SPACE, …)
 */
export function futimesNs(fd: number, ns: string): void {
  const c = libcCalls();
  if (!c) {
    const s = microSeconds(ns);
    fs.futimesSync(fd, s, s);
    return;
  }
  if (c.futimens(fd, timespecs(ns)) !== 0) throw toAwcError(errnoError('futimens', c.errno()));
}

/**
 * Sets the access and modification times of `name`, relative to the directory open as `dirFd`
 * (or, with `dirFd` undefined, the path `name` itself), to `ns`, never following a final
 * symlink (a symlink gets its own times). Exactly where supported, else to the microsecond.
 * @throws AwcError by errno (E_SOURCE_NOT_FOUND, E_PERMISSION, …)
 */
export function utimesNsAt(dirFd: number | undefined, name: string, ns: string): void {
  const c = libcCalls();
  if (!c) {
    const s = microSeconds(ns);
    fs.lutimesSync(fsPath(dirFd === undefined ? name : `/proc/self/fd/${dirFd}/${name}`), s, s);
    return;
  }
  // a raw name as its own bytes (koffi passes a string as UTF-8, a Buffer as it is)
  const path = hasEscape(name) ? Buffer.concat([nameToBytes(name), Buffer.of(0)]) : name;
  if (c.utimensat(dirFd ?? AT_FDCWD, path, timespecs(ns), AT_SYMLINK_NOFOLLOW) !== 0) {
    throw toAwcError(errnoError('utimensat', c.errno(), name));
  }
}
