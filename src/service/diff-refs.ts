import type { Digest } from '../core/digest.js';
import type { SnapshotRow, WorkspaceRow } from '../catalog/catalog.js';
import type { ContentReader } from '../store/content-reader.js';
import type { ContentWriter } from '../store/content-writer.js';
import { diffSnapshots, type Change } from './diff.js';
import { renderPatch } from './patch.js';

/** What `diffRefs` needs of the service: ref resolution, roots of live states, a reader. */
export interface DiffRefsDeps {
  resolve(ref: string): Promise<{ kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; workspace: WorkspaceRow }>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  /** Root digest of a ref: a snapshot's root, or a workspace's live state (mounted here) or head. */
  rootOf(ref: string, writer: ContentWriter): Promise<{ root: Digest; label: string }>;
  /** A reader that also serves the blobs of `extra` (the dry-run writer's session). */
  reader(extra?: (d: Digest) => Buffer | undefined): ContentReader;
}

/** Options of a diff: a git-style patch (`binary`: full binary hunks), metadata-only changes too. */
export interface DiffOptions {
  patch?: boolean;
  binary?: boolean;
  metadata?: boolean;
}

/** The result of a diff: the two roots, the changes and, when asked, the patch. */
export interface DiffResult {
  from: Digest;
  to: Digest;
  changes: Change[];
  patch?: string;
}

/**
 * Diffs two refs (`Awc.diff`). One ref: a workspace's head against its live state, or a
 * snapshot's parent (or the empty tree) against it. `writer` is a dry-run writer: live
 * states are scanned into it, and with `patch` it keeps their new bytes (in no store yet) in
 * memory for the patch.
 * @throws E_NOT_FOUND, E_AMBIGUOUS, E_CHANGED_DURING_READ (a live file kept changing)
 */
export async function diffRefs(
  deps: DiffRefsDeps,
  writer: ContentWriter,
  fromRef: string,
  toRef: string | undefined,
  opts: DiffOptions = {},
): Promise<DiffResult> {
  let from: Digest;
  let to: Digest;
  if (toRef === undefined) {
    const r = await deps.resolve(fromRef);
    if (r.kind === 'workspace') {
      from = (await deps.getSnapshot(r.workspace.headSnapshotId)).root;
      to = (await deps.rootOf(fromRef, writer)).root;
    } else {
      to = r.snapshot.root;
      from = r.snapshot.parentId ? (await deps.getSnapshot(r.snapshot.parentId)).root : await emptyRoot(writer);
    }
  } else {
    from = (await deps.rootOf(fromRef, writer)).root;
    to = (await deps.rootOf(toRef, writer)).root;
  }
  const src = deps.reader(writer.sessionBlob.bind(writer));
  const changes = await diffSnapshots(src, from, to, { metadata: opts.metadata });
  const out: DiffResult = { from, to, changes };
  if (opts.patch) {
    const readAll = async (f: { size: number; chunks: { digest: Digest; size: number }[] }): Promise<Buffer> => {
      const parts: Buffer[] = [];
      for await (const b of src.readFile(f)) parts.push(b); // new bytes of a live state come from the writer's session
      return Buffer.concat(parts);
    };
    out.patch = await renderPatch(src, readAll, changes, from, to, { binary: opts.binary ? 'full' : 'summary' });
  }
  return out;
}

/** The root of an empty directory (what a snapshot without a parent is diffed against). */
async function emptyRoot(writer: ContentWriter): Promise<Digest> {
  const tree = await writer.writeTree([]);
  return writer.writeRoot({ mode: 0o755, uid: 0, gid: 0, mtimeNs: '0', tree });
}
