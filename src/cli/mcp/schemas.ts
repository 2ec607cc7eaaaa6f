import * as z from 'zod';

/**
 * Zod shapes of the `awc mcp` tools' outputs (the SDK turns them into each tool's JSON
 * Schema `outputSchema`; docs/reference/mcp.md lists them). Sizes are bytes, times ISO-8601
 * UTC strings. Objects are open (`looseObject`): a later version may add fields.
 */

/** A ref as the CLI takes it: an id, a unique id prefix, a name, or `snapshot:<ref>` / `workspace:<ref>`. */
export const refInput = z.string().min(1).max(256);
/** A workspace of this server, by ref (described: every tool parameter carries a description). */
export const workspaceInput = refInput.describe("one of this server's workspaces: its id, a unique id prefix or its name");
/** A snapshot or workspace by ref. */
export const anyRefInput = refInput.describe(
  'a snapshot this server sees or one of its workspaces: an id, a unique id prefix or a name (snapshot:<ref> or workspace:<ref> says which)',
);
/** An absolute path on the server's host. */
export const absPathInput = z.string().min(1).max(4096).describe('absolute path on the host the server runs on');

/** A snapshot row. */
export const snapshotOut = z.looseObject({
  id: z.string(),
  name: z.string().nullable(),
  root: z.string(),
  parentId: z.string().nullable(),
  message: z.string().nullable(),
  createdAt: z.string(),
  fileCount: z.number().int(),
  byteCount: z.number(),
});

