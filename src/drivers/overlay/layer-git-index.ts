import * as fs from 'node:fs';
import { join } from 'node:path';
import type { Digest } from '../../core/digest.js';
import type { Entry, FileEntry } from '../../core/tree.js';
import {
  gitBlobId,
  gitIndexUnrewritable,
  parseGitIndex,
  rewriteGitIndexStat,
  type GitIndex,
  type GitStatData,
} from '../../core/git-index.js';
import { getGitProof, isProven, type GitIndexProof } from '../../store/content/git-proof-record.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { futimesNs } from '../../host/sys/utimens.js';
import { AwcError } from '../../core/errors.js';
import { hasEscape, nameToBytes } from '../../core/raw-name.js';
import type { ErofsFileData, ErofsInodeStat } from './erofs/tree.js';
import type { DirFd } from '../../core/dir-fd.js';

/** What a layer build needs to give its workspaces a trusted index: the root's proof and a way to read a file of the snapshot. */
export interface LayerGitIndexSource {
  /** The proof stored for the root at import (src/store/content/git-proof-record.ts), or undefined. */
  proof(root: Digest): Promise<GitIndexProof | undefined>;
  /** The whole content of a file of the snapshot (bytes). */
  read(file: FileEntry): Promise<Buffer>;
}

/**
 * The git source of layers read through `reader` (a namespace's ContentReader) with proofs
 * from `store` (a record that is not a v1 proof counts as none).
 * @throws from `proof`/`read`: what the store throws (E_OBJECT_NOT_FOUND, E_INTEGRITY, …)
 */
export function layerGitSource(reader: ContentReader, store: ObjectStore): LayerGitIndexSource {
  return {
    // a record that does not parse proves nothing: the workspace shows the snapshot's own index
    proof: (root) =>
      getGitProof(store, root).catch((err: unknown) => {
        if (err instanceof AwcError && err.code === 'E_FORMAT') return undefined;
        throw err;
      }),
    read: async (file) => {
      const parts: Buffer[] = [];
      for await (const b of reader.readFile(file)) parts.push(Buffer.from(b));
      return Buffer.concat(parts);
    },
  };
}

/** What {@link writeLayerGitIndex} did: entries in the index and entries whose stat data it set. */
export interface LayerGitIndexResult {
  entries: number;
  rewritten: number;
}

/** Entries of the snapshot by slash-separated path (regular files, symlinks, hardlinks), collected while the layer is built. */
export type LayerPaths = Map<string, Entry>;

/** Decides for entry `i` of `ix`: the snapshot entry it describes when its content and mode are proven equal, else undefined. */
function provenEntry(ix: GitIndex, i: number, paths: LayerPaths, proof: GitIndexProof, bits: Buffer): Entry | undefined {
  const e = ix.entries[i];
  if (e.stage !== 0 || e.assumeValid || e.notCheckedOut) return undefined;
  let se = paths.get(e.path);
  if (se?.type === 'hardlink') se = paths.get(se.target);
  if (!se) return undefined;
  if (e.mode === 0o120000) {
    return se.type === 'symlink' && gitBlobId(proof.algo, nameToBytes(se.target)) === e.oid ? se : undefined;
  }
  if (e.mode !== 0o100644 && e.mode !== 0o100755) return undefined;
  if (se.type !== 'file' || !isProven(proof, bits, i)) return undefined;
  return ((se.mode & 0o100) !== 0) === (e.mode === 0o100755) ? se : undefined;
}

/**
 * Gives a layer under construction (`tree`, open inside its build directory `buildDir`; placeholders all
 * written, directory times not yet set) the index its workspaces trust (docs/explanation/git.md#the-workspaces-index):
 * reads the snapshot's `.git/index`, and for every entry whose content the import proved
 * equal to its object id (a symlink: its target's blob id, computed here) and whose mode
 * matches, sets the entry's stat data to what a workspace shows for that path, the lstat of
 * its placeholder in the layer (overlayfs reports a file that is not copied up with the
 * lower's ino, ctime, mtime, uid, gid and size; dev is the mount's own and is recorded as 0,
 * which git compares only when built with USE_STDEV). An entry whose mtime second is not
 * before `nowNs`'s is left as it is (git would treat it as racy and re-read it anyway), so the
 * index file, dated `nowNs`, is later than every entry it vouches for. The result replaces the
 * placeholder of `.git/index` with a real file (the snapshot's mode and owner, no xattrs).
 * Nothing happens (undefined) without a proof for exactly this index, for a split index or
 * an index that does not parse; the workspace then shows the snapshot's own bytes.
 * Nested repositories and submodules are not handled. Cost: one read of the index, one lstat
 * per proven entry.
 * @throws as the file system calls (the caller maps them)
 */
