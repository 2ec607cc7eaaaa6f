import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';

/** A word for a POSIX shell: as is when it is plain, else single-quoted. */
function shellWord(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

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
        "import the project (with its dependencies) as Claude Code's prepared snapshot and add AWC's worktree hooks to .claude/settings.json",
      )
      .option('--update', 'import the project again (after a dependency change)')
      .action((dir: string | undefined, opts: { update?: boolean }) =>
        withAwc(
          async (opened, o) => {
            const { realpathSync } = await import('node:fs');
            const { initClaude } = await import('../../service/claude/claude-init.js');
            const { resolve } = await import('node:path');
            const { isRemoteAwc, openClaudeAwc } = await import('../remote/claude-awc.js');
            const { formatBytes } = await import('../output/output.js');
            const awc = await openClaudeAwc(opened);
            const cli = realpathSync(process.argv[1]!);
            const given = program.opts<{ home?: string }>().home ?? process.env.AWC_HOME;
            const home = !isRemoteAwc(opened) ? opened.config.home : given === undefined ? undefined : resolve(given);
            const hookCommand = [
              process.execPath,
              cli,
              ...(home === undefined ? [] : ['--home', home]),
              '--namespace',
              awc.namespace,
              'hook',
              'claude',
            ]
              .map(shellWord)
              .join(' ');
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
            o.result(r, () =>
              [
                r.imported
                  ? `imported ${r.project} as ${r.snapshot}: ${r.files} files, ${formatBytes(r.bytes)}`
                  : `${r.project} is prepared already (${r.snapshot}); pass --update to import it again`,
                ...(r.replaced ? [`replaced ${r.replaced.id}${r.replaced.removed ? ' (removed)' : ' (kept: workspaces use it)'}`] : []),
                r.settings.changed ? `hooks written to ${r.settings.path}` : `${r.settings.path} has the hooks already`,
              ].join('\n'),
            );
          },
          { create: true },
        ),
      );
  },
};
