import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';

/** `awc init`, shared by the tools that register an `init <tool>` subcommand (made once). */
function initGroup(program: Command): Command {
  return program.commands.find((c) => c.name() === 'init') ?? program.command('init').description('set an agent tool up to use AWC');
}

/**
 * Registers `awc init claude [dir] [--update]` (docs/reference/claude-code.md#awc-init-claude).
 * The hook command it writes names this CLI by absolute path (node and the script, real
 * paths) and this home and namespace, so the hook finds the same AWC whatever PATH and
 * environment Claude Code gives it (docs/explanation/claude-code.md#the-hook-command). An
 * ordinary user's CLI (a client of the root daemon) names the home only when one was given
 * (`--home`, `AWC_HOME`): without one, the hook finds the default home's socket as `init` did.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    initGroup(program)
      .command('claude [dir]')
      .description(
        "import the project (with its dependencies) as Claude Code's prepared snapshot and add AWC's worktree hooks to .claude/settings.local.json",
      )
      .option('--update', 'import the project again, reading only the files changed since the last import')
      .option('--git-hooks', 'also write post-merge and post-checkout git hooks that run `awc init claude --update` in the background')
      .action((dir: string | undefined, opts: { update?: boolean; gitHooks?: boolean }) =>
        withAwc(
          async (opened, o) => {
            const { initClaude } = await import('../../service/claude/claude-init.js');
            const { openClaudeAwc } = await import('../remote/claude-awc.js');
            const { formatBytes } = await import('../output/output.js');
            const { selfInvocation, shellWord } = await import('./self-command.js');
            const { hooksLine } = await import('./attach.js');
            const claudeHooks = async (self: string[], project: string) =>
              (await import('../../service/attach/git-hooks.js')).installPrepareHooks(project, [
                ...self,
                'init',
                'claude',
                '--update',
                shellWord(project),
              ]);
            const awc = await openClaudeAwc(opened);
            const hookCommand = [...selfInvocation(program, opened), 'hook', 'claude'].join(' ');
            let last = 0;
            const r = await initClaude(awc, dir ?? '.', {
              hookCommand,
              update: opts.update,
              onProgress: (p) => {
                if (Date.now() - last < 200) return;
                last = Date.now();
                // progress goes to stderr (a terminal or not: init runs outside any hook)
                process.stderr.write(`awc: importing ${p.files} files, ${formatBytes(p.bytes)}\n`);
              },
            });
            const hooks = opts.gitHooks ? await claudeHooks(selfInvocation(program, opened), r.project) : undefined;
            o.result({ ...r, ...(hooks && { gitHooks: hooks }) }, () =>
              [
                r.imported
                  ? `imported ${r.project} as ${r.snapshot}: ${r.files} files, ${formatBytes(r.bytes)}`
                  : `${r.project} is prepared already (${r.snapshot}); pass --update to import it again`,
                ...(r.replaced ? [`replaced ${r.replaced.id}${r.replaced.removed ? ' (removed)' : ' (kept: workspaces use it)'}`] : []),
                r.settings.changed ? `hooks written to ${r.settings.path}` : `${r.settings.path} has the hooks already`,
                ...(r.settings.migrated
                  ? [`AWC's hooks taken out of ${r.settings.migrated} (an earlier awc init put them there; they name this machine's paths)`]
                  : []),
                ...(hooks ? [hooksLine(hooks)] : []),
              ].join('\n'),
            );
          },
          { create: true },
        ),
      );
  },
};