/** A workspace row as `workspace_list` and `workspace_show` give it. */
export const workspaceOut = z.looseObject({
  id: z.string(),
  name: z.string().nullable(),
  baseSnapshotId: z.string(),
  headSnapshotId: z.string(),
  mountState: z.enum(['mounted', 'unmounted']),
  mountPath: z.string().nullable(),
  mountDriver: z.enum(['overlay', 'copy']).nullable(),
  mountHost: z.string().nullable(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

/** The lease of a workspace (`awc show`; docs/explanation/leases.md). */
export const leaseOut = z.looseObject({
  here: z.enum(['held', 'lost', 'elsewhere', 'free']),
  holder: z.string().nullable(),
  epoch: z.number().nullable(),
  state: z.string(),
  expiresAt: z.string().nullable(),
  note: z.string().nullable(),
});

/** An entry left out of a result, with the reason. */
const leftOut = z.array(z.object({ path: z.string(), reason: z.string() }));

/** A mount's result. */
export const mountOut = z.looseObject({
  workspace: z.string(),
  path: z.string(),
  driver: z.enum(['overlay', 'copy']),
  resumed: z.boolean(),
  leftOut: leftOut.optional(),
});

const counts = z.object({ files: z.number().int(), bytes: z.number() });

/** Secret files a capture left out (never stored; they stay on the host, docs/explanation/capture-classes.md). */
const secretsOut = z.array(z.object({ path: z.string(), size: z.number() }));

/** Secret files kept on the host when a workspace's host state was dropped (`awc kept`). */
const keptOut = z.array(z.object({ path: z.string(), size: z.number(), keptAt: z.string() })).optional();

/** Output shapes, one per tool (raw shapes: the SDK wraps each in an object schema; its top-level fields are exactly these). */
export const OUTPUT = {
  snapshot_list: { snapshots: z.array(snapshotOut) },
  workspace_fork: {
    workspaces: z.array(
      z.object({
        id: z.string(),
        name: z.string().nullable(),
        mount: mountOut.nullable().describe('where it was mounted, when mountPath was given'),
      }),
    ),
  },
  workspace_list: { scope: z.string(), workspaces: z.array(workspaceOut.extend({ lease: leaseOut })) },
  workspace_show: { workspace: workspaceOut.extend({ lastCheckpointAt: z.string(), lease: leaseOut }) },
  workspace_mount: {
    mount: mountOut,
    warmed: z
      .object({ entries: z.number().int(), directories: z.number().int(), git: z.boolean(), ms: z.number() })
      .optional()
      .describe('with warm: paths looked up, directories read, whether git status ran, time in ms'),
  },
  workspace_unmount: {
    workspace: z.string(),
    path: z.string(),
    pending: z.boolean().describe('uncheckpointed changes were kept on this host (the next mount resumes them)'),
    kept: keptOut.describe('with discard: secret files kept on this host'),
  },
  workspace_checkpoint: {
    id: z.string().describe('the new head snapshot (the old head when nothing changed)'),
    root: z.string(),
    changed: z.boolean(),
    parent: z.string(),
    files: z.number().int(),
    bytes: z.number(),
    filesRead: z.number().int(),
    newBytes: z.number(),
    skipped: leftOut,
    changing: z.array(z.string()).optional(),
    secrets: secretsOut.describe('secret files left out of the snapshot (they stay on the host)'),
    dropped: z.array(z.object({ path: z.string(), files: z.number().int(), bytes: z.number() })).describe('scratch paths dropped'),
    classes: z
      .looseObject({ durable: counts, reconstructible: counts, ignored: counts, scratch: counts, secret: counts })
      .describe('files and bytes per capture class'),
  },
  workspace_diff: {
    from: z.string().describe('root digest of the older side'),
    to: z.string().describe('root digest of the newer side'),
    changes: z.array(z.looseObject({ path: z.string(), status: z.string(), kind: z.string() })),
    secrets: z
      .array(z.object({ path: z.string(), size: z.number(), status: z.enum(['added', 'modified', 'unchanged']) }))
      .optional()
      .describe('secret files of the live workspace: never stored, not in changes nor in the patch; they stay on the host'),
    dropped: z
      .array(z.object({ path: z.string(), files: z.number().int(), bytes: z.number() }))
      .optional()
      .describe('scratch of the live workspace that a checkpoint drops'),
    patch: z.string().optional().describe('git-style patch (format "patch")'),
  },
  workspace_export: {
    id: z.string().describe('the snapshot written out'),
    root: z.string(),
    files: z.number().int(),
    bytes: z.number(),
    path: z.string(),
    leftOut: leftOut.optional(),
    git: z
      .looseObject({
        repo: z.string(),
        branch: z.string(),
        commit: z.string().describe("the branch's tip now"),
        parent: z.string().describe('the base commit'),
        created: z.boolean().describe('false: nothing git tracks changed, the branch points at the parent'),
        previous: z.string().nullable(),
        changes: z.array(z.object({ path: z.string(), status: z.enum(['A', 'M', 'D']) })),
        leftOut: z.array(z.looseObject({ path: z.string(), reason: z.string() })),
        ignored: z.number().int(),
        gitDir: z.number().int(),
      })
      .optional()
      .describe('format git: the commit written'),
  },
  workspace_remove: {
    kind: z.literal('workspace'),
    id: z.string(),
    unmounted: z.boolean().optional(),
    discarded: z.boolean().optional(),
    kept: keptOut.describe('secret files that existed nowhere else, kept on this host'),
  },
  prepare: {
    id: z.string().describe('the new snapshot'),
    name: z.string().nullable(),
    root: z.string(),
    labels: z.record(z.string(), z.string()).describe('its labels: awc.env-key, awc.env-dirs, awc.path'),
    envKey: z.string().describe('the environment key: a digest of the lockfiles and runtime versions'),
    envDirs: z.array(z.string()).describe('the dependency directories the snapshot holds'),
    files: z.number().int(),
    bytes: z.number(),
    newBytes: z.number(),
    skipped: leftOut,
    secrets: secretsOut.describe('secret files left out of the snapshot (they stay on the host)'),
    path: z.string().describe('the directory prepared (symbolic links resolved)'),
  },
  label: {
    kind: z.enum(['snapshot', 'workspace']),
    id: z.string(),
    labels: z.record(z.string(), z.string()).describe('the labels after the change'),
  },
  usage: {
    namespace: z.string(),
    scope: z.string(),
    totals: z.looseObject({
      workspaces: z.number().int(),
      snapshots: z.number().int(),
      logicalBytes: z.number(),
      uniqueStoredBytes: z.number(),
      hostBytes: z.number(),
      dedupRatio: z.number().nullable(),
    }),
    workspaces: z.array(z.looseObject({ id: z.string(), name: z.string().nullable(), logicalBytes: z.number(), hostBytes: z.number() })),
  },
} as const;
