import type { Argument, Command, Help, Option } from 'commander';

/**
 * The CLI's command definitions as plain data, read from the commander program through its
 * public API (`Help.visibleCommands`, `visibleOptions`, `commandUsage`, `registeredArguments`,
 * `optionTerm`, `optionDescription`): what `awc --help` shows is what the completion scripts
 * (completion-scripts.ts) and the man pages (man-pages.ts) are made of, so none can drift from
 * the code. Hidden options and commands stay hidden; commander's own `help` command is left out.
 */
export interface CommandSpec {
  /** The command's name (`import`); the program's for the root (`awc`). */
  name: string;
  /** Other names the command answers to (`umount` for `unmount`). */
  aliases: string[];
  /** The words from the root to this command, without the program's name (`['snapshot', 'import']`; `[]` for the root). */
  path: string[];
  description: string;
  /** Commander's usage line, program name included (`awc snapshot import [options] [source]`). */
  usage: string;
  options: OptionSpec[];
  args: ArgSpec[];
  subcommands: CommandSpec[];
}

/** One option of a command, as its help shows it. */
export interface OptionSpec {
  /** The short flag with its dash (`-m`), when it has one. */
  short?: string;
  /** The long flag with its dashes (`--message`), when it has one. */
  long?: string;
  /** Whether the option takes a value (`--message <msg>`, `--files [f]`). */
  takesValue: boolean;
  /** The allowed values, when the option declares them. */
  choices?: string[];
  /** The term of its help line (`-m, --message <msg>`). */
  term: string;
  /** Its description with commander's `(default: …)` and `(choices: …)` suffixes. */
  description: string;
}

/** One positional argument of a command. */
export interface ArgSpec {
  name: string;
  required: boolean;
  variadic: boolean;
  description: string;
  /** The allowed values, when the argument declares them. */
  choices?: string[];
}

/** The definitions of `cmd` and every command below it (`help` is the helper commander creates). */
export function commandSpec(cmd: Command, help: Help = cmd.createHelp(), path: string[] = []): CommandSpec {
  return {
    name: cmd.name(),
    aliases: cmd.aliases(),
    path,
    description: cmd.description(),
    usage: help.commandUsage(cmd),
    options: help.visibleOptions(cmd).map((o) => optionSpec(o, help)),
    args: cmd.registeredArguments.map(argSpec),
    subcommands: help
      .visibleCommands(cmd)
      .filter((c) => !(c.name() === 'help' && c.description().startsWith('display help')))
      .map((c) => commandSpec(c, help, [...path, c.name()])),
  };
}

/** `spec` and every command below it, depth first, parents before their children. */
export function allCommands(spec: CommandSpec): CommandSpec[] {
  return [spec, ...spec.subcommands.flatMap(allCommands)];
}

/** An option's spec (`help` formats its term and description as `--help` does). */
function optionSpec(o: Option, help: Help): OptionSpec {
  return {
    short: o.short,
    long: o.long,
    takesValue: o.required || o.optional,
    choices: o.argChoices,
    term: help.optionTerm(o),
    description: help.optionDescription(o),
  };
}

/** An argument's spec. */
function argSpec(a: Argument): ArgSpec {
  return { name: a.name(), required: a.required, variadic: a.variadic, description: a.description, choices: a.argChoices };
}
