import { createServer, type Server } from 'node:http';
import { AwcError } from '../../core/errors.js';
import type { MetricsAddress } from '../../config/metrics-address.js';
import type { Logger } from '../../core/log.js';
import type { DaemonMetrics } from './metrics.js';

/**
 * Serves the daemon's Prometheus metrics over TCP for a scraper (Prometheus scrapes HTTP over
 * TCP, not a Unix socket): `GET /metrics` answers the text exposition of `metrics`, anything
 * else 404; no other endpoint of the daemon is reachable here. Resolves once listening.
 * @throws E_CONFIG when the address cannot be listened on (in use, not an address of this host), naming it
 */
export async function serveMetricsOverTcp(metrics: DaemonMetrics, at: MetricsAddress, log: Logger): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found: this port serves GET /metrics only\n');
      return;
    }
    metrics.text().then(
      (text) => {
        const data = Buffer.from(text);
        res.writeHead(200, { 'content-type': metrics.contentType, 'content-length': data.length }).end(data);
      },
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(`${String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new AwcError('E_CONFIG', `cannot serve metrics on ${at.host}:${at.port}: ${err.code ?? err.message}`, {
          hint: 'Choose a free port on an address of this host in metricsAddress, or set it to "off".',
          details: { host: at.host, port: at.port },
        }),
      ),
    );
    server.listen(at.port, at.host, () => resolve());
  });
  log({ level: 'info', msg: 'metrics over tcp', host: at.host, port: at.port });
  return server;
}
