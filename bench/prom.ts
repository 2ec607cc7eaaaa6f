import { request } from 'node:http';

/** Samples of a Prometheus text exposition: sample name → [{labels, value}]. */
export type Samples = Map<string, { labels: Record<string, string>; value: number }[]>;

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

/** A tiny parser of the text format (comments skipped; labels with escaped quotes handled). */
export function parseProm(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    let list = out.get(m[1]);
    if (!list) out.set(m[1], (list = []));
    list.push({ labels, value: Number(m[4]) });
  }
  return out;
}

/** Sum of the samples of `name` whose labels include `labels`; 0 when absent. */
export function sumOf(s: Samples, name: string, labels: Record<string, string> = {}): number {
  let v = 0;
  for (const x of s.get(name) ?? []) if (Object.entries(labels).every(([k, want]) => x.labels[k] === want)) v += x.value;
  return v;
}

/** Reads the daemon's metrics now; `delta(later)` gives counter increases since. */
export async function snapshotMetrics(socket: string): Promise<{ samples: Samples; delta: (later: Samples, name: string, labels?: Record<string, string>) => number }> {
  const samples = parseProm(await fetchMetrics(socket).catch(() => ''));
  return { samples, delta: (later, name, labels) => sumOf(later, name, labels) - sumOf(samples, name, labels) };
}
