import { type ChildProcess, fork } from 'node:child_process';
import { EventEmitter } from 'node:events';
import * as fs from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { setPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { WarmInit } from './warm-protocol.js';
import { markDescriptorsCloseOnExec } from '../../host/sys/close-on-exec.js';
import { joinCgroupOf, peerCredentials } from '../../host/process/peer-process.js';
import { prepareSocketDir } from '../api/socket-file.js';
import type { Logger, LogRecord } from '../../core/log.js';

/** Whom a warm CLI socket serves, and what its workers load ahead (see WarmInit). */
export interface WarmIdentity {
  uid: number;
  gid: number;
  /** The user's name (their supplementary groups); absent for the daemon's own user. */
  user?: string;
  warm: WarmInit['warm'];
}

/** A warm worker: forked, then `ready` once it has loaded the CLI. */
interface Worker {
  child: ChildProcess;
  ready: boolean;
}

/** One warm CLI socket and its workers. */
interface Served {
  server: Server;
  who: WarmIdentity;
  ino: number;
  /** Workers loading or ready, not yet handed a connection. */
  workers: Worker[];
  /** How many to keep loading or ready. */
  size: number;
  /** A user socket's idle time after which its workers are stopped (ms). */
  idleMs?: number;
  /** The refill after a hand-off, if the command has not ended before. */
  deferTimer?: NodeJS.Timeout;
  /** Connections that came while no worker was ready. */
  waiting: Socket[];
  /** Workers handed a connection whose command has not ended yet. */
  running: number;
  idleTimer?: NodeJS.Timeout;
  /** When a worker last failed to start (ms since the epoch): none is started again for {@link RETRY_MS}. */
  failedAt?: number;
}

/** How long after a worker failed to start no other is started (ms): connections are closed at once, their fronts run the command themselves. */
const RETRY_MS = 5_000;

/** How long after a hand-off the pool refills at the latest, when the command has not ended yet (ms). */
const REFILL_MS = 1_000;

/**
 * The nice value of a worker that loads ahead (see WarmCliPool). Not 19: on a host whose
 * cores are busy (a build), a worker at 19 (weight 15 against nice 0's 1024 in Linux's
 * scheduler) never finished loading between two hooks, so each hook waited for one loading
 * at nice 0 (measured 2026-12-08: hooks 2.5 s apart went from 0.6 to 3.1 s); at 10 (weight
 * 110) it does, and still takes little from a command that runs.
 */
const AHEAD_NICE = 10;

/**
 * Sets the nice value of every thread of process `pid`: on Linux a nice value is a thread's
 * (setpriority with a pid sets only the thread of that id), and a worker's command does its
 * file work on libuv's threads and collects garbage on V8's. A thread made later takes the
 * value of the thread that makes it. A failure changes nothing but the timing.
 */
function niceAll(pid: number, nice: number): void {
  let tids: string[];
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    tids = [String(pid)];
  }
  for (const tid of tids) {
    try {
      setPriority(Number(tid), nice);
    } catch {
      // gone already
    }
  }
}

/** Lowers a worker's priority while it loads ahead (every thread). */
function relaxed(child: ChildProcess): void {
  if (child.pid !== undefined) niceAll(child.pid, AHEAD_NICE);
}

/** A worker a command waits for gets the normal priority back, on every thread (only root may raise it: others leave it). */
function urgent(child: ChildProcess): void {
  if (child.pid !== undefined && process.getuid?.() === 0) niceAll(child.pid, 0);
}

