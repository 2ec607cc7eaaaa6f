import { readdirSync } from 'node:fs';
import { requireLibc } from './libc.js';

const F_GETFD = 1;
const F_SETFD = 2;
const FD_CLOEXEC = 1;

/**
 * Marks every open descriptor of this process above stderr close-on-exec (fcntl F_SETFD
 * FD_CLOEXEC), so a process it starts inherits only what it is handed. Node opens its own
 * descriptors close-on-exec, but a descriptor a parent passed down (the supervisor's FUSE
 * connection, fd 3 of the daemon: dup2 clears the flag) or one a native addon opened is
 * not. Returns how many it marked.
 * @throws E_UNSUPPORTED when libc cannot be reached (koffi did not load)
 */
export function markDescriptorsCloseOnExec(): number {
  const fcntl = requireLibc('cannot mark descriptors close-on-exec').fcntl3;
  let marked = 0;
  for (const name of readdirSync('/proc/self/fd')) {
    const fd = Number(name);
    if (!(fd > 2)) continue;
    const flags = fcntl(fd, F_GETFD, 0);
    if (flags < 0 || (flags & FD_CLOEXEC) !== 0) continue; // closed meanwhile (the listing's own), or marked
    if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) === 0) marked++;
  }
  return marked;
}
