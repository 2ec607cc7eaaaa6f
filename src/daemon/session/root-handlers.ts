import type { ServerResponse } from 'node:http';
import type * as z from 'zod';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import { describeHolders, type Holder } from '../../drivers/port/mount-use.js';
import type { OverlayHost } from '../../drivers/overlay/overlay-host.js';
import type { DaemonMetrics } from '../metrics/metrics.js';
import { parseShape, RootBodies } from '../users/user-schemas.js';
import type { HostSweeper } from './host-sweeper.js';

/** What an endpoint of the root socket needs of the host daemon (src/daemon/session/host-daemon.ts). */
export interface RootContext {
  /** The DaemonStatus answered on `GET /v1/status`. */
  status(): unknown;
  /** The overlay mounts. @throws E_PERMISSION (an ordinary user's daemon), E_INTERNAL (not started) */
  overlays(): OverlayHost;
  metrics: DaemonMetrics;
  /** Applies the home's `users` again; the uids served. */
  reload(): Promise<number[]>;
  /** The host sweeper. @throws E_INTERNAL (not started) */
  sweeper(): HostSweeper;
  /** Unmounts every overlay not busy; the busy ones. */
  unmountAll(force: boolean): Promise<{ workspace: string; path: string; holders: Holder[] }[]>;
  /** Stops the daemon once this request is answered. */
  stopSoon(): void;
}

/** One endpoint of the root socket: the shape of its JSON body (null: none read), and its handler, whose result is answered as JSON. */
interface RootEndpoint {
  handle(d: RootContext, body: unknown, route: string, res: ServerResponse): Promise<unknown>;
}

/** An endpoint whose body `shape` parses before `run` gets it (E_USAGE when it does not fit). */
function endpoint<S extends z.ZodType>(shape: S, run: (d: RootContext, b: z.output<S>) => unknown): RootEndpoint {
  return { handle: async (d, body, route) => run(d, parseShape(shape, body, route)) };
}

/** An endpoint that reads no body. */
function bodiless(run: (d: RootContext) => unknown): RootEndpoint {
  return { handle: async (d) => run(d) };
}

/** Marks a handler's result that it answered itself (not JSON). */
export const ANSWERED = Symbol('answered');

/**
 * Every endpoint of the root socket (the API of HostDaemon: see its docstring) by `METHOD
 * path`, each with the shape of its body (RootBodies, src/daemon/users/user-schemas.ts).
 */
export const ROOT_ENDPOINTS: Readonly<Record<string, RootEndpoint>> = {
  'GET /metrics': {
    handle: async (d, _b, _r, res) => {
      const data = Buffer.from(await d.metrics.text());
      res.writeHead(200, { 'content-type': d.metrics.contentType, 'content-length': data.length });
      res.end(data);
      return ANSWERED;
    },
  },
  'GET /v1/status': bodiless((d) => d.status()),
  'POST /v1/mount': endpoint(RootBodies.mount, (d, b) => d.overlays().mount(b.namespace, b.workspace, b.target, 'mount', b.steal === true)),
  'POST /v1/unmount': endpoint(RootBodies.unmount, (d, b) => d.overlays().unmount(b.namespace, b.workspace, b.force === true)),
  'GET /v1/metrics.json': bodiless((d) => d.metrics.json()),
  'POST /v1/checkpoint-report': endpoint(RootBodies.checkpointReport, (d, b) => {
    d.metrics.recordCheckpoint(b);
    // an overlay checkpoint that made a new root: its layer image follows in the background
    // (an ordinary user's daemon mounts no overlays: nothing to share)
    if (b.namespace !== undefined && b.root !== undefined) tryOverlays(d)?.shareImageLater(b.namespace, b.root as Digest);
    return { ok: true };
  }),
  'POST /v1/image-report': endpoint(RootBodies.imageReport, (d, b) => {
    d.metrics.layerImages.inc({ outcome: b.outcome, reason: b.reason });
    return { ok: true };
  }),
  'POST /v1/reload': bodiless(async (d) => ({ users: await d.reload() })),
  'POST /v1/sweep': endpoint(RootBodies.flags, (d, b) => d.sweeper().run({ dryRun: b.dryRun === true })),
  'POST /v1/stop': endpoint(RootBodies.flags, async (d, b) => {
    const busy = await d.unmountAll(b.force === true);
    if (busy.length > 0) {
      const all = busy.flatMap((m) => m.holders);
      throw new AwcError(
        'E_TARGET_BUSY',
        `${busy.length} workspace mount(s) are in use: ${busy.map((m) => `${m.path} (by ${m.holders.length > 0 ? describeHolders(m.holders) : 'no process visible here'})`).join(', ')}`,
        {
          hint: `End those processes${all.length > 0 ? ` (\`kill ${[...new Set(all.map((h) => h.pid))].join(' ')}\`)` : ''} or move their shells out of the mounts (the daemon keeps serving them until then), then stop again; \`awc daemon stop --force\` detaches them lazily instead.`,
          details: { busy },
        },
      );
    }
    d.stopSoon();
    return { stopping: true };
  }),
};

/** The overlay mounts of `d`, or undefined where it has none (an ordinary user's daemon, or not started). */
function tryOverlays(d: RootContext): OverlayHost | undefined {
  try {
    return d.overlays();
  } catch {
    return undefined;
  }
}
