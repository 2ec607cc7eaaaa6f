import type { Transaction } from 'kysely';
import { toNum } from './rows.js';
import type { Database } from './schema.js';
import type { Db } from './sql-context.js';

/** A change of one namespace's totals: bytes of packs not deleted, and workspaces (either may be negative). */
export interface UsageDelta {
  storedBytes?: number;
  workspaces?: number;
}

/** A pack row's namespace id and size in bytes (what a RETURNING clause gives). */
export interface PackBytes {
  namespace: string;
  size: number | string;
}

/** A namespace's running totals (`namespace_usage`, 0010_namespace_usage). */
export interface UsageTotals {
  /** Bytes of its packs whose state is not `deleted`. */
  storedBytes: number;
  /** Its workspaces. */
  workspaces: number;
}

/**
 * Adds `d` to the totals of namespace id `nsId` inside `trx`: one upsert of its
 * `namespace_usage` row (created on first change), O(1) whatever the namespace holds. A zero
 * change writes nothing. On PostgreSQL the update locks the row until `trx` ends, so callers
 * make it the last write of the namespace's rows they touch (it then never waits while other
 * commits wait on it for something else: no deadlock).
 */
export async function addUsage(trx: Transaction<Database>, nsId: string, d: UsageDelta): Promise<void> {
  const stored = d.storedBytes ?? 0;
  const workspaces = d.workspaces ?? 0;
  if (stored === 0 && workspaces === 0) return;
  await trx
    .insertInto('namespace_usage')
    .values({ namespace: nsId, stored_bytes: stored, workspaces })
    .onConflict((oc) =>
      oc.column('namespace').doUpdateSet((eb) => ({
        stored_bytes: eb('namespace_usage.stored_bytes', '+', eb.ref('excluded.stored_bytes')),
        workspaces: eb('namespace_usage.workspaces', '+', eb.ref('excluded.workspaces')),
      })),
    )
    .execute();
}

/**
 * Adds (`sign` 1) or subtracts (`sign` -1) the sizes of pack rows `rows` (each its namespace
 * id and size in bytes, as a RETURNING clause gives them) to their namespaces' stored bytes,
 * inside `trx`; namespaces in id order (one lock order on PostgreSQL).
 */
export async function addPackBytes(trx: Transaction<Database>, rows: readonly PackBytes[], sign: 1 | -1): Promise<void> {
  const byNs = new Map<string, number>();
  for (const r of rows) byNs.set(r.namespace, (byNs.get(r.namespace) ?? 0) + toNum(r.size));
  for (const ns of [...byNs.keys()].sort()) await addUsage(trx, ns, { storedBytes: sign * byNs.get(ns)! });
}

/** The totals of namespace id `nsId` as `db` (a transaction or the database) sees them; zeros without a row. */
export async function readUsage(db: Db, nsId: string): Promise<UsageTotals> {
  const r = await db.selectFrom('namespace_usage').select(['stored_bytes', 'workspaces']).where('namespace', '=', nsId).executeTakeFirst();
  return { storedBytes: toNum(r?.stored_bytes), workspaces: toNum(r?.workspaces) };
}
