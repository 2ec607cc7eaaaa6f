import type { AwcError } from './errors.js';

/**
 * Parses `text` as a JSON object (not an array, not null) for a configuration file AWC
 * reads or merges. `bad(why)` builds the file's own error (its code, hint and details).
 * @throws what `bad` returns: "not valid JSON (…)" or "not a JSON object"
 */
export function parseJsonObject(text: string, bad: (why: string) => AwcError): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw bad(`not valid JSON (${(err as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('not a JSON object');
  return v as Record<string, unknown>;
}
