import { AwcError } from './errors.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses a duration such as `90s`, `24h`, `7d`, `500ms`, `0s` (a non-negative number and one
 * unit of ms, s, m, h, d) into milliseconds. `what` names the option in the error.
 * @throws E_USAGE for anything else
 */
export function parseDuration(text: string, what: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) {
    throw new AwcError('E_USAGE', `${what}: ${JSON.stringify(text)} is not a duration`, {
      hint: 'Write a number and a unit: 500ms, 90s, 30m, 24h, 7d.',
    });
  }
  return Math.round(Number(m[1]) * UNITS[m[2]!]!);
}
