import { rm } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import type * as z from 'zod';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { AwcConfig, AwcPaths } from '../../config/config.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';
import type { OverlayHost } from '../../drivers/overlay/overlay-host.js';
import { Awc } from '../../service/workspace/awc.js';
import { exportTar } from '../../service/tar/export-tar.js';
import { checkNamespace, type AllowedUser } from './user-access.js';
import type { DaemonMetrics } from '../metrics/metrics.js';
import { readJson, sendJson as send } from '../api/http-json.js';
import type { UserStatus } from './user-client.js';
import { callUserMethod, type CallContext } from './user-methods.js';
import { checkMounter } from './mounter-rule.js';
import { ImportArgs, parseShape, USER_ENDPOINTS, type UserRoute } from './user-schemas.js';
import { UserContent } from './user-content.js';
import { UserRun } from './user-run.js';
import { receiveUpload, UploadLedger } from './user-upload.js';

/** What the per-user API needs of the daemon. */
export interface UserRpcDeps {
  config: AwcConfig;
  paths: AwcPaths;
  catalog: Catalog;
  store: ObjectStore;
  overlays: () => OverlayHost;
  metrics: DaemonMetrics;
  /** When the daemon started (ISO 8601): `awc status` shows it. */
  startedAt: string;
}

/** What an endpoint's handler gets: the caller, the request, the response, and its body as its shape parsed it. */
type Handler<R extends UserRoute> = (
  r: { user: AllowedUser; req: IncomingMessage; res: ServerResponse },
  body: (typeof USER_ENDPOINTS)[R] extends z.ZodType ? z.output<(typeof USER_ENDPOINTS)[R]> : undefined,
) => unknown;

/**
 * The API of a per-user socket (docs/explanation/security.md "Per-user sockets"): the caller
 * is the user whose socket the request came in on; every request names its namespace, checked
 * against the user's rules (E_PERMISSION). Routes:
 *
 * - `GET /v1/status` → `{pid, user, uid, namespaces, host}`
 * - `POST /v1/call {namespace, method, args}` → the method's result: the table of
 *   src/daemon/users/user-methods.ts (USER_METHODS: one per REMOTE_METHODS, each with the shape of
 *   its arguments) says what each answers, and which follow the mounter rule
 *   (src/daemon/users/mounter-rule.ts): a workspace with state on this host is acted on or read only
 *   by the user who mounted it
 * - `POST /v1/import` (header `x-awc-args: {namespace, name?, message?, labels?}`, body: a tar the
 *   client made as the user) → ImportResult: imported by the hostile-tar-safe importer from a
 *   private temporary file; root never opens a path the user names
 * - `POST /v1/export-tar {namespace, ref}` → the snapshot (or workspace head: the mounter rule)
 *   as a pax tar, the result `{id, root, files, bytes}` in the trailer `x-awc-result`
 * - `POST /v1/read-file {namespace, snapshots, digest}` → the bytes of a file of one of those
 *   snapshots (a user's git export; src/daemon/users/user-content.ts, as `content.readRoot|readTree`)
 * - `POST /v1/run` (RunRequest of src/daemon/users/user-run.ts) → `{status}` once the command ended: `awc run` for the
 *   calling process (src/daemon/users/user-run.ts); `POST /v1/run-signal {namespace, id, signal}` passes a signal on
 *
 * Every body (and the import's header) is parsed by its schema (src/daemon/users/user-schemas.ts)
 * before anything runs: E_USAGE when it does not fit. Errors are `{error: {code, message, hint, retryable}}` with HTTP 4xx/5xx.
 */
export class UserRpc {
  private readonly content = new UserContent();
  /** Each user's upload bytes in flight (all of a uid's imports together within uploadMaxBytes). */
  private readonly uploads = new UploadLedger();
  private readonly runs: UserRun;

  constructor(private readonly deps: UserRpcDeps) {
    this.runs = new UserRun(deps.paths.workspaces);
  }

  /**
   * One handler per endpoint, each with the shape of its body (src/daemon/users/user-schemas.ts),
   * parsed before the handler runs: a request of the wrong shape is E_USAGE and nothing else.
   */
  private readonly endpoints: { readonly [R in UserRoute]: Handler<R> } = {
    'GET /v1/status': ({ user, res }) =>
      send(res, 200, {
        pid: process.pid,
        user: user.name,
        uid: user.uid,
        namespaces: user.namespaces,
        host: this.deps.config.host,
      } satisfies UserStatus),
    'POST /v1/import': async ({ user, req, res }) => send(res, 200, await this.importTar(user, req)),
    'POST /v1/call': async ({ user, res }, b) =>
      send(res, 200, (await callUserMethod(this.context(user, b.namespace), b.method, b.args)) ?? null),
    'POST /v1/run': async ({ user, req, res }, b) => {
      const c = this.context(user, b.namespace);
      send(res, 200, await this.runs.run(user, c.awc, this.deps.config.host, b, req, (ref) => c.mounter(ref)));
    },
    'POST /v1/run-signal': ({ user, res }, b) => {
      this.awcFor(user, b.namespace);
      send(res, 200, this.runs.signal(user, b));
    },
    'POST /v1/export-tar': async ({ user, res }, b) => {
      const c = this.context(user, b.namespace);
      await c.mounter(b.ref);
      await this.exportTar(c.awc, b.ref, res);
    },
    'POST /v1/read-file': async ({ user, res }, b) => this.content.streamFile(this.awcFor(user, b.namespace), b.snapshots, b.digest, res),
  };

