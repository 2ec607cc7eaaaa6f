import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';

/**
 * Registers `awc prune [--dry-run]` (docs/reference/claude-code.md#awc-prune): releases the
 * Claude Code hook's workspaces whose directory or session is gone.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    program
      .command('prune')
      .description('release Claude Code hook workspaces whose directory or session is gone (checkpoint, unmount, rm)')
      .option('--dry-run', 'report what would be released; change nothing')
      .action((opts: { dryRun?: boolean }) =>
        withAwc(async (awc, o) => {
          const { pruneClaude } = await import('../../service/claude/claude-prune.js');
          const { openClaudeAwc } = await import('../remote/claude-awc.js');
          const r = await pruneClaude(await openClaudeAwc(awc), { dryRun: opts.dryRun });
          o.result(r, () =>
            [
              ...r.pruned.map((e) => {
                const what = `${e.workspace}${e.name ? ` (${e.name})` : ''} at ${e.path ?? '-'}: ${e.reason}`;
                if (e.error) return `${what}: kept, release failed: ${e.error.code}: ${e.error.message}`;
                if (r.dryRun) return `${what}: would release`;
                return `${what}: released (${e.released?.checkpointed ? `checkpointed as ${e.released.snapshot}` : e.released?.work.work === false ? 'nothing uncommitted: no snapshot' : `work in ${e.released?.snapshot}`})`;
              }),
              `${r.dryRun ? 'dry run: ' : ''}${r.pruned.length} stale, ${r.kept} kept${r.others ? `, ${r.others} of other users left alone` : ''}`,
            ].join('\n'),
          );
          if (r.pruned.some((e) => e.error)) process.exitCode = 4;
        }),
      );
  },
};
