#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { AwcError, ERROR_CODES } from '../../core/errors.js';
import { packageVersion } from '../output/package-version.js';
import { cliContext, type CliCommand } from '../commands/command.js';
import { command as snapshot } from '../commands/snapshot.js';
import { command as ls } from '../commands/ls.js';
import { command as show } from '../commands/show.js';
import { command as fork } from '../commands/fork.js';
import { command as mount } from '../commands/mount.js';
import { command as unmount } from '../commands/unmount.js';
import { command as release } from '../commands/release.js';
import { command as checkpoint } from '../commands/checkpoint.js';
import { command as diff } from '../commands/diff.js';
import { command as exportCommand } from '../commands/export.js';
import { command as doctor } from '../commands/doctor.js';
import { command as daemon } from '../commands/daemon.js';
import { command as usage } from '../commands/usage.js';
import { command as metrics } from '../commands/metrics.js';
import { command as demo } from './demo-command.js';
import { command as kept } from '../commands/kept.js';
import { command as userGuards } from '../commands/user-guards.js';
import { command as gc } from '../commands/gc-commands.js';
import { command as fsck } from '../commands/fsck-command.js';
import { command as label } from '../commands/label.js';
import { command as quota } from '../commands/quota.js';
import { command as attach } from '../commands/attach.js';
import { command as run } from '../commands/run.js';
import { command as claude } from '../commands/claude.js';
import { command as mcp } from './mcp-command.js';

// CLI latency (docs/explanation/cli-latency.md): this module and what it imports statically stay
// tiny (commander, the error codes, Output, the commands' registrations); each command loads its
// implementation in its action.

/** The commands, in the order `awc --help` lists them (one file each in src/cli/commands/; demo and mcp in src/cli/entry/). */
const COMMANDS: readonly CliCommand[] = [
  snapshot,
  ls,
  show,
  fork,
  mount,
  unmount,
  release,
  checkpoint,
  diff,
  exportCommand,
  doctor,
  daemon,
  usage,
  metrics,
  demo,
  kept,
  userGuards,
  gc,
  fsck,
  label,
  quota,
  attach,
  run,
  claude,
  mcp,
];

const program = new Command();
program
  .name('awc')
  .description('Agent Workspace Cache: snapshot → fork → mount → checkpoint → diff / export')
  .option('--home <dir>', 'data directory (default: $AWC_HOME, /var/lib/awc for root, ~/.local/share/awc)')
  .option('--namespace <ns>', 'tenant namespace (default: $AWC_NAMESPACE or "default")')
  .option('--json', 'machine-readable output on stdout; errors as JSON on stderr')
  .version(packageVersion(), '-V, --version')
  .exitOverride();
const ctx = cliContext(program);
const out = ctx.out;
for (const c of COMMANDS) c.register(program, ctx);

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
