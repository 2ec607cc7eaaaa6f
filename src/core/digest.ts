import { createHash } from 'node:crypto';
import { AwcError } from './errors.js';

/** A content digest: `sha256:<64 lowercase hex>` of the uncompressed bytes. */
export type Digest = `sha256:${string}`;

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

/** SHA-256 digest of `data` (bytes). */
export function sha256(data: Uint8Array | string): Digest {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

/** True when `s` is a well-formed digest string. */
export function isDigest(s: unknown): s is Digest {
  return typeof s === 'string' && DIGEST_RE.test(s);
}

/** Parses a digest string; throws E_FORMAT when malformed. */
export function parseDigest(s: string): Digest {
  if (!isDigest(s)) throw new AwcError('E_FORMAT', `not a sha256 digest: ${JSON.stringify(s)}`);
  return s;
}

/** The 64 hex characters of a digest. */
export function digestHex(d: Digest): string {
  return d.slice(7);
}

/** The 32 raw bytes of a digest. */
export function digestBytes(d: Digest): Buffer {
  return Buffer.from(d.slice(7), 'hex');
}

/** Digest from 32 raw bytes. */
export function digestFromBytes(b: Uint8Array): Digest {
  return `sha256:${Buffer.from(b).toString('hex')}`;
}

/** Throws E_INTEGRITY unless `sha256(data) === expected`. */
export function verifyDigest(data: Uint8Array, expected: Digest, what = 'blob'): void {
  const got = sha256(data);
  if (got !== expected) {
    throw new AwcError('E_INTEGRITY', `${what} ${expected} failed verification (got ${got})`, { details: { expected, got } });
  }
}
