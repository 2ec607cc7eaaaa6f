import { Argument, type Command } from 'commander';
import type { CliCommand } from './command.js';

/**
 * `awc completion bash|zsh|fish`: prints the shell's completion script, made from this
 * program's command definitions (src/cli/output/completion-scripts.ts, loaded in the action).
 */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('completion')
      .description('print the shell completion script for bash, zsh or fish (docs/how-to/shell-completion.md)')
      .addArgument(new Argument('<shell>', 'the shell the script is for').choices(['bash', 'zsh', 'fish']))
      .action(async (shell: 'bash' | 'zsh' | 'fish', _opts: unknown, cmd: Command) => {
        const [{ completionScript }, { commandSpec }] = await Promise.all([
          import('../output/completion-scripts.js'),
          import('../output/command-spec.js'),
        ]);
        let root = cmd;
        while (root.parent) root = root.parent;
        const script = completionScript(shell, commandSpec(root));
        ctx.out().result({ shell, script }, () => script);
      });
  },
};
