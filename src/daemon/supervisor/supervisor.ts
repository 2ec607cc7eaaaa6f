/**
 * The host daemon's supervisor: a small process that opens /dev/fuse once, hands the
 * descriptor to the daemon (`awc daemon run` with AWC_DAEMON_WORKER=1) as its fd 3, and
 * starts the daemon again when it dies. Because the supervisor keeps the descriptor open, the
 * kernel keeps the content FUSE connection when the daemon dies: the overlays on it stay
 * mounted, processes inside keep their files, and the successor takes the connection over
 * (src/host/fuse/fuse-session.ts) instead of remounting anything (docs/decisions.md).
 *
 * Worker exit codes: 0 = stopped on request (the supervisor exits too); {@link EXIT_REFUSED} =
 * refused to start (another daemon serves this home, bad configuration: the supervisor exits
 * with it); {@link EXIT_SESSION_LOST} = the connection could not be taken over (the supervisor
 * opens a fresh descriptor and starts a worker that mounts anew). Any other exit or a signal
 * is a crash: the worker is started again on the same connection, at most
 * {@link MAX_RESTARTS} times a minute; after that the supervisor aborts the connection and
 * exits 1 (`awc daemon stop` / `awc doctor` clean what is left).
 *
 * SIGTERM / SIGINT: passed to the worker (which unmounts and stops), then the supervisor exits.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdirPrivateSync } from '../../core/private-fs.js';
import { fileURLToPath } from 'node:url';
import { detectDriver } from '../../drivers/detect/detect-driver.js';
import { abortFuseConnection, connectionMayBeAt, FUSECTL_DIR } from '../../host/fuse/fusectl.js';
import { readSessionState } from '../../host/fuse/fuse-session.js';
import { pathsOf, type AwcConfig, type AwcPaths } from '../../config/config.js';
import { livePid } from './pid-file.js';
import type { Logger } from '../../core/log.js';

/** Worker exit code: refused to start; the supervisor gives up with the same code. */
export const EXIT_REFUSED = 78;
/** Worker exit code: the live connection could not be taken over; start one that mounts anew. */
export const EXIT_SESSION_LOST = 75;
/** Crash restarts allowed within a minute. */
export const MAX_RESTARTS = 5;

/** Where the supervisor logs (src/core/log.ts). */
export type SupervisorLog = Logger;

/**
 * Runs the supervisor until the daemon stops for good. Resolves with the exit code the
 * supervisor process should exit with (it never calls process.exit itself).
 */
export function runSupervisor(config: AwcConfig, log: SupervisorLog): Promise<number> {
  const paths = pathsOf(config);
  mkdirPrivateSync(paths.hostDir);
  if (!claimPidFile(paths.supervisorPidFile)) {
    log({ level: 'error', msg: 'another supervisor runs for this home', pid: livePid(paths.supervisorPidFile) });
    return Promise.resolve(EXIT_REFUSED);
  }
  return new Supervision(config, log).run();
}

/** One run of the supervisor (runSupervisor, once it holds the pid file): the descriptor, the worker, its crashes. */
class Supervision {
  private readonly paths: AwcPaths;
  private readonly overlay: boolean;
  private readonly main = fileURLToPath(new URL('../../cli/entry/main.js', import.meta.url));
  /** The /dev/fuse descriptor handed to workers; -1 when there is none. */
  private fd = -1;
  private child: ChildProcess | undefined;
  private stopping = false;
  /** When the worker crashed within the last minute (ms since the epoch). */
  private readonly crashes: number[] = [];
  private resolveExit: (code: number) => void = () => undefined;
  private readonly onSignal = (): void => {
    this.stopping = true;
    if (this.child) this.child.kill('SIGTERM');
    else this.finish(0);
  };

  constructor(
    private readonly config: AwcConfig,
    private readonly log: SupervisorLog,
  ) {
    this.paths = pathsOf(config);
    this.overlay = detectDriver(config.mountDriver).driver === 'overlay';
  }

  /** Starts the first worker; resolves with the supervisor's exit code once it stops for good. */
  run(): Promise<number> {
    return new Promise<number>((resolveExit) => {
      this.resolveExit = resolveExit;
      process.on('SIGTERM', this.onSignal);
      process.on('SIGINT', this.onSignal);
      this.openDevice();
      this.start(false);
    });
  }

