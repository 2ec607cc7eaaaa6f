import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import type { IdleReleaseResult, IdleSweepReport } from '../../service/idle/idle-release.js';

/**
 * Registers `awc release <workspace>` and `awc release --idle [--dry-run]`
 * (docs/explanation/lifecycle.md#idle-release): checkpoint, unmount and record as released one
 * workspace now, or run one idle sweep now (what the host daemon does every `idleSweepIntervalMs`).
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    program
      .command('release [workspace]')
      .description(
        'checkpoint a workspace, unmount it and record it as released (`awc mount` resumes it); --idle: release every idle one now',
      )
      .option('--idle', 'one idle sweep now: release the workspaces idle beyond their TTL, remove those released beyond the retention')
      .option('--dry-run', 'with --idle: report what would be done; change nothing')
      .action((ws: string | undefined, opts: { idle?: boolean; dryRun?: boolean }) =>
        withAwc(async (awc, o) => {
          const { AwcError } = await import('../../core/errors.js');
          const { throughDaemon } = await import('../remote/through-daemon.js');
          if (throughDaemon(awc))
            throw new AwcError('E_PERMISSION', "`awc release` is for the home's owner (the host daemon releases idle workspaces)");
          if ((ws === undefined) === (opts.idle !== true)) throw new AwcError('E_USAGE', 'name a workspace, or pass --idle (not both)');
          const { releaseWorkspace, sweepIdle } = await import('../../service/idle/idle-release.js');
          const { selfInvocation, shellWord } = await import('./self-command.js');
          const self = selfInvocation(program, awc).join(' ');
          const resume = (r: IdleReleaseResult) => `${self} mount ${r.workspace} ${shellWord(r.path)}`;
          if (ws !== undefined) {
            const r = await releaseWorkspace(awc, ws);
            return o.result({ ...r, resume: resume(r) }, () => releasedLine(r, resume(r)));
          }
          const r = await sweepIdle(awc, { dryRun: opts.dryRun });
          o.result(r, () => sweepText(r, resume));
          if (r.entries.some((e) => e.status === 'failed')) process.exitCode = 4;
        }),
      );
  },
};

/** One released workspace, and the command that resumes it. */
function releasedLine(r: IdleReleaseResult, resume: string): string {
  const what = r.checkpointed ? `work checkpointed as ${r.snapshot}` : `nothing new since ${r.snapshot}`;
  const extra = `${r.pending ? '; changes written since (or secret files) kept on this host' : ''}${r.locked ? '; git worktree locked' : ''}`;
  return `${r.workspace} released from ${r.path} (${what}${extra})\n  to resume: ${resume}`;
}

/** One line per workspace the sweep looked at (the resume command under each released one). */
function sweepText(r: IdleSweepReport, resume: (r: IdleReleaseResult) => string): string {
  if (r.entries.length === 0) return 'no workspace mounted here or released';
  const idle = (ms: number) => `${Math.round(ms / 1000)} s`;
  return r.entries
    .map((e) => {
      const v = e.verdict;
      if (e.status === 'failed') return `${e.workspace}: failed: ${e.error?.code}: ${e.error?.message}`;
      if (e.status === 'removed') return `${e.workspace}: released beyond the retention: removed`;
      if (e.released) return releasedLine(e.released, resume(e.released));
      if (e.status === 'released') return `${e.workspace}: idle for ${idle(v?.idleForMs ?? 0)}: would be released`;
      if (v && !v.idle && v.reason === 'held')
        return `${e.workspace}: in use (${(v.holders ?? []).map((h) => `pid ${h.pid} ${h.command}, ${h.via}`).join('; ')})`;
      if (v && !v.idle && v.reason === 'never') return `${e.workspace}: never released when idle (TTL 0)`;
      return `${e.workspace}: active ${idle(v?.idleForMs ?? 0)} ago`;
    })
    .join('\n');
}
