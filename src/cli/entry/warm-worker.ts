import { readFileSync, writeSync } from 'node:fs';
import type { Socket } from 'node:net';
import { Readable, Writable } from 'node:stream';
import { adoptLimits, confinementDifference, peerCredentials, preparePeerChecks } from '../../host/process/peer-process.js';
import {
  BUILD_ID_FILE,
  FORWARDED_SIGNALS,
  FrameReader,
  frame,
  type FrameType,
  type WarmInit,
  type WarmRequest,
} from '../../daemon/warm/warm-protocol.js';

/** This build's id (dist/cli/build-id beside the bundle that holds this module; '' when missing). */
function ownBuildId(): string {
  try {
    // (in the bundle, import.meta.url is this file's tsc output, dist/src/cli/entry/warm-worker.js)
    return readFileSync(new URL(`../../../cli/${BUILD_ID_FILE}`, import.meta.url), 'utf8').trim();
  } catch {
    return '';
  }
}

/** Becomes `init`'s user for good (groups, then gid, then uid); exits when the system says otherwise. */
function becomeUser(init: WarmInit): void {
  if (process.getuid!() !== init.uid || process.getgid!() !== init.gid) {
    (process as unknown as { initgroups(user: string | number, extraGroup: number): void }).initgroups(init.user ?? init.uid, init.gid);
    process.setgid!(init.gid);
    process.setuid!(init.uid);
  }
  const ok =
    process.getuid!() === init.uid && process.geteuid!() === init.uid && process.getgid!() === init.gid && process.getegid!() === init.gid;
  if (!ok) process.exit(70);
}

/** The modules `awc hook claude` imports when it runs (src/cli/commands/hook.ts), loaded ahead. */
async function preloadHook(): Promise<void> {
  await Promise.all([
    import('../remote/claude-awc.js'),
    import('../commands/self-command.js'),
    import('../../service/claude/claude-payload.js'),
    import('../../service/claude/claude-hook.js'),
    import('../../service/claude/claude-session.js'),
    import('../../service/attach/env-key.js'),
  ]);
}

/** Loads what a command of this home will need, so that running it loads next to nothing. */
async function warmUp(w: WarmInit['warm']): Promise<void> {
  preparePeerChecks();
  // the checks each connection runs, once on this process (V8 compiles them now, not then)
  confinementDifference(process.pid);
  adoptLimits(process.pid);
  await import('./main.js');
  // every command asks it first (withAwc: is this user's route root's daemon?)
  await import('../remote/user-socket.js');
  // Claude Code's hooks: several sessions start at once, each a fresh `awc hook claude` (docs/how-to/claude-code.md)
  await preloadHook();
  if (w.kind === 'remote') {
    await import('../remote/remote-awc.js');
    return;
  }
  const { openAwc } = await import('../remote/open-awc.js');
  const { DaemonClient } = await import('../../daemon/supervisor/client.js');
  if (w.catalog.startsWith('postgres')) await import('../../catalog/postgres/postgres-catalog.js');
  else await import('../../catalog/sqlite/sqlite-catalog.js');
  if (w.objectStore.startsWith('s3:')) await import('../../store/s3/s3-object-store.js');
  else await import('../../store/fs/fs-object-store.js');
  // V8 compiles a function when it first runs: run the start of every command once (opening the home, reading its lists)
  try {
    const awc = await openAwc({ home: w.home }, { create: false });
    try {
      await awc.listWorkspaces();
      await awc.listSnapshots();
      // and the HTTP client a mount or an unmount calls the daemon with (a status request; never starts one)
      await new DaemonClient(awc.config).running();
    } finally {
      await awc.close();
    }
  } catch {
    // a home that cannot be read now: the command will say why
  }
}

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writes a whole frame to the connection's descriptor synchronously, as Node writes stdout to a
 * pipe: a full socket buffer (EAGAIN) waits 1 ms and tries again, so a slow reader slows the
 * command exactly as it would in the caller's own process. @throws the write error (EPIPE)
 */
