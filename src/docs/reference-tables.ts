import { Counter, Gauge, Histogram, Summary, type Registry } from 'prom-client';
import { ERROR_CODES } from '../core/errors.js';
import { CONFIG_KEYS } from '../config/config.js';
import { CONFIG_DOCS } from '../config/config-docs.js';

/**
 * The reference tables made from the code's registries (issue 29: reference pages that cannot
 * drift): the error codes (src/core/errors.ts), the configuration keys (src/config/config.ts and
 * config-docs.ts) and the daemon's metrics (src/daemon/metrics/metrics.ts). Each returns
 * Markdown, a table with a trailing newline; src/docs/generated.ts puts it into its page.
 */

/** `s` fit for one cell of a Markdown table: `|` escaped, line breaks as spaces. */
export function cell(s: string): string {
  return s.replace(/\r?\n/g, ' ').replace(/(?<!\\)\|/g, '\\|');
}

/** A Markdown table: `head` the column names, `align` `---` or `---:` per column. */
export function table(head: string[], rows: string[][], align: string[] = head.map(() => '---')): string {
  const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
  return [line(head), `|${align.join('|')}|`, ...rows.map(line)].join('\n') + '\n';
}

/** docs/reference/errors.md's table: every code of ERROR_CODES with its exit status, retryability and default hint. */
export function errorsTable(): string {
  const rows = Object.entries(ERROR_CODES).map(([code, spec]) => [
    `\`${code}\``,
    String(spec.exit),
    spec.retryable ? 'yes' : 'no',
    cell(spec.hint),
  ]);
  return table(['code', 'exit', 'retryable', 'default hint'], rows);
}

/** docs/reference/configuration.md's table: every key of CONFIG_DOCS (which covers CONFIG_KEYS and `users`) with its variable. */
export function configTable(): string {
  const envs: Record<string, { env: string }> = CONFIG_KEYS;
  const rows = Object.entries(CONFIG_DOCS).map(([key, doc]) => [
    `\`${key}\``,
    key in envs ? `\`${envs[key].env}\`` : '(none: `config.json` only)',
    doc.type,
    doc.default,
    doc.meaning,
  ]);
  return table(['key (`config.json`)', 'environment', 'type', 'default', 'unit and meaning'], rows);
}

/** One metric of a registry as the reference lists it. */
interface MetricRow {
  name: string;
  type: 'counter' | 'gauge' | 'histogram' | 'summary';
  labels: string[];
  help: string;
}

/** The metrics of `registry` in registration order (prom-client keeps name, help and label names on each). */
function metricRows(registry: Registry): MetricRow[] {
  return registry.getMetricsAsArray().map((m) => {
    const meta = m as unknown as { name: string; help: string; labelNames?: string[] };
    const type =
      m instanceof Counter
        ? 'counter'
        : m instanceof Gauge
          ? 'gauge'
          : m instanceof Histogram
            ? 'histogram'
            : m instanceof Summary
              ? 'summary'
              : null;
    if (type === null) throw new Error(`metric ${meta.name} is of a type the reference does not know`);
    return { name: meta.name, type, labels: meta.labelNames ?? [], help: meta.help };
  });
}

/** Whether a metric is one of prom-client's default process metrics (`awc_process_*`, `awc_nodejs_*`). */
function isDefaultMetric(name: string): boolean {
  return name.startsWith('awc_process_') || name.startsWith('awc_nodejs_');
}

/**
 * docs/reference/metrics.md's body: a table of AWC's own metrics (name, type, labels, help as
 * registered), then the names of prom-client's default metrics the daemon also serves.
 * `registry` is a DaemonMetrics' registry with the default metrics on.
 */
export function metricsTables(registry: Registry): string {
  const rows = metricRows(registry);
  const own = rows
    .filter((r) => !isDefaultMetric(r.name))
    .map((r) => [`\`${r.name}\``, r.type, r.labels.map((l) => `\`${l}\``).join(', '), cell(r.help)]);
  const defaults = rows.filter((r) => isDefaultMetric(r.name)).map((r) => `\`${r.name}\` (${r.type})`);
  return (
    table(['metric', 'type', 'labels', 'help'], own) +
    "\nprom-client's default metrics, with the prefix `awc_` (resident memory, CPU, heap, event-loop lag, …):\n" +
    defaults.join(', ') +
    '.\n'
  );
}
