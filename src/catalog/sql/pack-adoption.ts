import { sql, type Transaction } from 'kysely';
import type { Database } from './schema.js';
import { LOOKUP_BATCH } from './blob-queries.js';
import { chunks, nowIso } from './rows.js';
import type { SqlContext } from './sql-context.js';
import { addPackBytes, type PackBytes } from './usage-counter.js';

/** A pack object found in the store: its key and size in bytes. */
export interface StoredPack {
  key: string;
  size: number;
}

/**
 * gc's adoption of packs without a row (docs/explanation/gc.md#packs-without-a-row), inside
 * `trx` (the caller holds the gc lock in it): each of `objects` with no `packs` row gets one
 * in state `condemned` (condemned now, no blobs), and a `deleted` tombstone whose object is
 * in the store again (a writer uploaded the same bytes and never committed) goes back to
 * `condemned`. Rows in any other state are left alone, and so is every row a writer commits
 * meanwhile: its commit's pack guard (src/catalog/sql/pack-guard.ts) un-condemns a condemned
 * row of a pack it uploaded, or, once gc began deleting it, refuses retryably. The new row's
 * namespace is the first namespace by id; the writer that revives it takes it over.
 * Both count as stored bytes of their row's namespace again (`namespace_usage`).
 * Returns how many packs were adopted (0 when the catalog has no namespace yet).
 */
export async function adoptPacksInTx(ctx: SqlContext, trx: Transaction<Database>, objects: readonly StoredPack[]): Promise<number> {
  if (objects.length === 0) return 0;
  const ns = await trx.selectFrom('namespaces').select('id').orderBy('id').limit(1).executeTakeFirst();
  if (!ns) return 0;
  const now = sql<number>`${ctx.dialect.nowMs()}`;
  const created = nowIso();
  const back: PackBytes[] = []; // rows whose bytes count as stored again
  const sorted = [...new Map(objects.map((o) => [o.key, o])).values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const group of chunks(sorted, LOOKUP_BATCH)) {
    const keys = group.map((o) => o.key);
    const tomb = await trx
      .updateTable('packs')
      .set({ state: 'condemned', condemned_at: now, deleted_at: null })
      .where('key', 'in', keys)
      .where('state', '=', 'deleted')
      .returning(['namespace', 'size'])
      .execute();
    back.push(...tomb);
    const have = new Set((await trx.selectFrom('packs').select('key').where('key', 'in', keys).execute()).map((r) => r.key));
    const rows = group
      .filter((o) => !have.has(o.key))
      .map((o) => ({
        key: o.key,
        namespace: ns.id,
        size: o.size,
        blob_count: 0,
        created_at: created,
        state: 'condemned',
        condemned_at: now,
      }));
    for (const part of chunks(rows, ctx.rowsPerInsert(7))) {
      const added = await trx
        .insertInto('packs')
        .values(part)
        .onConflict((oc) => oc.column('key').doNothing())
        .returning(['namespace', 'size'])
        .execute();
      back.push(...added);
    }
  }
  await addPackBytes(trx, back, 1); // last (see addUsage)
  return back.length;
}
