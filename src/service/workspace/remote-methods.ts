/**
 * The Awc methods an ordinary user's CLI may call through the root daemon's per-user socket
 * (`POST /v1/call`, src/daemon/users/user-rpc.ts; docs/explanation/security.md "Per-user sockets").
 * Everything else is refused. `importSnapshot` and `export` are not here: their files cross
 * the boundary as tar streams (`/v1/import`, `/v1/export-tar`) so that root never opens a
 * path the user names. A new Awc method that is safe for users is added here and to the
 * daemon's method table with the schema of its arguments (src/daemon/users/user-methods.ts
 * USER_METHODS: a name here without an entry there does not compile); the client
 * (src/cli/remote/remote-awc.ts) forwards it with no other change.
 */
export const REMOTE_METHODS = [
  'listSnapshots',
  'listWorkspaces',
  'getSnapshot',
  'getWorkspace',
  'resolve',
  'fork',
  'mount',
  'unmount',
  'checkpoint',
  'diff',
  'rm',
  'doctor',
  'leases.list',
  'leases.show',
  // the Claude Code hooks label their workspaces and checkpoints (src/service/claude/claude-port.ts)
  'setLabels',
  // answered by the daemon itself for the caller (src/daemon/users/user-methods.ts): not Awc methods
  'usage',
  'status',
  'kept.ls',
  'kept.rm',
  'kept.read',
  // the worktree and its mount points checked as the caller's (src/service/attach/attach.ts asUser)
  'attach',
  'detach',
  // the trees of snapshots a user's git export reads (src/daemon/users/user-content.ts)
  'content.readRoot',
  'content.readTree',
] as const;

/** One of {@link REMOTE_METHODS}. */
export type RemoteMethod = (typeof REMOTE_METHODS)[number];
