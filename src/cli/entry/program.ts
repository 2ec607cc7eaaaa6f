import { Command } from 'commander';
import { packageVersion } from '../output/package-version.js';
import { cliContext, type CliCommand, type CliContext } from '../commands/command.js';
import { command as snapshot } from '../commands/snapshot.js';
import { command as ls } from '../commands/ls.js';
import { command as status } from '../commands/status.js';
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
import { command as completion } from '../commands/completion.js';

// CLI latency (docs/explanation/cli-latency.md): this module and what it imports statically stay
// tiny (commander, the error codes, Output, the commands' registrations); each command loads its
// implementation in its action.

/** The commands, in the order `awc --help` lists them (one file each in src/cli/commands/; demo and mcp in src/cli/entry/). */
const COMMANDS: readonly CliCommand[] = [
  snapshot,
  ls,
  status,
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
  completion,
];

/**
 * The `awc` program: global options and every command registered (nothing runs). main.ts builds it
 * once; src/cli/entry/man-main.ts and the completion scripts read its definitions
 * (src/cli/output/command-spec.ts), so help, man pages and completion cannot disagree.
 */
export function buildProgram(): { program: Command; ctx: CliContext } {
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
  for (const c of COMMANDS) c.register(program, ctx);
  return { program, ctx };
}
