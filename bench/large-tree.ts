import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { duBytes, fmtBytes, fmtMs, now, runTimed, treeStats } from './util.js';

/**
 * Tree (c), the large tree (issue 26, "fast at the users' size"): a still copy (`cp -a`) of a
 * big real directory, by default this machine's `/usr` (on the Debian 12 bench machine with
 * Node.js, Python and CUDA: 5.3 GiB on disk, about 117 000 files, 15 000 directories, 5 500
 * symlinks). Made once under the bench cache directory (`<cache>/large-tree`; another source
 * `--large-source DIR` gets `<cache>/large-tree-<12 hex of sha256(DIR)>`) and reused while its
 * marker (`<dir>.ready.json`, beside it, never inside) exists; remove both to make it again.
 * A copy, not the source itself: `/usr` changes under package installs, and an import or a
 * native read must see the same tree as the workspace. On a fresh machine nothing is needed
 * beyond a `/usr` of that size (or any directory of ≥ 5 GiB on disk and ≥ 100 000 files given
 * with `--large-source`) and free disk for one copy plus the AWC store:
 * `node dist/bench/run.js --trees c` makes it on first use (a few minutes).
 * It has no git repository and no npm lockfile: the worktree baseline and the build/test
 * figures are skipped on it.
 */

/** The least a large-tree source must hold (unless --quick): 5 GiB on disk (`du -sx`), and files. */
export const LARGE_TREE_MIN = { diskBytes: 5 * 2 ** 30, files: 100_000 };

/** What the marker records about the copy (and the source when it was made). */
export interface LargeTree {
  /** The copy (the tree under test). */
  dir: string;
  /** What it was copied from. */
  source: string;
  /** Regular files (hardlinked inodes once) and their logical bytes. */
  files: number;
  bytes: number;
  /** Allocated bytes on disk (`du -sx --block-size=1` of the copy). */
  diskBytes: number;
  /** How long the `cp -a` took when it was made (ms), and when (ISO date). */
  copyMs: number;
  made: string;
}

/** Where the copy of `source` lives under `cacheDir`. */
export function largeTreeDir(cacheDir: string, source: string): string {
  const src = resolve(source);
  if (src === '/usr') return join(cacheDir, 'large-tree');
  return join(cacheDir, `large-tree-${createHash('sha256').update(src).digest('hex').slice(0, 12)}`);
}

/** A large-tree source (or copy) below LARGE_TREE_MIN: the run stops with this message (no stack). */
export class LargeTreeRefused extends Error {}

/** Throws LargeTreeRefused when a tree is below LARGE_TREE_MIN (`quick` lets any size through). */
function checkSize(what: string, files: number, diskBytes: number, quick: boolean): void {
  if (quick || (files >= LARGE_TREE_MIN.files && diskBytes >= LARGE_TREE_MIN.diskBytes)) return;
  throw new LargeTreeRefused(
    `tree (c) must be the users' size: ${what} holds ${files} files and ${fmtBytes(diskBytes)} on disk, under the ` +
      `${LARGE_TREE_MIN.files} files and ${fmtBytes(LARGE_TREE_MIN.diskBytes)} the large tree needs; ` +
      `give a bigger directory with --large-source DIR (or --quick to run on a small one anyway)`,
  );
}

/**
 * Tree (c): reuses the copy when its marker exists, otherwise copies `source` (`cp -a`, into
 * `<dir>.tmp`, renamed into place when complete) and writes the marker. Refuses (throws) a
 * source or copy under LARGE_TREE_MIN unless `quick`. Idempotent.
 */
export async function ensureLargeTree(opts: {
  cacheDir: string;
  source: string;
  quick: boolean;
  log: (s: string) => void;
}): Promise<LargeTree & { built: boolean }> {
  const source = resolve(opts.source);
  const dir = largeTreeDir(opts.cacheDir, source);
  const marker = `${dir}.ready.json`;
  if (existsSync(marker) && existsSync(dir)) {
    const m = JSON.parse(readFileSync(marker, 'utf8')) as LargeTree;
    checkSize(`the copy ${dir} (of ${m.source})`, m.files, m.diskBytes, opts.quick);
    return { ...m, built: false };
  }
  if (!existsSync(source)) throw new LargeTreeRefused(`--large-source ${source} does not exist`);
  opts.log(`tree (c): measuring ${source}…`);
  const src = treeStats(source);
  checkSize(source, src.files, duBytes(source), opts.quick);
  const tmp = `${dir}.tmp`;
  rmSync(tmp, { recursive: true, force: true }); // a copy an earlier run left half made
  opts.log(`tree (c): cp -a ${source} ${dir} (${src.files} files, ${fmtBytes(src.bytes)}; once, reused by later runs)…`);
  const t0 = now();
  await runTimed('cp', ['-a', source, tmp]);
  const copyMs = now() - t0;
  renameSync(tmp, dir);
  const st = treeStats(dir);
  const m: LargeTree = { dir, source, files: st.files, bytes: st.bytes, diskBytes: duBytes(dir), copyMs, made: new Date().toISOString() };
  writeFileSync(`${marker}.tmp`, JSON.stringify(m, null, 2) + '\n');
  renameSync(`${marker}.tmp`, marker);
  opts.log(`tree (c): copied in ${fmtMs(copyMs)}: ${m.files} files, ${fmtBytes(m.bytes)} (${fmtBytes(m.diskBytes)} on disk)`);
  return { ...m, built: true };
}
