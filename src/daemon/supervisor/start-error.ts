import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { AwcError, ERROR_CODES, type ErrorCode, type ErrorJson } from '../../core/errors.js';
import { replaceFilePrivateSync } from '../../core/private-fs.js';

/**
 * Codes of a daemon start that will fail the same way when tried again (another daemon, a
 * bad configuration, a catalog and store that do not belong together): the worker exits
 * EXIT_REFUSED on them, so its supervisor gives up at once instead of restarting it.
 */
export const REFUSED_START_CODES: ReadonlySet<string> = new Set([
  'E_DAEMON_UNAVAILABLE',
  'E_CONFIG',
  'E_STORE_MISMATCH',
  'E_CATALOG_EMPTY',
]);

/** Where the daemon's worker records why its last start failed: `<hostDir>/start-error.json` (0600). */
export function startErrorFile(hostDir: string): string {
  return join(hostDir, 'start-error.json');
}

/** Records `err` (an AwcError's `{code, message, hint, details}`) as why the start failed. Never throws. */
export function recordStartError(hostDir: string, err: unknown): void {
  if (!(err instanceof AwcError)) return;
  try {
    replaceFilePrivateSync(startErrorFile(hostDir), JSON.stringify(err.toJSON()));
  } catch {
    // the log has it too
  }
}

/** Forgets a recorded start error (before a new start). Never throws. */
export function clearStartError(hostDir: string): void {
  rmSync(startErrorFile(hostDir), { force: true });
}

/**
 * The error a failed start recorded, as the error `awc daemon start` (and an on-demand start)
 * reports: its code, message and hint, the log named; undefined when none was recorded.
 */
export function readStartError(hostDir: string, logFile: string): AwcError | undefined {
  let j: ErrorJson;
  try {
    j = JSON.parse(readFileSync(startErrorFile(hostDir), 'utf8')) as ErrorJson;
  } catch {
    return undefined;
  }
  if (typeof j?.code !== 'string' || !Object.hasOwn(ERROR_CODES, j.code)) return undefined;
  return new AwcError(j.code as ErrorCode, `the host daemon did not start: ${j.message ?? ''} (see ${logFile})`, {
    hint: typeof j.hint === 'string' ? j.hint : undefined,
    details: j.details,
  });
}
