import { join } from 'node:path';

/**
 * The warm CLI's wire protocol (docs/explanation/cli-latency.md "Warm workers"): what the thin
 * front (src/cli/warm/front.ts) and a warm worker of the host daemon (src/cli/entry/warm-worker.ts) say
 * over the connection the daemon hands from one to the other. Node built-ins only: the front
 * loads this and nothing else of AWC.
 *
 * A frame is one type byte, a 4-byte big-endian payload length, then the payload.
 *
 * - front → worker: `H` the request ({@link WarmRequest} as JSON, always first), `G` go (the
 *   answer to `A`: the front is committed to this worker), `I` stdin bytes, `E` end of stdin,
 *   `S` a signal the front received (its name).
 * - worker → front: `A` accepted (the worker will run the command once it has `G`; before `G`
 *   nothing ran, so a front that gave up waiting, {@link HANDSHAKE_MS}, closes instead and runs
 *   the command itself), `D` declined (the reason; the front runs it itself), `O`
 *   stdout bytes, `R` stderr bytes, `W` the command reads stdin (the front starts sending it),
 *   `X` the exit status (decimal), always last.
 */
/**
 * The first message a warm worker gets from the daemon that forked it (src/daemon/warm/warm-pool.ts):
 * whom it runs commands for (it drops to that uid, gid and the user's groups before it loads
 * anything else) and what to load before it says it is ready (`local`: the home's catalog and
 * store adapters by URL scheme, then a read of the home's lists so that the code a command runs
 * is compiled; `remote`: the client of root's per-user socket).
 */
export interface WarmInit {
  type: 'init';
  uid: number;
  gid: number;
  /** The user's name, for their supplementary groups (initgroups); absent for the daemon's own user. */
  user?: string;
  warm: { kind: 'local'; home: string; catalog: string; objectStore: string } | { kind: 'remote' };
}

export type FrameType = 'H' | 'G' | 'I' | 'E' | 'S' | 'A' | 'D' | 'O' | 'R' | 'W' | 'X';

/**
 * How long (ms) the front waits for a worker's `A` or `D` before it closes the connection and
 * runs the command itself: a daemon that is stopped (SIGSTOP), hung or swamped still lets
 * the kernel accept connections on its socket, and must never hang the CLI.
 */
export const HANDSHAKE_MS = 2000;

/** What the front sends first: the command as the caller's own process would have run it. */
export interface WarmRequest {
  /** Protocol version: 1. */
  v: 1;
  /** The build the front belongs to ({@link BUILD_ID_FILE}): a worker of another build declines. */
  build: string;
  /** The arguments after `awc`. */
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  /** The caller's umask. */
  umask: number;
  /** Whether stdin, stdout and stderr are terminals. */
  tty: [boolean, boolean, boolean];
  /** The terminal's size (of stdout, else stderr), when one is. */
  columns?: number;
  rows?: number;
}

/** Signals the front passes on to the command (a terminal's Ctrl-C, a hook runner's timeout). */
export const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;

/** Encodes one frame. */
export function frame(type: FrameType, payload: Buffer | string = ''): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/** Splits a byte stream into frames: {@link push} the bytes as they come, get the whole frames. */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);

  /** The frames completed by `chunk` (a partial one waits for the next chunk). */
  push(chunk: Buffer): { type: FrameType; payload: Buffer }[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const out: { type: FrameType; payload: Buffer }[] = [];
    while (this.buf.length >= 5) {
      const len = this.buf.readUInt32BE(1);
      if (this.buf.length < 5 + len) break;
      out.push({ type: this.buf.toString('latin1', 0, 1) as FrameType, payload: this.buf.subarray(5, 5 + len) });
      this.buf = this.buf.subarray(5 + len);
    }
    return out;
  }
}

/**
 * The warm CLI socket beside a daemon socket: `/run/awc/awcd.sock` → `/run/awc/awcd.cli.sock`
 * (a name not ending in `.sock` gets `.cli`). Only the daemon's own user can connect (0600).
 */
export function cliSocketOf(daemonSocket: string): string {
  return daemonSocket.endsWith('.sock') ? `${daemonSocket.slice(0, -'.sock'.length)}.cli.sock` : `${daemonSocket}.cli`;
}

/** The warm CLI socket of `uid` in a root daemon's per-user socket directory (`<dir>/<uid>.cli.sock`, owned by that user, 0600). */
export function userCliSocketOf(userSocketsDir: string, uid: number): string {
  return join(userSocketsDir, `${uid}.cli.sock`);
}

/** The file beside the bundle (dist/cli/) that names its build: a digest of its files, written by scripts/bundle-cli.mjs. */
export const BUILD_ID_FILE = 'build-id';
