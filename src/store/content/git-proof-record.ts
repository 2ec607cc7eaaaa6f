import { digestHex, type Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { GitHashAlgo } from '../../core/git-index.js';
import type { ObjectStore } from '../object/object-store.js';
import { fanoutKey, fanoutKeyHex } from '../object/fanout-key.js';

/**
 * What an import proved about the `.git/index` of the repository at a snapshot's root
 * (docs/explanation/git.md#the-workspaces-index): which of the index's entries name a file
 * whose stored content has exactly the entry's object id. A function of the snapshot (an
 * import that could not read a file just proves less; the first record stored stays), kept
 * in the object store under {@link gitProofKey}. JSON, format `v` 1 (docs/reference/formats.md).
 */
export interface GitIndexProof {
  v: 1;
  /** The repository's object format (`extensions.objectformat`). */
  algo: GitHashAlgo;
  /** Content digest of the snapshot's `.git/index`: the proof is about exactly these bytes. */
  index: Digest;
  /** Entries in that index. */
  entries: number;
  /** Bit i (byte i>>3, bit i&7) set: entry i is proven (base64). */
  proven: string;
}

/** Object store key of the proof of a snapshot root: `gitproof/<aa>/<64 hex>`. */
export function gitProofKey(root: Digest): string {
  return fanoutKey('gitproof', digestHex(root));
}

/** The snapshot root a proof record's key names (the inverse of {@link gitProofKey}), or undefined for any other key. */
export function gitProofRoot(key: string): Digest | undefined {
  const hex = fanoutKeyHex('gitproof', key);
  return hex === undefined ? undefined : (`sha256:${hex}` as Digest);
}

/** Whether entry `i` is proven (`bits`: the decoded `proven`). */
export function isProven(proof: GitIndexProof, bits: Buffer, i: number): boolean {
  return i < proof.entries && (bits[i >> 3] & (1 << (i & 7))) !== 0;
}

/** Stores the proof of `root` (idempotent: an existing record is kept). @throws as ObjectStore.put */
export async function putGitProof(store: ObjectStore, root: Digest, proof: GitIndexProof): Promise<void> {
  await store.put(gitProofKey(root), Buffer.from(JSON.stringify(proof)));
}

/**
 * The proof of `root`, or undefined when none was stored.
 * @throws E_FORMAT for a record that is not a v1 proof; as ObjectStore.get otherwise
 */
export async function getGitProof(store: ObjectStore, root: Digest): Promise<GitIndexProof | undefined> {
  let raw: Buffer;
  try {
    raw = await store.get(gitProofKey(root));
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_OBJECT_NOT_FOUND') return undefined;
    throw err;
  }
  let p: GitIndexProof;
  try {
    p = JSON.parse(raw.toString('utf8')) as GitIndexProof;
  } catch (err) {
    throw new AwcError('E_FORMAT', `git proof of ${root} is not JSON`, { cause: err });
  }
  if (p?.v !== 1 || (p.algo !== 'sha1' && p.algo !== 'sha256') || typeof p.proven !== 'string' || !Number.isInteger(p.entries)) {
    throw new AwcError('E_FORMAT', `git proof of ${root} is not a v1 record`);
  }
  return p;
}
