import { EventEmitter } from 'node:events';
import * as fs from 'node:fs';
import type { Socket } from 'node:net';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { AwcError } from '../../core/errors.js';
import { DEFAULT_DAEMON_LIMITS, limitsOf, type DaemonLimits } from '../../config/daemon-limits.js';
import { bodyBudget } from './body-budget.js';
import { lingeringClose, sendJson } from './http-json.js';
import type { LogEvents, Logger } from '../../core/log.js';

/** How long a refused connection is kept to answer its request with the refusal before it is closed (ms). */
const REFUSED_GRACE_MS = 2000;
/** How often the open descriptors are counted at most (ms); between counts, accepted connections are added. */
const FD_COUNT_EVERY_MS = 250;

/** The soft RLIMIT_NOFILE of this process (Node raised it to the hard limit at start), from /proc/self/limits; Infinity when unlimited or unknown. */
export function openFileLimit(): number {
  try {
    const line = fs
      .readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === undefined || soft === 'unlimited' ? Infinity : Number(soft);
  } catch {
    return Infinity;
  }
}

/**
 * The descriptors the daemon keeps free (`fdReserve`): every new connection of a user asks
 * {@link left}, which counts /proc/self/fd at most every 250 ms and adds the connections
 * accepted in between.
 */
export class FdReserve {
  private readonly limit = openFileLimit();
  private fdCount = 0;
  private fdCountedAt = 0;
  private sinceCount = 0;

  constructor(private reserve: number = DEFAULT_DAEMON_LIMITS.fdReserve) {}

  /** Sets the reserve (descriptors; the daemon's configuration at start). */
  configure(reserve: number): void {
    this.reserve = reserve;
  }

  /** True while more than the reserve is left below RLIMIT_NOFILE (counts one more descriptor taken). */
  left(): boolean {
    if (this.limit === Infinity) return true;
    const room = this.limit - this.reserve;
    this.sinceCount++;
    if (this.fdCount + this.sinceCount < room && Date.now() - this.fdCountedAt < FD_COUNT_EVERY_MS) return true;
    try {
      this.fdCount = fs.readdirSync('/proc/self/fd').length;
    } catch {
      // EMFILE itself: no descriptor left to count with
      return false;
    }
    this.fdCountedAt = Date.now();
    this.sinceCount = 0;
    return this.fdCount < room;
  }
}

/** Descriptors that must be left for users' connections above the reserve, or the daemon refuses to start. */
export const MIN_FD_ROOM = 64;

/**
 * Checks at daemon start that `fdReserve` leaves room below the daemon's RLIMIT_NOFILE (at
 * least {@link MIN_FD_ROOM} descriptors for connections), else no user could ever connect.
 * @throws E_CONFIG naming `fdReserve`, the limit and the room left
 */
export function checkFdReserve(config: Partial<DaemonLimits>, limit: number = openFileLimit()): void {
  const { fdReserve: reserve } = limitsOf(config);
  if (limit === Infinity || limit - reserve >= MIN_FD_ROOM) return;
  throw new AwcError(
    'E_CONFIG',
    `fdReserve ${reserve} leaves ${Math.max(0, limit - reserve)} of the daemon's ${limit} descriptors (RLIMIT_NOFILE) for connections (at least ${MIN_FD_ROOM} needed)`,
    {
      hint: `Lower fdReserve in the home's config.json (or AWC_FD_RESERVE) to at most ${Math.max(0, limit - MIN_FD_ROOM)}, or raise the daemon's open-file limit (ulimit -n, systemd LimitNOFILE), then start the daemon again.`,
      details: { cap: 'fdReserve', value: reserve, limit },
    },
  );
}

/** The daemon's one descriptor reserve (configured at start: {@link configureDaemonLimits}). */
export const fdReserve = new FdReserve();

/**
 * Applies the daemon-wide limits of `config` (its one body budget and its descriptor reserve;
 * defaults for keys it leaves out) and returns them all. Called once at daemon start.
 */
