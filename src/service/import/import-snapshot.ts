import { realpath, stat } from 'node:fs/promises';
import { killPoint } from '../../core/kill-point.js';
import type * as fs from 'node:fs';
import { resolve } from 'node:path';
import type { Digest } from '../../core/digest.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import { checkName } from '../../catalog/port/names.js';
import { checkLabels, type Labels } from '../../catalog/port/labels.js';
import { withSourcePath } from '../refs/run-target.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import { importDir, type ImportDirOptions } from '../../host/tree/import-dir.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { putGitProof } from '../../store/content/git-proof-record.js';
import type { Progress } from '../../drivers/port/mount-driver.js';
import { importTar, looksLikeTar, openTarFile, tarError } from '../tar/import-tar.js';
import { readTarProjectFiles, TarCapture } from '../capture/tar-capture.js';
import type { CommitHooks } from '../refs/commit-retry.js';
import type { CaptureRecorder } from '../capture/capture-classes.js';
import type { ImportImage, ImportImageSkip } from './snapshot-image.js';
import { LoadedStatCache, StatCacheRecorder, type StatCacheMiss } from './stat-cache.js';

/** Result of an import: the new snapshot and what was stored. */
export interface ImportResult {
  id: string;
  name: string | null;
  root: Digest;
  /** The snapshot's labels (`{}` when none). */
  labels: Labels;
  files: number;
  bytes: number;
  newBytes: number;
  storedBytes: number;
  skipped: { path: string; reason: string }[];
  /** Secret files of the directory or tar left out by the secret filter (never stored), with their size in bytes. */
  secrets: { path: string; size: number }[];
  /** Files that kept changing while read, stored as last read (only with `allowChanging`; absent when none). */
  changing?: string[];
  /**
   * The snapshot's shared layer image, built, uploaded and recorded before the import returned
   * (src/service/import/snapshot-image.ts), or null (then `imageSkipped` says why). Set by
   * Awc.importSnapshot; absent from importSnapshot's own result.
   */
  image?: ImportImage | null;
  /** Why `image` is null. */
  imageSkipped?: ImportImageSkip;
  /** The new snapshot's parent (`parent`), else absent. */
  parent?: string;
  /**
   * With a stat cache (`statCacheDir`, directory imports): files taken from it unread, files
   * read, directories whose tree was taken from it unchanged (`dirs`, not encoded again;
   * absent when none), and why nothing was taken (`miss`: no cache, a corrupt one, one bound
   * to another snapshot or source; absent when it was used).
   */
  statCache?: { reused: number; read: number; dirs?: number; miss?: StatCacheMiss | 'no-parent' };
}

/** Options of {@link importSnapshot}. */
export interface ImportOptions {
  name?: string;
  message?: string;
  /** Labels of the new snapshot (catalog/labels.ts; validated before any byte is read: E_USAGE). */
  labels?: Labels;
  allowChanging?: boolean;
  onProgress?: Progress;
  onWarning?: (w: { code: string; path: string; message: string }) => void;
  /** A directory import leaves out the paths this returns true for (slash-separated, from the root; see ImportDirOptions.skip). */
  skip?: (relPath: string) => boolean;
  /** Makes the capture filter of the import (docs/explanation/capture-classes.md); none: everything is stored. */
  filter?: () => CaptureRecorder;
  /**
   * Where a directory import keeps what it proved about the root repository's `.git/index`
   * (src/store/content/git-proof-record.ts), which the overlay driver's layers use to give workspaces
   * an index git trusts (docs/explanation/git.md#the-workspaces-index). None: not computed.
   */
  gitProofStore?: ObjectStore;
  /**
   * A directory import records the directory's absolute path as the label `awc.path` (the
   * stable path of `awc run`, src/service/refs/run-target.ts) unless the labels name one; false:
   * never (an import from a temporary directory, such as a `--git` clone).
   */
  recordPath?: boolean;
  /**
   * The snapshot this import updates (a ref): the new snapshot's parent, and the snapshot whose
   * stat cache the import may take unchanged files from (`statCacheDir`). @throws E_NOT_FOUND when it is gone
   */
  parent?: string;
  /**
   * Keep a stat cache of this directory import (src/service/import/stat-cache.ts): unchanged
   * files of `parent`'s import are not read, and this import's is written after its commit.
   * Awc.importSnapshot sets it from `statCache`.
   */
  statCacheDir?: string;
  /** Ask Awc.importSnapshot for a stat cache (its host directory's `import-stats`; data only, so it crosses to a daemon). */
  statCache?: boolean;
  /** Test-only injection point before the catalog commit. */
  testHooks?: CommitHooks;
}

/**
 * Imports a directory or a tar file as a new snapshot of `namespace` (see Awc.importSnapshot):
 * content through a writer made by `makeWriter`, then one catalog row with its packs (and the
 * packs it deduplicated against, which the commit checks are still live; `attempt` is the
 * caller's retry count, for the test hook).
 * @throws E_SOURCE_NOT_FOUND, E_NAME_TAKEN, E_PATH_TRAVERSAL, E_CHANGED_DURING_READ, E_USAGE (neither a directory nor a tar)
 */
