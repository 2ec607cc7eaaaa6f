import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The sum of the samples of `name` in `awc metrics --json` whose labels include `labels` (0 when there are none). */
export function metricSum(metrics: Record<string, unknown>, name: string, labels: Record<string, string> = {}): number {
  const v = metrics[name];
  if (!Array.isArray(v)) return 0;
  return v
    .filter((s: { labels: Record<string, string> }) => Object.entries(labels).every(([k, x]) => String(s.labels[k]) === x))
    .reduce((a: number, s: { value: number }) => a + s.value, 0);
}

/** Reads every regular file under `dir` (to count, or to warm, what a read of the whole tree costs). */
export function readAll(dir: string): void {
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    const st = lstatSync(p);
    if (st.isDirectory()) readAll(p);
    else if (st.isFile()) readFileSync(p);
  }
}
