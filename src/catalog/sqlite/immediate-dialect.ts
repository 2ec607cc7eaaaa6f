import {
  CompiledQuery,
  SqliteAdapter,
  SqliteDialect,
  SqliteDriver,
  type DatabaseConnection,
  type DialectAdapter,
  type Driver,
  type SqliteDialectConfig,
} from 'kysely';

/**
 * SQLite driver whose transactions start with `BEGIN IMMEDIATE` (take the write lock up
 * front), so two writers (the CLI and the daemon) queue on the file lock within the busy
 * timeout instead of failing on a lock upgrade.
 */
class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
  /**
   * SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, SQLITE_IOERR…);
   * the ROLLBACK that follows would then fail with "no transaction is active" and hide the
   * error that mattered: that failure is ignored.
   */
  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await connection.executeQuery(CompiledQuery.raw('rollback'));
    } catch (err) {
      if (!/no transaction is active/.test((err as Error).message)) throw err;
    }
  }
}

/**
 * SQLite runs DDL in transactions: Kysely's migrator then runs every pending migration in one
 * transaction (BEGIN IMMEDIATE, above), after reading which ones are applied inside it, so two
 * processes opening a new catalog file at once migrate it one after the other (Kysely's own
 * SQLite migration lock does nothing: "SQLite only has one connection"), instead of the
 * second failing with `table … already exists`.
 */
class TransactionalDdlSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

/** Kysely's `SqliteDialect` over better-sqlite3, with `ImmediateSqliteDriver` (transactions begin IMMEDIATE). */
export class ImmediateSqliteDialect extends SqliteDialect {
  readonly #cfg: SqliteDialectConfig;
  constructor(cfg: SqliteDialectConfig) {
    super(cfg);
    this.#cfg = cfg;
  }
  override createDriver(): Driver {
    return new ImmediateSqliteDriver(this.#cfg);
  }
  override createAdapter(): DialectAdapter {
    return new TransactionalDdlSqliteAdapter();
  }
}
