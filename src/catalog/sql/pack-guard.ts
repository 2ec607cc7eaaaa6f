import { sql, type Transaction } from 'kysely';
import { AwcError } from '../../core/errors.js';
import type { NewSnapshot } from '../port/catalog.js';
import type { RepackCommit } from '../port/gc-catalog.js';
import type { Database } from './schema.js';
import { LOOKUP_BATCH, type BlobQueries } from './blob-queries.js';
import { chunks, nowIso, toNum } from './rows.js';
import type { SqlContext } from './sql-context.js';
import type { PackBytes } from './usage-counter.js';

/**
 * The commit-time guard of a snapshot's packs (docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe),
 * run inside the commit's transaction before its pack rows are inserted:
 * - every pack it deduplicated against (`s.reusedPacks`) must still be `live` (a conditional
 *   UPDATE of each row, so PostgreSQL orders it against gc's condemnation by the row lock);
 * - a pack it uploaded whose key exists is kept (live), un-condemned (condemned: its object
 *   is still there), or brought back (deleted before `s.startedAtMs`: the upload made it again;
 *   its bytes count as its namespace's stored bytes again).
 * Returns the rows brought back from `deleted`: the caller hands them to `insertPacks`
 * (`opts.revived`), which adds their bytes to their namespaces' stored bytes last.
 * @throws E_PACK_CONDEMNED (retryable; details.packs) when a reused pack is not live, or an
 *   uploaded one is being deleted or was deleted after the writer started
 */
export async function guardSnapshotPacks(
  ctx: SqlContext,
  trx: Transaction<Database>,
  s: Pick<NewSnapshot, 'packs' | 'reusedPacks' | 'startedAtMs'>,
): Promise<PackBytes[]> {
  const revived: PackBytes[] = [];
  const written = new Set(s.packs.map((p) => p.key));
  const reused = [...new Set(s.reusedPacks ?? [])].filter((k) => !written.has(k));
  const refuse = (packs: string[], why: string) =>
    new AwcError('E_PACK_CONDEMNED', `the snapshot relies on pack(s) ${packs.slice(0, 3).join(', ')} that gc ${why}`, {
      details: { packs },
    });
  for (const group of chunks(reused, LOOKUP_BATCH)) {
    const res = await trx
      .updateTable('packs')
      .set({ state: 'live' })
      .where('key', 'in', group)
      .where('state', '=', 'live')
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== group.length) {
      const live = await trx.selectFrom('packs').select('key').where('key', 'in', group).where('state', '=', 'live').execute();
      const ok = new Set(live.map((r) => r.key));
      throw refuse(
        group.filter((k) => !ok.has(k)),
        'condemned or deleted meanwhile',
      );
    }
  }
  for (const group of chunks([...written], LOOKUP_BATCH)) {
    const rows = await trx
      .selectFrom('packs')
      .select(['key', 'state', 'deleted_at', 'namespace', 'size'])
      .where('key', 'in', group)
      .execute();
    for (const r of rows) {
      if (r.state === 'live') continue;
      const back =
        r.state === 'condemned' ||
        (r.state === 'deleted' && s.startedAtMs !== undefined && r.deleted_at !== null && toNum(r.deleted_at) < s.startedAtMs);
      if (!back) throw refuse([r.key], r.state === 'deleting' ? 'is deleting' : 'deleted after this writer started');
      const res = await trx
        .updateTable('packs')
        .set({ state: 'live', condemned_at: null, deleted_at: null })
        .where('key', '=', r.key)
        .where('state', '=', r.state)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) throw refuse([r.key], 'moved on meanwhile');
      if (r.state === 'deleted') revived.push(r);
    }
  }
  return revived;
}

/**
 * The catalog side of a repack (docs/explanation/gc.md#repack), inside `trx` (the caller
 * holds the gc lock in it): condemns the packs `r.from` (all of them still live, else
 * nothing is written and it returns false), guards the copies `r.packs` by the same rules
 * as a commit's own packs (the same pack twice), and inserts them: their blob rows, whose
 * pack is condemned now, move to the copies by `insertPacks`'s guarded conflict rule. A
 * checkpoint that deduplicated against a pack of `r.from` is refused at its commit from
 * then on (the pack is not live) and retried against the copies.
 * @throws E_PACK_CONDEMNED (a copy's key is being deleted or was deleted after r.startedAtMs; rolled back)
 */
export async function commitRepackInTx(
  ctx: SqlContext,
  blobs: BlobQueries,
  trx: Transaction<Database>,
  nsId: string,
  r: RepackCommit,
): Promise<boolean> {
  const from = [...new Set(r.from)];
  if (from.length === 0) return false;
  let live = 0;
  for (const group of chunks(from, LOOKUP_BATCH)) {
    const rows = await trx
      .selectFrom('packs')
      .select('key')
      .where('key', 'in', group)
      .where('namespace', '=', nsId)
      .where('state', '=', 'live')
      .execute();
    live += rows.length;
  }
  if (live !== from.length) return false;
  let moved = 0;
  for (const group of chunks(from, LOOKUP_BATCH)) {
    const res = await trx
      .updateTable('packs')
      .set({ state: 'condemned', condemned_at: sql<number>`${ctx.dialect.nowMs()}` })
      .where('key', 'in', group)
      .where('state', '=', 'live')
      .executeTakeFirst();
    moved += Number(res.numUpdatedRows);
  }
  if (moved !== from.length)
    throw new AwcError('E_PACK_CONDEMNED', 'a pack being repacked moved on meanwhile', { details: { packs: from } });
  const revived = await guardSnapshotPacks(ctx, trx, { packs: r.packs, reusedPacks: [], startedAtMs: r.startedAtMs });
  await blobs.insertPacks(trx, nsId, r.packs, nowIso(), { revived });
  return true;
}
