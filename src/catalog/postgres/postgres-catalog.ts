import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { redactUrl } from '../../config/backend-url.js';
import type { Database } from '../sql/schema.js';
import { KyselyCatalog } from '../sql/kysely-catalog.js';
import type { SqlCatalogOptions } from '../sql/sql-context.js';
import type { SqlDialect } from '../sql/sql-dialect.js';
import { postgresErrors } from './postgres-errors.js';

/** Options of `PostgresCatalog.open`. */
export interface PostgresCatalogOptions extends SqlCatalogOptions {
  /** Most connections of this process's pool. Default 10. */
  maxConnections?: number;
  /** How long opening one connection may take, in ms. Default 10000. */
  connectTimeoutMs?: number;
  /**
   * The server cancels any statement running longer (a lock wait included), in ms; the
   * caller gets E_CATALOG_BUSY. Default 30000.
   */
  statementTimeoutMs?: number;
  /**
   * The server ends a session left idle inside a transaction this long (a paused or stuck
   * process must not keep row locks), in ms. Default 60000.
   */
  idleInTransactionTimeoutMs?: number;
  /** Idle connections are closed after this long, in ms. Default 30000. */
  idleTimeoutMs?: number;
}

const DEFAULTS = {
  maxConnections: 10,
  connectTimeoutMs: 10_000,
  statementTimeoutMs: 30_000,
  idleInTransactionTimeoutMs: 60_000,
  idleTimeoutMs: 30_000,
} as const;

/** The server's clock: `clock_timestamp()` (the time of the call, not of the transaction's start as `now()`), in ms. */
const nowMs = () => sql<string>`(extract(epoch from clock_timestamp()) * 1000)::bigint`;

/**
 * PostgreSQL's dialect hooks for the catalog at `where` (a redacted URL, named in error
 * hints): its error mapping (postgres-errors.ts), its clock, and row locks on the reads
 * that decide a write (READ COMMITTED: docs/explanation/catalog-concurrency.md).
 */
export function postgresDialectFor(where?: string): SqlDialect {
  return { errors: postgresErrors(where), nowMs, rowLocks: true };
}

/** PostgreSQL's dialect hooks, naming no URL in hints (see `postgresDialectFor`). */
export const postgresDialect: SqlDialect = postgresDialectFor();

/**
 * `PostgresCatalog`: the `Catalog` port over a PostgreSQL database shared by a fleet of
 * hosts, the dialect-neutral queries of `KyselyCatalog` over Kysely's `PostgresDialect` and
 * a `pg` pool. Same schema and migrations as SQLite (migrations.ts).
 *
 * Concurrency: every transaction runs at the server's default READ COMMITTED; a read that
 * decides a write locks its rows (`SELECT … FOR UPDATE`), check-and-set writes are
 * conditional (`UPDATE … WHERE head_snapshot_id = ?`), names and mount targets are guarded
 * by unique indexes, and blob rows are inserted in digest order with `ON CONFLICT DO
 * NOTHING` (two checkpoints indexing the same new blob never deadlock). Which guard covers
 * which write: docs/explanation/catalog-concurrency.md.
 */
export class PostgresCatalog extends KyselyCatalog {
  /** Names of the migrations this instance's `open` applied (empty when another process had, or the database was current). */
  appliedOnOpen: readonly string[] = [];

  /**
   * Connects to the database at `url` (`postgres://user:pass@host:5432/db`, libpq-style
   * query keys such as `?host=/var/run/postgresql` or `sslmode` pass to pg), checks that it
   * answers, and applies pending migrations. Safe from many processes at once: Kysely's
   * migrator takes a PostgreSQL advisory lock, so one process migrates and the others wait,
   * then find nothing to do.
   * @throws E_CATALOG_UNAVAILABLE (server unreachable, connection timed out or ended),
   *   E_CONFIG (login refused, unknown database), E_PERMISSION (the role may not create the
   *   tables), E_CATALOG_BUSY, E_FORMAT (written by a newer awc), E_NO_SPACE / E_READ_ONLY;
   *   messages and hints name the URL with its password redacted
   */
  static async open(url: string, opts: PostgresCatalogOptions = {}): Promise<PostgresCatalog> {
    const o = { ...DEFAULTS, ...opts };
    const dialect = postgresDialectFor(redactUrl(url));
    const pool = new pg.Pool({
      connectionString: url,
      max: o.maxConnections,
      connectionTimeoutMillis: o.connectTimeoutMs,
      idleTimeoutMillis: o.idleTimeoutMs,
      statement_timeout: o.statementTimeoutMs,
      idle_in_transaction_session_timeout: o.idleInTransactionTimeoutMs,
      application_name: 'awc',
    });
    // An idle connection the server ends (restart, pg_terminate_backend) is an 'error' event
    // of the pool: without a listener it would end the process. The pool drops that
    // connection and opens another on the next query; a query that fails is mapped there.
    pool.on('error', () => undefined);
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    try {
      await sql`select 1`.execute(db);
    } catch (err) {
      await db.destroy().catch(() => undefined);
      throw dialect.errors.classify(err) ?? err;
    }
    const cat = new PostgresCatalog(db, dialect, opts);
    try {
      cat.appliedOnOpen = await cat.migrate();
    } catch (err) {
      await db.destroy().catch(() => undefined);
      throw err;
    }
    return cat;
  }
}
