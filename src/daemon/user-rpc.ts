import { rm } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join, resolve } from 'node:path';
import { AwcError, toAwcError } from '../core/errors.js';
import type { Catalog, WorkspaceRow } from '../catalog/catalog.js';
import type { Labels } from '../catalog/labels.js';
import type { ObjectStore } from '../store/object-store.js';
import type { AwcConfig, AwcPaths } from '../config/config.js';
import type { HostDaemonPort } from '../drivers/host-daemon-port.js';
import type { OverlayHost } from '../drivers/overlay/overlay-host.js';
import { readHostState } from '../drivers/workspace-state.js';
import { Awc } from '../service/awc.js';
import { exportTar } from '../service/export-tar.js';
import { REMOTE_METHODS, type RemoteMethod } from '../service/remote-methods.js';
import { checkNamespace, type AllowedUser } from './user-access.js';
import type { DaemonMetrics } from './metrics.js';
import { readJson, sendJson as send } from './http-json.js';
import type { UserStatus } from './user-client.js';
import { callDaemonSide, DAEMON_SIDE } from './user-methods.js';
import { UserContent } from './user-content.js';
import { UserRun, type RunRequest } from './user-run.js';
import { receiveUpload } from './user-upload.js';

/** What the per-user API needs of the daemon. */
export interface UserRpcDeps {
  config: AwcConfig;
  paths: AwcPaths;
  catalog: Catalog;
  store: ObjectStore;
  overlays: () => OverlayHost;
  metrics: DaemonMetrics;
}

/** Methods that act on a workspace mounted on this host: only its mounter (and root) may call them. */
const MOUNTER_ONLY: ReadonlySet<RemoteMethod> = new Set(['checkpoint', 'unmount', 'rm', 'mount']);

/**
 * The API of a per-user socket (docs/explanation/security.md "Per-user sockets"): the caller
 * is the user whose socket the request came in on; every request names its namespace, checked
 * against the user's rules (E_PERMISSION). Routes:
 *
 * - `GET /v1/status` → `{pid, user, uid, namespaces, host}`
 * - `POST /v1/call {namespace, method, args}` → the Awc method's result (allow-list:
 *   src/service/remote-methods.ts); `mount` is always for the caller (their uid and gid, at a
 *   directory they own: OverlayHost.mount's `asUser`); `checkpoint`, `unmount`, `rm` and `mount`
 *   of a workspace with state on this host are refused unless the caller mounted it
 * - `POST /v1/import` (header `x-awc-args: {namespace, name?, message?, labels?}`, body: a tar the
 *   client made as the user) → ImportResult: imported by the hostile-tar-safe importer from a
 *   private temporary file; root never opens a path the user names
 * - `POST /v1/export-tar {namespace, ref}` → the snapshot (or workspace head) as a pax tar,
 *   the result `{id, root, files, bytes}` in the trailer `x-awc-result`
 * - `POST /v1/read-file {namespace, snapshots, digest}` → the bytes of a file of one of those
 *   snapshots (a user's git export; src/daemon/user-content.ts, as `content.readRoot|readTree`)
 * - `POST /v1/run` ({@link RunRequest}) → `{status}` once the command ended: `awc run` for the
 *   calling process (src/daemon/user-run.ts); `POST /v1/run-signal {namespace, id, signal}` passes a signal on
 * - `usage`, `kept.*` of the call route are answered by the daemon itself (src/daemon/user-methods.ts)
 *
 * Errors are `{error: {code, message, hint, retryable}}` with HTTP 4xx/5xx.
 */
export class UserRpc {
  private readonly content = new UserContent();
  private readonly runs: UserRun;

  constructor(private readonly deps: UserRpcDeps) {
    this.runs = new UserRun(deps.paths.workspaces);
  }

