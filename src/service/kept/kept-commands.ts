import { resolve } from 'node:path';
import { listKept, removeKept, restoreKept, type KeptSet } from './kept-files.js';

/**
 * `awc kept ls|restore|rm` (docs/reference/kept.md): the files a remove or a discard kept
 * on this host (see Keeper), as JSON-able results so that a daemon can serve them.
 */
export class KeptFiles {
  constructor(private readonly paths: { workspaces: string }) {}

  /** The kept sets, oldest first; `ref` limits them to one workspace (id or name) or one set id. */
  ls(ref?: string): { sets: KeptSet[] } {
    return { sets: listKept(this.paths, ref) };
  }

  /**
   * Copies a kept set (by set id, or a workspace's newest) into `dir` (see restoreKept).
   * @throws E_NOT_FOUND, E_SOURCE_NOT_FOUND, E_TARGET_EXISTS, E_PATH_TRAVERSAL
   */
  restore(ref: string, dir: string): { id: string; restored: string[] } {
    return restoreKept(this.paths, ref, resolve(dir));
  }

  /** Deletes a kept set (by set id, or a workspace's newest). @throws E_NOT_FOUND */
  rm(ref: string): { id: string; files: number } {
    return removeKept(this.paths, ref);
  }
}
