import * as z from 'zod';
import { AwcError } from '../../core/errors.js';
import type { LabelPatch } from '../../catalog/port/labels.js';
import { prepare } from '../../service/attach/prepare.js';
import { GIT_COMMIT_LABEL } from '../../service/git/git-import.js';
import { absPathInput, OUTPUT } from './schemas.js';
import { checkedRef, hints, type Tool, type ToolContext } from './tool-kit.js';

/** The only key under AWC's own `awc.` prefix the `label` tool sets or removes: the commit a snapshot's files started from (the parent of an export to git). */
export const MCP_LABEL_KEYS_OF_AWC: readonly string[] = [GIT_COMMIT_LABEL];

/**
 * The change `set` and `remove` of the `label` tool make: keys under `awc.` other than
 * {@link MCP_LABEL_KEYS_OF_AWC} are refused (they steer AWC itself: the environment key
 * `awc attach` picks a snapshot by, a worktree's source path, a Claude session), as is an
 * empty change and a key both set and removed.
 * @throws E_USAGE
 */
export function labelPatch(set: Record<string, string> | undefined, remove: readonly string[] | undefined): LabelPatch {
  const patch: Record<string, string | null> = { ...set };
  for (const k of remove ?? []) {
    if (k in patch)
      throw new AwcError('E_USAGE', `label ${JSON.stringify(k)} is both in set and in remove`, {
        hint: 'Name each key once: in set to give it a value, or in remove to delete it.',
      });
    patch[k] = null;
  }
  if (Object.keys(patch).length === 0)
    throw new AwcError('E_USAGE', 'no label to set or remove', {
      hint: 'Pass set (an object of key: value) and/or remove (a list of keys).',
    });
  const reserved = Object.keys(patch).filter((k) => k.startsWith('awc.') && !MCP_LABEL_KEYS_OF_AWC.includes(k));
  if (reserved.length > 0)
    throw new AwcError('E_USAGE', `labels under "awc." are AWC's own: ${reserved.join(', ')}`, {
      hint: `Use keys of your own (e.g. "team", "task"); of AWC's keys only ${MCP_LABEL_KEYS_OF_AWC.join(', ')} may be set here, and the prepare tool sets the environment labels.`,
      details: { keys: reserved },
    });
  return patch;
}

/** The tools `prepare` and `label`. */
export function envTools(tool: Tool, ctx: ToolContext): void {
  const { snapshots, root } = ctx;
  tool(
    'prepare',
    {
      title: 'Prepare an environment',
      description:
        "Import a checkout under the server's root whose dependencies are installed (node_modules, .venv, target, …) as a snapshot labelled with its environment key (a digest of its lockfiles and runtime versions), as `awc prepare` does: the snapshot worktrees with the same lockfiles start from (`awc attach`, workspace_fork). The server sees the snapshot afterwards. Symbolic links in the tree are stored as links, never followed; secret files are left out.",
      input: {
        path: absPathInput.describe(
          "the checkout's directory: absolute, under the server's root, holding a lockfile and its installed dependency directories",
        ),
        name: z.string().min(1).max(120).optional().describe('a name for the snapshot (unique among the snapshots of the namespace)'),
        message: z.string().max(4096).optional().describe('the snapshot message (default: "prepare <path>")'),
      },
      output: OUTPUT.prepare,
      annotations: hints(false, false, false),
      create: true,
    },
    // the import opens the directory by name: McpRoot.directory checks that it is still the one walked, before and after
    async ({ path, name, message }, awc) =>
      root.directory(
        path,
        'path',
        async (dir) => {
          const r = await prepare(awc, dir, { name, message: message ?? `prepare ${dir}` });
          await snapshots.record(r.id);
          return { ...r, path: dir };
        },
        async (r) => void (await awc.rm(`snapshot:${r.id}`, { force: true }).catch(() => undefined)),
      ),
  );

  tool(
    'label',
    {
      title: 'Label a snapshot or workspace',
      description: `Set and remove labels (short key=value strings) of a snapshot this server sees or of one of its workspaces; returns the labels after the change. Keys under "awc." are AWC's own: of them only ${MCP_LABEL_KEYS_OF_AWC.join(', ')} (the commit a snapshot's files started from, the parent of workspace_export format git) may be set here.`,
      input: {
        ref: z
          .string()
          .min(1)
          .max(256)
          .describe('the snapshot or workspace: an id, a unique id prefix or a name (snapshot:<ref> or workspace:<ref> says which)'),
        set: z
          .record(z.string(), z.string())
          .optional()
          .describe(
            'labels to set, key: value (keys: 1 to 63 of a-z 0-9 . _ / -, starting with a letter or digit; values up to 1024 characters)',
          ),
        remove: z.array(z.string().min(1).max(63)).max(64).optional().describe('keys of labels to remove (a missing one is no error)'),
      },
      output: OUTPUT.label,
      annotations: hints(false, false, true),
    },
    async ({ ref, set, remove }, awc) => {
      const patch = labelPatch(set, remove);
      const r = await checkedRef(awc, ctx, ref);
      return awc.setLabels(r.kind === 'snapshot' ? `snapshot:${r.snapshot.id}` : `workspace:${r.id}`, patch);
    },
  );
}
