import { resolve } from 'node:path';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { SnapshotRow } from '../../catalog/port/catalog.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { exportDir } from '../../host/tree/export-dir.js';
import type { Progress } from '../../drivers/port/mount-driver.js';
import { checkTarTarget, exportTar } from '../tar/export-tar.js';
import type { ResolvedRef } from '../refs/resolve-ref.js';

/** What exportRef needs of the service (implemented by `Awc`). */
export interface ExportContext {
  readonly config: { home: string };
  resolve(ref: string): Promise<ResolvedRef>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  reader(): ContentReader;
}

/**
 * Exports a snapshot (or a workspace's head) as a tar file or into a directory (written
 * beside it under a temporary name, in place only when complete; `overwrite` replaces a
 * non-empty directory). Into a directory, setuid/setgid bits and device nodes are left
 * out and listed in `leftOut` unless `keepPrivileges`; a tar keeps them.
 * @throws E_NOT_FOUND, E_TARGET_EXISTS (a tar file that exists, a directory not empty), E_PATH_TRAVERSAL, E_NO_SPACE…,
 *   E_USAGE (directory is, holds or is inside the home), E_TARGET_BUSY (a mount point at or below it)
 */
export async function exportRef(
  svc: ExportContext,
  ref: string,
  opts: { tar?: string; dir?: string; overwrite?: boolean; keepPrivileges?: boolean; onProgress?: Progress },
): Promise<{ id: string; root: Digest; files: number; bytes: number; leftOut?: { path: string; reason: string }[] }> {
  if ((opts.tar === undefined) === (opts.dir === undefined))
    throw new AwcError('E_USAGE', 'export needs exactly one of --tar FILE or --dir DIR');
  const r = await svc.resolve(ref);
  const snap = r.kind === 'snapshot' ? r.snapshot : await svc.getSnapshot(r.workspace.headSnapshotId);
  if (opts.tar !== undefined && opts.tar !== '-') await checkTarTarget(resolve(opts.tar));
  const res =
    opts.tar !== undefined
      ? await exportTar(svc.reader(), snap.root, opts.tar === '-' ? process.stdout : resolve(opts.tar))
      : await exportDir(svc.reader(), snap.root, resolve(opts.dir!), {
          onProgress: opts.onProgress,
          overwrite: opts.overwrite,
          unprivileged: !opts.keepPrivileges,
          home: svc.config.home,
        });
  return {
    id: snap.id,
    root: snap.root,
    files: res.files,
    bytes: res.bytes,
    ...('leftOut' in res ? { leftOut: (res as { leftOut: { path: string; reason: string }[] }).leftOut } : {}),
  };
}
