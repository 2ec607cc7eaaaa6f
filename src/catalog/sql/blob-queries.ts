import { sql, type ExpressionBuilder, OnConflictTables, OnConflictUpdateDatabase, Transaction } from 'kysely';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { BlobIndex, BlobKind, BlobLocation, Codec, WrittenPack } from '../../store/pack/pack-types.js';
import type { Database, NewBlobRecord } from './schema.js';
import { chunks, toNum } from './rows.js';
import type { SqlContext } from './sql-context.js';
import { addPackBytes, type PackBytes } from './usage-counter.js';

/** Code-unit order of two strings (any fixed total order serves: see `insertPacks`). */
const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** An expression builder of `INSERT INTO blobs … ON CONFLICT` (the `excluded` row beside `blobs`). */
export type BlobConflictEb = ExpressionBuilder<OnConflictUpdateDatabase<Database, 'blobs'>, OnConflictTables<'blobs'>>;

/** `DO UPDATE SET` of a blob row to the location of the row that conflicted (`excluded`): pack, offset, lengths, codec, kind. */
export const toExcludedLocation = (eb: BlobConflictEb) => ({
  pack: eb.ref('excluded.pack'),
  offset: eb.ref('excluded.offset'),
  stored_length: eb.ref('excluded.stored_length'),
  raw_length: eb.ref('excluded.raw_length'),
  codec: eb.ref('excluded.codec'),
  kind: eb.ref('excluded.kind'),
});

/** The columns of a blob row that say where its bytes are (select them for {@link locationOfRow}). */
export const BLOB_LOCATION_COLUMNS = ['digest', 'kind', 'pack', 'offset', 'stored_length', 'raw_length', 'codec'] as const;

/** A blob row as {@link BLOB_LOCATION_COLUMNS} selects it. */
export interface BlobLocationRow {
  digest: string;
  kind: string;
  pack: string;
  offset: number | bigint | string;
  stored_length: number | bigint | string;
  raw_length: number | bigint | string;
  codec: string;
}

/** The pack location a blob row records. */
export function locationOfRow(r: BlobLocationRow): BlobLocation {
  return {
    digest: r.digest as Digest,
    kind: r.kind as BlobKind,
    codec: r.codec as Codec,
    pack: r.pack,
    offset: toNum(r.offset),
    storedLength: toNum(r.stored_length),
    rawLength: toNum(r.raw_length),
  };
}

/** The blob row of namespace id `nsId` that records `loc` in pack `pack`. */
export function rowOfLocation(nsId: string, pack: string, loc: Omit<BlobLocation, 'pack'>): NewBlobRecord {
  return {
    namespace: nsId,
    digest: loc.digest,
    kind: loc.kind,
    pack,
    offset: loc.offset,
    stored_length: loc.storedLength,
    raw_length: loc.rawLength,
    codec: loc.codec,
  };
}

/** Digests per `WHERE digest IN (…)` query of a blob index lookup. */
export const LOOKUP_BATCH = 500;

/** The `packs` and `blobs` queries of the catalog (dialect-neutral): the blob index, pack totals and pack inserts. */
export class BlobQueries {
  constructor(private readonly ctx: SqlContext) {}

  /**
   * Blob index of `namespace`. `lookup` dedups its input and queries `WHERE digest IN (…)`
   * in groups of `LOOKUP_BATCH`; unknown digests (or an unknown namespace) are absent from
   * the result. Offsets and lengths are bytes. With `livePacksOnly` (the dedup index,
   * docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe), a blob whose pack is not
   * `live` is absent too: condemned blobs are never reused (kopia's rule).
   */
  blobIndex(namespace: string, opts: { livePacksOnly?: boolean } = {}): BlobIndex {
    const ctx = this.ctx;
    return {
      lookup: (digests) =>
        ctx.read(async () => {
          const out = new Map<Digest, BlobLocation>();
          if (digests.length === 0) return out;
          const nsId = await ctx.findNs(namespace);
          if (!nsId) return out;
          const unique = [...new Set(digests)];
          for (const group of chunks(unique, LOOKUP_BATCH)) {
            let q = ctx.db
              .selectFrom('blobs as b')
              .select(BLOB_LOCATION_COLUMNS.map((c) => `b.${c}` as const))
              .where('b.namespace', '=', nsId)
              .where('b.digest', 'in', group);
            if (opts.livePacksOnly)
              q = q.where(({ exists, selectFrom }) =>
                exists(selectFrom('packs as p').select('p.key').whereRef('p.key', '=', 'b.pack').where('p.state', '=', 'live')),
              );
            for (const r of await q.execute()) {
              out.set(r.digest as Digest, locationOfRow(r));
            }
          }
          return out;
        }),
    };
  }

