import { AwcError } from './errors.js';

/** Binary unit factors: K = KiB = 1024 bytes, as `du -h` and `numfmt --from=iec` read them. */
const FACTORS: Record<string, number> = { '': 1, B: 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40, P: 2 ** 50 };

/**
 * Parses a byte size for people: an integer count of bytes (`1048576`), or a number and a
 * binary unit K, M, G, T or P, written alone or as KiB…PiB (`10G` = `10GiB` = 10 × 2^30,
 * `1.5M` = 1572864; case-insensitive; a fraction is rounded down to a whole byte). `KB`, `MB`…
 * are refused: they mean powers of 1000 to some tools and 1024 to others. `what` names the
 * option in the error. Returns bytes, a non-negative safe integer.
 * @throws E_USAGE for anything else, or a size past 2^53 - 1 bytes
 */
export function parseSize(text: string, what: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(?:([kmgtp])(ib|i|b)?|(b))?$/i.exec(text.trim());
  const bad = (why: string) =>
    new AwcError('E_USAGE', `${what}: ${JSON.stringify(text)} is not a size${why}`, {
      hint: 'Write bytes (1048576) or a number and a binary unit: 512K, 1.5M, 10G, 2T (or 10GiB).',
    });
  if (!m) throw bad('');
  const [, num, unit, suffix] = m;
  if (suffix !== undefined && suffix.toLowerCase() === 'b') throw bad(' (KB, MB, GB are ambiguous: write K, M, G or KiB, MiB, GiB)');
  if (unit === undefined && num!.includes('.')) throw bad(' (a count of bytes is a whole number)');
  const bytes = Math.floor(Number(num) * FACTORS[(unit ?? '').toUpperCase()]!);
  if (!Number.isSafeInteger(bytes)) throw bad(' (too large)');
  return bytes;
}
