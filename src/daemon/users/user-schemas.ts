import * as z from 'zod';
import { AwcError } from '../../core/errors.js';

/**
 * The shapes of what an ordinary user sends the root daemon (docs/explanation/security.md
 * "The daemon checks every request's shape"): the arguments of each method of `POST /v1/call`
 * (src/daemon/users/user-methods.ts) and the body of each endpoint (src/daemon/users/user-rpc.ts). A
 * request is parsed with {@link parseShape} before anything runs; what a schema does not
 * name (an unknown option) is dropped, never passed on.
 */

/** A string that names something (a ref, an id, a path): not empty, no NUL, at most 4096 bytes. */
export const Name = z
  .string()
  .min(1)
  .max(4096)
  .refine((s) => !s.includes('\0'), 'holds a NUL');

/** An absolute path of the caller's (a mount target, a worktree). */
export const AbsPath = Name.refine((s) => s.startsWith('/'), 'is not an absolute path');

/** Labels (catalog/labels.ts checks keys and values: E_USAGE). */
export const LabelsShape = z.record(z.string(), z.string());

/** A label change: a string sets the key, null deletes it. */
export const LabelPatchShape = z.record(z.string(), z.string().nullable());

/** `{labels?}`: a list filter (catalog ListFilter). */
export const ListFilterShape = z.object({ labels: LabelsShape.optional() });

/** A list of at most 64 snapshot ids and a digest (user-content.ts). */
export const ContentArgs = z.tuple([z.array(Name).max(64), Name]);

/** An environment key as the user's CLI computed it (src/service/attach/env-key.ts EnvKeyResult): it only picks a snapshot. */
export const EnvKeyShape = z.object({
  key: z.string(),
  recipe: z.string(),
  lockfiles: z.array(z.object({ path: z.string(), sha256: z.string(), ecosystem: z.string() })),
  runtimes: z.record(z.string(), z.string()),
  envDirs: z.array(z.string()),
  installs: z.array(z.string()),
});

/** A workspace row as the user's CLI sends it to `leases.*`: only its id is read (the row is the catalog's). */
export const RowRef = z.object({ id: Name });

/** The body of every JSON endpoint: the namespace the call is in (checked against the user's rules). */
export const NamespaceBody = z.object({ namespace: Name });

/** `POST /v1/call`. */
export const CallBody = NamespaceBody.extend({ method: z.string(), args: z.array(z.unknown()) });

/** `POST /v1/export-tar`. */
export const ExportTarBody = NamespaceBody.extend({ ref: Name });

/** `POST /v1/read-file`. */
export const ReadFileBody = NamespaceBody.extend({ snapshots: z.array(Name).max(64), digest: Name });

/** `POST /v1/run` (src/daemon/users/user-run.ts RunRequest; UserRun checks sizes too). */
export const RunBody = NamespaceBody.extend({
  id: z.string().regex(/^[A-Za-z0-9]{8,64}$/),
  ref: Name,
  at: Name.nullish(),
  cwd: AbsPath,
  command: Name,
  args: z.array(z.string()),
  env: z.record(z.string(), z.string()),
  umask: z.int().min(0).max(0o777),
});

/** `POST /v1/run-signal`. */
export const RunSignalBody = NamespaceBody.extend({ id: z.string(), signal: z.string() });

/** The `x-awc-args` header of `POST /v1/import`. */
export const ImportArgs = NamespaceBody.extend({
  name: z.string().nullish(),
  message: z.string().nullish(),
  labels: LabelsShape.nullish(),
});

/**
 * `value` parsed by `schema`, or E_USAGE saying what of `what` is wrong (its message starts
 * `<what>: bad request:`, so that a refusal by shape is told from one by the call).
 * @throws E_USAGE
 */
export function parseShape<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  throw new AwcError('E_USAGE', `${what}: bad request: ${z.prettifyError(r.error).replace(/\n\s*/g, ' ')}`, {
    hint: 'Use the awc command line of the same version as the daemon (docs/explanation/security.md#per-user-sockets).',
  });
}

/**
 * The bodies of the root socket's endpoints (src/daemon/session/host-daemon.ts; the socket is root's,
 * 0600), parsed as the per-user ones are.
 */
export const RootBodies = {
  mount: z.object({ namespace: Name, workspace: Name, target: Name, steal: z.boolean().optional() }),
  unmount: z.object({ namespace: Name, workspace: Name, force: z.boolean().optional() }),
  checkpointReport: z.object({
    driver: Name,
    durationMs: z.number().nonnegative(),
    newBytes: z.number().nonnegative(),
    namespace: Name.optional(),
    root: z
      .string()
      .regex(/^sha256:[0-9a-f]{64}$/)
      .optional(),
  }),
  flags: z.object({ force: z.boolean().optional(), dryRun: z.boolean().optional() }),
  imageReport: z.object({ outcome: z.enum(['published', 'failed']), reason: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/) }),
};

/**
 * Every endpoint of a per-user socket with the shape of its JSON body (src/daemon/users/user-rpc.ts
 * has one handler for each): null for one that reads no JSON body (`GET /v1/status`; `POST
 * /v1/import` reads a tar, its arguments in the header {@link ImportArgs}).
 */
export const USER_ENDPOINTS = {
  'GET /v1/status': null,
  'POST /v1/import': null,
  'POST /v1/call': CallBody,
  'POST /v1/run': RunBody,
  'POST /v1/run-signal': RunSignalBody,
  'POST /v1/export-tar': ExportTarBody,
  'POST /v1/read-file': ReadFileBody,
} as const;

/** One of {@link USER_ENDPOINTS}. */
export type UserRoute = keyof typeof USER_ENDPOINTS;
