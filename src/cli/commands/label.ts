import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { parseLabelArgs, type Labels } from '../../catalog/port/labels.js';

/** commander's collector for a repeatable `--label key=value` option. */
export function collectLabel(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/**
 * The labels given by repeated `--label key=value` options.
 * @throws E_USAGE (not key=value, a bad key or value)
 */
export function labelsOf(args: readonly string[]): Labels {
  return parseLabelArgs(args, false) as Labels;
}

/** `  [k=v, …]` for a text listing, or '' without labels. */
export function labelWords(labels: Labels | undefined): string {
  const e = Object.entries(labels ?? {});
  return e.length === 0 ? '' : `  [${e.map(([k, v]) => `${k}=${v}`).join(', ')}]`;
}

/**
 * Registers `awc label <ref> key=value… key-…` (docs/reference/labels.md): sets and
 * removes labels of a snapshot or a workspace, and prints the labels after the change.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    program
      .command('label <ref> <changes...>')
      .description('set (key=value) or remove (key-) labels of a snapshot or a workspace')
      .action((ref: string, changes: string[]) =>
        withAwc(async (awc, o) => {
          const r = await awc.setLabels(ref, parseLabelArgs(changes));
          o.result(r, () => `${r.kind} ${r.id}:${labelWords(r.labels) || ' no labels'}`);
        }),
      );
  },
};
