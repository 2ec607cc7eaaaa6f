import { applyLabelPatch, labelsFromText, type LabelPatch, type Labels } from '../port/labels.js';
import { snapshotNotFound, workspaceNotFound } from './refs.js';
import type { SqlContext } from './sql-context.js';

/**
 * Changes the labels of snapshot or workspace `id` (exact id) of `namespace` in one
 * transaction: the row is read (locked `FOR UPDATE` where the dialect has row locks, so two
 * concurrent changes of one row both apply), the patch applied (a string sets, null
 * deletes), the result validated and written. Returns the labels after the change.
 * @throws E_NOT_FOUND (no such row in the namespace), E_USAGE (a bad key or value, more than 64 labels)
 */
export async function setLabelsQuery(
  ctx: SqlContext,
  kind: 'snapshot' | 'workspace',
  namespace: string,
  id: string,
  patch: LabelPatch,
): Promise<Labels> {
  const table = kind === 'snapshot' ? 'snapshots' : 'workspaces';
  const notFound = () => (kind === 'snapshot' ? snapshotNotFound(namespace, id) : workspaceNotFound(namespace, id));
  applyLabelPatch({}, patch); // a bad patch fails before any statement
  const nsId = await ctx.read(() => ctx.findNs(namespace));
  if (!nsId) throw notFound();
  let next: Labels = {};
  await ctx.tx(async (trx) => {
    const row = await trx
      .selectFrom(table)
      .select('labels')
      .where('id', '=', id)
      .where('namespace', '=', nsId)
      .$if(ctx.rowLocks, (q) => q.forUpdate())
      .executeTakeFirst();
    if (!row) throw notFound();
    next = applyLabelPatch(labelsFromText(row.labels), patch);
    await trx
      .updateTable(table)
      .set({ labels: JSON.stringify(next) })
      .where('id', '=', id)
      .execute();
  });
  return next;
}
