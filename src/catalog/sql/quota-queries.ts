import { sql, type Transaction } from 'kysely';
import { AwcError } from '../../core/errors.js';
import { formatBytes } from '../../core/format-bytes.js';
import type { WrittenPack } from '../../store/pack/pack-types.js';
import { checkQuotaPatch, QUOTA_DAY_MS, type NamespaceQuota, type QuotaPatch, type QuotaUsage } from '../port/quotas.js';
import { LOOKUP_BATCH } from './blob-queries.js';
import { chunks, nowIso, toNum } from './rows.js';
import type { Database } from './schema.js';
import type { Db, SqlContext } from './sql-context.js';
import { readUsage } from './usage-counter.js';

/** A `namespace_quotas` row as read. */
interface QuotaRecord {
  stored_bytes: number | string | null;
  daily_new_bytes: number | string | null;
  workspaces: number | null;
}

/** Limits of a row (bigints read as numbers). */
function toQuota(r: QuotaRecord): NamespaceQuota {
  const n = (v: number | string | null) => (v === null ? null : toNum(v));
  return {
    storedBytes: n(r.stored_bytes),
    dailyNewBytes: n(r.daily_new_bytes),
    workspaces: r.workspaces === null ? null : toNum(r.workspaces),
  };
}

/** What freeing space means, for hints. */
const FREE_STORED =
  'remove snapshots and workspaces you no longer need (`awc rm`) and run `awc gc`, or raise the limit (`awc quota set --stored-bytes`)';

/**
 * The quota queries of the catalog (dialect-neutral; migration 0009_namespace_quotas,
 * docs/reference/quotas.md): the limits per namespace, the usage they count, and the checks the
 * commit transactions run. A commit of a namespace with a quota row first locks that row
 * (`lockQuota`: `SELECT … FOR UPDATE` on PostgreSQL; SQLite's write transactions already run one
 * at a time), so two commits that each fit alone but not together are ordered: the second counts
 * the first's packs and is refused.
 */
export class QuotaQueries {
  constructor(private readonly ctx: SqlContext) {}

