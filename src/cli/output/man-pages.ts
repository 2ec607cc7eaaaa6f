import { allCommands, type CommandSpec, type OptionSpec } from './command-spec.js';

/**
 * Man pages (roff, the `man` macros) made from the program's command definitions
 * (command-spec.ts): awc(1) with the global options and the list of commands, and one page per
 * top-level command, awc-<command>(1), with its subcommands, arguments and options (their
 * defaults as `--help` shows them). `npm run man` writes them (src/cli/entry/man-main.ts).
 */
export interface ManPage {
  /** The file name (`awc-snapshot.1`). */
  file: string;
  /** The page in roff, ASCII only (other characters as `\[uXXXX]`). */
  text: string;
}

/** The pages for the program `root` describes, awc(1) first; `version` goes in each page's footer. */
export function manPages(root: CommandSpec, version: string): ManPage[] {
  return [rootPage(root, version), ...root.subcommands.map((c) => commandPage(root, c, version))];
}

/** `s` escaped for roff text: backslashes, hyphens as `\-`, non-ASCII as `\[uXXXX]`, a leading `.` or `'` guarded. */
export function roff(s: string): string {
  const escaped = s
    .replace(/\\/g, '\\e')
    .replace(/-/g, '\\-')
    .replace(/[^\x20-\x7e]/gu, (c) => `\\[u${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}]`);
  return /^[.']/.test(escaped) ? `\\&${escaped}` : escaped;
}

/** The `.TH` line and NAME section of a page. */
function header(name: string, summary: string, version: string): string[] {
  return [`.TH ${roff(name.toUpperCase())} 1 "" "awc ${roff(version)}" "User Commands"`, '.SH NAME', `${roff(name)} \\- ${roff(summary)}`];
}

/** An option as a tagged paragraph: its flags in bold, its value in italics, the description below. */
function optionItem(o: OptionSpec): string[] {
  const term = o.term
    .split(' ')
    .map((w) => (w.startsWith('-') ? `\\fB${roff(w.replace(/,$/, ''))}\\fR${w.endsWith(',') ? ',' : ''}` : `\\fI${roff(w)}\\fR`))
    .join(' ');
  return ['.TP', term, roff(o.description)];
}

/** A command's usage, description, arguments and options (`level` `.SH` for a page's own command, `.SS` for a subcommand). */
function commandBody(c: CommandSpec, sub: boolean): string[] {
  const lines: string[] = [];
  if (sub) lines.push(`.SS ${roff(c.path.join(' '))}`, `.B ${roff(c.usage)}`, '.PP');
  if (c.description) lines.push(roff(c.description));
  if (c.aliases.length > 0) lines.push('.PP', `Also: ${c.aliases.map((a) => `\\fB${roff(a)}\\fR`).join(', ')}.`);
  const args = c.args.filter((a) => a.description || a.choices);
  if (args.length > 0) {
    lines.push(sub ? '.PP\nArguments:' : '.SH ARGUMENTS');
    for (const a of args)
      lines.push('.TP', `\\fI${roff(a.name)}\\fR`, roff(`${a.description}${a.choices ? ` (one of: ${a.choices.join(', ')})` : ''}`));
  }
  if (c.options.length > 0) {
    lines.push(sub ? '.PP\nOptions:' : '.SH OPTIONS');
    for (const o of c.options) lines.push(...optionItem(o));
  }
  return lines;
}

/** awc(1): the program, its global options, and its commands with a pointer to each page. */
function rootPage(root: CommandSpec, version: string): ManPage {
  const lines = [
    ...header(root.name, root.description, version),
    '.SH SYNOPSIS',
    `.B ${roff(root.usage)}`,
    '.SH DESCRIPTION',
    roff(root.description),
    '.PP',
    `Each command has its own page, \\fB${root.name}\\-\\fIcommand\\fR(1); \\fB${root.name} \\fIcommand\\fB \\-\\-help\\fR prints the same.`,
    `Shell completion: \\fB${root.name} completion bash|zsh|fish\\fR.`,
    '.SH OPTIONS',
    ...root.options.flatMap(optionItem),
    '.SH COMMANDS',
    ...root.subcommands.flatMap((c) => ['.TP', `\\fB${roff(c.name)}\\fR`, roff(c.description)]),
    '.SH SEE ALSO',
    root.subcommands.map((c) => `\\fB${roff(`${root.name}-${c.name}`)}\\fR(1)`).join(', '),
  ];
  return { file: `${root.name}.1`, text: lines.join('\n') + '\n' };
}

/** awc-<command>(1): one top-level command, and each command below it as a subsection. */
function commandPage(root: CommandSpec, c: CommandSpec, version: string): ManPage {
  const name = `${root.name}-${c.name}`;
  const below = allCommands(c).slice(1);
  const lines = [
    ...header(name, c.description, version),
    '.SH SYNOPSIS',
    ...(below.length > 0 ? below.filter((s) => s.subcommands.length === 0) : [c]).flatMap((s) => [`.B ${roff(s.usage)}`, '.br']),
    '.SH DESCRIPTION',
    ...commandBody(c, false),
  ];
  if (below.length > 0) lines.push('.SH COMMANDS', ...below.flatMap((s) => commandBody(s, true)));
  const globals = root.options.flatMap((o) => (o.long && !['--help', '--version'].includes(o.long) ? [`\\fB${roff(o.long)}\\fR`] : []));
  lines.push('.SH GLOBAL OPTIONS', `${globals.join(', ')}: see \\fB${roff(root.name)}\\fR(1).`);
  lines.push('.SH SEE ALSO', `\\fB${roff(root.name)}\\fR(1)`);
  return { file: `${name}.1`, text: lines.join('\n') + '\n' };
}
