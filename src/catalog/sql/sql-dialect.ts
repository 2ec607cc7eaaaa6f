import type { RawBuilder } from 'kysely';
import type { SqlErrors } from './sql-errors.js';

/**
 * What a SQL dialect folder (`sqlite/`, `postgres/`) gives the dialect-neutral queries
 * besides its Kysely dialect: its driver's error mapping and the database's own clock.
 * Leases and GC grace periods are judged by the database's clock, never a host's
 * (docs/explanation/design.md#durability): every host sees the same "now".
 */
export interface SqlDialect {
  /** The driver's error mapping. */
  errors: SqlErrors;
  /**
   * The database server's current time in ms since the Unix epoch, as an SQL expression
   * (read it through `toNum`: pg returns a `bigint` as a decimal string). SQLite: from
   * `julianday('now')`; PostgreSQL: from `clock_timestamp()` (not `now()`, which is the
   * transaction's start).
   */
  nowMs(): RawBuilder<number | string>;
  /**
   * True when a read that decides a write must lock its rows (`SELECT … FOR UPDATE` /
   * `FOR KEY SHARE`): PostgreSQL, whose READ COMMITTED lets other writers change a row
   * between the read and the write. SQLite leaves it out: `BEGIN IMMEDIATE` already makes
   * every write transaction run alone (and SQLite has no `FOR UPDATE`).
   */
  rowLocks?: boolean;
}
