import { AwcError } from '../../core/errors.js';
import type { SnapshotRow } from '../../catalog/port/catalog.js';
import { matchesLabels, type Labels } from '../../catalog/port/labels.js';
import type { AwcApi } from '../../service/workspace/awc-api.js';
import type { ScopeRegistry } from '../../service/workspace/scope-registry.js';

/** The snapshots a server was started with: `--snapshot REF` (repeatable) and `--snapshot-label k=v` (repeatable, all must match). */
export interface SnapshotGrant {
  refs: readonly string[];
  /** undefined: no label selector (it grants nothing; it never means "every snapshot"). */
  labels: Labels | undefined;
}

/** Longest chain of checkpoints walked back from a workspace's head to its base. */
const MAX_WALK = 100_000;

/**
 * Which snapshots an `awc mcp` server sees (docs/reference/mcp.md#scope): those it was
 * started with (named refs, resolved at each call, and a label selector) and those it made
 * (the checkpoints and prepared snapshots it recorded, and each owned workspace's head back to
 * its base). `--scope all` sees every snapshot. Any other snapshot is, to every tool, as if it did
 * not exist: `E_NOT_FOUND` with the same message as a missing one, so a server cannot tell a
 * hidden snapshot from no snapshot (nor learn names or ids by probing).
 */
export class SnapshotScope {
  constructor(
    private readonly scope: ScopeRegistry,
    private readonly grant: SnapshotGrant,
  ) {}

  /** The visible snapshots, newest first (every one for `--scope all`). */
  async list(awc: AwcApi): Promise<SnapshotRow[]> {
    const all = await awc.listSnapshots();
    if (this.scope.unrestricted) return all;
    const ids = await this.visibleIds(awc, all);
    return all.filter((s) => ids.has(s.id));
  }

  /** Records a snapshot the server made: a checkpoint of one of its workspaces, or a `prepare` (it stays visible after the workspace is removed). */
  async record(snapshotId: string): Promise<void> {
    await this.scope.claim([snapshotId]);
  }

  /**
   * A visible snapshot by ref (an id, a unique id prefix, a name, `snapshot:<ref>`):
   * `candidate` is what the namespace resolved the ref to, if anything; a hidden one, or a ref
   * that is missing or ambiguous in the namespace, is looked for among the visible ones only.
   * @throws E_NOT_FOUND (the same for hidden and missing)
   */
  async find(awc: AwcApi, ref: string, candidate?: SnapshotRow): Promise<SnapshotRow> {
    if (this.scope.unrestricted) return candidate ?? awc.getSnapshot(ref);
    const all = await awc.listSnapshots();
    const ids = await this.visibleIds(awc, all);
    if (candidate && ids.has(candidate.id)) return candidate;
    const r = ref.replace(/^snapshot:/i, '');
    const visible = all.filter((s) => ids.has(s.id));
    const exact = visible.find((s) => s.id === r) ?? visible.find((s) => s.name === r);
    if (exact) return exact;
    // an id prefix as the catalog takes it: with or without `sn_`, at least 4 characters after it, any case
    const body = r.replace(/^sn_/i, '').toLowerCase();
    const byPrefix = body.length >= 4 ? visible.filter((s) => s.id.toLowerCase().startsWith(`sn_${body}`)) : [];
    if (byPrefix.length === 1) return byPrefix[0]!;
    throw this.notFound(ref);
  }

  /** Whether a snapshot id is visible (always for `--scope all`). */
  async sees(awc: AwcApi, id: string): Promise<boolean> {
    if (this.scope.unrestricted) return true;
    return (await this.visibleIds(awc, await awc.listSnapshots())).has(id);
  }

  /** The error for a snapshot this server does not see: the same whether it exists or not. */
  notFound(ref: string): AwcError {
    return new AwcError('E_NOT_FOUND', `no snapshot ${JSON.stringify(ref)} for this MCP server`, {
      hint: 'This server sees the snapshots it was started with, those its own workspaces checkpointed and those it prepared; snapshot_list lists them.',
      details: { ref },
    });
  }

  private async visibleIds(awc: AwcApi, all: readonly SnapshotRow[]): Promise<Set<string>> {
    const byId = new Map(all.map((s) => [s.id, s]));
    const ids = new Set<string>();
    for (const ref of this.grant.refs) {
      const s = await snapshotOrNone(awc, ref);
      if (s) ids.add(s.id);
    }
    if (this.grant.labels !== undefined) for (const s of all) if (matchesLabels(s.labels, this.grant.labels)) ids.add(s.id);
    for (const id of await this.scope.ownedSnapshots()) if (byId.has(id)) ids.add(id);
    const mine = await this.scope.owned();
    for (const ws of await awc.listWorkspaces()) {
      if (!mine?.has(ws.id)) continue;
      // the workspace's checkpoints: its head back through its parents to its base (inclusive)
      let id: string | null = ws.headSnapshotId;
      for (let i = 0; id !== null && i < MAX_WALK; i++) {
        ids.add(id);
        if (id === ws.baseSnapshotId) break;
        id = byId.get(id)?.parentId ?? null;
      }
    }
    return ids;
  }
}

/** The snapshot `ref` names, or undefined when none or several do (E_NOT_FOUND, E_AMBIGUOUS). @throws what else getSnapshot throws */
export async function snapshotOrNone(awc: AwcApi, ref: string): Promise<SnapshotRow | undefined> {
  return awc.getSnapshot(ref).catch((err: unknown) => {
    if (err instanceof AwcError && (err.code === 'E_NOT_FOUND' || err.code === 'E_AMBIGUOUS')) return undefined;
    throw err;
  });
}