export function configureDaemonLimits(config: Partial<DaemonLimits>): DaemonLimits {
  const limits = limitsOf(config);
  bodyBudget.configure(limits.requestBodyBudgetBytes);
  fdReserve.configure(limits.fdReserve);
  return limits;
}

/** The options of a WarmCliPool under `config`'s caps: `userMaxConnections` waiting per socket, none past the descriptor reserve. */
export function warmLimits(config: Partial<DaemonLimits>): { maxWaiting: number; admit: () => boolean; ownWorkers: number } {
  const limits = limitsOf(config);
  return { maxWaiting: limits.userMaxConnections, admit: () => fdReserve.left(), ownWorkers: limits.warmWorkers };
}

/**
 * The root daemon's guard on the connections of its users' sockets (docs/explanation/security.md
 * "Per-user resource caps"):
 *
 * - at most `userMaxConnections` open at once per user: one more is answered `E_TOO_MANY`
 *   naming the cap (its request, if it sends one within 2 s; then closed);
 * - descriptors in reserve: once fewer than `fdReserve` are left below RLIMIT_NOFILE (counted
 *   from /proc/self/fd at most every 250 ms, accepted connections added in between), new
 *   connections are closed at once, so the content FUSE server and mounts always have some;
 * - a connection with no request in progress is closed after `userIdleTimeoutMs`, headers must
 *   arrive within it (Node's headersTimeout / keepAliveTimeout, checked every second at most);
 * - a request's body that sends nothing for `userRequestTimeoutMs` is ended with
 *   `E_REQUEST_STALLED`; one that keeps sending never is, however long it takes (no
 *   whole-request limit: Node's requestTimeout is 0);
 * - a request answered before its body ended (refused over the body budget, or too large) has
 *   its connection closed once the answer is written (a lingering close: what still comes is
 *   discarded for LINGER_MS, 2 s, so the client reads the answer), never left waiting for the rest.
 *
 * Emits 'log' (`{level, msg, uid, cap}` once per refusal streak of a user).
 */
export class ConnectionGuard extends EventEmitter<LogEvents> {
  private readonly open = new Map<number, number>();
  private readonly refusedOpen = new Map<number, number>();
  private readonly refused = new WeakSet<Socket>();

  private readonly log: Logger;

  /** `logger`: where it logs (default: its `'log'` event). */
  constructor(
    readonly limits: DaemonLimits,
    logger?: Logger,
  ) {
    super();
    this.log = logger ?? ((l) => void this.emit('log', l));
  }

  /** Connections `uid` holds open now (refused ones not counted). */
  openOf(uid: number): number {
    return this.open.get(uid) ?? 0;
  }

  /** An HTTP server for `uid`'s socket with the timeouts and caps applied; `handler` sees only admitted requests. */
  server(uid: number, handler: RequestListener): Server {
    const { userIdleTimeoutMs: idle } = this.limits;
    const server = createServer({ connectionsCheckingInterval: Math.min(1000, idle) }, (req, res) => {
      if (this.refused.has(req.socket)) return this.answerRefused(uid, req, res);
      // a request in progress is never idle: the timeout comes back with keep-alive (keepAliveTimeout)
      req.socket.setTimeout(0);
      // its body is timed by what it sends, never by how long it takes (an upload of hours flows on)
      this.watchBody(uid, req, res);
      // answered before its body ended (refused: over the budget, too large): closed once the client
      // could read the answer (a lingering close of LINGER_MS), never left waiting for the rest
      res.once('finish', () => {
        if (!req.complete) lingeringClose(req);
      });
      handler(req, res);
    });
    server.headersTimeout = idle;
    // no limit on a whole request: a body is ended only when it stalls (watchBody)
    server.requestTimeout = 0;
    server.keepAliveTimeout = idle;
    server.timeout = 0;
    // past the cap and as many refused ones waiting, a connection is closed by Node as it is accepted,
    // before a socket or parser exists for it: what admit() would do, at a fraction of the cost in a flood
    server.maxConnections = 2 * this.limits.userMaxConnections;
    server.on('connection', (socket: Socket) => this.admit(uid, socket));
    return server;
  }

