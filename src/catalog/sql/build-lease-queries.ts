import { sql, type RawBuilder, type Selectable } from 'kysely';
import { AwcError } from '../../core/errors.js';
import type { BuildLease, BuildLeasePort } from '../port/build-leases.js';
import type { BuildLeasesTable } from './schema.js';
import { toNum } from './rows.js';
import type { Db, SqlContext } from './sql-context.js';

/** A `build_leases` row as the port's lease, judged at `nowMs`. */
function toLease(r: Selectable<BuildLeasesTable>, nowMs: number): BuildLease {
  const expiresAtMs = toNum(r.expires_at_ms);
  return {
    key: r.key,
    holder: r.holder,
    epoch: toNum(r.epoch),
    state: r.holder === null ? 'released' : expiresAtMs > nowMs ? 'live' : 'expired',
    acquiredAtMs: toNum(r.acquired_at_ms),
    expiresAtMs,
    result: r.result,
    nowMs,
  };
}

/**
 * The `build_leases` queries (dialect-neutral; migration 0008_build_leases; the port:
 * src/catalog/port/build-leases.ts). The primary key guards the first take (a unique
 * violation: another caller won); a later take is a conditional UPDATE (`WHERE epoch = <read>
 * AND (released OR expired by the database's now)`), whose row lock orders concurrent takers
 * under PostgreSQL's READ COMMITTED as SQLite's single writer does.
 */
export class BuildLeaseQueries implements BuildLeasePort {
  constructor(private readonly ctx: SqlContext) {}

  #now(): RawBuilder<number> {
    return this.ctx.dialect.nowMs() as RawBuilder<number>;
  }

  async #row(db: Db, nsId: string, key: string): Promise<BuildLease | undefined> {
    const r = await db
      .selectFrom('build_leases')
      .selectAll()
      .select(this.#now().as('now_ms'))
      .where('namespace', '=', nsId)
      .where('key', '=', key)
      .executeTakeFirst();
    return r ? toLease(r, toNum(r.now_ms)) : undefined;
  }

  /** See BuildLeasePort.acquireBuildLease. */
  async acquireBuildLease(
    namespace: string,
    key: string,
    holder: string,
    ttlMs: number,
  ): Promise<{ acquired: boolean; lease: BuildLease }> {
    if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0)
      throw new AwcError('E_USAGE', `a lease TTL must be a positive whole number of ms, got ${ttlMs}`);
    if (!key || !holder) throw new AwcError('E_USAGE', 'a build lease needs a key and a holder');
    const ctx = this.ctx;
    const nsId = await ctx.read(() => ctx.ensureNs(namespace));
    return ctx.tx(async (trx) => {
      const cur = await this.#row(trx, nsId, key);
      const expires = sql<number>`(${this.#now()} + ${ttlMs})`;
      const taken = { holder, acquired_at_ms: this.#now(), expires_at_ms: expires, result: null };
      if (!cur) {
        const ins = await trx
          .insertInto('build_leases')
          .values({ namespace: nsId, key, epoch: 1, ...taken })
          .onConflict((oc) => oc.columns(['namespace', 'key']).doNothing())
          .executeTakeFirst();
        const won = Number(ins.numInsertedOrUpdatedRows ?? 0n) === 1;
        return { acquired: won, lease: (await this.#row(trx, nsId, key))! };
      }
      if (cur.state === 'live') return { acquired: false, lease: cur };
      const up = await trx
        .updateTable('build_leases')
        .set({ ...taken, epoch: sql<number>`${sql.ref('epoch')} + 1` })
        .where('namespace', '=', nsId)
        .where('key', '=', key)
        .where('epoch', '=', cur.epoch)
        .where((eb) => eb.or([eb('holder', 'is', null), eb('expires_at_ms', '<=', this.#now())]))
        .executeTakeFirst();
      const won = Number(up.numUpdatedRows) === 1;
      return { acquired: won, lease: (await this.#row(trx, nsId, key))! };
    });
  }

  /** See BuildLeasePort.renewBuildLease. */
  async renewBuildLease(namespace: string, key: string, epoch: number, ttlMs: number): Promise<boolean> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return false;
      const r = await ctx.db
        .updateTable('build_leases')
        .set({ expires_at_ms: sql<number>`(${this.#now()} + ${ttlMs})` })
        .where('namespace', '=', nsId)
        .where('key', '=', key)
        .where('epoch', '=', epoch)
        .where('holder', 'is not', null)
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    });
  }

  /** See BuildLeasePort.releaseBuildLease. */
  async releaseBuildLease(namespace: string, key: string, epoch: number, result: string | null): Promise<boolean> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return false;
      const r = await ctx.db
        .updateTable('build_leases')
        .set({ holder: null, result, expires_at_ms: this.#now() })
        .where('namespace', '=', nsId)
        .where('key', '=', key)
        .where('epoch', '=', epoch)
        .where('holder', 'is not', null)
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    });
  }

  /** See BuildLeasePort.getBuildLease. */
  async getBuildLease(namespace: string, key: string): Promise<BuildLease | undefined> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      return nsId === undefined ? undefined : this.#row(ctx.db, nsId, key);
    });
  }
}
