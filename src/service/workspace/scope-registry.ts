import { constants } from 'node:fs';
import { lstat, open, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { mkdirPrivate, PRIVATE_FILE_MODE } from '../../core/private-fs.js';

/** The scope id that lifts scoping: the server acts on every workspace of its namespace. */
export const SCOPE_ALL = 'all';

/** A scope id: 1–64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit (a file name under the home, never a path). */
const SCOPE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** A workspace id as the catalog makes them (`ws_` + a time-sortable random suffix). */
const WORKSPACE_ID = /^ws_[A-Za-z0-9]+$/;
/** A snapshot id as the catalog makes them (`sn_` + a time-sortable random suffix). */
const SNAPSHOT_ID = /^sn_[A-Za-z0-9]+$/;

/**
 * Which workspaces an `awc mcp` server may act on (docs/reference/mcp.md#scope). A scope is
 * an id the server is started with (`--scope ID`); every workspace it forks is recorded as
 * one empty marker file `<home>/mcp-scopes/<scope>/<workspace id>` (directories 0700, files
 * 0600, created with O_EXCL|O_NOFOLLOW), so a server restarted with the same id owns them
 * again, and two servers with different ids never see each other's. Markers are per home
 * (per host): a server on another host with the same scope id does not own them. The scope
 * `all` owns every workspace of the namespace and records nothing.
 */
export class ScopeRegistry {
  private readonly dir: string;

  /** @throws E_USAGE for a scope id that is not 1–64 of `A-Za-z0-9._-` starting with a letter or digit */
  constructor(
    home: string,
    readonly scope: string,
  ) {
    if (!SCOPE_ID.test(scope))
      throw new AwcError('E_USAGE', `--scope must be 1-64 letters, digits, '.', '_' or '-' (or "all"), got ${JSON.stringify(scope)}`);
    this.dir = join(home, 'mcp-scopes', scope);
  }

  /** True for the scope `all` (no restriction). */
  get unrestricted(): boolean {
    return this.scope === SCOPE_ALL;
  }

  /**
   * Records workspaces (or the snapshots they checkpointed: `sn_…` ids) as this scope's
   * (nothing for `all`). An existing marker is kept. @throws the fs error as an AwcError
   */
  async claim(workspaceIds: readonly string[]): Promise<void> {
    if (this.unrestricted) return;
    await mkdirPrivate(this.dir).catch((err: unknown) => Promise.reject(toAwcError(err)));
    for (const id of workspaceIds) {
      const fh = await open(this.marker(id), constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW, PRIVATE_FILE_MODE).catch(
        (err: unknown) => Promise.reject(toAwcError(err)),
      );
      await fh.close();
    }
  }

  /** Whether this scope owns a workspace (always for `all`; a marker that is a regular file otherwise). */
  async owns(workspaceId: string): Promise<boolean> {
    if (this.unrestricted) return true;
    if (!WORKSPACE_ID.test(workspaceId)) return false;
    const st = await lstat(this.marker(workspaceId)).catch(() => undefined);
    return st?.isFile() === true;
  }

  /** The ids this scope owns (undefined for `all`: every workspace). */
  async owned(): Promise<Set<string> | undefined> {
    if (this.unrestricted) return undefined;
    const names = await readdir(this.dir).catch(() => [] as string[]);
    return new Set(names.filter((n) => WORKSPACE_ID.test(n)));
  }

  /**
   * The snapshots this scope's workspaces made, recorded by {@link claim} with their ids
   * (`sn_…` markers beside the workspaces'): they stay the scope's after the workspace is removed.
   * Empty for `all` (which sees every snapshot).
   */
  async ownedSnapshots(): Promise<Set<string>> {
    if (this.unrestricted) return new Set();
    const names = await readdir(this.dir).catch(() => [] as string[]);
    return new Set(names.filter((n) => SNAPSHOT_ID.test(n)));
  }

  /**
   * Refuses a workspace this scope does not own.
   * @throws E_OUT_OF_SCOPE (details: workspace, scope)
   */
  async check(workspace: { id: string; name: string | null }): Promise<void> {
    if (await this.owns(workspace.id)) return;
    throw new AwcError(
      'E_OUT_OF_SCOPE',
      `workspace ${workspace.name ?? workspace.id} was not created by this MCP server (scope ${this.scope})`,
      {
        hint: `This server acts only on workspaces it forked; start \`awc mcp\` with --scope all (or the scope that forked ${workspace.id}) to act on it.`,
        details: { workspace: workspace.id, scope: this.scope },
      },
    );
  }

  /** Forgets a removed workspace (absent is fine). */
  async release(workspaceId: string): Promise<void> {
    if (this.unrestricted || !WORKSPACE_ID.test(workspaceId)) return;
    await unlink(this.marker(workspaceId)).catch(() => undefined);
  }

  private marker(workspaceId: string): string {
    return join(this.dir, workspaceId);
  }
}

/**
 * Which MCP scopes of `home` own each workspace (`awc status`): workspace id → scope ids,
 * from the markers under `<home>/mcp-scopes/<scope>/` (the scope `all` records none).
 * A missing or unreadable directory counts as no scope; never throws.
 */
export async function scopesByWorkspace(home: string): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  const root = join(home, 'mcp-scopes');
  for (const scope of (await readdir(root).catch(() => [] as string[])).sort()) {
    if (!SCOPE_ID.test(scope)) continue;
    for (const name of await readdir(join(root, scope)).catch(() => [] as string[])) {
      if (!WORKSPACE_ID.test(name)) continue;
      const list = out.get(name);
      if (list) list.push(scope);
      else out.set(name, [scope]);
    }
  }
  return out;
}