  /** Whether a connection of `uid` may be served; counts it (until it closes) when it may. */
  private admit(uid: number, socket: Socket): void {
    if (!fdReserve.left()) {
      this.log({ level: 'warn', msg: 'connection closed: descriptors held in reserve', uid, cap: 'fdReserve' });
      return void socket.destroy();
    }
    // idle until its first request (Node's http server closes a socket whose timeout nobody handles)
    socket.setTimeout(this.limits.userIdleTimeoutMs);
    if (this.openOf(uid) < this.limits.userMaxConnections) {
      this.open.set(uid, this.openOf(uid) + 1);
      socket.once('close', () => this.dec(this.open, uid));
      return;
    }
    // over the cap: answer its request with the refusal, unless as many refused ones are waiting already
    const waiting = this.refusedOpen.get(uid) ?? 0;
    if (waiting === 0) this.log({ level: 'warn', msg: 'connection refused: over the cap', uid, cap: 'userMaxConnections' });
    if (waiting >= this.limits.userMaxConnections) return void socket.destroy();
    this.refused.add(socket);
    this.refusedOpen.set(uid, waiting + 1);
    socket.once('close', () => this.dec(this.refusedOpen, uid));
    socket.setTimeout(Math.min(REFUSED_GRACE_MS, this.limits.userIdleTimeoutMs));
  }

  /**
   * Ends `req` once its body has sent nothing for `userRequestTimeoutMs` while the daemon was
   * reading it (time the daemon itself holds the body paused, waiting for the body budget or
   * the disk, does not count): answered `408 E_REQUEST_STALLED` naming the key, then closed.
   * A body that keeps sending is never cut off, however long it takes.
   */
  private watchBody(uid: number, req: IncomingMessage, res: ServerResponse): void {
    if (req.complete) return;
    const stall = this.limits.userRequestTimeoutMs;
    let seen = req.socket.bytesRead;
    let since = Date.now();
    const t = setInterval(
      () => {
        if (req.complete || req.destroyed || res.writableEnded) return clearInterval(t);
        const now = Date.now();
        if (req.socket.bytesRead !== seen || req.readableFlowing !== true) {
          seen = req.socket.bytesRead;
          since = now;
        } else if (now - since >= stall) {
          clearInterval(t);
          this.answerStalled(uid, req, res);
        }
      },
      Math.max(25, Math.min(1000, Math.floor(stall / 4))),
    ).unref();
    req.socket.once('close', () => clearInterval(t));
  }

  private answerStalled(uid: number, req: IncomingMessage, res: ServerResponse): void {
    const stall = this.limits.userRequestTimeoutMs;
    this.log({ level: 'warn', msg: 'request ended: its body stalled', uid, cap: 'userRequestTimeoutMs' });
    const e = new AwcError('E_REQUEST_STALLED', `the request's body sent nothing for ${stall} ms (userRequestTimeoutMs: ${stall})`, {
      details: { cap: 'userRequestTimeoutMs', value: stall },
    });
    if (res.headersSent) return void req.socket.destroy();
    res.shouldKeepAlive = false;
    // once the answer is written, the request is ended for whoever still reads its body (it fails with
    // this error: an upload removes its partial file); a request already answered is never aborted by Node
    res.once('finish', () => req.destroy(e));
    sendJson(res, 408, { error: e.toJSON() });
  }

  private answerRefused(uid: number, req: IncomingMessage, res: ServerResponse): void {
    const cap = this.limits.userMaxConnections;
    const e = new AwcError('E_TOO_MANY', `uid ${uid} has ${cap} connections open to the daemon already (userMaxConnections: ${cap})`, {
      hint: `Close some of your connections to the daemon (or wait for commands to finish), then try again; the limit is userMaxConnections (${cap}) in the root home's config.json.`,
      details: { cap: 'userMaxConnections', value: cap },
    });
    res.shouldKeepAlive = false;
    req.resume(); // its body is read and dropped, never held
    sendJson(res, 429, { error: e.toJSON() });
  }

  private dec(m: Map<number, number>, uid: number): void {
    const n = (m.get(uid) ?? 1) - 1;
    if (n > 0) m.set(uid, n);
    else m.delete(uid);
  }
}
