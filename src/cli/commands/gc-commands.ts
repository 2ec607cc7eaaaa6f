import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { inProcess } from '../remote/through-daemon.js';
import { parseDuration } from '../../core/duration.js';
import { AwcError } from '../../core/errors.js';
import { formatBytes } from '../output/output.js';
import type { HostSweepReport } from '../../service/gc/host-sweep.js';

/**
 * Registers `awc rm` and `awc gc` (docs/reference/rm-gc.md) on `program`.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    program
      .command('rm <ref>')
      .description('remove a workspace or a snapshot (catalog rows only; the bytes go with `awc gc`)')
      .option(
        '--force',
        'unmount a workspace mounted here and drop its uncheckpointed changes; remove a snapshot that is a base or has named children',
      )
      .action((ref: string, opts: { force?: boolean }) =>
        withAwc(async (awc, o) => {
          const r = await awc.rm(ref, opts);
          o.result(r, () => {
            const extra = [
              r.unmounted ? 'unmounted first' : '',
              r.discarded ? 'uncheckpointed changes dropped' : '',
              r.kept?.length ? `${r.kept.length} secret file(s) kept on this host: \`awc kept ls ${r.id}\`` : '',
              r.reparented?.length ? `${r.reparented.length} child snapshot(s) re-parented` : '',
              r.rebased?.length ? `${r.rebased.length} workspace(s) re-based` : '',
            ].filter(Boolean);
            return `removed ${r.kind} ${r.id}${extra.length ? ` (${extra.join('; ')})` : ''}`;
          });
        }),
      );

    program
      .command('gc')
      .description('delete what no live snapshot needs (every namespace; one gc at a time across the fleet)')
      .option('--dry-run', 'report what a run would do; change nothing')
      .option('--grace <duration>', 'delete a condemned pack only this long after it was condemned', '24h')
      .option('--retention <duration>', 'keep unnamed, unheld snapshots this long after they were made', '7d')
      .option('--repack-below <pct>', 'repack a live pack whose live blobs fill less than this percentage of it (0: never)', '50')
      .option('--local', "only this host's sweep: drop the layers and cached chunks of removed snapshots (through the host daemon)")
      .action((opts: { dryRun?: boolean; grace: string; retention: string; repackBelow: string; local?: boolean }) =>
        withAwc(async (opened, o) => {
          const awc = inProcess(opened, 'config');
          const graceMs = parseDuration(opts.grace, '--grace');
          const retentionMs = parseDuration(opts.retention, '--retention');
          const repackBelow = parsePercent(opts.repackBelow, '--repack-below');
          const { DaemonClient } = await import('../../daemon/supervisor/client.js');
          if (opts.local) {
            const r = await new DaemonClient(awc.config).sweep({ dryRun: opts.dryRun });
            o.result(r, () => sweepText(r));
            return;
          }
          const r = await awc.gc({ dryRun: opts.dryRun, graceMs, retentionMs, repackBelow });
          // this host follows at once when its daemon runs (the others on their own interval)
          let local: HostSweepReport | null = null;
          if (!r.dryRun)
            local = await new DaemonClient(awc.config).sweep({ start: false }).catch((err: unknown) => {
              if (!(err instanceof Error && 'code' in err && err.code === 'E_DAEMON_UNAVAILABLE'))
                o.warn(`host sweep failed: ${String(err)}`);
              return null;
            });
          const would = r.dryRun ? 'would ' : '';
          o.result({ ...r, local }, () =>
            [
              `${r.dryRun ? 'dry run: ' : ''}${r.snapshots.live} live snapshot(s), ${r.packs.live} live pack(s), ${r.blobs.live} live blob(s)`,
              `${would}remove ${r.snapshots.removed.length} snapshot row(s)${r.snapshots.removed.length ? `: ${r.snapshots.removed.join(', ')}` : ''}`,
              `${would}condemn ${r.packs.condemned.count} pack(s) (${formatBytes(r.packs.condemned.bytes)})`,
              `${would}un-condemn ${r.packs.uncondemned.count} pack(s) (${formatBytes(r.packs.uncondemned.bytes)})`,
              `${would}delete ${r.packs.deleted.count} pack(s), freeing ${formatBytes(r.packs.deleted.bytes)}`,
              `${would}adopt ${r.packs.adopted.count} pack(s) no row names as condemned (${formatBytes(r.packs.adopted.bytes)})`,
              `${would}repack ${r.packs.repacked.count} pack(s) (${formatBytes(r.packs.repacked.bytes)}, ${formatBytes(r.packs.repacked.liveBytes)} of it live)`,
              `${would}remove ${r.gitProofs.removed} git proof(s) of removed snapshots`,
              `${would}remove ${r.layerImages.records} shared layer image record(s) of removed snapshots and ${r.layerImages.objects} image object(s)`,
              ...(local ? [sweepText(local)] : []),
            ].join('\n'),
          );
        }),
      );
  },
};

/** One line for a host sweep's report. */
function sweepText(r: HostSweepReport): string {
  const would = r.dryRun ? 'would drop' : 'dropped';
  const objects = r.objects ?? { dropped: 0, kept: 0, bytes: 0 }; // (a daemon from before the host object cache)
  return `this host: ${would} ${r.layers.dropped.length} layer(s) (${formatBytes(r.layers.bytes)}), ${objects.dropped} cached object(s) (${formatBytes(objects.bytes)}) and ${r.chunks.dropped} cached chunk(s) (${formatBytes(r.chunks.bytes)}), ${r.dryRun ? 'freeing' : 'freed'} ${formatBytes(r.freedBytes)}; kept ${r.layers.kept} layer(s), ${r.chunks.kept} chunk(s), ${objects.kept} object(s)`;
}

/**
 * A percentage option (`50`, `12.5`, `50%`) as a fraction 0..1.
 * @throws E_USAGE (exit 2) for anything else or a value outside 0..100
 */
export function parsePercent(v: string, option: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*%?\s*$/.exec(v);
  const pct = m ? Number(m[1]) : NaN;
  if (!(pct >= 0 && pct <= 100)) {
    throw new AwcError('E_USAGE', `${option} ${JSON.stringify(v)} is not a percentage from 0 to 100`, {
      hint: `Pass a number from 0 to 100, e.g. ${option} 50 or ${option} 12.5%.`,
    });
  }
  return pct / 100;
}
