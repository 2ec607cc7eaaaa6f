import { AwcError, type ErrorCode } from '../../core/errors.js';
import type { SqlErrors } from '../sql/sql-errors.js';

/**
 * PostgreSQL's error mapping: the one place where pg's errors become AWC codes. pg throws a
 * `DatabaseError` whose `code` is the SQLSTATE (five characters, e.g. `23505`), or a Node
 * network error (`ECONNREFUSED`, `ENOTFOUND`…) when it cannot reach the server, or a plain
 * `Error` when a connection ends or times out.
 *
 * | SQLSTATE / condition | AWC code |
 * | --- | --- |
 * | 23505 unique violation | (the caller's: E_NAME_TAKEN, E_TARGET_BUSY) |
 * | 40001 serialization failure, 40P01 deadlock, 55P03 lock not available, 57014 statement cancelled (`statement_timeout`), 53300 too many connections | E_CATALOG_BUSY (retryable) |
 * | 53100 disk full | E_NO_SPACE |
 * | 25006 read-only transaction (a standby) | E_READ_ONLY |
 * | 58030 I/O error | E_IO |
 * | XX001 / XX002 data or index corrupted | E_INTEGRITY |
 * | 42501 insufficient privilege | E_PERMISSION |
 * | class 08 connection exception, 57P01–57P03 shutdown / starting up, ECONNREFUSED, ENOTFOUND, ETIMEDOUT…, a connection timeout or a connection ended | E_CATALOG_UNAVAILABLE (retryable) |
 * | 28P01 / 28000 authentication failed, 3D000 unknown database | E_CONFIG (the URL is wrong) |
 *
 * Messages and hints name the catalog by its redacted URL (src/config/backend-url.ts
 * `redactUrl`): a password never appears.
 */

/** Node network error codes that mean "the server cannot be reached". */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE']);

/** Messages of pg and pg-pool for a connection that timed out or ended. */
const CONNECTION_LOST =
  /timeout exceeded when trying to connect|Connection terminated|connection timeout|Client has encountered a connection error|Connection ended/i;

function errCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

function pgCode(sqlstate: string): { code: ErrorCode; what: string } | undefined {
  switch (sqlstate) {
    case '40001':
      return { code: 'E_CATALOG_BUSY', what: 'a concurrent transaction conflicted (serialization failure)' };
    case '40P01':
      return { code: 'E_CATALOG_BUSY', what: 'a deadlock with a concurrent transaction was broken' };
    case '55P03':
      return { code: 'E_CATALOG_BUSY', what: 'a row or table lock was not obtained in time' };
    case '57014':
      return { code: 'E_CATALOG_BUSY', what: 'a statement was cancelled (it ran past statement_timeout, or an operator cancelled it)' };
    case '53300':
      return { code: 'E_CATALOG_BUSY', what: 'the server has no free connection slot' };
    case '53100':
      return { code: 'E_NO_SPACE', what: "the database server's disk is full" };
    case '25006':
      return { code: 'E_READ_ONLY', what: 'the server only accepts reads (a standby, or default_transaction_read_only)' };
    case '58030':
      return { code: 'E_IO', what: 'the database server reported an I/O error' };
    case 'XX001':
    case 'XX002':
      return { code: 'E_INTEGRITY', what: 'the database server reported damaged data' };
    case '42501':
      return { code: 'E_PERMISSION', what: 'the catalog role lacks a privilege' };
    case '28P01':
    case '28000':
      return { code: 'E_CONFIG', what: 'the server refused the login' };
    case '3D000':
      return { code: 'E_CONFIG', what: 'the database does not exist' };
  }
  if (sqlstate.startsWith('08') || sqlstate === '57P01' || sqlstate === '57P02' || sqlstate === '57P03') {
    return { code: 'E_CATALOG_UNAVAILABLE', what: 'the connection to the server failed' };
  }
  return undefined;
}

/** The hint of each code, naming the catalog's redacted URL `where`. */
function hintFor(code: ErrorCode, where: string): string | undefined {
  switch (code) {
    case 'E_CATALOG_UNAVAILABLE':
      return `Check that PostgreSQL runs and accepts connections at ${where} (\`pg_lsclusters\`; \`pg_ctlcluster <version> main start\`), then run the command again; \`awc doctor\` checks the catalog.`;
    case 'E_CONFIG':
      return `Check the user, password and database name of the catalog URL ${where} (config key \`catalog\`, AWC_CATALOG; see docs/how-to/postgres-catalog.md).`;
    case 'E_PERMISSION':
      return `Make the catalog role the owner of its database (\`CREATE DATABASE … OWNER …\`), as docs/how-to/postgres-catalog.md shows (${where}).`;
    case 'E_READ_ONLY':
      return `Point the catalog at the primary server, not a standby (${where}).`;
    case 'E_CATALOG_BUSY':
      return 'Other writers held the catalog rows this command needed; run the command again.';
    default:
      return undefined;
  }
}

/**
 * The `SqlErrors` of PostgreSQL (see module doc) for the catalog at `where`, a URL already
 * redacted (`redactUrl`) or a description such as "the PostgreSQL catalog".
 */
export function postgresErrors(where = 'the PostgreSQL catalog'): SqlErrors {
  const make = (code: ErrorCode, message: string, err: unknown, details?: Record<string, unknown>) =>
    new AwcError(code, message, { cause: err, hint: hintFor(code, where), details });
  return {
    isUniqueViolation: (err) => errCode(err) === '23505',
    classify(err) {
      if (err instanceof AwcError) return err;
      const code = errCode(err);
      const message = (err as Error | null)?.message ?? String(err);
      if (code !== undefined && /^[0-9A-Z]{5}$/.test(code)) {
        const m = pgCode(code);
        return m ? make(m.code, `${m.what}: ${message} (SQLSTATE ${code}; catalog ${where})`, err, { sqlstate: code }) : undefined;
      }
      const syscall = (err as { syscall?: unknown } | null)?.syscall;
      if ((code !== undefined && UNREACHABLE.has(code)) || (code !== undefined && syscall === 'connect')) {
        return make('E_CATALOG_UNAVAILABLE', `cannot reach the PostgreSQL catalog at ${where}: ${message}`, err);
      }
      if (code === undefined && CONNECTION_LOST.test(message)) {
        return make('E_CATALOG_UNAVAILABLE', `lost the connection to the PostgreSQL catalog at ${where}: ${message}`, err);
      }
      if (code === undefined && /^SASL: .*password/i.test(message)) {
        return make('E_CONFIG', `the server at ${where} asks for a password the catalog URL does not give: ${message}`, err);
      }
      return undefined;
    },
  };
}
