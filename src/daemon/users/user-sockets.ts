import { EventEmitter } from 'node:events';
import * as fs from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tagBodyOwner } from '../api/body-budget.js';
import { ConnectionGuard } from '../api/conn-guard.js';
import { limitsOf, type DaemonLimits } from '../../config/daemon-limits.js';
import { join } from 'node:path';
import { listenOnSocket, prepareSocketDir } from '../api/socket-file.js';
import type { AllowedUser } from './user-access.js';
import type { LogEvents, Logger } from '../../core/log.js';

/** Serves a request that came in on the socket of `user`. */
export type UserHandler = (user: AllowedUser, req: IncomingMessage, res: ServerResponse) => void;

/**
 * The root daemon's per-user sockets (docs/explanation/security.md "Per-user sockets"):
 * `<dir>/<uid>.sock` for every allowed user, owned by that user and mode 0600, in a
 * root-owned 0755 directory (prepareSocketDir), so only that user (and root) can connect;
 * the daemon knows the caller by the socket a request came in on (Node has no
 * SO_PEERCRED). {@link sync} makes the set match the configuration (start, SIGHUP):
 * sockets of users no longer allowed are closed and removed, and so are stray ones a
 * crashed daemon left. With `limits` (the daemon's configuration), each socket's connections are capped and timed out
 * (ConnectionGuard: docs/explanation/security.md "Per-user resource caps"), and its request
 * bodies count against the user's share of the daemon's body budget (body-budget.ts). Logs to
 * `logger` (default: its `'log'` event).
 */
export class UserSockets extends EventEmitter<LogEvents> {
  private readonly served = new Map<number, { server: Server; user: AllowedUser; ino: number }>();
  private readonly guard?: ConnectionGuard;
  private readonly log: Logger;

  constructor(
    readonly dir: string,
    private readonly handler: UserHandler,
    limits?: Partial<DaemonLimits>,
    logger?: Logger,
  ) {
    super();
    this.log = logger ?? ((l) => void this.emit('log', l));
    if (limits) this.guard = new ConnectionGuard(limitsOf(limits), this.log);
  }

  /** The socket path of `uid`. */
  socketOf(uid: number): string {
    return join(this.dir, `${uid}.sock`);
  }

  /**
   * Serves exactly `users`: new ones get a socket, removed ones lose theirs, the others
   * keep theirs with their rules updated (calls check them per request).
   * @throws E_PERMISSION (the directory is unsafe: see prepareSocketDir), the listen error
   */
  async sync(users: ReadonlyMap<number, AllowedUser>): Promise<void> {
    prepareSocketDir(this.socketOf(0));
    for (const [uid, s] of [...this.served]) {
      const u = users.get(uid);
      if (u) s.user = u;
      else await this.drop(uid);
    }
    for (const name of fs.readdirSync(this.dir)) {
      const m = /^(\d+)\.sock$/.exec(name);
      if (m && !this.served.has(Number(m[1])) && !users.has(Number(m[1]))) fs.rmSync(join(this.dir, name), { force: true });
    }
    for (const [uid, u] of users) {
      if (this.served.has(uid)) continue;
      const path = this.socketOf(uid);
      const serve = (req: IncomingMessage, res: ServerResponse): void => {
        const s = this.served.get(uid);
        tagBodyOwner(req, `uid:${uid}`);
        if (s) this.handler(s.user, req, res);
        else res.writeHead(403).end();
      };
      const server = this.guard ? this.guard.server(uid, serve) : createServer(serve);
      // 0600 root first (listenOnSocket), then given to the user: at no moment may anybody else connect
      const ino = await listenOnSocket(server, path);
      fs.chownSync(path, uid, u.gid);
      this.served.set(uid, { server, user: u, ino });
      this.log({ level: 'info', msg: 'user socket', user: u.name, uid, path });
    }
  }

  /** The uids served now. */
  uids(): number[] {
    return [...this.served.keys()];
  }

  /** Closes every socket and removes its file. */
  async close(): Promise<void> {
    for (const uid of [...this.served.keys()]) await this.drop(uid);
  }

  private async drop(uid: number): Promise<void> {
    const s = this.served.get(uid)!;
    this.served.delete(uid);
    s.server.closeAllConnections();
    await new Promise<void>((r) => s.server.close(() => r()));
    const path = this.socketOf(uid);
    if (fs.statSync(path, { throwIfNoEntry: false })?.ino === s.ino) fs.rmSync(path, { force: true });
    this.log({ level: 'info', msg: 'user socket removed', uid, path });
  }
}