  /** A fresh /dev/fuse descriptor (no connection yet); -1 when there is none to have. */
  private openDevice(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    rmSync(this.paths.fuseSession, { force: true });
    if (!this.overlay) return;
    try {
      this.fd = openSync('/dev/fuse', 'r+');
    } catch (err) {
      this.log({
        level: 'warn',
        msg: 'cannot open /dev/fuse: the daemon opens its own (no connection kept across restarts)',
        err: String(err),
      });
    }
  }

  /** The connection the last worker served, when it is still alive and safe to take over. */
  private liveSession(): ReturnType<typeof readSessionState> {
    const s = readSessionState(this.paths.fuseSession);
    if (!s || this.fd < 0 || !existsSync(`${FUSECTL_DIR}/${s.connId}`) || !connectionMayBeAt(s.connId, s.mountpoint)) return undefined;
    return s;
  }

  private finish(code: number): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    try {
      if (readFileSync(this.paths.supervisorPidFile, 'utf8').trim() === String(process.pid))
        rmSync(this.paths.supervisorPidFile, { force: true });
    } catch {
      /* gone */
    }
    process.off('SIGTERM', this.onSignal);
    process.off('SIGINT', this.onSignal);
    this.resolveExit(code);
  }

  /** Starts a worker (`awc daemon run`), with the descriptor as its fd 3 when there is one. */
  private start(resume: boolean): void {
    const { config, fd } = this;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      AWC_HOME: config.home,
      AWC_NAMESPACE: config.namespace,
      AWC_DAEMON_WORKER: '1',
      AWC_FUSE_RESUME: resume ? '1' : '0',
    };
    if (fd >= 0) env.AWC_FUSE_FD = '3';
    else delete env.AWC_FUSE_FD;
    const child = spawn(process.execPath, [this.main, '--home', config.home, 'daemon', 'run'], {
      stdio: ['ignore', 'inherit', 'inherit', ...(fd >= 0 ? [fd] : [])],
      env,
    });
    this.child = child;
    this.log({ level: 'info', msg: resume ? 'daemon started on the live connection' : 'daemon started', pid: child.pid });
    child.once('error', (err) => this.log({ level: 'error', msg: 'cannot start the daemon', err: String(err) }));
    child.once('exit', (code, signal) => this.onExit(code, signal));
  }

  /** The worker exited: stop, mount anew, or restart it on the same connection (see the module's comment). */
  private onExit(code: number | null, signal: NodeJS.Signals | null): void {
    this.child = undefined;
    if (code === 0 || this.stopping) return this.finish(code ?? 0);
    if (code === EXIT_REFUSED) return this.finish(EXIT_REFUSED);
    if (code === EXIT_SESSION_LOST) {
      this.log({ level: 'warn', msg: 'the daemon could not take the connection over: mounting anew' });
      this.openDevice();
      return this.start(false);
    }
    const { crashes, log } = this;
    const now = Date.now();
    crashes.push(now);
    while (crashes.length > 0 && crashes[0]! < now - 60_000) crashes.shift();
    const s = this.liveSession();
    if (crashes.length > MAX_RESTARTS) {
      log({ level: 'error', msg: 'the daemon keeps dying: giving up', code, signal });
      if (s) abortFuseConnection(s.connId, s.mountpoint);
      return this.finish(1);
    }
    if (s && !s.cloned) {
      // it read requests from our descriptor: the ones it had not answered would wait forever
      log({ level: 'warn', msg: 'the daemon died without a cloned descriptor: aborting its connection', code, signal });
      abortFuseConnection(s.connId, s.mountpoint);
    }
    log({ level: 'warn', msg: 'the daemon died: starting it again', code, signal });
    const resume = s !== undefined && s.cloned;
    if (!resume) this.openDevice();
    // a little later each time, so that a crash loop does not spin
    setTimeout(() => (this.stopping ? this.finish(0) : this.start(resume)), 100 * (crashes.length - 1));
  }
}

/** Creates `file` with this process's pid, exclusively; a stale one (dead pid) is replaced. False when a live process holds it. */
function claimPidFile(file: string): boolean {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx', mode: 0o600 });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (livePid(file) !== undefined) return false;
      rmSync(file, { force: true });
    }
  }
  return false;
}
