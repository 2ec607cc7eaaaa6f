import type { AwcError } from '../../core/errors.js';

/**
 * What a SQL dialect tells the dialect-neutral queries about its driver's errors. Each
 * dialect folder (`sqlite/`, `postgres/`) implements it next to its driver:
 * SQLite reads better-sqlite3's `err.code` (`SQLITE_CONSTRAINT_UNIQUE`, `SQLITE_BUSY`,
 * `SQLITE_FULL`…); PostgreSQL reads pg's SQLSTATE (`23505` unique violation, `40001` /
 * `40P01` serialization failure / deadlock → E_CATALOG_BUSY, `53100` disk full → E_NO_SPACE).
 */
export interface SqlErrors {
  /** True for a unique or primary-key violation (the guard of names, mounts and rows). */
  isUniqueViolation(err: unknown): boolean;
  /**
   * The AwcError for a driver error whose code means something to AWC (a lock not obtained
   * in time → E_CATALOG_BUSY, a full disk → E_NO_SPACE, a read-only file → E_READ_ONLY, an I/O
   * failure → E_IO, a damaged database → E_INTEGRITY), or undefined for anything else.
   */
  classify(err: unknown): AwcError | undefined;
}
