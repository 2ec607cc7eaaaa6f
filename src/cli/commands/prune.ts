import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import type { PruneEntry, PruneReport } from '../../service/claude/claude-prune.js';
import type { AttachPruneEntry, AttachPruneReport } from '../../service/attach/attach-prune.js';

/** The `--json` result of `awc prune`: the Claude Code part, and the attach part (null through the root daemon: its sweep prunes those). */
export type PruneCommandResult = PruneReport & { attached: AttachPruneReport | null };

/**
 * Registers `awc prune [--dry-run]` (docs/reference/claude-code.md#awc-prune): releases the Claude
 * Code hook's workspaces whose directory, mount, git registration or session is gone, and the
 * workspaces of attached worktrees a tool removed without `awc detach`.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    program
      .command('prune')
      .description(
        'release workspaces whose worktree is gone: Claude Code hook worktrees (directory, mount, git registration or session gone) and attached worktrees a tool removed (checkpoint work, unmount, rm)',
      )
      .option('--dry-run', 'report what would be released; change nothing')
      .action((opts: { dryRun?: boolean }) =>
        withAwc(async (awc, o) => {
          const { pruneClaude } = await import('../../service/claude/claude-prune.js');
          const { openClaudeAwc, isRemoteAwc } = await import('../remote/claude-awc.js');
          // the host daemon remounts what the catalog says is mounted here when it starts (after a reboot): only
          // then may a workspace recorded as mounted but not mounted be judged `not-mounted`
          if (!isRemoteAwc(awc)) await awc.ensureHostSession();
          const claude = await pruneClaude(await openClaudeAwc(awc), { dryRun: opts.dryRun });
          let attached: AttachPruneReport | null = null;
          if (!isRemoteAwc(awc)) {
            const { pruneAttached } = await import('../../service/attach/attach-prune.js');
            attached = await pruneAttached(awc, { dryRun: opts.dryRun });
          }
          const r: PruneCommandResult = { ...claude, attached };
          const { selfInvocation, shellWord } = await import('./self-command.js');
          const self = selfInvocation(program, awc).join(' ');
          o.result(r, () => humanReport(r, (snapshot, dir) => `${self} export ${snapshot} --dir ${shellWord(dir)}`));
          if (r.pruned.some((e) => e.error) || attached?.orphaned.some((e) => e.status === 'failed')) process.exitCode = 4;
        }),
      );
  },
};

/** The command that exports `snapshot` into the new directory `dir` (this AWC, by absolute path, as the hook prints it). */
type ExportCommand = (snapshot: string, dir: string) => string;

/**
 * One line per workspace looked at, then a summary line. A workspace whose work was
 * checkpointed gets a second line, `to bring the work back as a directory: <command>` (the
 * Claude Code hook's WorktreeRemove prints the same).
 */
function humanReport(r: PruneCommandResult, back: ExportCommand): string {
  const a = r.attached;
  const summary = [
    `${r.pruned.length} stale hook worktree(s), ${r.kept} kept${r.others ? `, ${r.others} of other users left alone` : ''}`,
    a
      ? `${a.orphaned.length} orphaned attached worktree(s), ${a.kept} kept${a.others ? `, ${a.others} of other namespaces` : ''}`
      : undefined,
  ].filter(Boolean);
  return [
    ...r.pruned.map((e) => claudeLine(e, r.dryRun) + claudeBack(e, back)),
    ...(a?.orphaned.map((e) => attachLine(e) + attachBack(e, back)) ?? []),
    `${r.dryRun ? 'dry run: ' : ''}${summary.join('; ')}`,
  ].join('\n');
}

function holdersText(holders: readonly { pid: number; command: string; via: string }[]): string {
  return holders.map((h) => `pid ${h.pid} (${h.command}, ${h.via})`).join(', ');
}

function claudeLine(e: PruneEntry, dryRun: boolean): string {
  const what = `${e.workspace}${e.name ? ` (${e.name})` : ''} at ${e.path ?? '-'}: ${e.reason}`;
  if (e.busy) return `${what}: in use by ${holdersText(e.busy)}; left alone (end them, then prune again)`;
  if (e.gone) return `${what}: released meanwhile by another prune`;
  if (e.error) return `${what}: kept, release failed: ${e.error.code}: ${e.error.message}`;
  if (dryRun) return `${what}: would release`;
  const rel = e.released;
  return `${what}: released (${rel?.checkpointed ? `checkpointed as ${rel.snapshot}` : rel?.work.work === false ? 'nothing uncommitted: no snapshot' : `work in ${rel?.snapshot}`})`;
}

/** The line that brings a released hook worktree's checkpointed work back, at its own path (removed by the release). */
function claudeBack(e: PruneEntry, back: ExportCommand): string {
  const rel = e.released;
  if (!rel || rel.work.work === false || e.path === null) return '';
  return `\nto bring the work back as a directory: ${back(rel.snapshot, e.path)}`;
}

/**
 * The line that brings a released attached worktree's checkpoint back: the prepared checkout
 * with the worktree's dependency directories as they were, beside the worktree (whose
 * directory may be left).
 */
function attachBack(e: AttachPruneEntry, back: ExportCommand): string {
  return e.status === 'released' && e.checkpoint
    ? `\nto bring the work back as a directory: ${back(e.checkpoint, `${e.dir}.checkpoint`)}`
    : '';
}

function attachLine(e: AttachPruneEntry): string {
  const what = `attached ${e.dir} (workspace ${e.workspace}): ${e.reason}`;
  switch (e.status) {
    case 'busy':
      return `${what}: in use by ${holdersText(e.holders ?? [])}; left alone (end them, then prune again)`;
    case 'in-progress':
      return `${what}: another prune is releasing it`;
    case 'gone':
      return `${what}: released meanwhile by another prune`;
    case 'failed':
      return `${what}: kept, release failed: ${e.error?.code}: ${e.error?.message}`;
    case 'would-release':
      return `${what}: would release (${e.work?.work === false ? 'nothing to keep' : `would checkpoint: ${e.work?.why ?? 'workspace gone'}`})`;
    default:
      return `${what}: released (${e.checkpoint ? `work checkpointed as ${e.checkpoint}` : 'nothing to keep: no snapshot'}${e.unmounted?.length ? `; ${e.unmounted.length} bind mount(s) detached` : ''})${e.left ? `; ${e.dir} is left (what git's removal did not reach: remove it yourself)` : ''}`;
  }
}
