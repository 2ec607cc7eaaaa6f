import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { inProcess } from '../remote/through-daemon.js';
import { AwcError } from '../../core/errors.js';
import type { AdoptReport } from '../../service/import/adopt-store.js';
import type { FsckReport } from '../../service/fsck/fsck.js';
import { parsePercent } from './gc-commands.js';
import { formatBytes } from '../output/output.js';

/** Exit status of `awc fsck` when it finds a problem: the integrity class of the error registry. */
export const FSCK_PROBLEM_EXIT = 5;

/**
 * Registers `awc fsck [--read-data [--subset P%]] [--repair [--force]]` (docs/reference/fsck.md) on
 * `program` (run through `withAwc` opened `checking`: an unbound home whose store lacks packs is
 * checked and reported, src/service/doctor/fsck-binding.ts), and `awc fsck --adopt-store` (docs/how-to/recover-a-catalog.md: rebuild an empty
 * catalog from the store's packs and bind it to the store; run through `adopting`, which opens the
 * home without the catalog–store check). The report goes to stdout (`--json`: FsckReport, or
 * AdoptReport); the exit status is 0 when nothing is wrong, {@link FSCK_PROBLEM_EXIT} when a problem remains.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc: opened }: CliContext): void {
    program
      .command('fsck')
      .description('check that every snapshot can be read whole: catalog rows, packs, trees and blobs (every namespace)')
      .option('--read-data', 'read every byte of the packs and of this host chunk cache, and verify it')
      .option('--subset <pct>', 'with --read-data: read this percentage of the packs, chosen at random')
      .option('--repair', 're-index packs from their own indexes and drop chunk cache files that fail (takes the gc lock)')
      .option('--force', "with --repair: drop lost packs even when most of the catalog's packs are missing from the store")
      .option('--adopt-store', "rebuild an EMPTY catalog from the object store's packs (one snapshot per root found) and bind the two")
      .action((opts: { readData?: boolean; subset?: string; repair?: boolean; force?: boolean; adoptStore?: boolean }) => {
        if (opts.adoptStore) {
          if (opts.readData || opts.subset !== undefined || opts.repair || opts.force)
            throw new AwcError('E_USAGE', '--adopt-store takes no other fsck option', {
              hint: 'Run `awc fsck --adopt-store`, then `awc fsck`.',
            });
          return opened(
            async (awc, o) => {
              const { adoptStore } = await import('../../service/import/adopt-store.js');
              const home = inProcess(awc, 'catalog');
              const r = await adoptStore({ catalog: home.catalog, store: home.store, namespace: home.namespace });
              o.result(r, () => adoptText(r));
            },
            { create: true, adopting: true },
          );
        }
        return opened(
          async (awc, o) => {
            const subset = opts.subset === undefined ? undefined : parseSubset(opts.subset);
            if (opts.force && !opts.repair)
              throw new AwcError('E_USAGE', '--force needs --repair', { hint: 'Run `awc fsck --repair --force`.' });
            const { fsckAndBind } = await import('../../service/doctor/fsck-binding.js');
            const r = await fsckAndBind(inProcess(awc, 'catalog'), {
              readData: opts.readData,
              subset,
              repair: opts.repair,
              force: opts.force,
            });
            o.result(r, () => fsckText(r));
            if (!r.ok) process.exitCode = FSCK_PROBLEM_EXIT;
          },
          { checking: true },
        );
      });
  },
};

/** The text report of `awc fsck --adopt-store`. */
function adoptText(r: AdoptReport): string {
  const lines = [
    `catalog ${r.catalogId} bound to object store ${r.storeId}${r.previousCatalogId ? ` (it belonged to catalog ${r.previousCatalogId})` : ''}`,
    `re-indexed ${r.packs} pack(s), ${r.blobs} blob(s); rebuilt ${r.snapshots.length} snapshot(s)`,
    ...r.snapshots.map((s) => `${s.id}  ${s.name}  ${s.files} files  ${formatBytes(s.bytes)}`),
    ...r.skipped.map((s) => `skipped ${s.what}: ${s.code} ${s.message}`),
  ];
  return lines.join('\n');
}

/** The text report: what was checked, then one line per problem and warning. */
export function fsckText(r: FsckReport): string {
  const c = r.checked;
  const lines = [
    `checked ${c.snapshots} snapshot(s), ${c.trees} tree(s), ${c.blobs} blob(s), ${c.packs} pack(s), ${c.gitProofs} git proof(s), ${c.layerImages} layer image(s)`,
  ];
  if (r.readData)
    lines.push(
      `read ${r.readData.packs} of ${r.readData.of} pack(s) whole (${formatBytes(r.readData.bytes)}) and ${r.readData.cacheFiles} chunk cache file(s)`,
    );
  if (r.unreferenced.packs > 0 || r.unreferenced.gitProofs > 0 || r.unreferenced.images > 0)
    lines.push(
      `${r.unreferenced.packs} pack(s) (${formatBytes(r.unreferenced.bytes)}), ${r.unreferenced.gitProofs} git proof(s) and ${r.unreferenced.images} image object(s) in the store belong to no catalog row (uploads of commits that did not happen, or left for gc)`,
    );
  if (r.repaired)
    lines.push(
      `repaired: ${r.repaired.blobRows} blob row(s) re-indexed from packs, ${r.repaired.lostPacks} lost pack(s) dropped with ${r.repaired.droppedRows} row(s), ${r.repaired.cacheFiles} chunk cache file(s) dropped, ${r.repaired.layerImages} layer image record(s) deleted`,
    );
  for (const p of r.problems) {
    const where = p.snapshots.length > 0 ? ` [snapshots: ${p.snapshots.join(', ')}]` : '';
    lines.push(`${p.code} ${p.kind}: ${p.message}${where}`);
  }
  for (const w of r.warnings) lines.push(`warning ${w.kind}: ${w.message}`);
  const b = r.binding;
  if (b && (b.outcome === 'created' || b.outcome === 'upgraded'))
    lines.push(`recorded the identity: catalog ${b.catalogId} bound to object store ${b.storeId}`);
  lines.push(r.ok ? 'no problem found' : `${r.problems.length} problem(s) found`);
  return lines.join('\n');
}

/**
 * A `--subset` percentage (`10`, `2.5%`) as a fraction in (0, 1].
 * @throws E_USAGE (exit 2) for anything else
 */
function parseSubset(v: string): number {
  const f = parsePercent(v, '--subset');
  if (f === 0)
    throw new AwcError('E_USAGE', '--subset 0 reads nothing', { hint: 'e.g. --subset 10% reads a tenth of the packs, chosen at random' });
  return f;
}