  /** Serves one request of `user`. Never throws. */
  async handle(user: AllowedUser, req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const route = `${req.method} ${req.url}`;
      if (!Object.hasOwn(USER_ENDPOINTS, route)) throw new AwcError('E_USAGE', `no such endpoint ${route}`);
      const shape = USER_ENDPOINTS[route as UserRoute];
      const body = shape ? parseShape(shape, await readJson(req), route) : undefined;
      await (this.endpoints[route as UserRoute] as Handler<UserRoute>)({ user, req, res }, body as never);
    } catch (err) {
      const e = toAwcError(err);
      // a body not read to its end (an upload over its cap): answered, then the connection is
      // closed by ConnectionGuard's lingering close (the client reads the answer, then stops sending)
      if (res.headersSent) {
        // answered already (a stalled body: ConnectionGuard): nothing more to say
        if (!res.writableEnded) res.destroy(e);
      } else send(res, e.code === 'E_INTERNAL' ? 500 : 400, { error: e.toJSON() });
    }
  }

  /** What a method of the call table gets for `user` in namespace `ns` (checked against their rules). */
  private context(user: AllowedUser, ns: string): CallContext {
    const awc = this.awcFor(user, ns);
    const { paths, startedAt } = this.deps;
    return {
      user,
      awc,
      paths,
      content: this.content,
      mounter: (ref) => checkMounter(user, awc, paths.workspaces, ref),
      // the read path's figures stay out: they count every user's reads, as `awc metrics` (administrative) does
      daemon: () => ({ running: true, pid: process.pid, startedAt }),
    };
  }

  /** A service for one call in `ns` (checked against the user's rules), mounting through this daemon for the caller. */
  private awcFor(user: AllowedUser, ns: string): Awc {
    checkNamespace(user, ns, join(this.deps.config.home, 'config.json'));
    const { overlays, metrics } = this.deps;
    const asUser = { uid: user.uid, gid: user.gid };
    const port: HostDaemonPort = {
      // always the caller, whatever the request says
      mount: (r) => overlays().mount(r.namespace, r.workspace, r.target, 'mount', r.steal === true, asUser),
      ensureRunning: async () => undefined,
      unmount: async (r) => void (await overlays().unmount(r.namespace, r.workspace, r.force)),
      reportCheckpoint: async (r) => {
        metrics.recordCheckpoint(r);
        if (r.root !== undefined) overlays().shareImageLater(ns, r.root);
      },
      reportImportImage: async (r) => metrics.layerImages.inc({ outcome: r.outcome, reason: r.reason }),
    };
    return Awc.over({ ...this.deps.config, namespace: ns }, this.deps.catalog, this.deps.store, port);
  }

  private async importTar(user: AllowedUser, req: IncomingMessage): Promise<unknown> {
    const header = req.headers['x-awc-args'];
    let raw: unknown;
    try {
      raw = JSON.parse(typeof header === 'string' ? header : '{}');
    } catch {
      throw new AwcError('E_USAGE', 'x-awc-args is not JSON');
    }
    const args = parseShape(ImportArgs, raw, 'POST /v1/import x-awc-args');
    const awc = this.awcFor(user, args.namespace);
    // counted as it arrives, refused over uploadMaxBytes: this one, and all of the user's in flight (src/daemon/users/user-upload.ts)
    const account = { uid: user.uid, ledger: this.uploads };
    const { path: tmp, bytes } = await receiveUpload(
      req,
      join(this.deps.paths.hostDir, 'uploads'),
      this.deps.config.uploadMaxBytes,
      account,
    );
    try {
      return await awc.importSnapshot(tmp, {
        name: args.name ?? undefined,
        message: args.message ?? undefined,
        // checked by the import (E_USAGE) before any byte is read
        labels: args.labels ?? undefined,
      });
    } finally {
      await rm(tmp, { force: true });
      this.uploads.add(user.uid, -bytes);
    }
  }

  private async exportTar(awc: Awc, ref: string, res: ServerResponse): Promise<void> {
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
