/**
 * Object keys fanned out by the first byte of a SHA-256 hex: `<prefix>/<hex[0..2]>/<hex>`
 * (packs, git index proofs), and their inverse.
 */

const HEX_KEY = new Map<string, RegExp>();

/** The object key `<prefix>/<hex[0..2]>/<hex>` of the SHA-256 hex `hex` (64 lowercase hex digits). */
export function fanoutKey(prefix: string, hex: string): string {
  return `${prefix}/${hex.slice(0, 2)}/${hex}`;
}

/**
 * The SHA-256 hex a key of the form {@link fanoutKey} names under `prefix` (a fixed word of
 * letters), or undefined for any other key (another prefix, not 64 lowercase hex digits, or a
 * fan-out directory that is not the hex's first byte).
 */
export function fanoutKeyHex(prefix: string, key: string): string | undefined {
  let re = HEX_KEY.get(prefix);
  if (!re) HEX_KEY.set(prefix, (re = new RegExp(`^${prefix}/([0-9a-f]{2})/([0-9a-f]{64})$`)));
  const m = re.exec(key);
  return m && m[2]!.startsWith(m[1]!) ? m[2] : undefined;
}
