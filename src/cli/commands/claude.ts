import type { CliCommand } from './command.js';
import { command as hook } from './hook.js';
import { command as initClaude } from './init-claude.js';
import { command as prune } from './prune.js';

/**
 * The Claude Code commands (docs/reference/claude-code.md): `awc hook claude`, `awc init
 * claude` (which makes a missing home) and `awc prune`.
 */
export const command: CliCommand = {
  register(program, ctx) {
    hook.register(program, ctx);
    initClaude.register(program, ctx);
    prune.register(program, ctx);
  },
};