  /** Number of blobs indexed in `namespace` (0 for an unknown namespace). */
  async countBlobs(namespace: string): Promise<number> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return 0;
      const r = await ctx.db
        .selectFrom('blobs')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('namespace', '=', nsId)
        .executeTakeFirstOrThrow();
      return toNum(r.n as number | string);
    });
  }

  /** Pack totals of `namespace` (packs whose object exists: not `deleted`): pack count, stored bytes (sum of pack sizes), blob count. */
  async packStats(namespace: string): Promise<{ packs: number; bytes: number; blobs: number }> {
    const ctx = this.ctx;
    return ctx.read(async () => {
      const nsId = await ctx.findNs(namespace);
      if (!nsId) return { packs: 0, bytes: 0, blobs: 0 };
      const r = await ctx.db
        .selectFrom('packs')
        .select((eb) => [eb.fn.countAll().as('packs'), eb.fn.sum('size').as('bytes'), eb.fn.sum('blob_count').as('blobs')])
        .where('namespace', '=', nsId)
        .where('state', '!=', 'deleted') // a deleted pack's row is a tombstone: its object is gone
        .executeTakeFirstOrThrow();
      return {
        packs: toNum(r.packs as number | string),
        bytes: toNum(r.bytes as number | string | null),
        blobs: toNum(r.blobs as number | string | null),
      };
    });
  }

  /**
   * Inserts pack rows (duplicates by key ignored) and blob rows (duplicates by (namespace,
   * digest) ignored: a blob keeps its first location, unless gc condemned that pack: then it
   * moves to the new one), batched, inside `trx`. Rows go in key and digest order: two
   * transactions indexing the same new digests at once take the unique-index locks in one
   * order, so one waits for the other and never deadlocks (PostgreSQL; the waiter's
   * `ON CONFLICT` then keeps the winner's location). `opts.committed`: a snapshot's commit (not gc's
   * repack): new pack rows get `committed_at_ms` = the database's now (0009_namespace_quotas).
   * The new rows' bytes, and those of `opts.revived` (rows the pack guard brought back from
   * `deleted`), are added to their namespace's stored bytes last (`namespace_usage`, 0010).
   * @throws E_INTERNAL when a blob names another pack than the one listing it (a caller bug)
   */
  async insertPacks(
    trx: Transaction<Database>,
    nsId: string,
    packs: readonly WrittenPack[],
    now: string,
    opts: { committed?: boolean; revived?: readonly PackBytes[] } = {},
  ): Promise<void> {
    if (packs.length === 0) return; // (a guard revives only packs of `packs`)
    // a snapshot's or checkpoint's commit stamps its new pack rows with the database's now (the daily quota counts them)
    const committedAt = opts.committed ? sql<number>`${this.ctx.dialect.nowMs()}` : null;
    const packRows = [...packs]
      .sort((a, b) => cmp(a.key, b.key))
      .map((p) => ({
        key: p.key,
        namespace: nsId,
        size: p.size,
        blob_count: p.blobs.length,
        created_at: now,
        committed_at_ms: committedAt,
      }));
    const inserted: PackBytes[] = [...(opts.revived ?? [])];
    for (const group of chunks(packRows, this.ctx.rowsPerInsert(6))) {
      const rows = await trx
        .insertInto('packs')
        .values(group)
        .onConflict((oc) => oc.column('key').doNothing())
        .returning(['namespace', 'size'])
        .execute();
      inserted.push(...rows);
    }
    const blobRows: NewBlobRecord[] = [];
    for (const p of packs) {
      for (const b of p.blobs) {
        if (b.pack !== p.key) {
          throw new AwcError('E_INTERNAL', `blob ${b.digest} is listed in pack ${p.key} but names pack ${b.pack}`);
        }
        blobRows.push(rowOfLocation(nsId, p.key, b));
      }
    }
    blobRows.sort((a, b) => cmp(a.digest, b.digest));
    const inserts = chunks(blobRows, this.ctx.rowsPerInsert(8)).map((group) =>
      // a blob already indexed keeps its location, unless that pack is on its way out (gc
      // condemned it): then it moves to this pack (docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe)
      trx
        .insertInto('blobs')
        .values(group)
        .onConflict((oc) =>
          oc
            .columns(['namespace', 'digest'])
            .doUpdateSet(toExcludedLocation)
            .where((eb) => eb('blobs.pack', 'in', eb.selectFrom('packs').select('packs.key').where('packs.state', '!=', 'live'))),
        )
        .compile(),
    );
    await this.ctx.hooks.beforeBlobInsert?.();
    for (const q of inserts) await trx.executeQuery(q);
    await addPackBytes(trx, inserted, 1); // last: the namespace's usage row stays locked (PostgreSQL) only from here to the commit
  }
}
