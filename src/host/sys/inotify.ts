import { closeSync, readSync } from 'node:fs';
import { AwcError } from '../../core/errors.js';
import { requireLibc } from './libc.js';

/** inotify event bits (linux/inotify.h). */
export const IN_OPEN = 0x20;
/** The event queue overflowed: events were lost. */
export const IN_Q_OVERFLOW = 0x4000;
const IN_DONT_FOLLOW = 0x2000000;
const IN_ONLYDIR = 0x1000000;
const IN_NONBLOCK = 0x800;
const IN_CLOEXEC = 0x80000;
/** struct inotify_event: int wd; uint32 mask, cookie, len; char name[len]. */
const EVENT_HEADER = 16;

/** One event read from an {@link InotifyWatch}: its mask and the name in the watched directory ('' for the directory itself). */
export interface InotifyEvent {
  mask: number;
  name: string;
}

/**
 * One inotify(7) watch on one directory (never followed through a symlink: IN_DONT_FOLLOW |
 * IN_ONLYDIR), read without blocking: {@link drain} returns what the kernel queued since the
 * last call. Node's fs.watch reports neither IN_OPEN nor the queue overflow, hence this.
 */
export class InotifyWatch {
  private readonly buf = Buffer.alloc(64 * 1024);
  private fd: number;

  /**
   * @param dir the directory to watch; @param mask the events (e.g. IN_OPEN)
   * @throws E_UNSUPPORTED when libc cannot be reached; E_IO when inotify refuses (ENOSPC: too many watches, ENOENT, ENOTDIR…)
   */
  constructor(dir: string, mask: number) {
    const c = requireLibc('inotify');
    const fd = c.inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) throw new AwcError('E_IO', `inotify_init1 failed (errno ${c.errno()})`);
    if (c.inotify_add_watch(fd, dir, mask | IN_DONT_FOLLOW | IN_ONLYDIR) < 0) {
      const errno = c.errno();
      closeSync(fd);
      throw new AwcError('E_IO', `inotify_add_watch ${dir} failed (errno ${errno})`);
    }
    this.fd = fd;
  }

  /** The events queued since the last call (none once closed); IN_Q_OVERFLOW comes as an event of its own. */
  drain(): InotifyEvent[] {
    const out: InotifyEvent[] = [];
    while (this.fd >= 0) {
      let n: number;
      try {
        n = readSync(this.fd, this.buf, 0, this.buf.length, null);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break;
        throw err;
      }
      for (let at = 0; at + EVENT_HEADER <= n;) {
        const mask = this.buf.readUInt32LE(at + 4);
        const len = this.buf.readUInt32LE(at + 12);
        const raw = this.buf.subarray(at + EVENT_HEADER, at + EVENT_HEADER + len);
        const nul = raw.indexOf(0);
        out.push({ mask, name: raw.subarray(0, nul < 0 ? raw.length : nul).toString() });
        at += EVENT_HEADER + len;
      }
    }
    return out;
  }

  /** Closes the descriptor (idempotent). */
  close(): void {
    if (this.fd < 0) return;
    closeSync(this.fd);
    this.fd = -1;
  }
}
