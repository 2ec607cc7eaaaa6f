import { randomBytes } from 'node:crypto';

/**
 * Catalog ids: `<prefix>_` + 10 characters of the creation time in milliseconds + 10 random
 * characters, all lowercase Crockford base32 (`0-9a-z` without `i l o u`), e.g.
 * `sn_01jq3v7k2mx4c9t0b8ra5w`. Ids sort by creation time as plain strings; within one
 * millisecond the random part is incremented (monotonic, like ULID), so the ids of one
 * batch (a fork of 1000) sort in the order they were generated.
 */

/** Lowercase Crockford base32 alphabet. */
export const ID_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** Kinds of catalog ids and their prefixes. */
export const ID_PREFIX = { snapshot: 'sn', workspace: 'ws', namespace: 'ns' } as const;
/** An id prefix (`sn`, `ws`, `ns`). */
export type IdPrefix = (typeof ID_PREFIX)[keyof typeof ID_PREFIX];

/** Length of the time part, in characters (5 bits each: 50 bits of milliseconds). */
export const TIME_CHARS = 10;
/** Length of the random part, in characters (5 bits each: 50 random bits). */
export const RANDOM_CHARS = 10;

const RANDOM_MAX = 1n << BigInt(RANDOM_CHARS * 5);

let lastMs = -1;
let lastRandom = 0n;

function encode(value: bigint, chars: number): string {
  let out = '';
  for (let i = 0; i < chars; i++) {
    out = ID_ALPHABET[Number(value & 31n)] + out;
    value >>= 5n;
  }
  return out;
}

function randomPart(): bigint {
  const b = randomBytes(8);
  return b.readBigUInt64BE() % RANDOM_MAX;
}

/**
 * A new id with `prefix`, e.g. `newId('sn')`. Monotonic within this process: an id is always
 * greater than the previous one, even if the clock goes back or many ids share a millisecond.
 */
export function newId(prefix: IdPrefix): string {
  let ms = Date.now();
  let rnd: bigint;
  if (ms <= lastMs) {
    ms = lastMs;
    rnd = lastRandom + 1n;
    if (rnd >= RANDOM_MAX) {
      ms += 1;
      rnd = randomPart();
    }
  } else {
    rnd = randomPart();
  }
  lastMs = ms;
  lastRandom = rnd;
  return `${prefix}_${encode(BigInt(ms), TIME_CHARS)}${encode(rnd, RANDOM_CHARS)}`;
}

/** `count` new ids with `prefix`, strictly increasing. */
export function newIds(prefix: IdPrefix, count: number): string[] {
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) out[i] = newId(prefix);
  return out;
}

/** True when `s` is a well-formed id with `prefix`. */
export function isId(s: string, prefix: IdPrefix): boolean {
  return (
    s.length === prefix.length + 1 + TIME_CHARS + RANDOM_CHARS &&
    s.startsWith(`${prefix}_`) &&
    /^[0-9a-hjkmnp-tv-z]+$/.test(s.slice(prefix.length + 1))
  );
}

/** Creation time (ms since the epoch) encoded in an id. */
export function idTime(id: string): number {
  const body = id.slice(id.indexOf('_') + 1, id.indexOf('_') + 1 + TIME_CHARS);
  let v = 0;
  for (const ch of body) v = v * 32 + ID_ALPHABET.indexOf(ch);
  return v;
}
