import { constants as fsc } from 'node:fs';
import { access } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { AwcError, toAwcError, type ErrorCode } from '../../core/errors.js';
import type { SqlErrors } from '../sql/sql-errors.js';

/**
 * SQLite's error mapping (better-sqlite3 throws `err.code` = the extended result code, e.g.
 * `SQLITE_FULL`, `SQLITE_IOERR_SHMSIZE`, `SQLITE_CONSTRAINT_UNIQUE`). The one place where
 * SQLite result codes become AWC codes:
 * SQLITE_BUSY* / SQLITE_LOCKED* → E_CATALOG_BUSY, SQLITE_FULL (or SQLITE_IOERR_SHMSIZE, when
 * the WAL index cannot grow) → E_NO_SPACE, SQLITE_READONLY* → E_READ_ONLY, SQLITE_IOERR* /
 * SQLITE_CANTOPEN* → E_IO, SQLITE_CORRUPT* / SQLITE_NOTADB → E_INTEGRITY. Other codes (misuse,
 * constraint…) mean a bug and are left to the caller.
 */

function errCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

/** The AWC code (and hint) of a SQLite result code, or undefined for codes that mean a bug. */
function sqliteCode(code: string): { code: ErrorCode; hint?: string } | undefined {
  if (code === 'SQLITE_FULL' || code === 'SQLITE_IOERR_SHMSIZE') return { code: 'E_NO_SPACE' };
  if (code.startsWith('SQLITE_READONLY')) return { code: 'E_READ_ONLY' };
  if (code.startsWith('SQLITE_IOERR') || code.startsWith('SQLITE_CANTOPEN')) return { code: 'E_IO' };
  if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB')
    return { code: 'E_INTEGRITY', hint: 'The catalog (catalog.sqlite) is damaged; restore it from a copy.' };
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return { code: 'E_CATALOG_BUSY' };
  return undefined;
}

/** "Could not get the lock within the busy timeout." */
const BUSY = new Set(['SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_LOCKED']);

/** The `SqlErrors` of SQLite (see module doc). */
export const sqliteErrors: SqlErrors = {
  isUniqueViolation(err) {
    const c = errCode(err);
    return c === 'SQLITE_CONSTRAINT_UNIQUE' || c === 'SQLITE_CONSTRAINT_PRIMARYKEY';
  },
  classify(err) {
    const raw = errCode(err);
    if (raw === undefined || !raw.startsWith('SQLITE_')) return undefined;
    const message = (err as Error).message;
    if (BUSY.has(raw)) return new AwcError('E_CATALOG_BUSY', `the catalog is locked: ${message}`, { cause: err });
    const sq = sqliteCode(raw);
    return sq ? new AwcError(sq.code, `${message} (${raw})`, { cause: err, hint: sq.hint }) : undefined;
  },
};

/** Any thrown value as an AwcError: SQLite's codes first (see module doc), then `toAwcError`. */
export function sqliteToAwcError(err: unknown): AwcError {
  if (err instanceof AwcError) return err;
  return sqliteErrors.classify(err) ?? toAwcError(err);
}

/**
 * SQLite says only "unable to open database file" (SQLITE_CANTOPEN) or SQLITE_READONLY when
 * the catalog's directory is not writable: ask the file system why (EROFS, EACCES…) so that
 * the error gets its code (E_READ_ONLY, E_PERMISSION). Other errors are mapped as usual
 * (an error without a code SQLite or AWC knows passes through unchanged).
 */
export async function whyCannotOpen(err: unknown, path: string): Promise<unknown> {
  const c = errCode(err) ?? '';
  if (path === ':memory:' || !(c.startsWith('SQLITE_CANTOPEN') || c.startsWith('SQLITE_READONLY'))) {
    return err instanceof AwcError ? err : (sqliteErrors.classify(err) ?? err);
  }
  try {
    await access(dirname(resolve(path)), fsc.W_OK);
    await access(path, fsc.W_OK).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
  } catch (probe) {
    const p = toAwcError(probe);
    return new AwcError(p.code, `cannot open the catalog ${path}: ${(probe as Error).message}`, { cause: err });
  }
  return sqliteToAwcError(err);
}
