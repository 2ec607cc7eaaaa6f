import type { Digest } from '../../core/digest.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import { diffSnapshots, type Change } from './diff.js';
import { renderPatch, type PatchFileRef } from './patch.js';
import { detectRenames } from './diff-renames.js';
import { markSecrets, type DiffDropped, type DiffSecret, type LiveLeftOut } from './diff-secrets.js';

/** What `diffRefs` needs of the service: ref resolution, roots of live states, a reader. */
export interface DiffRefsDeps {
  resolve(ref: string): Promise<{ kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; workspace: WorkspaceRow }>;
  getSnapshot(ref: string): Promise<SnapshotRow>;
  /** Root digest of a ref: a snapshot's root, or a workspace's live state (mounted here; `leftOut`: what its scan left out) or head. */
  rootOf(ref: string, writer: ContentWriter): Promise<{ root: Digest; label: string; leftOut?: LiveLeftOut }>;
  /** A reader that also serves the blobs of `extra` (the dry-run writer's session). */
  reader(extra?: (d: Digest) => Buffer | undefined): ContentReader;
}

/** Options of a diff: a git-style patch (`binary`: full binary hunks), metadata-only changes too. */
export interface DiffOptions {
  patch?: boolean;
  binary?: boolean;
  metadata?: boolean;
}

/**
 * The result of a diff: the two roots, the changes and, when asked, the patch. When the
 * newer side is a live workspace (docs/explanation/capture-classes.md#diff): `secrets`, the
 * secret files it holds that a checkpoint leaves out (never in `changes` nor in the patch),
 * and `dropped`, the scratch a checkpoint drops; absent for a snapshot or a workspace's head.
 */
export interface DiffResult {
  from: Digest;
  to: Digest;
  changes: Change[];
  secrets?: DiffSecret[];
  dropped?: DiffDropped[];
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
  let leftOut: LiveLeftOut | undefined;
  if (toRef === undefined) {
    const r = await deps.resolve(fromRef);
    if (r.kind === 'workspace') {
      from = (await deps.getSnapshot(r.workspace.headSnapshotId)).root;
      ({ root: to, leftOut } = await deps.rootOf(fromRef, writer));
    } else {
      to = r.snapshot.root;
      from = r.snapshot.parentId ? (await deps.getSnapshot(r.snapshot.parentId)).root : await emptyRoot(writer);
    }
  } else {
    from = (await deps.rootOf(fromRef, writer)).root;
    ({ root: to, leftOut } = await deps.rootOf(toRef, writer));
  }
  const src = deps.reader(writer.sessionBlob.bind(writer));
  const all = await diffSnapshots(src, from, to, { metadata: opts.metadata });
  // a live side: its secrets are listed, never shown (nor patched) as stored changes
  const marked = leftOut ? markSecrets(all, leftOut) : undefined;
  // exact renames (same content under a new path) are one change, as git reports them
  const changes = detectRenames(marked?.changes ?? all);
  const out: DiffResult = { from, to, changes, ...(marked && leftOut ? { secrets: marked.secrets, dropped: leftOut.dropped } : {}) };
  if (opts.patch) {
    const readAll = async (f: PatchFileRef): Promise<Buffer> => {
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
