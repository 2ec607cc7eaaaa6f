import { closeSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { isAbsolute } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { Awc } from '../../service/workspace/awc.js';
import { cwdInNamespace, runTarget } from '../../service/refs/run-target.js';
import { workspaceDirs } from '../../drivers/port/workspace-state.js';
import { startForCaller, type CallerCommand } from '../../host/process/caller-namespace.js';
import { alive, holdPeer, takeDescriptors, type HeldPeer } from '../../host/sys/pidfd.js';
import { callerProfile, joinCgroups, sandboxDifference, type CallerProfile } from '../../host/process/caller-process.js';
import type { AllowedUser } from './user-access.js';

/** The body of `POST /v1/run`. */
export interface RunRequest {
  namespace: string;
  /** The caller's id for this run (for `POST /v1/run-signal`): 8 to 64 of [A-Za-z0-9]. */
  id: string;
  ref: string;
  /** A checkpoint to run at (`awc run --at`); null or absent: the live workspace. */
  at?: string | null;
  /** The caller's working directory (absolute). */
  cwd: string;
  command: string;
  args: string[];
  env: Record<string, string>;
  umask: number;
}

/** Signals a caller may pass on to its command. */
const SIGNALS: ReadonlySet<string> = new Set(['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT']);
/** An environment variable's name as env(1) and execve take it: not empty, no "=", no NUL. */
const ENV_NAME = /^[^=\0]+$/;

/** The most one argument or variable may be (bytes; MAX_ARG_STRLEN less its NUL), and all of them together. */
const MAX_ARG = 128 * 1024 - 1;
const MAX_ARGS_TOTAL = 1024 * 1024;
/** The most runs one user may have at once (each holds a stage process and two daemon descriptors). */
export const MAX_RUNS_PER_USER = 16;

const noNul = (s: unknown): s is string => typeof s === 'string' && !s.includes('\0') && Buffer.byteLength(s) <= MAX_ARG;

/** The request's shape, or E_USAGE (every string free of NUL: nothing reaches execve that it would cut). */
function checkRequest(body: RunRequest): void {
  const ok =
    typeof body.id === 'string' &&
    /^[A-Za-z0-9]{8,64}$/.test(body.id) &&
    noNul(body.ref) &&
    noNul(body.cwd) &&
    isAbsolute(body.cwd) &&
    noNul(body.command) &&
    body.command !== '' &&
    Array.isArray(body.args) &&
    body.args.every(noNul) &&
    typeof body.env === 'object' &&
    body.env !== null &&
    !Array.isArray(body.env) &&
    Object.entries(body.env).every(([k, v]) => ENV_NAME.test(k) && noNul(v)) &&
    Number.isInteger(body.umask) &&
    body.umask >= 0 &&
    body.umask <= 0o777 &&
    (body.at === undefined || body.at === null || noNul(body.at));
  if (!ok) throw new AwcError('E_USAGE', 'not a run request', { hint: 'Use `awc run <workspace> -- <command>`.' });
  const total = [body.command, ...body.args, ...Object.entries(body.env).map(([k, v]) => `${k}=${v}`)].reduce(
    (n, a) => n + Buffer.byteLength(a) + 1,
    0,
  );
  if (total > MAX_ARGS_TOTAL)
    throw new AwcError('E_USAGE', `the command, its arguments and its environment are ${total} bytes, over ${MAX_ARGS_TOTAL}`, {
      hint: 'Pass less in the environment, or put long arguments in a file.',
    });
}

/**
 * `awc run` for an ordinary user (docs/reference/run.md, docs/explanation/stable-paths.md):
 * root makes the private mount namespace and starts the command as the caller. The caller is
 * the process at the other end of the request's connection, held by a pidfd from the moment
 * its credentials are read (holdPeer: SO_PEERPIDFD), which must be the socket's user and not
 * sandboxed relative to the daemon (sandboxDifference: a sandboxed agent never gets a command
 * run outside its sandbox). The workspace must be one the caller mounted (the caller of
 * {@link run} checks it). The command gets the caller's own stdin, stdout and stderr
 * (pidfd_getfd), uid, gid and groups, no capabilities and no_new_privs, and, before anything
 * is checked or mounted in the namespace, the caller's cgroups (v2 and every v1 hierarchy),
 * and just before its exec, the caller's resource limits and nice value. The stable
 * path and the workspace's mount are checked inside the namespace (src/host/mount/namespace-bind.ts).
 */
export class UserRun {
  /** Runs in progress by `<uid>:<id>`: one user never sees, signals or blocks another's. */
  private readonly running = new Map<string, Entry>();

  constructor(private readonly workspacesDir: string) {}

  /**
   * Runs one request; resolves with the command's exit status (128 + a signal's number). A
   * connection that closes before the end hangs the command up (SIGHUP to its process group;
   * before it started, it is not started). `checkMounter(ref)` must throw unless the caller
   * mounted the workspace.
   * @throws E_USAGE (a bad request, an id in use), E_TOO_MANY (MAX_RUNS_PER_USER of theirs run),
   *   E_PERMISSION (another user's process, a sandboxed, setuid or vanished caller, a cgroup it
   *   cannot join), E_NOT_MOUNTED, E_UNSUPPORTED (no pidfd_getfd), what runTarget and the stage throw
   */
  async run(
    user: AllowedUser,
    awc: Awc,
    host: string,
    body: RunRequest,
    req: IncomingMessage,
    checkMounter: (ref: string) => Promise<void>,
  ): Promise<{ status: number }> {
    checkRequest(body);
    const key = this.reserve(user, body.id);
    const entry = this.running.get(key)!;
    // the caller going away, at any point from now on: no command, or a hung-up one
    const state = { gone: req.socket.destroyed };
    const onClose = () => {
      state.gone = true;
      const pid = entry.cmd?.child.pid;
      if (pid !== undefined) kill(pid, 'SIGHUP');
    };
    req.socket.once('close', onClose);
    let peer: HeldPeer | undefined;
    try {
      peer = holdCaller(req, user);
      const caller = callerProfile(peer.pid);
      if (!alive(peer.pidfd) || caller.uid !== user.uid) throw new AwcError('E_PERMISSION', 'the calling process is gone');
      await checkMounter(body.ref);
      const target = await runTarget(awc, host, body.ref, body.at ?? undefined, body.cwd, { checkAt: false });
      if (target.workspace.mountDriver !== 'overlay') throw new AwcError('E_NOT_MOUNTED', 'a user runs only in overlay workspaces');
      entry.cmd = this.startCommand(peer, caller, target, body, () => state.gone);
      return await runStarted(entry, entry.cmd, peer, () => state.gone);
    } finally {
      req.socket.off('close', onClose);
      peer?.close();
      this.running.delete(key);
    }
  }

  /** Reserves run `id` of `user` (before the first await); returns its key. @throws E_USAGE (in use), E_TOO_MANY */
  private reserve(user: AllowedUser, id: string): string {
    const key = `${user.uid}:${id}`;
    if (this.running.has(key)) throw new AwcError('E_USAGE', `run ${id} is running already`);
    if ([...this.running.keys()].filter((k) => k.startsWith(`${user.uid}:`)).length >= MAX_RUNS_PER_USER)
      throw new AwcError('E_TOO_MANY', `${user.name} has ${MAX_RUNS_PER_USER} runs going already`, {
        hint: `Wait for some of your \`awc run\` commands to end, then try again; a user runs at most ${MAX_RUNS_PER_USER} through the daemon at once (a fixed limit, not configurable).`,
        details: { cap: 'runsPerUser', value: MAX_RUNS_PER_USER },
      });
    this.running.set(key, {});
    return key;
  }

  /** Starts the stage of the command in its namespace, on the caller's stdin, stdout and stderr. @throws E_PERMISSION (the caller is gone) */
  private startCommand(
    peer: HeldPeer,
    caller: CallerProfile,
    target: Awaited<ReturnType<typeof runTarget>>,
    body: RunRequest,
    gone: () => boolean,
  ): CallerCommand {
    const stdio = takeDescriptors(peer.pidfd, [0, 1, 2]);
    try {
      if (gone()) throw new AwcError('E_PERMISSION', 'the calling process is gone');
      return startForCaller(
        {
          source: target.source,
          upper: workspaceDirs(this.workspacesDir, target.workspace.id).upper,
          at: target.at,
          uid: caller.uid,
          gid: caller.gid,
          groups: caller.groups,
          cwd: cwdInNamespace(target, body.cwd),
          umask: body.umask.toString(8).padStart(4, '0'),
          command: body.command,
          args: body.args,
          env: body.env,
          limits: caller.limits,
          nice: caller.nice,
        },
        [stdio[0]!, stdio[1]!, stdio[2]!],
      );
    } finally {
      for (const d of stdio) closeSync(d);
    }
  }

  /**
   * `POST /v1/run-signal {id, signal}`: passes a signal on to the process group of the caller's
   * run `id`; one that comes while the root stage still sets up is held until the command runs.
   * @throws E_NOT_FOUND, E_USAGE
   */
  signal(user: AllowedUser, body: { id?: unknown; signal?: unknown }): { sent: boolean } {
    const r = typeof body.id === 'string' ? this.running.get(`${user.uid}:${body.id}`) : undefined;
    if (!r) throw new AwcError('E_NOT_FOUND', 'no such run of yours');
    if (typeof body.signal !== 'string' || !SIGNALS.has(body.signal)) throw new AwcError('E_USAGE', 'not a signal a run takes');
    const pid = r.cmd?.child.pid;
    if (!r.started || pid === undefined) {
      r.pending = body.signal as NodeJS.Signals;
      return { sent: false };
    }
    return { sent: kill(pid, body.signal as NodeJS.Signals) };
  }
}

/** A run in progress: its command once started, whether it runs as the caller yet, a signal held for then. */
interface Entry {
  cmd?: CallerCommand;
  started?: boolean;
  pending?: NodeJS.Signals;
}

/**
 * Holds the process at the other end of the request's connection (a pidfd, SO_PEERPIDFD): it
 * must be `user`'s and not sandboxed relative to the daemon (sandboxDifference).
 * @throws E_PERMISSION
 */
function holdCaller(req: IncomingMessage, user: AllowedUser): HeldPeer {
  const fd = (req.socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new AwcError('E_PERMISSION', 'cannot tell who is calling: the request has no socket');
  const peer = holdPeer(fd);
  try {
    if (peer.uid !== user.uid) throw new AwcError('E_PERMISSION', `the calling process is not ${user.name}'s`);
    const confined = sandboxDifference(peer.pid);
    if (confined)
      throw new AwcError(
        'E_PERMISSION',
        `the calling process is confined (${confined}): awc run would start the command outside its sandbox`,
        { hint: 'Call `awc run` from outside the sandbox, or run the command in the sandbox on the workspace mount itself.' },
      );
    return peer;
  } catch (err) {
    peer.close();
    throw err;
  }
}

/**
 * Puts the started stage into the caller's cgroups (killed when that fails or the caller is
 * gone), lets it go, and resolves with the command's exit status once it ended.
 */
async function runStarted(entry: Entry, cmd: CallerCommand, peer: HeldPeer, gone: () => boolean): Promise<{ status: number }> {
  const pid = cmd.child.pid;
  try {
    if (pid === undefined) throw new AwcError('E_MOUNT_FAILED', 'unshare(1) did not start');
    // into the caller's cgroups before the stage looks at anything; the limits it takes itself
    joinCgroups(pid, peer.pid);
    if (gone() || !alive(peer.pidfd)) throw new AwcError('E_PERMISSION', 'the calling process is gone');
  } catch (err) {
    cmd.child.kill('SIGKILL');
    await cmd.exit.catch(() => undefined);
    throw err;
  }
  cmd.go();
  void cmd.ready.then(
    () => {
      entry.started = true;
      if (entry.pending) kill(pid, entry.pending);
    },
    () => undefined,
  );
  const status = await cmd.exit;
  await cmd.ready;
  return { status };
}

/** Signals process group `pid` (its leader: the run was started detached). */
function kill(pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, sig);
    return true;
  } catch {
    return false;
  }
}
