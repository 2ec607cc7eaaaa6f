import { isAscii, isUtf8 } from 'node:buffer';

/**
 * File names as raw bytes in JavaScript strings, by the `surrogateescape` rule of Python's
 * PEP 383 ("Non-decodable Bytes in System Character Interfaces"): bytes that form valid UTF-8
 * decode as usual; each byte of an invalid sequence becomes the lone low surrogate
 * U+DC00 + byte (U+DC80 … U+DCFF; bytes below 0x80 are always valid). The mapping is a
 * bijection between byte strings and the strings it produces, so a name survives any trip
 * through memory, JSON (which writes a lone surrogate as `\udcXX`) and back to the file system
 * byte for byte. Valid UTF-8 never contains an escape: a tree whose names are all UTF-8 reads
 * and encodes exactly as before (tree format v1, docs/reference/formats.md#tree-object-version-2-names-as-raw-bytes).
 */

/** Length of the valid UTF-8 sequence starting at `i`, or 0 when the bytes there are not one (RFC 3629). */
function validAt(b: Uint8Array, i: number): number {
  const c = b[i]!;
  if (c < 0x80) return 1;
  let n: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c === 0xe0) lo = 0xa0; // no overlong forms
    if (c === 0xed) hi = 0x9f; // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c === 0xf0) lo = 0x90;
    if (c === 0xf4) hi = 0x8f; // nothing past U+10FFFF
  } else return 0;
  if (i + n > b.length) return 0;
  const second = b[i + 1]!;
  if (second < lo || second > hi) return 0;
  for (let k = 2; k < n; k++) if ((b[i + k]! & 0xc0) !== 0x80) return 0;
  return n;
}

/** The string of raw name bytes `raw` (surrogateescape; see module doc). Never throws: every byte string has one. */
export function nameFromBytes(raw: Uint8Array): string {
  // valid UTF-8 (nearly every name; ASCII the cheapest to tell): no escape, decoded as is
  const b = Buffer.isBuffer(raw) ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  if (isAscii(b)) return b.toString('latin1');
  if (isUtf8(b)) return b.toString('utf8');
  let out = '';
  let start = 0; // start of the valid run not yet decoded
  const dec = new TextDecoder('utf-8');
  for (let i = 0; i < raw.length;) {
    const n = validAt(raw, i);
    if (n > 0) {
      i += n;
      continue;
    }
    if (start < i) out += dec.decode(raw.subarray(start, i));
    out += String.fromCharCode(0xdc00 + raw[i]!);
    start = ++i;
  }
  if (start < raw.length) out += dec.decode(raw.subarray(start));
  return out;
}

/**
 * The raw bytes of a name string: escapes (lone U+DC80 … U+DCFF) back to their byte, the rest
 * as UTF-8. Only {@link isCanonicalName} strings round-trip; call it first on untrusted input.
 */
export function nameToBytes(name: string): Buffer {
  if (!hasEscape(name)) return Buffer.from(name, 'utf8');
  const parts: Buffer[] = [];
  let start = 0;
  for (let i = 0; i < name.length; i++) {
    const u = name.charCodeAt(i);
    if (u >= 0xd800 && u <= 0xdbff && i + 1 < name.length) {
      const next = name.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++; // a pair: an ordinary astral character
        continue;
      }
    }
    if (u >= 0xdc80 && u <= 0xdcff) {
      parts.push(Buffer.from(name.slice(start, i), 'utf8'), Buffer.of(u - 0xdc00));
      start = i + 1;
    }
  }
  parts.push(Buffer.from(name.slice(start), 'utf8'));
  return Buffer.concat(parts);
}

/** Whether `name` holds an escaped raw byte (a lone low surrogate): it is not valid UTF-8 as bytes. */
export function hasEscape(name: string): boolean {
  return !name.isWellFormed();
}

/**
 * Whether `name` is what {@link nameFromBytes} gives for some bytes: well-formed apart from
 * escapes, and no escapes that together would be valid UTF-8 (`\udcc3\udca9` is the bytes of
 * `é`, which decode to `é`: not canonical). Every such string names exactly one byte string.
 */
export function isCanonicalName(name: string): boolean {
  if (!hasEscape(name)) return true;
  return nameFromBytes(nameToBytes(name)) === name;
}

/** Compares two names by their raw bytes (the order of tree entries). */
export function compareNameBytes(a: string, b: string): number {
  if (!hasEscape(a) && !hasEscape(b)) return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
  return Buffer.compare(nameToBytes(a), nameToBytes(b));
}

/**
 * A path for the file system from a path string whose names may hold escaped raw bytes (as
 * Python's `os.fsencode`): the string itself when it holds none, else its raw bytes as a
 * Buffer (Node writes a string path as UTF-8, which would turn each escape into U+FFFD's bytes).
 */
export function fsPath(path: string): string | Buffer {
  return hasEscape(path) ? nameToBytes(path) : path;
}
