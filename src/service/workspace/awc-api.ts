import type { ListFilter, SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { LabelPatch, Labels } from '../../catalog/port/labels.js';
import type { MountOptions, MountResult, UnmountResult } from '../../drivers/port/mount-driver.js';
import type { DriverReport } from '../../drivers/detect/detect-driver.js';
import type { ImportOptions, ImportResult } from '../import/import-snapshot.js';
import type { GitImportOptions, GitImportResult } from '../git/git-import.js';
import type { CheckpointGitOptions, GitExportOptions, GitExportResult } from '../git/git-export.js';
import type { DiffOptions, DiffResult } from '../diff/diff-refs.js';
import type { exportRef } from '../export/export-ref.js';
import type { ResolvedRef } from '../refs/resolve-ref.js';
import type { RemoveResult, UnmountFlags } from './remove.js';
import type { KeptFields } from './live-state.js';
import type { LeaseGuard } from './lease-guard.js';
import type { Digest } from '../../core/digest.js';
import type { CaptureFields } from '../capture/capture-classes.js';

/**
 * Result of a checkpoint. `changed` is false when the workspace equals its head (no snapshot made).
 * `secrets`, `dropped`, `classes`: what the capture filter left out and the files and bytes per class (capture-classes.ts).
 */
export interface CheckpointResult extends CaptureFields {
  id: string;
  root: Digest;
  changed: boolean;
  parent: string;
  files: number;
  bytes: number;
  filesRead: number;
  newBytes: number;
  /** Entries the snapshot cannot hold (sockets), left out with this reason. */
  skipped: { path: string; reason: string }[];
  /** Files that kept changing while read, stored as last read (only with `allowChanging`; absent when none). */
  changing?: string[];
}

/** The options of `export` (a tar file or a directory). */
export type ExportOptions = Parameters<typeof exportRef>[2];
/** What `export` returns. */
export type ExportResult = Awaited<ReturnType<typeof exportRef>>;

/** The import options every AwcApi takes: a function (`skip`, `filter`) cannot cross to the daemon, nor test hooks. */
export type ApiImportOptions = Omit<ImportOptions, 'skip' | 'filter' | 'testHooks'>;

/**
 * The workspace service as the CLI's commands and the MCP server use it, implemented twice:
 * in process by `Awc` (src/service/workspace/awc.ts) and, for an ordinary user, by the root
 * daemon's client over the per-user socket (src/cli/remote/remote-awc.ts, which adds what the
 * daemon answers for a user: `usage`, `attach`, `kept`, …). What only an Awc in process has
 * (the catalog, the store, gc, fsck) is not here: a command that needs it takes an `Awc`.
 * The methods are documented on Awc; the errors are the same on both sides.
 */
export interface AwcApi {
  /** The tenant namespace this service acts in. */
  readonly namespace: string;
  /** Closes the service (the catalog and the store of an Awc; nothing for the daemon's client). */
  close(): Promise<void>;
  listSnapshots(filter?: ListFilter): Promise<SnapshotRow[]>;
  listWorkspaces(filter?: ListFilter): Promise<WorkspaceRow[]>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  getWorkspace(ref: string): Promise<WorkspaceRow>;
  resolve(ref: string): Promise<ResolvedRef>;
  setLabels(ref: string, patch: LabelPatch): Promise<{ kind: 'snapshot' | 'workspace'; id: string; labels: Labels }>;
  fork(snapshotRef: string, opts?: { name?: string; count?: number; labels?: Labels }): Promise<WorkspaceRow[]>;
  mount(wsRef: string, dir: string, opts?: MountOptions): Promise<MountResult>;
  unmount(refOrPath: string, opts?: UnmountFlags): Promise<UnmountResult & KeptFields>;
  checkpoint(wsRef: string, opts?: { message?: string; allowChanging?: boolean }): Promise<CheckpointResult>;
  diff(fromRef: string, toRef?: string, opts?: DiffOptions): Promise<DiffResult>;
  rm(ref: string, opts?: { force?: boolean }): Promise<RemoveResult>;
  /** The mount driver this host uses and why (in process at once; through the daemon, the daemon's). */
  doctor(): DriverReport | Promise<DriverReport>;
  export(ref: string, opts: ExportOptions): Promise<ExportResult>;
  importSnapshot(source: string, opts?: ApiImportOptions): Promise<ImportResult>;
  importGit(repo: string, opts?: GitImportOptions): Promise<GitImportResult>;
  exportGit(ref: string, opts: GitExportOptions): Promise<GitExportResult>;
  checkpointGit(wsRef: string, opts: CheckpointGitOptions): Promise<{ checkpoint: CheckpointResult; git: GitExportResult }>;
  /** What `ls` and `show` say of a workspace's lease. */
  readonly leases: Pick<LeaseGuard, 'list' | 'show'>;
}
