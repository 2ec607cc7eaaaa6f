import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Registry } from 'prom-client';
import type { CommandSpec } from '../cli/output/command-spec.js';
import { benchPlots, type TreePlot } from './bench-plots.js';
import { cliReference } from './cli-reference.js';
import { cell, configTable, errorsTable, metricsTables, table } from './reference-tables.js';

/**
 * The parts of docs/ made from the code and the benchmark output (issue 29), committed so that
 * they read the same on GitHub and on the site: `npm run docs:gen` (src/docs/docs-main.ts)
 * writes them, `npm run docs` does before it builds the site, and test/docs/generated.test.ts
 * fails when a committed file differs from what this makes (a code change without its docs).
 *
 * In a page, a generated part sits between two comments, which the rest of the page keeps:
 *
 *     <!-- BEGIN generated errors (npm run docs:gen, from src/core/errors.ts) -->
 *     …
 *     <!-- END generated errors -->
 */

/** A file as it must be: its path relative to the repository and its whole text. */
export interface GeneratedFile {
  path: string;
  text: string;
}

/** What the generated parts are made from: the CLI's command definitions and the daemon's metrics registry. */
export interface GenerateInputs {
  cli: CommandSpec;
  metrics: Registry;
}

/** `page` with the body of its region `name` replaced by `body`. @throws Error when the page lacks the region's comments */
export function withRegion(page: string, name: string, body: string, file: string): string {
  const re = new RegExp(`(<!-- BEGIN generated ${name} [^\\n]*-->\\n)[\\s\\S]*?(<!-- END generated ${name} -->)`);
  if (!re.test(page))
    throw new Error(`${file} has no region "${name}" (<!-- BEGIN generated ${name} … --> … <!-- END generated ${name} -->)`);
  return page.replace(re, (_m, begin: string, end: string) => `${begin}\n${body.trimEnd()}\n\n${end}`);
}

/** The plots page's region: per tree its plot, the figures drawn, and the rows with no ratio. */
function plotsRegion(plots: TreePlot[]): string {
  const out: string[] = [];
  for (const p of plots) {
    out.push(`### Tree ${p.tree}`, '', `![AWC against its baseline, tree ${p.tree}](plots/${p.file})`, '');
    out.push(
      table(
        ['figure', 'AWC', 'baseline (same run)', 'AWC vs baseline', 'target', 'met?'],
        p.drawn.map((r) => [r.figure, r.awc, r.baseline, r.versus, r.target, r.met].map(cell)),
      ),
    );
    if (p.skipped.length > 0) out.push(`Not drawn (the table gives no ratio): ${p.skipped.map((r) => r.figure).join('; ')}.`, '');
  }
  return out.join('\n');
}

/** Every generated file of the repository at `root` as it must be, reading the pages' other parts from `root`. */
export function generatedFiles(root: string, inputs: GenerateInputs): GeneratedFile[] {
  const read = (p: string): string => readFileSync(join(root, p), 'utf8');
  const region = (path: string, name: string, body: string): GeneratedFile => ({ path, text: withRegion(read(path), name, body, path) });
  const plots = benchPlots(read('docs/benchmarks.md'));
  return [
    region('docs/reference/errors.md', 'errors', errorsTable()),
    region('docs/reference/configuration.md', 'configuration', configTable()),
    region('docs/reference/cli.md', 'commands', cliReference(inputs.cli)),
    region('docs/reference/metrics.md', 'metrics', metricsTables(inputs.metrics)),
    region('docs/benchmark-plots.md', 'plots', plotsRegion(plots)),
    ...plots.map((p) => ({ path: `docs/plots/${p.file}`, text: p.svg })),
  ];
}
