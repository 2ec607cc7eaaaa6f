/**
 * Object-store keys of shared layer images and their content indexes (src/drivers/overlay/shared-image.ts;
 * docs/reference/formats.md#object-store-key-layout): `images/<aa>/<64 hex>`, the hex being the SHA-256 of
 * the stored (lz4-compressed) bytes.
 */
import { digestHex, type Digest } from '../../core/digest.js';

/** Key prefix of the shared images and content indexes in the object store. */
export const IMAGE_PREFIX = 'images/';

/** The object key of an image or content index whose stored bytes have sha256 `d`: `images/<aa>/<64 hex>`. */
export function imageObjectKey(d: Digest): string {
  const hex = digestHex(d);
  return `${IMAGE_PREFIX}${hex.slice(0, 2)}/${hex}`;
}

/** The digest an `images/<aa>/<64 hex>` key names (`<aa>` its first two hex digits), or undefined for another key. */
export function imageObjectDigest(key: string): Digest | undefined {
  const m = /^images\/([0-9a-f]{2})\/([0-9a-f]{64})$/.exec(key);
  return m && m[2]!.startsWith(m[1]!) ? (`sha256:${m[2]}` as Digest) : undefined;
}
