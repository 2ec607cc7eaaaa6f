import type { Catalog, SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { importSnapshot, type ImportOptions, type ImportResult } from '../import/import-snapshot.js';
import { retryCondemned } from '../refs/commit-retry.js';
import { CaptureRecorder } from '../capture/capture-classes.js';
import type { GitImportOptions, GitImportResult } from '../git/git-import.js';
import type { CheckpointGitOptions, GitExportOptions, GitExportResult } from '../git/git-export.js';
import type { ResolvedRef } from '../refs/resolve-ref.js';

/**
 * The service's imports and its exports to git (`Awc` extends it; its file stays small):
 * what moves a tree in (a directory, a tar file, a git repository) or a snapshot out as a
 * git commit. `CP` is the checkpoint result (awc.ts's CheckpointResult).
 */
export abstract class AwcTransfer<CP> {
  abstract readonly catalog: Catalog;
  abstract readonly store: ObjectStore;
  abstract readonly paths: { hostDir: string };
  abstract get namespace(): string;
  abstract reader(): ContentReader;
  protected abstract writer(): ContentWriter;
  abstract resolve(ref: string): Promise<ResolvedRef>;
  abstract getSnapshot(ref: string): Promise<SnapshotRow>;
  abstract getWorkspace(ref: string): Promise<WorkspaceRow>;
  abstract checkpoint(wsRef: string, opts: { message?: string; allowChanging?: boolean }): Promise<CP>;

  /**
   * Imports a directory or a tar file as a new snapshot. `allowChanging`: a file of a
   * directory that keeps changing while read is stored as last read and listed in `changing`.
   * @throws E_SOURCE_NOT_FOUND, E_NAME_TAKEN, E_PATH_TRAVERSAL, E_CHANGED_DURING_READ
   */
  importSnapshot(source: string, opts: ImportOptions = {}): Promise<ImportResult> {
    const filter = () => new CaptureRecorder(this.reader(), { dropScratch: false });
    return retryCondemned((n) =>
      importSnapshot(this.catalog, this.namespace, () => this.writer(), source, { gitProofStore: this.store, ...opts, filter }, n),
    );
  }

  /** `awc snapshot import --git` (see importGit). @throws E_GIT_NOT_A_REPO, E_GIT_BAD_REV, E_GIT_FAILED, and as importSnapshot */
  async importGit(repo: string, opts: GitImportOptions = {}): Promise<GitImportResult> {
    return (await import('../git/git-import.js')).importGit(this, repo, opts);
  }

  /**
   * `awc export <ref> --git <repo> --branch B` (see exportGit): the snapshot's changes against its base as one commit.
   * @throws E_GIT_NO_BASE, E_GIT_BRANCH_EXISTS, E_GIT_BRANCH_CHECKED_OUT, E_GIT_NOT_A_REPO, E_GIT_FAILED, E_USAGE, E_NOT_FOUND
   */
  async exportGit(ref: string, opts: GitExportOptions): Promise<GitExportResult> {
    return (await import('../git/git-export.js')).exportGit(this, ref, opts);
  }

  /** `awc checkpoint --git-branch B` (see checkpointGit): a checkpoint, then exportGit of the new head. @throws as checkpoint and exportGit */
  async checkpointGit(wsRef: string, opts: CheckpointGitOptions): Promise<{ checkpoint: CP; git: GitExportResult }> {
    return (await import('../git/git-export.js')).checkpointGit(this, wsRef, opts);
  }
}
