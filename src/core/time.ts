/**
 * Nanosecond timestamps. AWC keeps mtimes as decimal strings of nanoseconds since the
 * epoch (they exceed 2^53). Node 20's utimes takes seconds as a double and libuv then
 * truncates to whole microseconds (`uv__fs_to_timespec`), so from Node the best is the
 * exact microsecond; `src/host/tree/export-dir.ts` sets exact nanoseconds through python3.
 */

/** Nanoseconds (bigint) as the decimal string used in trees. */
export function nsToString(ns: bigint): string {
  return ns.toString();
}

/**
 * Seconds as a double for fs.utimes/lutimes that lands on the exact microsecond of `ns`
 * after libuv's truncation: half a microsecond is added so the double's rounding error
 * (≈ 240 ns at today's epoch) cannot fall below the intended microsecond.
 */
export function nsToUtimeSeconds(ns: string): number {
  const n = BigInt(ns);
  const sec = n / 1_000_000_000n;
  const us = (n % 1_000_000_000n) / 1000n;
  return Number(sec) + (Number(us) + 0.5) / 1e6;
}