function writeFrame(fd: number, type: FrameType, payload: Buffer | string = ''): void {
  const buf = frame(type, payload);
  for (let off = 0; off < buf.length;) {
    try {
      off += writeSync(fd, buf, off);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

/** A stream that sends what is written to it as frames of `type`. */
function frameStream(fd: number, type: 'O' | 'R', tty: boolean, req: WarmRequest): Writable {
  const s = new Writable({
    write(chunk: Buffer, _enc, cb) {
      try {
        writeFrame(fd, type, chunk);
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
  });
  return Object.assign(s, { isTTY: tty, columns: tty ? req.columns : undefined, rows: tty ? req.rows : undefined });
}

/**
 * Runs the one command of the connection `conn` (a warm worker serves one and exits): reads the
 * request, declines it (`D`) when it is of another build or its directory cannot be entered, else
 * becomes the caller's process (directory, environment, umask, arguments, stdio as frames,
 * `process.exit` sending the status first), accepts (`A`), runs the CLI and exits.
 */
function serve(conn: Socket, build: string): void {
  const fd = (conn as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) process.exit(71);
  const reader = new FrameReader();
  let stdin: Readable | undefined;
  let ended = false;
  let goOn: () => void = () => undefined;
  const go = new Promise<void>((ok) => (goOn = ok));
  const realExit = process.exit.bind(process);
  const finish = (code: number): never => {
    if (!ended) {
      ended = true;
      try {
        writeFrame(fd, 'X', String(code));
      } catch {
        // the front is gone: nobody waits for the status
      }
    }
    return realExit(code);
  };
  const start = async (req: WarmRequest): Promise<void> => {
    if (req.v !== 1 || req.build !== build || build === '') return void finishDeclined(fd, 'another build');
    const unlike = callerDifference(fd);
    if (unlike) return void finishDeclined(fd, unlike);
    try {
      process.chdir(req.cwd);
    } catch {
      return void finishDeclined(fd, 'cannot enter the working directory');
    }
    process.umask(req.umask);
    for (const k of Object.keys(process.env)) delete process.env[k];
    Object.assign(process.env, req.env);
    process.argv = [process.execPath, new URL('./main.js', import.meta.url).pathname, ...req.argv];
    let stdinAsked = false;
    stdin = new Readable({ read: () => void (stdinAsked || ((stdinAsked = true), writeFrame(fd, 'W'))) });
    Object.assign(stdin, { isTTY: req.tty[0] });
    define('stdin', stdin);
    define('stdout', frameStream(fd, 'O', req.tty[1], req));
    define('stderr', frameStream(fd, 'R', req.tty[2], req));
    process.exit = ((code?: number | string | null) => finish(Number(code ?? process.exitCode ?? 0) || 0)) as typeof process.exit;
    process.on('uncaughtException', (err) => {
      try {
        writeFrame(fd, 'R', `${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      } catch {
        // the front is gone
      }
      finish(1);
    });
    writeFrame(fd, 'A');
    await go; // the front's G: it waits for this worker (it closes instead when it gave up: 'close' below)
    const { runCli } = await import('./main.js');
    await runCli(process.argv);
    finish(Number(process.exitCode ?? 0) || 0);
  };
  conn.on('data', (chunk: Buffer) => {
    for (const f of reader.push(chunk)) {
      if (!stdin) {
        if (f.type !== 'H') return void realExit(72);
        let req: WarmRequest;
        try {
          req = JSON.parse(f.payload.toString()) as WarmRequest;
        } catch {
          return void realExit(72);
        }
        // (start sets stdin up before it first waits: the frames after this one find it)
        void start(req);
        continue;
      }
      if (f.type === 'G') goOn();
      else if (f.type === 'I') stdin.push(f.payload);
      else if (f.type === 'E') stdin.push(null);
      else if (f.type === 'S') {
        const sig = f.payload.toString();
        // to the whole process group, as a terminal does: the command and what it runs (git, tar)
        if ((FORWARDED_SIGNALS as readonly string[]).includes(sig)) process.kill(-process.pid, sig);
      }
    }
  });
  // the front went away (killed, or its terminal closed): a hangup, as its terminal would have sent
  conn.on('close', () => {
    if (!ended) process.kill(-process.pid, 'SIGHUP');
  });
}

/**
 * Why this worker must not run the command of the process at the other end of `fd` (its uid
 * differs, or its namespaces, credentials or confinement: see confinementDifference), or
 * undefined once this worker has taken its resource limits. A sandboxed caller (no_new_privs,
 * seccomp, its own mount namespace…) runs its command itself, inside its sandbox.
 */
function callerDifference(fd: number): string | undefined {
  try {
    const peer = peerCredentials(fd);
    if (peer.uid !== process.getuid!()) return 'another user';
    return confinementDifference(peer.pid) ?? adoptLimits(peer.pid);
  } catch (err) {
    return `cannot tell who called: ${String(err)}`;
  }
}

function finishDeclined(fd: number, why: string): void {
  try {
    writeFrame(fd, 'D', why);
  } finally {
    process.exit(0);
  }
}

function define(name: 'stdin' | 'stdout' | 'stderr', value: unknown): void {
  Object.defineProperty(process, name, { value, configurable: true, enumerable: true, writable: false });
}

/**
 * A warm worker's life (forked by src/daemon/warm/warm-pool.ts with an IPC channel; see
 * docs/explanation/cli-latency.md "Warm workers"): takes its `init`, becomes its user, loads
 * the CLI and what its commands need, says `ready`, and waits for one connection; once it has
 * it, it closes the channel to the daemon (nothing it then runs can reach the daemon through
 * it) and runs that connection's command.
 */
export function runWarmWorker(): void {
  if (!process.send) process.exit(64);
  process.once('message', (init: WarmInit) => {
    if (init?.type !== 'init') process.exit(65);
    becomeUser(init);
    const build = ownBuildId();
    // the daemon went away while this worker waited: nothing will come
    const orphaned = () => process.exit(0);
    process.once('disconnect', orphaned);
    void warmUp(init.warm).then(() => {
      process.on('message', (m: { type?: string }, handle?: unknown) => {
        if (m?.type !== 'conn' || !handle) return;
        process.removeAllListeners('message');
        process.off('disconnect', orphaned);
        process.disconnect?.();
        serve(handle as Socket, build);
      });
      process.send!({ type: 'ready' });
    });
  });
}