export async function writeLayerGitIndex(
  tree: DirFd,
  buildDir: string,
  root: Digest,
  paths: LayerPaths,
  git: LayerGitIndexSource,
  owner: { uid: number; gid: number } | undefined,
  nowNs: bigint,
): Promise<LayerGitIndexResult | undefined> {
  const p = await provenIndex(root, paths, git);
  if (!p) return undefined;
  const { ie, bytes, ix, proof, bits } = p;
  const nowSec = nowNs / 1_000_000_000n;
  const stats = new Map<number, GitStatData>();
  for (let i = 0; i < ix.entries.length; i++) {
    if (!provenEntry(ix, i, paths, proof, bits)) continue;
    const st = lstatInTree(tree, ix.entries[i].path);
    if (st.mtimeNs / 1_000_000_000n >= nowSec) continue;
    stats.set(i, statData(st));
  }
  const out = rewriteGitIndexStat(bytes, ix, proof.algo, stats);
  const target = tree.path('.git/index');
  // written beside the tree (the layer's build directory holds only it and meta.json), so no snapshot name can collide
  const tmp = join(buildDir, 'git-index.tmp');
  const fd = fs.openSync(tmp, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW, 0o600);
  try {
    fs.writeSync(fd, out);
    fs.fchownSync(fd, owner?.uid ?? ie.uid, owner?.gid ?? ie.gid);
    fs.fchmodSync(fd, ie.mode);
    futimesNs(fd, nowNs.toString());
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, target);
  return { entries: ix.entries.length, rewritten: stats.size };
}

/** The snapshot's `.git/index`, parsed, and the proof that lets a layer rewrite it. */
interface ProvenIndex {
  ie: FileEntry;
  bytes: Buffer;
  ix: GitIndex;
  proof: GitIndexProof;
  bits: Buffer;
}

/**
 * The snapshot's `.git/index` when a layer may rewrite it: a regular file, a proof stored for
 * exactly these bytes, an index that parses, is not split and has the proof's entry count.
 * @throws what `git` throws
 */
async function provenIndex(root: Digest, paths: LayerPaths, git: LayerGitIndexSource): Promise<ProvenIndex | undefined> {
  const ie = paths.get('.git/index');
  if (ie?.type !== 'file') return undefined;
  const proof = await git.proof(root);
  if (!proof || proof.index !== ie.digest) return undefined;
  const bytes = await git.read(ie);
  let ix: GitIndex;
  try {
    ix = parseGitIndex(bytes, proof.algo);
  } catch {
    return undefined;
  }
  if (gitIndexUnrewritable(ix) || ix.entries.length !== proof.entries) return undefined;
  return { ie, bytes, ix, proof, bits: Buffer.from(proof.proven, 'base64') };
}

/**
 * The `.git/index` of a layer image (src/drivers/overlay/erofs/): a data file of the image, not a
 * placeholder. `data` gives the bytes once the image is laid out; `mtimeNs` is the file's mtime.
 */
export interface ImageGitIndex {
  mtimeNs: bigint;
  data: ErofsFileData;
  entries: number;
  /** Entries whose stat data are set to the image's. */
  rewritten: number;
}

/**
 * What {@link writeLayerGitIndex} does for a layer directory, for a layer image, without a
 * layer on disk: every proven entry (as there) gets the stat data the mounted image will report
 * for its path, which the writer knows once it has laid the image out (overlayfs reports a file
 * it has not copied up with the lower's st_ino, here the EROFS node id, and ctime equal to
 * mtime: see ErofsInodeStat; dev recorded as 0, uid, gid and size as the entry's). The index
 * is dated one second after the latest mtime it vouches for (its own mtime when later), so git
 * finds no entry racy; the date depends on the snapshot only, so the same tree gives the same
 * image. Undefined when {@link writeLayerGitIndex} would do nothing, and when another name is a
 * hardlink of `.git/index` (it would show the rewritten bytes too). Cost: one read of the
 * index; the data, O(index entries).
 * @throws what `git` throws
 */