  /** Serves one request of `user`. Never throws. */
  async handle(user: AllowedUser, req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const route = `${req.method} ${req.url}`;
      if (route === 'GET /v1/status')
        return send(res, 200, {
          pid: process.pid,
          user: user.name,
          uid: user.uid,
          namespaces: user.namespaces,
          host: this.deps.config.host,
        } satisfies UserStatus);
      if (route === 'POST /v1/import') return send(res, 200, await this.importTar(user, req));
      const body = await readJson(req);
      if (typeof body !== 'object' || body === null || Array.isArray(body))
        throw new AwcError('E_USAGE', 'request body is not a JSON object');
      const awc = this.awcFor(user, body.namespace);
      if (route === 'POST /v1/call') return send(res, 200, (await this.call(user, awc, body.method, body.args)) ?? null);
      if (route === 'POST /v1/run')
        return send(
          res,
          200,
          await this.runs.run(user, awc, this.deps.config.host, body as unknown as RunRequest, req, (ref) =>
            this.checkMounter(user, awc, ref),
          ),
        );
      if (route === 'POST /v1/run-signal') return send(res, 200, this.runs.signal(user, body));
      if (route === 'POST /v1/export-tar') return await this.exportTar(awc, body.ref, res);
      if (route === 'POST /v1/read-file') return await this.content.streamFile(awc, body.snapshots, body.digest, res);
      throw new AwcError('E_USAGE', `no such endpoint ${route}`);
    } catch (err) {
      const e = toAwcError(err);
      // a body not read to its end (an upload over its cap): answer, discard what still comes
      // (the client stops sending once it reads the error) and close after 5 s at most
      if (!req.complete) {
        req.resume();
        const t = setTimeout(() => req.socket.destroy(), 5000).unref();
        req.socket.once('close', () => clearTimeout(t));
      }
      if (res.headersSent) res.destroy(e);
      else send(res, e.code === 'E_INTERNAL' ? 500 : 400, { error: e.toJSON() });
    }
  }

  /** A service for one call in `ns` (checked against the user's rules), mounting through this daemon for the caller. */
  private awcFor(user: AllowedUser, ns: unknown): Awc {
    if (typeof ns !== 'string' || ns === '') throw new AwcError('E_USAGE', 'missing string field namespace');
    checkNamespace(user, ns, join(this.deps.config.home, 'config.json'));
    const { overlays, metrics } = this.deps;
    const asUser = { uid: user.uid, gid: user.gid };
    const port: HostDaemonPort = {
      // always the caller, whatever the request says
      mount: (r) => overlays().mount(r.namespace, r.workspace, r.target, 'mount', r.steal === true, asUser),
      ensureRunning: async () => undefined,
      unmount: async (r) => void (await overlays().unmount(r.namespace, r.workspace, r.force)),
      reportCheckpoint: async (r) => metrics.recordCheckpoint(r),
    };
    return Awc.over({ ...this.deps.config, namespace: ns }, this.deps.catalog, this.deps.store, port);
  }

  private async call(user: AllowedUser, awc: Awc, method: unknown, rawArgs: unknown): Promise<unknown> {
    let args = rawArgs as unknown[];
    if (typeof method !== 'string' || !(REMOTE_METHODS as readonly string[]).includes(method))
      throw new AwcError('E_USAGE', `no such method ${JSON.stringify(method)} through the daemon`, {
        hint: `Callable: ${REMOTE_METHODS.join(', ')}.`,
      });
    if (!Array.isArray(rawArgs)) throw new AwcError('E_USAGE', 'args must be a list');
    // JSON has no undefined: an argument left out arrives as null
    args = args.map((a: unknown) => (a === null ? undefined : a));
    const m = method as RemoteMethod;
    if (MOUNTER_ONLY.has(m) && typeof args[0] === 'string') await this.checkMounter(user, awc, args[0]);
    if (m === 'mount') {
      const opts = (args[2] ?? {}) as { steal?: boolean };
      return awc.mount(String(args[0]), String(args[1]), { steal: opts.steal === true, asUser: { uid: user.uid, gid: user.gid } });
    }
    if (m === 'content.readRoot') return this.content.readRoot(awc, args[0], args[1]);
    if (m === 'content.readTree') return this.content.readTree(awc, args[0], args[1]);
    if (DAEMON_SIDE.has(m)) return callDaemonSide(user, awc, this.deps.paths, m, args);
    if (m === 'leases.list') return awc.leases.list(args[0] as WorkspaceRow[]);
    if (m === 'leases.show') return awc.leases.show(args[0] as WorkspaceRow);
    const fn = (awc as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[m]!;
    return fn.apply(awc, args);
  }

  /** @throws E_PERMISSION when `ref` names a workspace with state on this host that `user` did not mount */
  private async checkMounter(user: AllowedUser, awc: Awc, ref: string): Promise<void> {
    let ws: WorkspaceRow | undefined;
    if (ref.includes('/')) ws = await awc.catalog.findWorkspaceByMountPath(resolve(ref));
    if (!ws) {
      const r = await awc.resolve(ref).catch(() => undefined);
      if (r?.kind === 'workspace') ws = r.workspace;
    }
    if (!ws) return; // a snapshot, or nothing: the call itself answers
    const state = await readHostState(this.deps.paths.workspaces, ws.id);
    if (state && state.owner?.uid !== user.uid)
      throw new AwcError(
        'E_PERMISSION',
        `workspace ${ws.id} was mounted on this host by ${state.owner ? `uid ${state.owner.uid}` : 'root'}, not by ${user.name}`,
        {
          hint: 'Only the user who mounted a workspace (or root) may checkpoint, unmount or remove it.',
        },
      );
  }

  private async importTar(user: AllowedUser, req: IncomingMessage): Promise<unknown> {
    const header = req.headers['x-awc-args'];
    let args: { namespace?: unknown; name?: unknown; message?: unknown; allowChanging?: unknown; labels?: unknown };
    try {
      args = JSON.parse(typeof header === 'string' ? header : '{}');
    } catch {
      throw new AwcError('E_USAGE', 'x-awc-args is not JSON');
    }
    const awc = this.awcFor(user, args.namespace);
    // counted as it arrives, refused over uploadMaxBytes (src/daemon/user-upload.ts)
    const tmp = await receiveUpload(req, join(this.deps.paths.hostDir, 'uploads'), this.deps.config.uploadMaxBytes);
    try {
      return await awc.importSnapshot(tmp, {
        name: typeof args.name === 'string' ? args.name : undefined,
        message: typeof args.message === 'string' ? args.message : undefined,
        // checked by the import (E_USAGE) before any byte is read
        labels: args.labels as Labels | undefined,
      });
    } finally {
      await rm(tmp, { force: true });
    }
  }

  private async exportTar(awc: Awc, ref: unknown, res: ServerResponse): Promise<void> {
    if (typeof ref !== 'string' || ref === '') throw new AwcError('E_USAGE', 'missing string field ref');
    const r = await awc.resolve(ref);
    const snap = r.kind === 'snapshot' ? r.snapshot : await awc.getSnapshot(r.workspace.headSnapshotId);
    res.writeHead(200, { 'content-type': 'application/x-tar', trailer: 'x-awc-result' });
    // through a pass-through that does not end the response: the result goes in its trailer
    const pt = new PassThrough();
    const drained = new Promise<void>((r) => pt.once('end', r));
    pt.pipe(res, { end: false });
    const counts = await exportTar(awc.reader(), snap.root, pt);
    await drained;
    res.addTrailers({ 'x-awc-result': JSON.stringify({ id: snap.id, root: snap.root, files: counts.files, bytes: counts.bytes }) });
    res.end();
  }
}
