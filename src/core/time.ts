/**
 * Nanosecond timestamps. AWC keeps mtimes as decimal strings of nanoseconds since the
 * epoch (they exceed 2^53). Node's utimes takes seconds as a double, which at today's
 * epoch rounds to about 240 ns; `nsToUtimeSeconds` gives the closest double.
 */

/** Nanoseconds (bigint) as the decimal string used in trees. */
export function nsToString(ns: bigint): string {
  return ns.toString();
}

/** Seconds as a double for fs.utimes/lutimes (precision ≈ 2^-22 s at today's epoch). */
export function nsToUtimeSeconds(ns: string): number {
  const n = BigInt(ns);
  const sec = n / 1_000_000_000n;
  const rem = n % 1_000_000_000n;
  return Number(sec) + Number(rem) / 1e9;
}
