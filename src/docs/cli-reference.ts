import { allCommands, type CommandSpec } from '../cli/output/command-spec.js';
import { cell, table } from './reference-tables.js';

/**
 * The CLI reference (docs/reference/cli.md, "Every command") made from the program's command
 * definitions (src/cli/output/command-spec.ts), the same data `awc --help`, the man pages and the
 * completion scripts are made of: per command its usage, description, aliases, arguments and
 * options with their defaults.
 */
export function cliReference(root: CommandSpec): string {
  const out: string[] = [];
  out.push(`### ${root.name}`, '', fence(root.usage), '', 'Global options, accepted before or after the command:', '');
  out.push(optionsTable(root));
  for (const c of allCommands(root).slice(1)) out.push(...commandSection(root, c));
  return out.join('\n').replace(/\n{3,}/g, '\n\n');
}

/** A fenced block holding `text` (usage lines hold `<…>` and `[…]`, which stay literal there). */
function fence(text: string): string {
  return ['```text', text, '```'].join('\n');
}

/** One command's section: heading (`### awc snapshot import`), usage, description, aliases, arguments, options. */
function commandSection(root: CommandSpec, c: CommandSpec): string[] {
  const out = ['', `### ${[root.name, ...c.path].join(' ')}`, '', fence(c.usage), ''];
  if (c.description) out.push(c.description, '');
  if (c.aliases.length > 0) out.push(`Also: ${c.aliases.map((a) => `\`${a}\``).join(', ')}.`, '');
  if (c.subcommands.length > 0) out.push(`Commands: ${c.subcommands.map((s) => `\`${s.name}\``).join(', ')}.`, '');
  const args = c.args.filter((a) => a.description || a.choices);
  if (args.length > 0)
    out.push(
      table(
        ['argument', 'meaning'],
        args.map((a) => [`\`${a.name}\``, cell(`${a.description}${a.choices ? ` (one of: ${a.choices.join(', ')})` : ''}`)]),
      ),
    );
  if (c.options.length > 0) out.push(optionsTable(c));
  return out;
}

/** The options of a command as a table: the term as `--help` shows it, and its description. */
function optionsTable(c: CommandSpec): string {
  return table(
    ['option', 'meaning'],
    c.options.map((o) => [`\`${o.term}\``, cell(o.description)]),
  );
}
