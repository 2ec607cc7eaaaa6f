import { request } from 'node:http';
import { parseProm, sumOf, type Samples } from '../src/daemon/metrics/prom-text.js';

export { parseProm, sumOf, type Samples };

/** GET /metrics on the daemon's Unix socket; '' when the daemon answers an error (no metrics endpoint). */
export function fetchMetrics(socket: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: socket, method: 'GET', path: '/metrics', timeout: 30_000 }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('error', reject);
      res.on('end', () => resolve(res.statusCode === 200 ? Buffer.concat(parts).toString('utf8') : ''));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Reads the daemon's metrics now; `delta(later)` gives counter increases since. */
export async function snapshotMetrics(
  socket: string,
): Promise<{ samples: Samples; error?: string; delta: (later: Samples, name: string, labels?: Record<string, string>) => number }> {
  const r = await fetchMetricsRetry(socket);
  const samples = parseProm(r.text);
  return { samples, error: r.error, delta: (later, name, labels) => sumOf(later, name, labels) - sumOf(samples, name, labels) };
}

/** fetchMetrics with one retry; never throws ('' and the error text when both attempts fail). */
export async function fetchMetricsRetry(socket: string): Promise<{ text: string; error?: string }> {
  let error = '';
  for (let i = 0; i < 2; i++) {
    try {
      const text = await fetchMetrics(socket);
      if (text !== '') return { text };
      error = 'the daemon answered GET /metrics with an error';
    } catch (err) {
      error = (err as Error).message;
    }
  }
  return { text: '', error };
}
