import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, sql } from 'kysely';
import { mkdirPrivate, touchPrivateSync } from '../../core/private-fs.js';
import type { Database } from '../sql/schema.js';
import { KyselyCatalog } from '../sql/kysely-catalog.js';
import type { SqlCatalogOptions } from '../sql/sql-context.js';
import type { SqlDialect } from '../sql/sql-dialect.js';
import { ImmediateSqliteDialect } from './immediate-dialect.js';
import { sqliteErrors, whyCannotOpen } from './sqlite-errors.js';

/** Options of `SqliteCatalog.open`. */
export interface SqliteCatalogOptions extends SqlCatalogOptions {
  /** How long a writer waits for another process's write lock, in ms. Default 5000. */
  busyTimeoutMs?: number;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;

/** SQLite's dialect hooks: its error mapping and its clock (`julianday('now')`, ms precision). */
export const sqliteDialect: SqlDialect = {
  errors: sqliteErrors,
  nowMs: () => sql<number>`CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)`,
};

/**
 * `SqliteCatalog`: the `Catalog` port over an embedded SQLite file (better-sqlite3), the
 * dialect-neutral queries of `KyselyCatalog` with SQLite's driver and error mapping.
 *
 * Concurrency: several processes (the CLI and the daemon) may open the same SQLite file. It
 * runs in WAL mode (readers never block), with a busy timeout, and every write transaction
 * starts with `BEGIN IMMEDIATE` so two writers queue on the file lock instead of failing on
 * a lock upgrade. A lock not obtained within the busy timeout is `E_CATALOG_BUSY`
 * (retryable). Open one `SqliteCatalog` per file per process: better-sqlite3 is synchronous,
 * so two instances in one process that write concurrently would wait on each other while
 * blocking the event loop.
 */
export class SqliteCatalog extends KyselyCatalog {
  /**
   * Opens (creating it 0600 and its parent directory 0700 if needed) the SQLite catalog at `path`,
   * with WAL journal, `busy_timeout`, foreign keys on and `synchronous=FULL`, and applies
   * pending migrations. Safe to call from several processes on the same file.
   * @throws E_CATALOG_BUSY (another process held the lock too long), E_FORMAT (written by a newer awc),
   *   E_READ_ONLY / E_PERMISSION / E_NO_SPACE / E_IO (the file or its directory cannot be written)
   */
  static async open(path: string, opts: SqliteCatalogOptions = {}): Promise<SqliteCatalog> {
    const busy = opts.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (path !== ':memory:') {
      // created 0600 before SQLite opens it: SQLite gives its -wal and -shm files the same mode
      await mkdirPrivate(dirname(resolve(path)));
      try {
        touchPrivateSync(path);
      } catch {
        // a read-only or unwritable place: SQLite reports it when it opens the file
      }
    }
    let sqlite: BetterSqlite3.Database;
    try {
      sqlite = new BetterSqlite3(path, { timeout: busy });
    } catch (err) {
      throw await whyCannotOpen(err, path);
    }
    let db: Kysely<Database> | undefined;
    try {
      sqlite.pragma(`busy_timeout = ${Math.max(0, Math.floor(busy))}`);
      sqlite.pragma('journal_mode = WAL');
      sqlite.pragma('foreign_keys = ON');
      sqlite.pragma('synchronous = FULL');
      db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: cachingStatements(sqlite) }) });
      const cat = new SqliteCatalog(db, sqliteDialect, opts);
      await cat.migrate();
      return cat;
    } catch (err) {
      if (db) await db.destroy().catch(() => undefined);
      else sqlite.close();
      throw await whyCannotOpen(err, path);
    }
  }
}

/** Prepared `select` statements kept per SQL text by `cachingStatements`. */
const STATEMENT_CACHE_SIZE = 256;

/**
 * Makes `db.prepare` reuse the statement it prepared before for the same `select` text (up to
 * STATEMENT_CACHE_SIZE of them, the oldest dropped first). Kysely prepares every query it runs;
 * preparing costs tens of µs, as much as running a small query (an import's blob index
 * lookups, thousands per GB). Kysely runs a statement to its end at once (`all`/`run`), so a
 * shared statement is never busy when it is used again. Other statements are prepared each time.
 * @returns `db` itself
 */
function cachingStatements(db: BetterSqlite3.Database): BetterSqlite3.Database {
  const cache = new Map<string, BetterSqlite3.Statement>();
  const prepare = db.prepare.bind(db);
  db.prepare = ((source: string) => {
    if (!/^\s*select\b/i.test(source)) return prepare(source);
    let st = cache.get(source);
    if (st) return st;
    st = prepare(source);
    if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
    cache.set(source, st);
    return st;
  }) as typeof db.prepare;
  return db;
}
