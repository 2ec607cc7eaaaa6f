import { request, type IncomingMessage } from 'node:http';
import { AwcError, type ErrorJson } from '../../core/errors.js';

/** What `GET /v1/status` of a per-user socket answers (src/daemon/users/user-rpc.ts). */
export interface UserStatus {
  pid: number;
  user: string;
  uid: number;
  namespaces: string[];
  /** The daemon's host name in the catalog (what `mountHost` of a workspace it mounted says). */
  host: string;
}

/**
 * Client of a per-user socket of the root daemon (src/daemon/users/user-rpc.ts): JSON calls and
 * the two tar streams. Needs no catalog, no store, no SDK.
 */
export class UserClient {
  constructor(readonly socket: string) {}

  /** `POST /v1/call {namespace, method, args}`. @throws the daemon's AwcError, E_DAEMON_UNAVAILABLE */
  async call(namespace: string, method: string, args: unknown[]): Promise<unknown> {
    const res = await this.send('/v1/call', {}, JSON.stringify({ namespace, method, args }));
    return JSON.parse((await readAll(res)).toString('utf8'));
  }

  /** `POST /v1/run`: waits for the command's end; its exit status. @throws the daemon's AwcError, E_DAEMON_UNAVAILABLE */
  async run(body: Record<string, unknown>): Promise<number> {
    const res = await this.send('/v1/run', {}, JSON.stringify(body));
    return (JSON.parse((await readAll(res)).toString('utf8')) as { status: number }).status;
  }

  /** `POST /v1/run-signal`: passes `signal` on to the run `id`. Never throws (a run that ended takes none). */
  async runSignal(namespace: string, id: string, signal: string): Promise<void> {
    await this.send('/v1/run-signal', {}, JSON.stringify({ namespace, id, signal }))
      .then(readAll)
      .catch(() => undefined);
  }

  /** `GET /v1/status`: who the daemon takes the caller for, and its host. @throws E_DAEMON_UNAVAILABLE */
  async status(): Promise<UserStatus> {
    const res = await this.send('/v1/status', {}, undefined, undefined, 'GET');
    return JSON.parse((await readAll(res)).toString('utf8')) as UserStatus;
  }

  /**
   * `POST /v1/import` with `body` (a tar stream made as the user) and `args` in `x-awc-args`.
   * `body` is ended by its producer; `abort(err)` on it (a failed `tar`) destroys the request,
   * so the daemon never imports a partial archive.
   */
  async upload(args: Record<string, unknown>, body: NodeJS.ReadableStream, done: Promise<void>): Promise<unknown> {
    const res = await this.send('/v1/import', { 'x-awc-args': JSON.stringify(args) }, body, done);
    return JSON.parse((await readAll(res)).toString('utf8'));
  }

  /** `POST /v1/export-tar {namespace, ref}`: the response (a tar; the result is in its trailer `x-awc-result`). */
  exportTar(namespace: string, ref: string): Promise<IncomingMessage> {
    return this.send('/v1/export-tar', {}, JSON.stringify({ namespace, ref }));
  }

  /** `POST /v1/read-file {namespace, snapshots, digest}`: the response (a file's bytes; src/daemon/users/user-content.ts). */
  readFile(namespace: string, snapshots: readonly string[], digest: string): Promise<IncomingMessage> {
    return this.send('/v1/read-file', {}, JSON.stringify({ namespace, snapshots, digest }));
  }

  private send(
    path: string,
    headers: Record<string, string>,
    body: string | NodeJS.ReadableStream | undefined,
    done?: Promise<void>,
    method = 'POST',
  ): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      let answered = false;
      const req = request({ socketPath: this.socket, method, path, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
        answered = true;
        if ((res.statusCode ?? 500) < 400) return resolve(res);
        readAll(res).then((b) => {
          req.destroy(); // an error answered before the body was all sent (an upload over its cap): stop sending
          try {
            reject(AwcError.fromJSON((JSON.parse(b.toString('utf8')) as { error?: ErrorJson }).error ?? {}));
          } catch {
            reject(new AwcError('E_INTERNAL', `the daemon sent a non-JSON error: ${b.toString('utf8').slice(0, 200)}`));
          }
        }, reject);
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (err instanceof AwcError) return reject(err);
        // the answer came before the body was all sent (an upload over its cap): a write after the
        // daemon closed (EPIPE) says nothing more; the answer is read (readAll) and decides
        if (answered) return;
        reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon did not answer on ${this.socket}: ${err.message}`));
      });
      if (body === undefined || typeof body === 'string') {
        req.end(body);
        return;
      }
      body.pipe(req, { end: false });
      done!.then(
        () => req.end(),
        (err: unknown) => {
          reject(err);
          req.destroy(err as Error);
        },
      );
    });
  }
}

/** The whole body of a response. */
export function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    res.on('data', (d: Buffer) => parts.push(d));
    res.on('end', () => resolve(Buffer.concat(parts)));
    res.on('error', reject);
  });
}