  /** The limits of `namespace`, or undefined (no row, or an unknown namespace). */
  async quota(namespace: string): Promise<NamespaceQuota | undefined> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return undefined;
      const r = await this.#select(ctx.db, nsId, false);
      return r ? toQuota(r) : undefined;
    });
  }

  /** Sets the limits of `namespace` (upsert, one transaction) and returns them. @throws E_USAGE */
  async setQuota(namespace: string, patch: QuotaPatch): Promise<NamespaceQuota> {
    checkQuotaPatch(patch);
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.ensureNs(namespace));
    return ctx.tx(async (trx) => {
      const old = await this.#select(trx, nsId, true);
      const cur = old ? toQuota(old) : { storedBytes: null, dailyNewBytes: null, workspaces: null };
      const next: NamespaceQuota = { ...cur, ...stripUndefined(patch) };
      const row = {
        stored_bytes: next.storedBytes,
        daily_new_bytes: next.dailyNewBytes,
        workspaces: next.workspaces,
        updated_at: nowIso(),
      };
      if (old) await trx.updateTable('namespace_quotas').set(row).where('namespace', '=', nsId).execute();
      else
        await trx
          .insertInto('namespace_quotas')
          .values({ namespace: nsId, ...row })
          .execute();
      return next;
    });
  }

  /** Removes the limits of `namespace`; false when it had none. */
  async clearQuota(namespace: string): Promise<boolean> {
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.findNs(namespace));
    if (!nsId) return false;
    return ctx.tx(async (trx) => {
      const res = await trx.deleteFrom('namespace_quotas').where('namespace', '=', nsId).executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    });
  }

  /** What `namespace` uses now (zeros for an unknown namespace). */
  async quotaUsage(namespace: string): Promise<QuotaUsage> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return { storedBytes: 0, dailyNewBytes: 0, workspaces: 0, nowMs: await this.#now(ctx.db) };
      return this.#usage(ctx.db, nsId);
    });
  }

  /**
   * Inside a commit's transaction, first: locks the quota row of namespace id `nsId` (PostgreSQL
   * `FOR UPDATE`; the commits of one namespace with a quota queue here until the one ahead
   * commits or rolls back) and returns its limits, or undefined when it has none.
   */
  async lockQuota(trx: Transaction<Database>, nsId: string): Promise<NamespaceQuota | undefined> {
    const r = await this.#select(trx, nsId, true);
    return r ? toQuota(r) : undefined;
  }

  /**
   * Inside a snapshot or checkpoint commit, after `lockQuota` and the pack guard, before its pack
   * rows are inserted: the bytes of `packs` not yet in the catalog, added to the stored bytes and
   * to the last 24 h's, must stay within `q`. A commit that adds no bytes always passes.
   * @throws E_QUOTA (details: limit, quota, used, adding; the daily limit's is retryable, with
   *   details.retryAtMs, when time alone frees enough)
   */
  async checkCommit(
    trx: Transaction<Database>,
    nsId: string,
    namespace: string,
    q: NamespaceQuota,
    packs: readonly WrittenPack[],
  ): Promise<void> {
    if (q.storedBytes === null && q.dailyNewBytes === null) return;
    const adding = await this.#newBytes(trx, packs);
    if (adding === 0) return;
    if (q.storedBytes !== null) {
      const used = (await readUsage(trx, nsId)).storedBytes; // the running total: O(1)
      if (used + adding > q.storedBytes) {
        throw quotaError(namespace, 'storedBytes', q.storedBytes, used, adding, `the namespace's stored bytes`, {
          hint: `Nothing was committed. To free space, ${FREE_STORED}.`,
        });
      }
    }
    if (q.dailyNewBytes !== null) await this.#checkDaily(trx, nsId, namespace, q.dailyNewBytes, adding);
  }

  /** The daily part of `checkCommit`. @throws E_QUOTA (retryable with details.retryAtMs when time frees enough) */
  async #checkDaily(trx: Transaction<Database>, nsId: string, namespace: string, limit: number, adding: number): Promise<void> {
    const nowMs = await this.#now(trx);
    const used = await this.#dailyBytes(trx, nsId, nowMs);
    if (used + adding <= limit) return;
    const retryAtMs = await this.#dailyRetryAt(trx, nsId, { dailyNewBytes: used, nowMs }, adding, limit);
    const when = retryAtMs === undefined ? undefined : new Date(retryAtMs).toISOString();
    throw quotaError(namespace, 'dailyNewBytes', limit, used, adding, 'the new bytes of the last 24 h', {
      hint:
        when === undefined
          ? 'Nothing was committed. This commit alone is larger than the daily limit: raise it (`awc quota set --daily-new-bytes`).'
          : `Nothing was committed. Enough of the last 24 h's bytes leave the window at ${when}: run the command again then, or raise the limit (\`awc quota set --daily-new-bytes\`).`,
      retryAtMs,
    });
  }

  /**
   * Inside a fork's transaction, after `lockQuota`: `adding` more workspaces must stay within
   * `q.workspaces`. @throws E_QUOTA (not retryable: removing workspaces frees it)
   */
  async checkFork(trx: Transaction<Database>, nsId: string, namespace: string, q: NamespaceQuota, adding: number): Promise<void> {
    if (q.workspaces === null || adding === 0) return;
    const used = (await readUsage(trx, nsId)).workspaces;
    if (used + adding > q.workspaces) {
      throw new AwcError(
        'E_QUOTA',
        `namespace "${namespace}": ${adding} more workspace(s) would make ${used + adding}, over its quota of ${q.workspaces} workspaces (in use: ${used})`,
        {
          hint: 'Nothing was created. Remove workspaces you no longer need (`awc rm <workspace>`), or raise the limit (`awc quota set --workspaces`).',
          details: { namespace, limit: 'workspaces', quota: q.workspaces, used, adding },
        },
      );
    }
  }

  async #select(db: Db, nsId: string, lock: boolean): Promise<QuotaRecord | undefined> {
    return db
      .selectFrom('namespace_quotas')
      .select(['stored_bytes', 'daily_new_bytes', 'workspaces'])
      .where('namespace', '=', nsId)
      .$if(lock && this.ctx.rowLocks, (qb) => qb.forUpdate())
      .executeTakeFirst();
  }

  async #now(db: Db): Promise<number> {
    const r = await sql<{ now: number | string }>`select ${this.ctx.dialect.nowMs()} as now`.execute(db);
    return toNum(r.rows[0]!.now);
  }

  /**
   * The usage of namespace id `nsId` as `db` (a transaction, or the database) sees it: stored
   * bytes and workspaces from its running totals (`namespace_usage`: one row, O(1)), the daily
   * figure by {@link #dailyBytes}.
   */
  async #usage(db: Db, nsId: string): Promise<QuotaUsage> {
    const nowMs = await this.#now(db);
    const totals = await readUsage(db, nsId);
    const dailyNewBytes = await this.#dailyBytes(db, nsId, nowMs);
    return { storedBytes: totals.storedBytes, dailyNewBytes, workspaces: totals.workspaces, nowMs };
  }

  /**
   * Bytes of the packs namespace id `nsId`'s commits added in the 24 h before `nowMs`: a range
   * of the index (namespace, committed_at_ms), so O(the packs of the last day), never the
   * namespace's older packs.
   */
  async #dailyBytes(db: Db, nsId: string, nowMs: number): Promise<number> {
    const daily = await db
      .selectFrom('packs')
      .select((eb) => eb.fn.sum('size').as('bytes'))
      .where('namespace', '=', nsId)
      .where('committed_at_ms', '>', nowMs - QUOTA_DAY_MS)
      .executeTakeFirstOrThrow();
    return toNum(daily.bytes as number | string | null);
  }

  /** Bytes of `packs` whose key has no row yet (a pack already recorded is not new). */
  async #newBytes(trx: Transaction<Database>, packs: readonly WrittenPack[]): Promise<number> {
    const byKey = new Map(packs.map((p) => [p.key, p.size]));
    for (const group of chunks([...byKey.keys()], LOOKUP_BATCH)) {
      const rows = await trx.selectFrom('packs').select('key').where('key', 'in', group).execute();
      for (const r of rows) byKey.delete(r.key);
    }
    let n = 0;
    for (const size of byKey.values()) n += size;
    return n;
  }

  /**
   * When enough of the window's bytes have left it for `adding` to fit under `limit`, ms by the
   * database's clock: the commit time of the oldest pack that must leave, plus a day.
   * Undefined when `adding` alone is over the limit (time never frees it).
   */
  async #dailyRetryAt(
    trx: Transaction<Database>,
    nsId: string,
    use: Pick<QuotaUsage, 'dailyNewBytes' | 'nowMs'>,
    adding: number,
    limit: number,
  ): Promise<number | undefined> {
    if (adding > limit) return undefined;
    const need = use.dailyNewBytes + adding - limit;
    const rows = await trx
      .selectFrom('packs')
      .select(['committed_at_ms', 'size'])
      .where('namespace', '=', nsId)
      .where('committed_at_ms', '>', use.nowMs - QUOTA_DAY_MS)
      .orderBy('committed_at_ms')
      .execute();
    let freed = 0;
    for (const r of rows) {
      freed += toNum(r.size);
      if (freed >= need) return toNum(r.committed_at_ms) + QUOTA_DAY_MS;
    }
    return use.nowMs + QUOTA_DAY_MS;
  }
}

/** A patch without its absent keys (so a spread keeps the current limits). */
function stripUndefined(p: QuotaPatch): QuotaPatch {
  return Object.fromEntries(Object.entries(p).filter(([, v]) => v !== undefined)) as QuotaPatch;
}

/** The E_QUOTA of a byte limit: names the limit, the usage, what the commit adds, and what frees it. */
function quotaError(
  namespace: string,
  limit: 'storedBytes' | 'dailyNewBytes',
  quota: number,
  used: number,
  adding: number,
  what: string,
  o: { hint: string; retryAtMs?: number },
): AwcError {
  const retryable = limit === 'dailyNewBytes' && o.retryAtMs !== undefined;
  return new AwcError(
    'E_QUOTA',
    `namespace "${namespace}": this commit adds ${formatBytes(adding)}, and ${what} would be ${formatBytes(used + adding)}, over its quota of ${formatBytes(quota)} (${limit}; in use: ${formatBytes(used)})`,
    {
      hint: o.hint,
      retryable,
      details: { namespace, limit, quota, used, adding, ...(o.retryAtMs === undefined ? {} : { retryAtMs: o.retryAtMs }) },
    },
  );
}
