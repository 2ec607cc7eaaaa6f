import { closeSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { isAbsolute } from 'node:path';
import { AwcError } from '../core/errors.js';
import type { Awc } from '../service/awc.js';
import { cwdInNamespace, runTarget } from '../service/run-target.js';
import { startInNamespace, type RunningCommand } from '../host/run-namespace.js';
import { takeDescriptors } from '../host/pidfd.js';
import { copyLimits, identityOf, joinCgroupOf, peerCredentials, sandboxDifference } from '../host/peer-process.js';
import type { AllowedUser } from './user-access.js';

/** The body of `POST /v1/run`. */
export interface RunRequest {
  namespace: string;
  /** The caller's id for this run (for `POST /v1/run-signal`): 8 to 64 of [A-Za-z0-9]. */
  id: string;
  ref: string;
  at?: string;
  /** The caller's working directory (absolute). */
  cwd: string;
  command: string;
  args: string[];
  env: Record<string, string>;
  umask: number;
}

/** Signals a caller may pass on to its command. */
const SIGNALS: ReadonlySet<string> = new Set(['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT']);

/**
 * `awc run` for an ordinary user (docs/reference/run.md): root makes the private mount
 * namespace and starts the command as the caller. The caller is the process at the other end
 * of the request's connection (SO_PEERCRED), which must be the socket's user and unconfined
 * relative to the daemon (sandboxDifference: a sandboxed agent never gets a command run
 * outside its sandbox). The command gets the caller's own stdin, stdout and stderr
 * (pidfd_getfd: the same open files, terminal included), uid, gid and groups, no capabilities
 * and no_new_privs, and, before it starts, the caller's cgroup and resource limits. The
 * workspace must be one the caller mounted.
 */
export class UserRun {
  private readonly running = new Map<string, { uid: number; cmd: RunningCommand }>();

  /**
   * Runs one request; resolves with the command's exit status (128 + a signal's number).
   * A connection that closes first hangs the command up (SIGHUP to its process group).
   * @throws E_USAGE (a bad request), E_PERMISSION (another user's process or workspace, a sandboxed caller), what runTarget and startInNamespace throw
   */
  async run(user: AllowedUser, awc: Awc, host: string, body: RunRequest, req: IncomingMessage): Promise<{ status: number }> {
    const ok =
      typeof body.id === 'string' &&
      /^[A-Za-z0-9]{8,64}$/.test(body.id) &&
      typeof body.ref === 'string' &&
      typeof body.cwd === 'string' &&
      isAbsolute(body.cwd) &&
      typeof body.command === 'string' &&
      Array.isArray(body.args) &&
      body.args.every((a) => typeof a === 'string') &&
      typeof body.env === 'object' &&
      body.env !== null &&
      Object.entries(body.env).every(([k, v]) => typeof v === 'string' && k !== '' && !k.includes('=')) &&
      Number.isInteger(body.umask) &&
      (body.at === undefined || body.at === null || typeof body.at === 'string');
    if (!ok) throw new AwcError('E_USAGE', 'not a run request');
    if (this.running.has(body.id)) throw new AwcError('E_USAGE', `run ${body.id} is running already`);
    const fd = (req.socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) throw new AwcError('E_INTERNAL', 'the request has no socket descriptor');
    const peer = peerCredentials(fd);
    if (peer.uid !== user.uid) throw new AwcError('E_PERMISSION', `the calling process is not ${user.name}'s`);
    const confined = sandboxDifference(peer.pid);
    if (confined)
      throw new AwcError(
        'E_PERMISSION',
        `the calling process is confined (${confined}): awc run would start the command outside its sandbox`,
        {
          hint: 'Call `awc run` from outside the sandbox, or run the command in the sandbox on the workspace mount itself.',
        },
      );
    const target = await runTarget(awc, host, body.ref, body.at ?? undefined, body.cwd);
    const id = identityOf(peer.pid);
    const stdio = takeDescriptors(peer.pid, user.uid, [0, 1, 2]);
    let cmd: RunningCommand;
    try {
      cmd = startInNamespace({
        source: target.source,
        at: target.at,
        cwd: cwdInNamespace(target, body.cwd),
        command: body.command,
        args: body.args,
        env: body.env,
        umask: body.umask & 0o777,
        asUser: { uid: id.uid, gid: id.gid, groups: id.groups },
        stdio: [stdio[0]!, stdio[1]!, stdio[2]!],
        detached: true,
        gated: true,
      });
    } finally {
      for (const d of stdio) closeSync(d);
    }
    const pid = cmd.child.pid;
    if (pid !== undefined) {
      joinCgroupOf(pid, peer.pid);
      copyLimits(peer.pid, pid);
    }
    cmd.go();
    this.running.set(body.id, { uid: user.uid, cmd });
    let done = false;
    req.socket.once('close', () => {
      if (!done && pid !== undefined) kill(pid, 'SIGHUP');
    });
    try {
      const status = await cmd.exit;
      await cmd.ready;
      return { status };
    } finally {
      done = true;
      this.running.delete(body.id);
    }
  }

  /** `POST /v1/run-signal {id, signal}`: passes a signal on to the process group of the caller's run `id`. @throws E_NOT_FOUND, E_USAGE */
  signal(user: AllowedUser, body: { id?: unknown; signal?: unknown }): { sent: boolean } {
    const r = typeof body.id === 'string' ? this.running.get(body.id) : undefined;
    if (!r || r.uid !== user.uid) throw new AwcError('E_NOT_FOUND', 'no such run of yours');
    if (typeof body.signal !== 'string' || !SIGNALS.has(body.signal)) throw new AwcError('E_USAGE', 'not a signal a run takes');
    return { sent: r.cmd.child.pid !== undefined && kill(r.cmd.child.pid, body.signal as NodeJS.Signals) };
  }
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
