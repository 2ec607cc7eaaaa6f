import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import { AwcError } from '../../core/errors.js';

/** What a ref names: a snapshot or a workspace. */
export type ResolvedRef = { kind: 'snapshot'; snapshot: SnapshotRow } | { kind: 'workspace'; workspace: WorkspaceRow };

/** The lookups `resolveRef` needs (Awc's getSnapshot / getWorkspace). */
export interface RefLookups {
  getSnapshot(ref: string): Promise<SnapshotRow>;
  getWorkspace(ref: string): Promise<WorkspaceRow>;
}

/**
 * Resolves a ref that may name a snapshot or a workspace (`show`, `diff`, `export`, `label`).
 * Ids carry their kind (`sn_…`, `ws_…`), and `snapshot:<ref>` / `workspace:<ref>` say it; a
 * bare name or id prefix that matches a snapshot and a workspace is refused.
 * @throws E_NOT_FOUND, E_AMBIGUOUS (with a hint naming both and how to say which)
 */
export async function resolveRef(by: RefLookups, ref: string): Promise<ResolvedRef> {
  // ids carry their kind (names may not start with sn_/ws_), so a workspace id never resolves as a snapshot
  if (/^(ws_|workspace:)/i.test(ref)) return { kind: 'workspace', workspace: await by.getWorkspace(ref) };
  if (/^(sn_|snapshot:)/i.test(ref)) return { kind: 'snapshot', snapshot: await by.getSnapshot(ref) };
  const unlessNotFound = <T>(p: Promise<T>): Promise<T | undefined> =>
    p.catch((err: unknown) => {
      if (err instanceof AwcError && err.code === 'E_NOT_FOUND') return undefined;
      throw err;
    });
  const [snapshot, workspace] = await Promise.all([unlessNotFound(by.getSnapshot(ref)), unlessNotFound(by.getWorkspace(ref))]);
  if (snapshot && workspace) {
    throw new AwcError('E_AMBIGUOUS', `${JSON.stringify(ref)} names both snapshot ${snapshot.id} and workspace ${workspace.id}`, {
      hint: `Say which: snapshot:${ref} or workspace:${ref} (or the id ${snapshot.id} / ${workspace.id}).`,
      details: { ref, snapshot: snapshot.id, workspace: workspace.id },
    });
  }
  if (snapshot) return { kind: 'snapshot', snapshot };
  if (workspace) return { kind: 'workspace', workspace };
  throw new AwcError('E_NOT_FOUND', `no snapshot or workspace ${JSON.stringify(ref)}`);
}
