import { createHash } from 'node:crypto';
import type { Digest } from '../../core/digest.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { parseGitIndex, type GitHashAlgo } from '../../core/git-index.js';
import { SMALL_FILE_BYTES } from '../../core/small-file.js';
import type { Entry, FileEntry } from '../../core/tree.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { getGitProof, gitProofRoot, isProven, type GitIndexProof } from '../../store/content/git-proof-record.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import type { FsckProblem, FsckWarning } from './fsck-report.js';

/** A snapshot root the check of its proof can read: the snapshots holding it and a reader of their namespace. */
export interface ProofRoot {
  snapshots: string[];
  reader: ContentReader;
}

/**
 * Checks the git-index proof records (`gitproof/…`, src/store/content/git-proof-record.ts) of the
 * object store. Every record of a live root must parse as a v1 record and be its own
 * canonical encoding (a changed byte cannot hide in whitespace or key order). With `readData`
 * it is recomputed from the snapshot's contents, as the import computed it
 * (src/host/tree/git-proof.ts): `index` is the digest of the snapshot's `.git/index`, `entries`
 * its entry count, `algo` its repository's object format, and every proven entry names a
 * regular file whose content has the entry's object id (else `gitproof-invalid`). An entry
 * that could be proven but is not is a `gitproof-weaker` warning (the workspace's git
 * re-reads that file: slower, never wrong). Records of roots no snapshot holds are counted.
 * @returns records checked and records of no live root.
 * @throws what the store throws for reasons other than a missing or corrupt object
 */
export async function checkGitProofs(
  store: ObjectStore,
  roots: ReadonlyMap<Digest, ProofRoot>,
  readData: boolean,
  problems: FsckProblem[],
  warnings: FsckWarning[],
): Promise<{ checked: number; unreferenced: number }> {
  let checked = 0;
  let unreferenced = 0;
  for await (const { key } of store.list('gitproof/')) {
    const root = gitProofRoot(key);
    const live = root ? roots.get(root) : undefined;
    if (!live || !root) {
      unreferenced++;
      continue;
    }
    checked++;
    const bad = (code: FsckProblem['code'], message: string): void =>
      void problems.push({ kind: 'gitproof-invalid', code, message, key, snapshots: [...live.snapshots].sort() });
    let proof: GitIndexProof | undefined;
    try {
      proof = await getGitProof(store, root);
      if (!proof) continue; // removed meanwhile (gc of its snapshot)
      const raw = (await store.get(key)).toString('utf8');
      const canonical = JSON.stringify({ v: proof.v, algo: proof.algo, index: proof.index, entries: proof.entries, proven: proof.proven });
      const bits = Buffer.from(proof.proven, 'base64');
      const spare = proof.entries % 8 === 0 ? 0 : (bits[bits.length - 1] ?? 0) >> (proof.entries % 8); // bits past the last entry
      // entries: a git index counts them in a u32 (and `>> 3` would wrap past 2^31)
      const long = proof.entries >= 0 && proof.entries <= 0xffffffff ? Math.ceil(proof.entries / 8) : -1;
      if (raw !== canonical || bits.toString('base64') !== proof.proven || bits.length !== long || spare !== 0)
        throw new AwcError('E_FORMAT', `git proof ${key} is not in its canonical form`);
    } catch (err) {
      const e = toAwcError(err);
      if (e.code === 'E_OBJECT_NOT_FOUND') continue;
      if (e.code !== 'E_FORMAT') throw e;
      bad('E_FORMAT', e.message);
      continue;
    }
    if (!readData) continue;
    try {
      const found = await recompute(live.reader, root, proof);
      if (found.wrong.length > 0)
        bad('E_INTEGRITY', `git proof ${key} claims ${found.wrong.length} entr(ies) the snapshot does not show, e.g. ${found.wrong[0]}`);
      else if (found.missed > 0)
        warnings.push({
          kind: 'gitproof-weaker',
          message: `git proof ${key} leaves ${found.missed} provable entr(ies) unproven (an import that did not hash them, e.g. further names of a hardlinked file, or a changed byte; git re-reads them in a workspace, nothing is wrong)`,
          key,
          snapshots: [...live.snapshots].sort(),
        });
    } catch (err) {
      const e = toAwcError(err);
      if (e.code !== 'E_FORMAT' && e.code !== 'E_INTEGRITY' && e.code !== 'E_OBJECT_NOT_FOUND') throw e;
      bad(e.code, `git proof ${key}: ${e.message}`);
    }
  }
  return { checked, unreferenced };
}

