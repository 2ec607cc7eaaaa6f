import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fault-injecting HTTP proxy in front of a real S3 server (a fake only to inject faults:
 * every request it does not fail goes to the server as is). `plan` decides, for the n-th
 * request (from 1), whether it fails and how:
 *
 * - `slowdown`: 503 with S3's `SlowDown` error;   - `internal`: 500 `InternalError`;
 * - `throttle`: 429 `TooManyRequests`;             - `reset`: the connection is destroyed unanswered;
 * - `cut`: forwarded, but the response body is cut off after half of it (the connection destroyed);
 * - `full`: 507 with MinIO's `XMinioStorageFull` (a server out of disk); `quota`: 403 with Ceph RGW's `QuotaExceeded`;
 * - `hang`: the request is read and never answered (until the client times out, or the proxy closes).
 */
export type Fault = 'slowdown' | 'internal' | 'throttle' | 'reset' | 'cut' | 'full' | 'quota' | 'hang';

/** A running proxy. */
export interface FaultProxy {
  endpoint: string;
  /** Requests seen, and how many of them were failed, by fault. */
  readonly seen: { requests: number; faults: Record<Fault, number>; methods: string[] };
  plan: (n: number, req: IncomingMessage) => Fault | undefined;
  close(): Promise<void>;
}

const ERRORS: Record<'slowdown' | 'internal' | 'throttle' | 'full' | 'quota', [number, string, string]> = {
  slowdown: [503, 'SlowDown', 'Please reduce your request rate.'],
  internal: [500, 'InternalError', 'We encountered an internal error. Please try again.'],
  throttle: [429, 'TooManyRequests', 'Too many requests.'],
  quota: [403, 'QuotaExceeded', 'The quota of the user or bucket is exceeded.'],
  full: [507, 'XMinioStorageFull', 'Storage backend has reached its minimum free drive threshold. Please delete a few objects to proceed.'],
};

/** Starts a proxy on 127.0.0.1 (a random port) in front of `upstream` (an http:// endpoint). */
export async function startFaultProxy(upstream: string, plan: FaultProxy['plan'] = () => undefined): Promise<FaultProxy> {
  const up = new URL(upstream);
  const seen = {
    requests: 0,
    faults: { slowdown: 0, internal: 0, throttle: 0, reset: 0, cut: 0, full: 0, quota: 0, hang: 0 },
    methods: [] as string[],
  };
  const proxy: FaultProxy = { endpoint: '', seen, plan, close: async () => undefined };
  const server: Server = createServer((req, res) => {
    const n = ++seen.requests;
    seen.methods.push(`${req.method} ${req.url}`);
    const fault = proxy.plan(n, req);
    if (fault) seen.faults[fault]++;
    if (fault === 'reset') {
      req.socket.destroy();
      return;
    }
    if (fault === 'hang') {
      req.resume();
      return;
    }
    if (fault === 'slowdown' || fault === 'internal' || fault === 'throttle' || fault === 'full' || fault === 'quota') {
      const [status, code, message] = ERRORS[fault];
      req.resume();
      req.once('end', () => {
        const xml = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>fault</RequestId></Error>`;
        res.writeHead(status, { 'content-type': 'application/xml', 'content-length': req.method === 'HEAD' ? 0 : Buffer.byteLength(xml) });
        res.end(req.method === 'HEAD' ? undefined : xml);
      });
      return;
    }
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      if (fault !== 'cut') {
        upRes.pipe(res);
        return;
      }
      const total = Number(upRes.headers['content-length'] ?? 0);
      let sent = 0;
      upRes.on('data', (chunk: Buffer) => {
        if (sent >= total / 2) return;
        const part = chunk.subarray(0, Math.max(0, Math.ceil(total / 2) - sent));
        sent += part.length;
        res.write(part);
        if (sent >= total / 2) setImmediate(() => res.socket?.destroy());
      });
    });
    fwd.on('error', () => req.socket.destroy());
    req.pipe(fwd);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  proxy.endpoint = `http://127.0.0.1:${port}`;
  proxy.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return proxy;
}
