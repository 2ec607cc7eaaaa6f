import type { DirFd } from '../../core/dir-fd.js';
import { checkTarget, moveInPlace, openExportPlace, userError } from '../../host/tree/export-dir-guard.js';
import { extractTar, type ExtractTarOptions, type ExtractTarResult } from './extract-tar.js';

/** Options of {@link extractTarToDir}. */
export interface ExtractTarToDirOptions extends ExtractTarOptions {
  /** Replace a non-empty target directory (default: refuse it with E_TARGET_EXISTS). */
  overwrite?: boolean;
  /** Called once the stream is extracted, before the tree is moved in place: a throw fails the export. */
  verify?: () => void;
}

/**
 * `export --dir` of a tar stream: checks the target `dir` (missing or an empty directory, or
 * with `overwrite` any directory; no mount point at or below it), then calls `open` for the
 * stream, extracts it ({@link extractTar} (src/service/tar/extract-tar.ts)) into a new directory beside the target
 * (`.awc-export-<hex>`, 0700 until its own mode is set) and renames that onto the target
 * (src/host/tree/export-dir-guard.ts). Any failure removes the new directory, through descriptors,
 * and destroys the stream.
 * @returns what {@link extractTar} returns
 * @throws AwcError E_TARGET_EXISTS, E_TARGET_BUSY, E_SOURCE_NOT_FOUND (the parent vanished),
 *   what `open` and {@link extractTar} throw
 */
export async function extractTarToDir(
  open: () => Promise<NodeJS.ReadableStream & { destroy(err?: Error): unknown }>,
  dir: string,
  opts: ExtractTarToDirOptions = {},
): Promise<ExtractTarResult> {
  const { name, parentPath, parent, dev, tmp } = openExportPlace(dir, undefined);
  let top: DirFd | undefined;
  let source: Awaited<ReturnType<typeof open>> | undefined;
  try {
    checkTarget(parent, name, dir, opts.overwrite === true);
    top = parent.mkdirOpen(tmp, 0o700, '');
    source = await open();
    const res = await extractTar(source, top, opts);
    opts.verify?.();
    top.close();
    top = undefined;
    moveInPlace(parent, { tmp, name, shown: dir, parentPath, overwrite: opts.overwrite === true });
    return res;
  } catch (err) {
    const e = userError(err);
    source?.destroy();
    top?.close();
    try {
      parent.removeTree(tmp, { dev }); // through descriptors: what was written may be deeper than PATH_MAX
    } catch {
      // best effort: the original failure is what the caller needs
    }
    throw e;
  } finally {
    parent.close();
  }
}
