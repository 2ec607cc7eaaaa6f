/**
 * The INIT handshake of a FUSE connection (once per connection, see fuse-server.ts): the
 * protocol version and the capabilities the server asks for, and the buffer sizes they imply.
 */
import {
  FUSE_KERNEL_VERSION,
  FUSE_MIN_MINOR_VERSION,
  IN_HEADER_SIZE,
  INIT_OUT_SIZE,
  InitFlag,
  OUT_HEADER_SIZE,
  WRITE_IN_SIZE,
  decodeInitIn,
  encodeInitOut,
  encodeOutHeader,
} from './protocol.js';

/** Pages per request: 256 × 4 KiB = 1 MiB reads. */
export const MAX_PAGES = 256;
/** We are read-only: a modest max_write keeps the kernel's read-buffer rule small. */
const MAX_WRITE = 128 * 1024;
/**
 * Device read buffer. The kernel refuses reads shorter than
 * max(FUSE_MIN_READ_BUFFER, sizeof(fuse_in_header) + sizeof(fuse_write_in) + max_write);
 * 1 MiB + 4 KiB covers that and any request body the kernel may send.
 */
export const READ_BUFFER_SIZE = Math.max(MAX_PAGES * 4096, IN_HEADER_SIZE + WRITE_IN_SIZE + MAX_WRITE) + 4096;
/** Background requests (async reads, readahead) the kernel keeps in flight. */
const MAX_BACKGROUND = 64;
const CONGESTION_THRESHOLD = 48;

/**
 * What the server asks for: asynchronous reads, parallel lookups, 1 MiB requests, and
 * zero-message opens (NO_OPEN(DIR)_SUPPORT: OPEN and OPENDIR answered ENOSYS once, then never
 * sent again, and the kernel keeps the page cache across opens).
 */
const WANT =
  InitFlag.ASYNC_READ |
  InitFlag.NO_OPEN_SUPPORT |
  InitFlag.NO_OPENDIR_SUPPORT |
  InitFlag.PARALLEL_DIROPS |
  InitFlag.MAX_PAGES |
  InitFlag.BIG_WRITES;

/**
 * How an INIT request was answered by {@link answerInit}: `minor` once the connection is
 * ready (the negotiated `7.<minor>`), `retry` when the kernel will send a new INIT with our
 * major version, `tooOld` with the kernel's version when the server cannot speak it.
 */
export type InitOutcome = { len: number; minor: number } | { len: number; retry: true } | { tooOld: string };

/**
 * Answers an INIT request `b` (the whole request, header included) into `out`: encodes the
 * reply (`len` bytes) and says what it means. `tooOld` writes nothing: the caller answers
 * EPROTO.
 */
export function answerInit(b: Buffer, unique: number, out: Buffer): InitOutcome {
  const init = decodeInitIn(b, IN_HEADER_SIZE, b.readUInt32LE(0) - IN_HEADER_SIZE);
  if (init.major > FUSE_KERNEL_VERSION) {
    encodeOutHeader(out, OUT_HEADER_SIZE + 8, 0, unique);
    out.fill(0, OUT_HEADER_SIZE, OUT_HEADER_SIZE + 8);
    out.writeUInt32LE(FUSE_KERNEL_VERSION, OUT_HEADER_SIZE);
    return { len: OUT_HEADER_SIZE + 8, retry: true };
  }
  if (init.major < FUSE_KERNEL_VERSION || init.minor < FUSE_MIN_MINOR_VERSION) return { tooOld: `${init.major}.${init.minor}` };
  encodeOutHeader(out, OUT_HEADER_SIZE + INIT_OUT_SIZE, 0, unique);
  encodeInitOut(out, OUT_HEADER_SIZE, {
    major: FUSE_KERNEL_VERSION,
    minor: init.minor,
    maxReadahead: init.maxReadahead,
    flags: (WANT & init.flags) >>> 0,
    maxBackground: MAX_BACKGROUND,
    congestionThreshold: CONGESTION_THRESHOLD,
    maxWrite: MAX_WRITE,
    timeGran: 1,
    maxPages: MAX_PAGES,
    flags2: 0,
  });
  return { len: OUT_HEADER_SIZE + INIT_OUT_SIZE, minor: init.minor };
}
