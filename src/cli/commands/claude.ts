import type { Command } from 'commander';
import type { WithAwc } from './gc-commands.js';
import { registerHookCommands } from './hook.js';
import { registerInitClaudeCommands } from './init-claude.js';
import { registerPruneCommands } from './prune.js';

/**
 * Registers the Claude Code commands (docs/reference/claude-code.md): `awc hook claude`,
 * `awc init claude` (run with `withHome`, which makes a missing home) and `awc prune`.
 */
export function registerClaudeCommands(program: Command, withAwc: WithAwc, withHome: WithAwc): void {
  registerHookCommands(program, withAwc);
  registerInitClaudeCommands(program, withHome);
  registerPruneCommands(program, withAwc);
}
