/**
 * The names of content objects in the host's content FUSE mount, and the overlay redirects
 * that layer placeholders use to point at them. One place for the format; the FUSE server
 * (src/host/fuse), the layer builder and the upper merge all make and parse names here.
 *
 * A content object (a file's whole bytes, named by the sha256 of them, 64 lowercase hex) has
 * two names in the mount:
 *
 * - the long name `<aa>/<64 hex>`, in the directory `<aa>` of the digest's first two hex
 *   characters; its redirect `/<aa>/<64 hex>` is 68 bytes;
 * - the short name `<23 base64url characters>` in the root: the first {@link SHORT_NAME_LENGTH}
 *   characters of the base64url encoding of the 32 digest bytes, so 138 bits (bytes 0‥16 and
 *   the top 2 bits of byte 17). Its redirect `/<short>` is 24 bytes, the longest
 *   `trusted.overlay.redirect` that still fits in a 256-byte ext4 inode next to
 *   `trusted.overlay.metacopy`, so a placeholder costs no xattr block (docs/decisions.md,
 *   "Short content redirects").
 *
 * The namespace is host-local, never a durable format: a short name is only resolved against
 * the content objects announced on this host, and one that two of them share is ambiguous
 * (never guessed). Layers built before short names existed keep their long redirects.
 */

/** Characters of a short content name (base64url, 6 bits each: 138 bits of the digest). */
export const SHORT_NAME_LENGTH = 23;
/** Bytes of a short redirect (`/` + the short name). */
export const SHORT_REDIRECT_BYTES = 1 + SHORT_NAME_LENGTH;
/** Bytes of a long redirect (`/<aa>/<64 hex>`). */
export const LONG_REDIRECT_BYTES = 4 + 64;

const SHORT_NAME = /^[A-Za-z0-9_-]{23}$/;
const HEX64 = /^[0-9a-f]{64}$/;
const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** The short name of a content object (64-hex digest): the first 23 base64url characters of its digest. */
export function shortContentName(hex: string): string {
  return Buffer.from(hex, 'hex').toString('base64url').slice(0, SHORT_NAME_LENGTH);
}

/** True when `name` has the shape of a short content name (23 base64url characters). */
export function isShortContentName(name: string): boolean {
  return name.length === SHORT_NAME_LENGTH && SHORT_NAME.test(name);
}

/** The long redirect of a content object (64-hex digest): `/<aa>/<64 hex>` (68 bytes). */
export function longContentRedirect(hex: string): string {
  return `/${hex.slice(0, 2)}/${hex}`;
}

/** The short redirect of a content object (64-hex digest): `/<short name>` (24 bytes). */
export function shortContentRedirect(hex: string): string {
  return `/${shortContentName(hex)}`;
}

/** A redirect into the content mount, parsed: the digest of a long one, or the name of a short one. */
export type ContentRedirect = { form: 'long'; hex: string } | { form: 'short'; short: string };

/**
 * Parses an overlay redirect into the content mount: `/<aa>/<64 hex>` (with `aa` the first
 * two characters of the hex) or `/<short name>`. Undefined for anything else (a redirect to
 * a path of the layer, a malformed or upper-case digest, a directory of the wrong prefix).
 */
export function parseContentRedirect(redirect: string): ContentRedirect | undefined {
  if (redirect.length === LONG_REDIRECT_BYTES) {
    const hex = redirect.slice(4);
    if (redirect[0] !== '/' || redirect[3] !== '/' || redirect.slice(1, 3) !== hex.slice(0, 2) || !HEX64.test(hex)) return undefined;
    return { form: 'long', hex };
  }
  if (redirect.length !== SHORT_REDIRECT_BYTES || redirect[0] !== '/') return undefined;
  const short = redirect.slice(1);
  return isShortContentName(short) ? { form: 'short', short } : undefined;
}

/** A parsed content name: the digest bytes it fixes and how many of them (32, or 17 + 2 bits). */
export interface ContentKey {
  bytes: Buffer;
  /** True for a short name: only bytes 0‥16 and the top 2 bits of byte 17 are fixed. */
  short: boolean;
  /** For a short name: the top 2 bits of byte 17 (0‥3). */
  tail: number;
}

/**
 * Parses a 64-hex digest or a short name into a {@link ContentKey}; undefined when `name` is
 * neither.
 */
export function contentKey(name: string): ContentKey | undefined {
  if (name.length === 64) {
    if (!HEX64.test(name)) return undefined;
    return { bytes: Buffer.from(name, 'hex'), short: false, tail: 0 };
  }
  if (!isShortContentName(name)) return undefined;
  const bytes = Buffer.from(name, 'base64url'); // 17 bytes: the last character's low 2 bits are dropped
  const last = BASE64URL.indexOf(name[SHORT_NAME_LENGTH - 1]!);
  return { bytes, short: true, tail: last & 3 };
}

/**
 * The content object a lookup of `name` in directory node `parent` of the mount names: a short
 * name in the root (`rootId`), or a 64-hex digest in the directory node `dirBase + 0x<aa>` of
 * its first two hex digits. Undefined for anything else (the 256 directories themselves
 * included).
 */
export function contentKeyIn(parent: number, name: string, rootId: number, dirBase: number): ContentKey | undefined {
  if (parent === rootId) return isShortContentName(name) ? contentKey(name) : undefined;
  const d = parent - dirBase;
  if (d < 0 || d > 255 || name.length !== 64 || parseInt(name.slice(0, 2), 16) !== d) return undefined;
  return contentKey(name);
}