export async function imageGitIndex(root: Digest, paths: LayerPaths, git: LayerGitIndexSource): Promise<ImageGitIndex | undefined> {
  for (const e of paths.values()) if (e.type === 'hardlink' && e.target === '.git/index') return undefined;
  const p = await provenIndex(root, paths, git);
  if (!p) return undefined;
  const { ie, bytes, ix, proof, bits } = p;
  const proven: number[] = [];
  let latest = BigInt(ie.mtimeNs);
  for (let i = 0; i < ix.entries.length; i++) {
    const se = provenEntry(ix, i, paths, proof, bits);
    if (!se || se.type === 'hardlink') continue;
    proven.push(i);
    const after = (floorSec(BigInt(se.mtimeNs)) + 1n) * 1_000_000_000n;
    if (after > latest) latest = after;
  }
  const data: ErofsFileData = (statOf) => {
    const stats = new Map<number, GitStatData>();
    for (const i of proven) {
      const rel = ix.entries[i].path;
      const st = statOf(hasEscape(rel) ? nameToBytes(rel) : rel);
      if (st) stats.set(i, imageStatData(st));
    }
    return rewriteGitIndexStat(bytes, ix, proof.algo, stats);
  };
  return { mtimeNs: latest, data, entries: ix.entries.length, rewritten: proven.length };
}

/** Seconds of a time in ns, rounded down (as the kernel's timespec: a time before 1970 has a non-negative ns part). */
function floorSec(ns: bigint): bigint {
  return ns >= 0n ? ns / 1_000_000_000n : -((-ns + 999_999_999n) / 1_000_000_000n);
}

/** Git's `fill_stat_data` of what an image reports for an inode: ctime is its mtime, ino its node id; 32-bit truncation as {@link statData}. */
function imageStatData(st: ErofsInodeStat): GitStatData {
  const sec = Number(BigInt.asUintN(32, st.mtimeSec));
  return {
    ctimeSec: sec,
    ctimeNsec: st.mtimeNsec,
    mtimeSec: sec,
    mtimeNsec: st.mtimeNsec,
    dev: 0,
    ino: st.nid >>> 0,
    uid: st.uid >>> 0,
    gid: st.gid >>> 0,
    size: st.size >>> 0,
  };
}

/**
 * lstat (bigint) of `rel` (a slash path of the snapshot, any length) in the layer's tree,
 * through its directories one at a time, never following a symlink.
 * @throws AwcError E_PATH_TRAVERSAL when a directory on the way is not one of the tree; the lstat error
 */
function lstatInTree(tree: DirFd, rel: string): fs.BigIntStats {
  const slash = rel.lastIndexOf('/');
  const parent = tree.openRel(slash < 0 ? '' : rel.slice(0, slash));
  try {
    return fs.lstatSync(parent.path(rel.slice(slash + 1)), { bigint: true });
  } finally {
    parent.close();
  }
}

const U32 = 0xffffffffn;

/** Git's `fill_stat_data` of an lstat: seconds, nanoseconds and ids truncated to 32 bits; dev recorded as 0 (see writeLayerGitIndex). */
function statData(st: fs.BigIntStats): GitStatData {
  const sec = (ns: bigint): number => Number((ns / 1_000_000_000n) & U32);
  const nsec = (ns: bigint): number => Number(ns % 1_000_000_000n);
  return {
    ctimeSec: sec(st.ctimeNs),
    ctimeNsec: nsec(st.ctimeNs),
    mtimeSec: sec(st.mtimeNs),
    mtimeNsec: nsec(st.mtimeNs),
    dev: 0,
    ino: Number(st.ino & U32),
    uid: Number(st.uid & U32),
    gid: Number(st.gid & U32),
    size: Number(st.size & U32),
  };
}
