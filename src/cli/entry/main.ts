#!/usr/bin/env node
import { type Command, CommanderError } from 'commander';
import { AwcError, ERROR_CODES } from '../../core/errors.js';
import { buildProgram } from './program.js';

const { program, ctx } = buildProgram();
const out = ctx.out;

/**
 * Runs the CLI on `argv` (`[node, script, ...words]`) in this process: src/cli/entry/cli-main.ts for
 * the bundle's entry, src/cli/entry/warm-worker.ts in a warm worker (which has made this process the
 * caller's: directory, environment, stdio). Builds nothing at import (a warm worker imports this
 * module before it knows its command). Ends the process with the command's status when it fails.
 */
export async function runCli(argv: string[]): Promise<void> {
  // A closed pipe (`awc ls | head -1`): stop quietly with status 141, as GNU tools and git do (docs/reference/errors.md).
  process.stdout.on('error', (err: NodeJS.ErrnoException) =>
    process.exit(err.code === 'EPIPE' ? ERROR_CODES.E_CLOSED_PIPE.exit : out().error(err)),
  );
  process.stderr.on('error', () => process.exit(ERROR_CODES.E_CLOSED_PIPE.exit)); // nowhere left to say anything
  // commander's own error line is dropped: the catch below prints the one line (and hint) of E_USAGE
  quietCommander(program, argv.includes('--json'));
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0 || err.code === 'commander.helpDisplayed' || err.code === 'commander.version') process.exit(0);
      if (err.code === 'commander.help') {
        // a command group without its subcommand: commander printed the help
        if (out().json) out().error(new AwcError('E_USAGE', 'a command is required'));
        process.exit(2);
      }
      process.exit(out().error(usageError(err, argv)));
    }
    process.exit(out().error(err));
  }
}

/** E_USAGE for a word commander refused, with a hint naming the help of the command it belongs to. */
function usageError(err: CommanderError, argv: string[]): AwcError {
  const path: string[] = [];
  let at: Command = program;
  for (const w of argv.slice(2)) {
    const sub = w.startsWith('-') ? undefined : at.commands.find((c) => c.name() === w || c.aliases().includes(w));
    if (sub) [at, path[path.length]] = [sub, sub.name()];
  }
  return new AwcError('E_USAGE', err.message.replace(/^error: /, '').replace(/\n/g, ' '), {
    hint: `Run \`awc ${path.map((p) => `${p} `).join('')}--help\` for usage.`,
  });
}

/** Drops commander's own error output on `cmd` and every subcommand (each keeps a copy made when it was added); under --json also its help. */
function quietCommander(cmd: Command, json: boolean): void {
  cmd.configureOutput(json ? { writeErr: () => undefined, outputError: () => undefined } : { outputError: () => undefined });
  for (const sub of cmd.commands) quietCommander(sub, json);
}
