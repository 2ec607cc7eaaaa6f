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
import { pathsOf, type AwcConfig } from '../../config/config.js';
import { livePid } from './pid-file.js';

/** Worker exit code: refused to start; the supervisor gives up with the same code. */
export const EXIT_REFUSED = 78;
/** Worker exit code: the live connection could not be taken over; start one that mounts anew. */
export const EXIT_SESSION_LOST = 75;
/** Crash restarts allowed within a minute. */
export const MAX_RESTARTS = 5;

/** A log line of the supervisor (`{level, msg, ...}`). */
export type SupervisorLog = (l: Record<string, unknown>) => void;

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
  const overlay = detectDriver(config.mountDriver).driver === 'overlay';
  const main = fileURLToPath(new URL('../../cli/entry/main.js', import.meta.url));
  let fd = -1;
  let child: ChildProcess | undefined;
  let stopping = false;
  const crashes: number[] = [];

  /** A fresh /dev/fuse descriptor (no connection yet); -1 when there is none to have. */
  const openDevice = (): void => {
    if (fd >= 0) closeSync(fd);
    fd = -1;
    rmSync(paths.fuseSession, { force: true });
    if (!overlay) return;
    try {
      fd = openSync('/dev/fuse', 'r+');
    } catch (err) {
      log({ level: 'warn', msg: 'cannot open /dev/fuse: the daemon opens its own (no connection kept across restarts)', err: String(err) });
    }
  };

  /** The connection the last worker served, when it is still alive and safe to take over. */
  const liveSession = (): ReturnType<typeof readSessionState> => {
    const s = readSessionState(paths.fuseSession);
    if (!s || fd < 0 || !existsSync(`${FUSECTL_DIR}/${s.connId}`) || !connectionMayBeAt(s.connId, s.mountpoint)) return undefined;
    return s;
  };

  return new Promise<number>((resolveExit) => {
    const finish = (code: number): void => {
      if (fd >= 0) closeSync(fd);
      fd = -1;
      try {
        if (readFileSync(paths.supervisorPidFile, 'utf8').trim() === String(process.pid)) rmSync(paths.supervisorPidFile, { force: true });
      } catch {
        /* gone */
      }
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      resolveExit(code);
    };
    const start = (resume: boolean): void => {
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        AWC_HOME: config.home,
        AWC_NAMESPACE: config.namespace,
        AWC_DAEMON_WORKER: '1',
        AWC_FUSE_RESUME: resume ? '1' : '0',
      };
      if (fd >= 0) env.AWC_FUSE_FD = '3';
      else delete env.AWC_FUSE_FD;
      child = spawn(process.execPath, [main, '--home', config.home, 'daemon', 'run'], {
        stdio: ['ignore', 'inherit', 'inherit', ...(fd >= 0 ? [fd] : [])],
        env,
      });
      log({ level: 'info', msg: resume ? 'daemon started on the live connection' : 'daemon started', pid: child.pid });
      child.once('error', (err) => log({ level: 'error', msg: 'cannot start the daemon', err: String(err) }));
      child.once('exit', (code, signal) => onExit(code, signal));
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
      child = undefined;
      if (code === 0 || stopping) return finish(code ?? 0);
      if (code === EXIT_REFUSED) return finish(EXIT_REFUSED);
      if (code === EXIT_SESSION_LOST) {
        log({ level: 'warn', msg: 'the daemon could not take the connection over: mounting anew' });
        openDevice();
        return start(false);
      }
      const now = Date.now();
      crashes.push(now);
      while (crashes.length > 0 && crashes[0]! < now - 60_000) crashes.shift();
      const s = liveSession();
      if (crashes.length > MAX_RESTARTS) {
        log({ level: 'error', msg: 'the daemon keeps dying: giving up', code, signal });
        if (s) abortFuseConnection(s.connId, s.mountpoint);
        return finish(1);
      }
      if (s && !s.cloned) {
        // it read requests from our descriptor: the ones it had not answered would wait forever
        log({ level: 'warn', msg: 'the daemon died without a cloned descriptor: aborting its connection', code, signal });
        abortFuseConnection(s.connId, s.mountpoint);
      }
      log({ level: 'warn', msg: 'the daemon died: starting it again', code, signal });
      const resume = s !== undefined && s.cloned;
      if (!resume) openDevice();
      // a little later each time, so that a crash loop does not spin
      setTimeout(() => (stopping ? finish(0) : start(resume)), 100 * (crashes.length - 1));
    };
    const onSignal = (): void => {
      stopping = true;
      if (child) child.kill('SIGTERM');
      else finish(0);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    openDevice();
    start(false);
  });
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
