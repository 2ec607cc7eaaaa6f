import type { Kysely, Transaction } from 'kysely';
import { AwcError } from '../../core/errors.js';
import { newId } from '../port/ids.js';
import type { Database } from './schema.js';
import { nowIso } from './rows.js';
import type { SqlDialect } from './sql-dialect.js';
import type { SqlErrors } from './sql-errors.js';

/** A Kysely instance or an open transaction on the catalog database. */
export type Db = Kysely<Database> | Transaction<Database>;

/** Options of the dialect-neutral catalog. */
export interface SqlCatalogOptions {
  /**
   * Most bind parameters in one statement; multi-row INSERTs are split to stay under it.
   * Default 30000 (SQLite allows 32766, PostgreSQL 65535).
   */
  maxParams?: number;
  /** Injection points for tests that drive races (none in production). */
  hooks?: SqlCatalogHooks;
}

/** Injection points of the SQL catalog, for tests that drive races without timers. */
export interface SqlCatalogHooks {
  /**
   * Awaited inside a snapshot's or checkpoint's transaction right before its blob rows are
   * sent (the statements are already built): a test holds several writers here and releases
   * them together, so their inserts of the same digests meet on the server.
   */
  beforeBlobInsert?(): Promise<void>;
}

const DEFAULT_MAX_PARAMS = 30_000;

/**
 * What the catalog's query groups (blobs, snapshots, workspaces) share: the database, the
 * dialect (error mapping, the database's clock), the namespace id cache and the read / write-transaction
 * wrappers that map driver errors to AwcErrors.
 */
export class SqlContext {
  readonly #maxParams: number;
  /** Namespace name → id. Namespaces are never renamed or deleted, so entries never go stale. */
  readonly #nsIds = new Map<string, string>();

  /** The dialect's error mapping. */
  readonly errors: SqlErrors;
  /** The injection points (empty in production). */
  readonly hooks: SqlCatalogHooks;

  constructor(
    readonly db: Kysely<Database>,
    readonly dialect: SqlDialect,
    opts: SqlCatalogOptions = {},
  ) {
    this.errors = dialect.errors;
    this.#maxParams = opts.maxParams ?? DEFAULT_MAX_PARAMS;
    this.hooks = opts.hooks ?? {};
  }

  /** Maps a driver error to an AwcError where a code fits (see `SqlErrors.classify`); others pass through unchanged. */
  mapError(err: unknown): unknown {
    if (err instanceof AwcError) return err;
    return this.errors.classify(err) ?? err;
  }

  /** Runs `fn` in one write transaction, mapping driver errors (a lock not obtained in time: E_CATALOG_BUSY). */
  async tx<T>(fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    try {
      return await this.db.transaction().execute(fn);
    } catch (err) {
      throw this.mapError(err);
    }
  }

  /** Runs a read, mapping driver errors. */
  async read<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.mapError(err);
    }
  }

  /** Id of namespace `name`, or undefined when it does not exist yet. */
  async findNs(name: string): Promise<string | undefined> {
    const cached = this.#nsIds.get(name);
    if (cached) return cached;
    const row = await this.db.selectFrom('namespaces').select('id').where('name', '=', name).executeTakeFirst();
    if (row) this.#nsIds.set(name, row.id);
    return row?.id;
  }

  /** Id of namespace `name`, creating it on first use (its own autocommit statement). @throws E_USAGE (empty name) */
  async ensureNs(name: string): Promise<string> {
    if (typeof name !== 'string' || name.length === 0) throw new AwcError('E_USAGE', 'a namespace name must be a non-empty string');
    const found = await this.findNs(name);
    if (found) return found;
    await this.db
      .insertInto('namespaces')
      .values({ id: newId('ns'), name, created_at: nowIso() })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    const id = await this.findNs(name);
    if (!id) throw new AwcError('E_INTERNAL', `namespace ${name} could not be created`);
    return id;
  }

  /**
   * True when a read that decides a write must lock its rows (`SqlDialect.rowLocks`:
   * PostgreSQL). Queries apply it with `.$if(ctx.rowLocks, (q) => q.forUpdate())`.
   */
  get rowLocks(): boolean {
    return this.dialect.rowLocks === true;
  }

  /** Rows per multi-row INSERT for a table with `columns` columns. */
  rowsPerInsert(columns: number): number {
    return Math.max(1, Math.floor(this.#maxParams / columns));
  }
}
