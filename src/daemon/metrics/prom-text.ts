/**
 * Reading the Prometheus text exposition (the daemon's `GET /metrics`): a tiny parser for
 * the demos and the benchmark suite, which compare counters before and after.
 */

/** Samples of a Prometheus text exposition: sample name → [{labels, value}]. */
export type Samples = Map<string, { labels: Record<string, string>; value: number }[]>;

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