/** Root: moves the worker into the cgroup of the process that connected (its accounting and limits apply; the worker checks it). */
function joinCallersCgroup(child: ChildProcess, conn: Socket): void {
  const fd = (conn as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (child.pid === undefined || typeof fd !== 'number' || fd < 0) return;
  try {
    joinCgroupOf(child.pid, peerCredentials(fd).pid);
  } catch {
    // the worker sees the difference and declines: the front runs the command itself
  }
}

/** Events of {@link WarmCliPool}: log lines, and one `handed` per connection given to a worker. */
export interface WarmCliPoolEvents {
  log: [LogRecord];
  handed: [{ uid: number }];
}

/**
 * Warm CLI workers (docs/explanation/cli-latency.md "Warm workers"; the model of Nailgun and of
 * Gradle's daemon, one process per command): for each socket it serves, the pool keeps workers
 * forked ahead (src/cli/entry/warm-worker.ts; `ownWorkers`, two by default, for the daemon's own user, one for a user socket),
 * running as that socket's user with the CLI loaded, and hands each the next connection (the
 * descriptor, over the IPC channel, unread: `pauseOnConnect`); a worker runs that one command
 * and exits. The pool forks the replacements once no command it handed runs any more (or
 * REFILL_MS after the last hand-off), at nice 10, so loading ahead never takes the CPU from a
 * command that runs (the first of five hooks started together to end does not start loading
 * five workers beside the four still running); a
 * connection that finds no worker ready refills at once and gets the worker loading longest nice 0.
 * A socket is 0600 and owned by its user (created 0600 by root first, then given to them), so
 * only that user connects and a worker runs only that user's commands, as that user.
 *
 * Before each fork every descriptor of the daemon is marked close-on-exec, so a worker (and
 * what it runs) inherits only its stdio (/dev/null) and the IPC channel, which it closes when
 * it takes its connection. `idleMs`: workers not used for that long are stopped and only forked
 * again by the next connection (the daemon's own socket keeps its always: `idleMs` undefined).
 */
export class WarmCliPool extends EventEmitter<WarmCliPoolEvents> {
  private readonly served = new Map<string, Served>();
  private readonly workerFile: string;
  private readonly log: Logger;

  /**
   * `maxWaiting`: connections of one socket waiting for a worker at most (more are closed: their
   * CLI runs the command itself); `admit`: asked for each connection, false closes it (the
   * daemon's descriptors in reserve: FdReserve.left in conn-guard.ts); `ownWorkers`: how many
   * the daemon's own socket keeps ready (config `warmWorkers`, default 2); `logger`: where it
   * logs (default: its `'log'` event); `refillMs`: how long after the last hand-off the pool
   * refills although commands still run (ms, default REFILL_MS).
   */
  constructor(
    private readonly opts: {
      workerFile?: string;
      maxWaiting?: number;
      admit?: () => boolean;
      ownWorkers?: number;
      logger?: Logger;
      refillMs?: number;
    } = {},
  ) {
    super();
    this.log = opts.logger ?? ((l) => void this.emit('log', l));
    // (bundled, import.meta.url is this file's tsc output, dist/src/daemon/warm/warm-pool.js)
    this.workerFile = opts.workerFile ?? fileURLToPath(new URL('../../../cli/warm-worker.js', import.meta.url));
  }

  /** The socket paths served now. */
  paths(): string[] {
    return [...this.served.keys()];
  }

  /**
   * Serves `path` for `who` (a stale socket file there is replaced). `idleMs`: see the class.
   * @throws E_PERMISSION (an unsafe directory: see prepareSocketDir), the listen error
   */
  async serve(path: string, who: WarmIdentity, idleMs?: number): Promise<void> {
    if (this.served.has(path)) return;
    if (!fs.existsSync(this.workerFile)) return void this.log({ level: 'warn', msg: 'no warm worker build', file: this.workerFile });
    prepareSocketDir(path);
    fs.rmSync(path, { force: true });
    const server = createServer({ pauseOnConnect: true });
    const old = process.umask(0o177); // 0600 from the first moment, then given to its user
    try {
      await new Promise<void>((ok, fail) => server.once('error', fail).listen(path, () => ok()));
    } finally {
      process.umask(old);
    }
    fs.chownSync(path, who.uid, who.gid);
    // the daemon's own user keeps `ownWorkers` ready (a script's commands come back to back, agents start together); a user one, forked on first use
    const size = idleMs === undefined ? (this.opts.ownWorkers ?? 2) : 1;
    const s: Served = { server, who, ino: fs.lstatSync(path).ino, waiting: [], workers: [], running: 0, size, idleMs };
    this.served.set(path, s);
    server.on('connection', (conn) => this.connection(s, conn));
    if (idleMs === undefined) this.refill(s);
    this.log({ level: 'info', msg: 'warm cli socket', path, uid: who.uid });
  }

  /** Stops serving `path`: its socket file is removed, its waiting workers stopped (running ones finish their command). */
  async drop(path: string): Promise<void> {
    const s = this.served.get(path);
    if (!s) return;
    this.served.delete(path);
    clearTimeout(s.idleTimer);
    clearTimeout(s.deferTimer);
    for (const w of s.workers.splice(0)) w.child.kill('SIGKILL');
    for (const c of s.waiting) c.destroy();
    // not waiting for close's callback: it waits for every connection ever accepted, and the
    // handed ones are their workers' now (the parent may still count them)
    s.server.close();
    if (fs.lstatSync(path, { throwIfNoEntry: false })?.ino === s.ino) fs.rmSync(path, { force: true });
  }

  /** Stops serving every socket (see {@link drop}). */
  async close(): Promise<void> {
    for (const p of [...this.served.keys()]) await this.drop(p);
  }

  private connection(s: Served, conn: Socket): void {
    if (s.failedAt !== undefined && Date.now() - s.failedAt < RETRY_MS) return void conn.destroy();
    if (s.waiting.length >= (this.opts.maxWaiting ?? Infinity) || this.opts.admit?.() === false) return void conn.destroy();
    s.waiting.push(conn);
    conn.once('close', () => (s.waiting = s.waiting.filter((c) => c !== conn)));
    this.handOff(s);
    if (s.waiting.length === 0) return;
    // a command waits: no deferring, and as many workers as commands wait, those loading longest
    // (the first to be ready), get the normal priority; the others keep loading at nice 10, so
    // they never take the CPU from the ones the commands wait for
    this.refill(s, true);
    for (const w of s.workers.filter((x) => !x.ready).slice(0, s.waiting.length)) urgent(w.child);
  }

  /** Gives waiting connections to ready workers; refills once no command it handed runs (or REFILL_MS after the last hand-off). */
  private handOff(s: Served): void {
    while (s.waiting.length > 0) {
      const w = s.workers.find((x) => x.ready);
      if (!w) return;
      s.workers = s.workers.filter((x) => x !== w);
      const conn = s.waiting.shift()!;
      clearTimeout(s.idleTimer);
      urgent(w.child);
      if (process.getuid?.() === 0) joinCallersCgroup(w.child, conn);
      w.child.send({ type: 'conn' }, conn, { keepOpen: false }, (err) => {
        if (err) conn.destroy();
      });
      this.emit('handed', { uid: s.who.uid });
      // loading the next one now would take the CPU from the commands running: wait for their end (or a while)
      clearTimeout(s.deferTimer);
      s.deferTimer = setTimeout(() => this.refill(s), this.opts.refillMs ?? REFILL_MS).unref();
      s.running++;
      w.child.once('exit', () => {
        s.running--;
        if (s.running === 0) this.refill(s);
      });
    }
  }

  /**
   * Forks workers until `size` are ready or loading (not while a handed command runs, unless
   * `now`); `now`, with commands waiting: until there is one for each of them (a burst of five
   * WorktreeCreate hooks gets five loading at once, not two and then one more per second).
   */
  private refill(s: Served, now = false): void {
    if (!this.served.has(this.pathOf(s))) return;
    if (now) clearTimeout(s.deferTimer);
    const want = now ? Math.max(s.size, s.waiting.length) : s.size;
    while (s.workers.length < want) if (!this.forkWorker(s)) return;
  }

  /** Forks one worker; false when none can be (see markDescriptorsCloseOnExec). */
  private forkWorker(s: Served): boolean {
    try {
      markDescriptorsCloseOnExec();
    } catch (err) {
      // never fork a worker that could inherit the daemon's descriptors: the fronts run commands themselves
      s.failedAt = Date.now();
      for (const c of s.waiting.splice(0)) c.destroy();
      this.log({ level: 'warn', msg: 'no warm worker', err: String(err) });
      return false;
    }
    const child = fork(this.workerFile, [], {
      execArgv: [],
      // its own process group (signals the front passes on reach what the command runs), stdio to /dev/null
      detached: true,
      stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    const w: Worker = { child, ready: false };
    s.workers.push(w);
    // loading ahead must not slow a command running now: a lower priority until a command waits for it
    if (s.waiting.length === 0) relaxed(child);
    child.on('error', (err) => this.log({ level: 'warn', msg: 'warm worker failed', err: String(err) }));
    child.on('message', (m: { type?: unknown }) => {
      // a worker says one thing, once: anything else is ignored
      if (m?.type !== 'ready' || w.ready || !s.workers.includes(w)) return;
      w.ready = true;
      if (s.idleMs !== undefined) {
        clearTimeout(s.idleTimer);
        s.idleTimer = setTimeout(() => this.retire(s), s.idleMs).unref();
      }
      this.handOff(s);
    });
    child.once('exit', (code, signal) => {
      if (!s.workers.includes(w)) return;
      s.workers = s.workers.filter((x) => x !== w);
      if (!w.ready) {
        s.failedAt = Date.now();
        this.log({ level: 'warn', msg: 'warm worker exited before it was ready', code, signal, uid: s.who.uid });
        for (const c of s.waiting.splice(0)) c.destroy(); // their fronts run the commands themselves
      }
    });
    child.unref();
    child.channel?.unref();
    const init: WarmInit = { type: 'init', uid: s.who.uid, gid: s.who.gid, user: s.who.user, warm: s.who.warm };
    child.send(init);
    return true;
  }

  /** Stops the idle workers of a user socket (forked again by its next connection). */
  private retire(s: Served): void {
    for (const w of s.workers.splice(0)) w.child.kill('SIGTERM');
  }

  private pathOf(s: Served): string {
    for (const [p, v] of this.served) if (v === s) return p;
    return '';
  }
}
