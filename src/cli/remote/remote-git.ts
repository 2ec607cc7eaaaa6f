import { withHoles } from '../../store/content/sparse-read.js';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Digest } from '../../core/digest.js';
import type { FileEntry, RootObject, TreeObject } from '../../core/tree.js';
import type { SnapshotRow } from '../../catalog/port/catalog.js';
import type { UserClient } from '../../daemon/users/user-client.js';
import type { CheckpointResult } from '../../service/workspace/awc.js';
import type { CheckpointGitOptions, GitExportDeps, GitExportOptions, GitExportResult } from '../../service/git/git-export.js';
import type { GitExportReader } from '../../service/git/git-export-plan.js';
import type { GitImportOptions, GitImportResult } from '../../service/git/git-import.js';
import type { ImportOptions } from '../../service/import/import-snapshot.js';
import type { ImportResult } from '../../service/workspace/awc.js';
import type { ResolvedRef } from '../../service/refs/resolve-ref.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';

/** The Awc calls the git commands of an ordinary user make through the daemon (src/cli/remote/remote-awc.ts). */
export interface GitCalls {
  resolve(ref: string): Promise<ResolvedRef>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  getWorkspace(ref: string): Promise<WorkspaceRow>;
  checkpoint(ws: string, o: { message?: string; allowChanging?: boolean }): Promise<CheckpointResult>;
  /** A directory import as the user (a tar stream to the daemon). */
  importDir(dir: string, opts: ImportOptions): Promise<ImportResult>;
}

/** Runs `fn` with a fresh private (0700) directory of this user under the system temporary directory, removed afterwards. */
async function withOwnTemp<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = fs.mkdtempSync(join(tmpdir(), 'awc-git-'));
  try {
    return await fn(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The reads of a user's git export through the daemon: every snapshot row the export got
 * from the daemon joins the scope, and each read names that scope, so the daemon serves
 * only what those snapshots hold (src/daemon/users/user-content.ts).
 */
class ScopedReader implements GitExportReader {
  readonly scope = new Set<string>();

  constructor(
    private readonly client: UserClient,
    private readonly namespace: string,
  ) {}

  readRoot(digest: Digest): Promise<RootObject> {
    return this.client.call(this.namespace, 'content.readRoot', [[...this.scope], digest]) as Promise<RootObject>;
  }

  readTree(digest: Digest): Promise<TreeObject> {
    return this.client.call(this.namespace, 'content.readTree', [[...this.scope], digest]) as Promise<TreeObject>;
  }

  /** The file's content: the daemon streams its stored data, a sparse file's holes are put back here (zeros). */
  async *readFile(file: FileEntry): AsyncIterable<Buffer> {
    const data = (await this.client.readFile(this.namespace, [...this.scope], file.digest)) as AsyncIterable<Buffer>;
    yield* file.extents ? withHoles(file.size, file.extents, data) : data;
  }
}

/** The deps of exportGit for a user: the daemon's rows (each snapshot joins the reader's scope), this user's temp directory. */
function exportDeps(client: UserClient, namespace: string, calls: GitCalls, tmp: string): GitExportDeps & Pick<GitCalls, 'getWorkspace'> {
  const reader = new ScopedReader(client, namespace);
  const seen = (s: SnapshotRow): SnapshotRow => (reader.scope.add(s.id), s);
  return {
    paths: { hostDir: tmp },
    resolve: async (ref) => {
      const r = await calls.resolve(ref);
      if (r.kind === 'snapshot') seen(r.snapshot);
      return r;
    },
    getSnapshot: async (ref) => seen(await calls.getSnapshot(ref)),
    getWorkspace: (ref) => calls.getWorkspace(ref),
    reader: () => reader,
  };
}

/**
 * `snapshot import --git` as the user: git clones and checks out as this user, on files they
 * can read, into a fresh private directory of theirs; the clone, `.git` included, goes to the
 * daemon as a tar (`importDir`) and is removed. @throws as importGit
 */
export async function importGitAsUser(calls: GitCalls, repo: string, opts: GitImportOptions): Promise<GitImportResult> {
  const { importGit } = await import('../../service/git/git-import.js');
  return withOwnTemp((own) => importGit({ paths: { hostDir: own }, importSnapshot: (dir, o) => calls.importDir(dir, o) }, repo, opts));
}

/**
 * `export --git` as the user (docs/explanation/git.md "Ordinary users"): the same exportGit,
 * in this process: git (rev-parse, ls-tree, check-ignore, fast-import) runs as the user in
 * their repository; the daemon only supplies the snapshots' rows, trees and file contents.
 * @throws as exportGit
 */
export async function exportGitAsUser(
  client: UserClient,
  namespace: string,
  calls: GitCalls,
  ref: string,
  opts: GitExportOptions,
): Promise<GitExportResult> {
  const { exportGit } = await import('../../service/git/git-export.js');
  return withOwnTemp((tmp) => exportGit(exportDeps(client, namespace, calls, tmp), ref, opts));
}

/** `checkpoint --git-branch` as the user: the checkpoint through the daemon, the export as exportGitAsUser. @throws as checkpointGit */
export async function checkpointGitAsUser(
  client: UserClient,
  namespace: string,
  calls: GitCalls,
  ws: string,
  opts: CheckpointGitOptions,
): Promise<{ checkpoint: CheckpointResult; git: GitExportResult }> {
  const { checkpointGit } = await import('../../service/git/git-export.js');
  return withOwnTemp((tmp) => checkpointGit({ ...exportDeps(client, namespace, calls, tmp), checkpoint: calls.checkpoint }, ws, opts));
}