/** Finds the entry at slash-separated `path` from the root tree `tree` (no hardlink is followed). */
async function lookup(reader: ContentReader, tree: Digest, path: string): Promise<Entry | undefined> {
  const parts = path.split('/');
  let at = tree;
  for (let i = 0; i < parts.length; i++) {
    const e = (await reader.readTree(at)).entries.find((x) => x.name === parts[i]);
    if (!e || i === parts.length - 1) return e;
    if (e.type !== 'dir') return undefined;
    at = e.tree;
  }
  return undefined;
}

/** The regular file at `path`, through one hardlink entry to the file's first name. */
async function fileAt(reader: ContentReader, tree: Digest, path: string): Promise<FileEntry | undefined> {
  let e = await lookup(reader, tree, path);
  if (e?.type === 'hardlink') e = await lookup(reader, tree, e.target);
  return e?.type === 'file' ? e : undefined;
}

/** Reads a file's content whole, or its first `max` bytes. */
async function readAll(reader: ContentReader, f: FileEntry, max = Infinity): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const b of reader.readFile(f)) {
    parts.push(b);
    n += b.length;
    if (n >= max) break;
  }
  const all = Buffer.concat(parts);
  return all.length > max ? all.subarray(0, max) : all;
}

/**
 * Recomputes what `proof` says about the snapshot at `root`.
 * @returns the proven entries that are not true (paths) and how many true ones are left unproven.
 * @throws E_INTEGRITY when the record is not about this snapshot's `.git/index`; as the reader
 */
async function recompute(reader: ContentReader, root: Digest, proof: GitIndexProof): Promise<{ wrong: string[]; missed: number }> {
  const tree = (await reader.readRoot(root)).tree;
  const indexFile = await fileAt(reader, tree, '.git/index');
  if (!indexFile || indexFile.digest !== proof.index) throw new AwcError('E_INTEGRITY', "it is not about the snapshot's .git/index");
  const config = await fileAt(reader, tree, '.git/config');
  // as the import reads it (src/host/tree/git-proof.ts): its first SMALL_FILE_BYTES (a huge config cannot exhaust memory either)
  const text = config ? (await readAll(reader, config, SMALL_FILE_BYTES)).toString('utf8') : '';
  const algo: GitHashAlgo = /^\s*objectformat\s*=\s*sha256\s*$/im.test(text) ? 'sha256' : 'sha1';
  if (algo !== proof.algo) throw new AwcError('E_INTEGRITY', `it says ${proof.algo}, the repository uses ${algo}`);
  const ix = parseGitIndex(await readAll(reader, indexFile), algo);
  if (ix.entries.length !== proof.entries)
    throw new AwcError('E_INTEGRITY', `it counts ${proof.entries} entries, the index has ${ix.entries.length}`);
  const bits = Buffer.from(proof.proven, 'base64');
  const wrong: string[] = [];
  let missed = 0;
  for (let i = 0; i < ix.entries.length; i++) {
    const e = ix.entries[i]!;
    const proven = isProven(proof, bits, i);
    const wanted = e.stage === 0 && !e.notCheckedOut && (e.mode === 0o100644 || e.mode === 0o100755);
    if (!wanted) {
      if (proven) wrong.push(e.path);
      continue;
    }
    const f = await fileAt(reader, tree, e.path);
    let ok = false;
    if (f) {
      const h = createHash(algo).update(`blob ${f.size}\0`);
      for await (const b of reader.readFile(f)) h.update(b);
      ok = h.digest('hex') === e.oid;
    }
    if (proven && !ok) wrong.push(e.path);
    else if (!proven && ok) missed++;
  }
  return { wrong, missed };
}
