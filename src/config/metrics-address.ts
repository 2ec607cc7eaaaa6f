import { isIP } from 'node:net';
import { AwcError } from '../core/errors.js';

/** Where the daemon serves `GET /metrics` over TCP (config `metricsAddress`): a host (IP literal) and a port. */
export interface MetricsAddress {
  host: string;
  port: number;
}

/** The address `metricsAddress: "on"` means: loopback, the port of OpenTelemetry's Prometheus exporter. */
export const DEFAULT_METRICS_ADDRESS: MetricsAddress = { host: '127.0.0.1', port: 9464 };

/**
 * Parses config `metricsAddress` (docs/reference/configuration.md): `off` (the default: the
 * metrics are served on the daemon's Unix socket only), `on` (127.0.0.1:9464), a port
 * (`9464`: on 127.0.0.1), or `<ip>:<port>` (`[::1]:9464` for IPv6). Only IP literals: a
 * host name could resolve to an interface the operator did not mean to open.
 * @returns the address, or undefined for `off`
 * @throws E_CONFIG naming the key, with the accepted forms as hint
 */
export function parseMetricsAddress(value: unknown): MetricsAddress | undefined {
  if (value === undefined || value === 'off') return undefined;
  if (value === 'on') return DEFAULT_METRICS_ADDRESS;
  const text = typeof value === 'number' ? String(value) : typeof value === 'string' ? value : '';
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[0-9.]+):)?(\d{1,5})$/.exec(text);
  const host = m ? (m[1] ?? '127.0.0.1').replace(/^\[|\]$/g, '') : '';
  const port = m ? Number(m[2]) : 0;
  if (!m || isIP(host) === 0 || port < 1 || port > 65_535)
    throw new AwcError('E_CONFIG', `invalid metricsAddress ${JSON.stringify(value)}`, {
      hint: 'Use "off" (the default), "on" (127.0.0.1:9464), a port (on 127.0.0.1), or "<ip>:<port>" ("[::1]:9464" for IPv6).',
    });
  return { host, port };
}