export async function importSnapshot(
  catalog: Catalog,
  namespace: string,
  makeWriter: () => ContentWriter,
  source: string,
  opts: ImportOptions = {},
  attempt = 0,
): Promise<ImportResult> {
  const src = resolve(source);
  const st = await statSource(src, source);
  checkName(opts.name, 'snapshot');
  const labels = checkLabels(withSourcePath(opts.labels, st.isDirectory() && opts.recordPath !== false ? src : undefined));
  if (opts.name !== undefined) await assertSnapshotNameFree(catalog, namespace, opts.name);
  const startedAtMs = await catalog.nowMs();
  const writer = makeWriter();
  if (!st.isDirectory() && !(st.isFile() && looksLikeTar(src))) {
    throw new AwcError('E_USAGE', `${source} is neither a directory nor a tar archive`, {
      hint: 'Pass a directory, or a .tar / .tar.gz file.',
    });
  }
  const filter = opts.filter?.();
  const parent = opts.parent === undefined ? undefined : await catalog.getSnapshot(namespace, opts.parent);
  const stats = st.isDirectory() ? await openStatCache(opts.statCacheDir, namespace, src, parent) : undefined;
  const r = st.isDirectory()
    ? await importDir(src, writer, {
        onProgress: opts.onProgress,
        onWarning: opts.onWarning,
        allowChanging: opts.allowChanging,
        skip: opts.skip,
        filter,
        gitProof: opts.gitProofStore !== undefined,
        ...stats?.hooks,
      })
    : await importTar(src, writer, {
        onProgress: opts.onProgress,
        onWarning: opts.onWarning,
        capture:
          filter &&
          new TarCapture(filter, await readTarProjectFiles(() => openTarFile(src)).catch((e: unknown) => Promise.reject(tarError(e)))),
      });
  killPoint('import.scan.after');
  const packs = await writer.flush();
  if (opts.gitProofStore && 'gitProof' in r && r.gitProof) await putGitProof(opts.gitProofStore, r.root, r.gitProof);
  await opts.testHooks?.beforeCommit?.(attempt);
  killPoint('import.commit.before');
  const snap = await catalog.createSnapshot({
    namespace,
    root: r.root,
    parentId: parent?.id ?? null,
    name: opts.name ?? null,
    message: opts.message ?? `import ${src}`,
    labels,
    fileCount: r.fileCount,
    byteCount: r.byteCount,
    packs,
    reusedPacks: writer.reusedPacks(),
    startedAtMs,
  });
  killPoint('import.commit.after');
  const statCache = stats && (await stats.finish(snap, writer.stats.files, filter?.verdictsKey?.()));
  return {
    id: snap.id,
    name: snap.name,
    root: snap.root,
    labels: snap.labels,
    files: r.fileCount,
    bytes: r.byteCount,
    newBytes: writer.stats.newBytes,
    storedBytes: writer.stats.storedBytes,
    skipped: r.skipped,
    secrets: filter?.report.secrets ?? [],
    ...changingOf(r.changing),
    ...(parent && { parent: parent.id }),
    ...(statCache && { statCache }),
  };
}

/** A directory import's stat cache: the one loaded (bound to `parent`) and the recorder of this import's. */
interface OpenStatCache {
  /** importDir's options that use and record it. */
  hooks: Pick<ImportDirOptions, 'reuse' | 'onFile' | 'reuseDir' | 'onDir' | 'recorded' | 'verdictsKey'>;
  /**
   * Saves this import's cache, bound to the committed `snap` (its checks made under the capture
   * filter's `verdicts` key); what ImportResult.statCache says.
   */
  finish(snap: { id: string; root: Digest }, read: number, verdicts: string | undefined): Promise<NonNullable<ImportResult['statCache']>>;
}

/** The stat cache of an import of directory `src` (its real path is the cache's key), or undefined without `dir`. */
async function openStatCache(
  dir: string | undefined,
  namespace: string,
  src: string,
  parent: { id: string; root: Digest } | undefined,
): Promise<OpenStatCache | undefined> {
  if (dir === undefined) return undefined;
  const key = { namespace, source: await realpath(src) };
  const loaded = parent ? await LoadedStatCache.load(dir, key, parent) : LoadedStatCache.empty('none');
  const recorder = new StatCacheRecorder(loaded);
  return {
    hooks: {
      reuse: loaded.reuse,
      onFile: recorder.onFile,
      reuseDir: loaded.reuseDir,
      onDir: recorder.onDir,
      recorded: loaded.recorded,
      verdictsKey: loaded.verdictsKey,
    },
    async finish(snap, read, verdicts) {
      recorder.verdictsKey = verdicts;
      await recorder.save(dir, key, snap); // a cache that cannot be written only makes the next import read everything
      const miss = parent ? loaded.miss : 'no-parent';
      const dirs = recorder.reusedDirs;
      return { reused: loaded.reused + recorder.unread, read, ...(dirs > 0 && { dirs }), ...(miss !== undefined && { miss }) };
    },
  };
}

/** The stat of the import's source `src` (as the caller named it: `source`). @throws E_SOURCE_NOT_FOUND */
async function statSource(src: string, source: string): Promise<fs.Stats> {
  try {
    return await stat(src);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new AwcError('E_SOURCE_NOT_FOUND', `no such file or directory: ${source}`);
    throw toAwcError(err);
  }
}

async function assertSnapshotNameFree(catalog: Catalog, namespace: string, name: string): Promise<void> {
  const existing = await catalog.listSnapshots(namespace);
  if (existing.some((s) => s.name === name)) throw new AwcError('E_NAME_TAKEN', `a snapshot named ${JSON.stringify(name)} already exists`);
}

/** `{changing}` when some file kept changing while read, else nothing (results carry the key only when it says something). */
export function changingOf(changing: string[] | undefined): { changing?: string[] } {
  return changing && changing.length > 0 ? { changing } : {};
}
