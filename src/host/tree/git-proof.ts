import { closeSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { sha256, type Digest } from '../../core/digest.js';
import type { DirFd } from '../../core/dir-fd.js';
import { gitHashLen, parseGitIndex, type GitHashAlgo } from '../../core/git-index.js';
import { readSmallText } from '../../core/small-file.js';
import type { AlsoHash } from '../../store/content/content-writer.js';
import type { GitIndexProof } from '../../store/content/git-proof-record.js';

/**
 * Collects a GitIndexProof (src/store/content/git-proof-record.ts) during a directory import: opened on the import's root, it
 * reads `.git/config` (object format) and `.git/index` (never through a symlink), and hands
 * the importer, for each path the index tracks as a regular file at stage 0, an extra hash
 * (git's blob id, computed in the same read pass as the content's chunks); the importer
 * reports each result with {@link record}. Nested repositories and submodules are not looked
 * at (their entries are gitlinks in the top repository's index).
 */
export class GitProofCollector {
  private readonly bits: Buffer;
  private indexDigest: Digest | undefined;

  private constructor(
    private readonly algo: GitHashAlgo,
    private readonly indexBytesDigest: Digest,
    private readonly count: number,
    /** path → entry numbers and object ids to compare with. */
    private readonly wanted: Map<string, { i: number; oid: string }>,
  ) {
    this.bits = Buffer.alloc((count + 7) >> 3);
  }

  /**
   * A collector for the repository whose `.git` directory is in `root`, or undefined when
   * there is none, its index is missing, unreadable or in a form this does not rewrite.
   */
  static open(root: DirFd): GitProofCollector | undefined {
    let found: ReturnType<DirFd['open']>;
    try {
      found = root.open('.git', undefined);
    } catch {
      return undefined; // the walk meets (and reports) the same problem
    }
    if (!found) return undefined;
    if (found.type !== 'dir') {
      if (found.type === 'file') closeSync(found.fd);
      return undefined;
    }
    try {
      const config = readSmallText(found.dir, 'config') ?? '';
      const algo: GitHashAlgo = /^\s*objectformat\s*=\s*sha256\s*$/im.test(config) ? 'sha256' : 'sha1';
      const f = found.dir.open('index', undefined);
      if (f?.type === 'dir') f.dir.close();
      if (f?.type !== 'file') return undefined;
      let bytes: Buffer;
      try {
        bytes = readFileSync(f.fd);
      } finally {
        closeSync(f.fd);
      }
      const ix = parseGitIndex(bytes, algo);
      const wanted = new Map<string, { i: number; oid: string }>();
      ix.entries.forEach((e, i) => {
        if (e.stage === 0 && !e.notCheckedOut && (e.mode === 0o100644 || e.mode === 0o100755)) wanted.set(e.path, { i, oid: e.oid });
      });
      return new GitProofCollector(algo, sha256(bytes), ix.entries.length, wanted);
    } catch {
      return undefined; // not an index this rewrites: the workspace's git re-reads, as without a proof
    } finally {
      found.dir.close();
    }
  }

  /** The extra hash for the file at `rel` (slash-separated from the root), when the index tracks it. */
  also(rel: string): AlsoHash | undefined {
    if (!this.wanted.has(rel)) return undefined;
    const algo = this.algo;
    // gitAlgo: a hash worker computes the same blob id (src/store/content/hash-pool.ts)
    return Object.assign((size: number) => createHash(algo).update(`blob ${size}\0`), { gitAlgo: algo });
  }

  /** Whether {@link record} must hear of the file at `rel` (the index tracks it, or it is `.git/index`): cheaper than {@link also}. */
  needs(rel: string): boolean {
    return rel === '.git/index' || this.wanted.has(rel);
  }

  /** Records the file at `rel` as stored: its content digest and the extra hash (hex) {@link also} asked for. */
  record(rel: string, digest: Digest, hex: string | undefined): void {
    if (rel === '.git/index') this.indexDigest = digest;
    if (hex === undefined) return;
    const w = this.wanted.get(rel);
    if (w && hex.length === 2 * gitHashLen(this.algo) && hex === w.oid) this.bits[w.i >> 3] |= 1 << (w.i & 7);
  }

  /** The proof, when the stored `.git/index` is the one read at the start (else git ran meanwhile: nothing is proven). */
  finish(): GitIndexProof | undefined {
    if (this.indexDigest !== this.indexBytesDigest) return undefined;
    return { v: 1, algo: this.algo, index: this.indexBytesDigest, entries: this.count, proven: this.bits.toString('base64') };
  }
}
