import { sql, type Kysely } from 'kysely';
import { AwcError } from '../../core/errors.js';
import type { IdPrefix } from '../port/ids.js';
import type { Database } from './schema.js';

/** Minimum length of an id prefix a ref may use (characters after `sn_` / `ws_`). */
export const MIN_PREFIX = 4;

/** E_NOT_FOUND for a snapshot ref, with the hint that lists snapshots. */
export function snapshotNotFound(namespace: string, ref: string): AwcError {
  return new AwcError('E_NOT_FOUND', `no snapshot "${ref}" in namespace "${namespace}"`, {
    hint: `List snapshots with \`awc snapshot ls\`; a ref is an id, a name, or an id prefix of at least ${MIN_PREFIX} characters.`,
    details: { namespace, ref },
  });
}

/** E_NOT_FOUND for a workspace ref, with the hint that lists workspaces. */
export function workspaceNotFound(namespace: string, ref: string): AwcError {
  return new AwcError('E_NOT_FOUND', `no workspace "${ref}" in namespace "${namespace}"`, {
    hint: `List workspaces with \`awc ls\`; a ref is an id, a name, or an id prefix of at least ${MIN_PREFIX} characters.`,
    details: { namespace, ref },
  });
}

/**
 * Resolves `ref` to one id of `table` in namespace `nsId` (named `namespace` in messages):
 * exact id, then exact name, then unique id prefix. A prefix is the id's beginning, with or
 * without the `sn_`/`ws_` part, and has at least `MIN_PREFIX` characters after that part
 * (case-insensitive; `LIKE … ESCAPE '!'`, so `%` and `_` in a ref match themselves).
 * @throws E_NOT_FOUND, E_AMBIGUOUS (details.candidates lists up to 5 ids)
 */
export async function resolveRef(
  database: Kysely<Database>,
  table: 'snapshots' | 'workspaces',
  prefix: IdPrefix,
  nsId: string,
  namespace: string,
  ref: string,
): Promise<string> {
  const what = table === 'snapshots' ? 'snapshot' : 'workspace';
  const db = database as unknown as Kysely<Record<'snapshots' | 'workspaces', { id: string; namespace: string; name: string | null }>>;
  const exact = await db
    .selectFrom(table)
    .select(['id', 'name'])
    .where('namespace', '=', nsId)
    .where((eb) => eb.or([eb('id', '=', ref), eb('name', '=', ref)]))
    .execute();
  const byId = exact.find((r) => r.id === ref);
  if (byId) return byId.id;
  if (exact.length > 0) return exact[0]!.id;

  const lower = ref.toLowerCase();
  const body = lower.startsWith(`${prefix}_`) ? lower.slice(prefix.length + 1) : lower;
  if (body.length >= MIN_PREFIX && /^[0-9a-z]+$/.test(body)) {
    const pattern = `${prefix}!_${body}%`;
    const rows = await db
      .selectFrom(table)
      .select('id')
      .where('namespace', '=', nsId)
      .where(sql<boolean>`${sql.ref('id')} like ${pattern} escape '!'`)
      .orderBy('id')
      .limit(6)
      .execute();
    if (rows.length === 1) return rows[0]!.id;
    if (rows.length > 1) {
      const ids = rows.slice(0, 5).map((r) => r.id);
      throw new AwcError(
        'E_AMBIGUOUS',
        `"${ref}" matches several ${what}s in namespace "${namespace}": ${ids.join(', ')}${rows.length > 5 ? ', …' : ''}`,
        {
          details: { ref, candidates: ids },
        },
      );
    }
  }
  throw table === 'snapshots' ? snapshotNotFound(namespace, ref) : workspaceNotFound(namespace, ref);
}
