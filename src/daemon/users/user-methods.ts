import * as z from 'zod';
import { AwcError } from '../../core/errors.js';
import type { AwcPaths } from '../../config/config.js';
import type { Awc } from '../../service/workspace/awc.js';
import { listKept, oneSet, readKeptFile, removeKept, type KeptSet } from '../../service/kept/kept-files.js';
import type { RemoteMethod } from '../../service/workspace/remote-methods.js';
import { computeUsage } from '../../service/workspace/usage.js';
import { computeHostStatus, type DaemonFigures } from '../../service/workspace/host-status.js';
import type { AllowedUser } from './user-access.js';
import type { UserContent } from './user-content.js';
import { ownsLiveState } from './mounter-rule.js';
import {
  AbsPath,
  ContentArgs,
  EnvKeyShape,
  LabelPatchShape,
  LabelsShape,
  ListFilterShape,
  Name,
  parseShape,
  RowRef,
} from './user-schemas.js';

/** What a method of the table gets besides its arguments: the caller, the service of their namespace, the mounter rule. */
export interface CallContext {
  user: AllowedUser;
  awc: Awc;
  paths: AwcPaths;
  content: UserContent;
  /** The mounter rule (src/daemon/users/mounter-rule.ts checkMounter) for this caller. @throws E_PERMISSION, E_NOT_FOUND */
  mounter(ref: string): Promise<void>;
  /** What `awc status` says of the daemon: that it runs, its pid and start. */
  daemon(): DaemonFigures;
}

/** One method of `POST /v1/call`: the shape of its arguments (a tuple) and what answers it. */
export interface UserMethod {
  args: z.ZodType<unknown[]>;
  run(c: CallContext, args: unknown[]): Promise<unknown>;
}

/** A table entry: `run` gets the arguments as `args` parsed them. */
function method<S extends z.ZodType<unknown[]>>(args: S, run: (c: CallContext, a: z.output<S>) => unknown): UserMethod {
  return { args, run: async (c, a) => run(c, a as z.output<S>) };
}

/** The most bytes `kept.read` sends in one answer (64 MiB): kept files are secrets (keys, `.env`), small. */
const KEPT_READ_MAX_BYTES = 64 * 1024 * 1024;

/** A kept set as `kept.read` answers it: the set and each file's bytes (base64, in the set's order). JSON. */
export interface KeptSetBytes {
  set: KeptSet;
  contents: string[];
}

const ref = z.tuple([Name]);
const asUser = (c: CallContext) => ({ uid: c.user.uid, gid: c.user.gid });
const mine = (c: CallContext) => (s: KeptSet) => s.owner?.uid === c.user.uid;

/**
 * Every method of `POST /v1/call` (src/service/workspace/remote-methods.ts), with its arguments' shape
 * (src/daemon/users/user-schemas.ts), checked before anything runs (a method not in this table has
 * no way in; test/daemon/users/user-rpc-shapes.test.ts fails for one without a schema). JSON has no
 * undefined: an argument left out arrives as null and is read as left out. Answers:
 *
 * - Awc methods: as the service answers them, for the caller: `mount` is always theirs (their
 *   uid and gid, at a directory they own); `mount`, `unmount`, `checkpoint`, `rm` and the reads
 *   of live state, `diff` (either side) and `leases.show`, follow the mounter rule
 *   (docs/explanation/security.md "Live state belongs to its mounter")
 * - `leases.list(rows)`, `leases.show(row)`: only the rows' ids are read; the rows are the
 *   catalog's (the caller's copies are never trusted)
 * - `usage()` → the UsageReport of the namespace, the state on this host of workspaces the
 *   caller did not mount withheld (`withheld: true`)
 * - `status()` → the HostStatusReport of `awc status` (src/service/workspace/host-status.ts):
 *   only the workspaces whose live state on this host is the caller's or nobody's (the others
 *   counted in `hidden`); without the read path's figures (`figures: null`: they count every
 *   user's reads, as the administrative `awc metrics` does)
 * - `kept.ls(ref?)` → `{sets}`: only the sets of workspaces this user mounted; `kept.rm(ref)`
 *   → `{id, files}`: one of those, deleted; `kept.read(ref)` → {@link KeptSetBytes}: one of
 *   those with its bytes, which the user's CLI writes as the user (E_USAGE over 64 MiB)
 * - `attach(dir, {snapshot?, key?})`, `detach(dir, {force?})` → as src/service/attach/attach.ts with
 *   `asUser` the caller
 * - `content.readRoot|readTree(snapshots, digest)` → src/daemon/users/user-content.ts
 */
export const USER_METHODS: Readonly<Record<RemoteMethod, UserMethod>> = {
  listSnapshots: method(z.tuple([ListFilterShape.optional()]), (c, [f]) => c.awc.listSnapshots(f)),
  listWorkspaces: method(z.tuple([ListFilterShape.optional()]), (c, [f]) => c.awc.listWorkspaces(f)),
  getSnapshot: method(ref, (c, [r]) => c.awc.getSnapshot(r)),
  getWorkspace: method(ref, (c, [r]) => c.awc.getWorkspace(r)),
  resolve: method(ref, (c, [r]) => c.awc.resolve(r)),
  fork: method(
    z.tuple([Name, z.object({ name: z.string().optional(), count: z.int().optional(), labels: LabelsShape.optional() }).optional()]),
    (c, [r, o]) => c.awc.fork(r, o),
  ),
  mount: method(z.tuple([Name, AbsPath, z.object({ steal: z.boolean().optional() }).optional()]), async (c, [r, dir, o]) => {
    await c.mounter(r);
    return c.awc.mount(r, dir, { steal: o?.steal === true, asUser: asUser(c) });
  }),
  unmount: method(
    z.tuple([
      Name,
      z.object({ discard: z.boolean().optional(), force: z.boolean().optional(), keptOnly: z.boolean().optional() }).optional(),
    ]),
    async (c, [r, o]) => {
      await c.mounter(r);
      return c.awc.unmount(r, o);
    },
  ),
  checkpoint: method(
    z.tuple([Name, z.object({ message: z.string().optional(), allowChanging: z.boolean().optional() }).optional()]),
    async (c, [r, o]) => {
      await c.mounter(r);
      return c.awc.checkpoint(r, o);
    },
  ),
  diff: method(
    z.tuple([
      Name,
      Name.optional(),
      z.object({ patch: z.boolean().optional(), binary: z.boolean().optional(), metadata: z.boolean().optional() }).optional(),
    ]),
    async (c, [from, to, o]) => {
      for (const r of to === undefined ? [from] : [from, to]) await c.mounter(r);
      return c.awc.diff(from, to, o);
    },
  ),
  rm: method(z.tuple([Name, z.object({ force: z.boolean().optional() }).optional()]), async (c, [r, o]) => {
    await c.mounter(r);
    return c.awc.rm(r, o);
  }),
  doctor: method(z.tuple([]), (c) => c.awc.doctor()),
  'leases.list': method(z.tuple([z.array(RowRef)]), async (c, [rows]) => {
    const all = new Map((await c.awc.listWorkspaces()).map((w) => [w.id, w]));
    return c.awc.leases.list(rows.flatMap((r) => all.get(r.id) ?? []));
  }),
  'leases.show': method(z.tuple([RowRef]), async (c, [row]) => {
    await c.mounter(row.id);
    return c.awc.leases.show(await c.awc.getWorkspace(row.id));
  }),
  setLabels: method(z.tuple([Name, LabelPatchShape]), async (c, [r, patch]) => {
    refuseReservedLabels(patch);
    // what WorktreeRemove trusts to skip a checkpoint: only on a workspace the caller mounted (the mounter rule)
    if (MOUNTER_ONLY_LABELS.some((k) => k in patch)) await c.mounter(r);
    return c.awc.setLabels(r, patch);
  }),
  usage: method(z.tuple([]), (c) => computeUsage(c.awc, { measures: (state) => ownsLiveState(c.user, state) })),
  status: method(z.tuple([]), (c) => computeHostStatus(c.awc, { daemon: c.daemon(), forUid: c.user.uid, through: 'daemon' })),
  'kept.ls': method(z.tuple([Name.optional()]), (c, [r]) => ({ sets: listKept(c.paths, r).filter(mine(c)) })),
  'kept.rm': method(ref, (c, [r]) => removeKept(c.paths, r, mine(c))),
  'kept.read': method(ref, (c, [r]) => {
    const set = oneSet(c.paths, r, mine(c));
    const bytes = set.files.reduce((n, f) => n + f.size, 0);
    if (bytes > KEPT_READ_MAX_BYTES)
      throw new AwcError('E_USAGE', `kept set ${set.id} holds ${bytes} bytes: too large to restore through the daemon`, {
        hint: `Ask an administrator to run \`awc kept restore ${set.id} <dir>\` as root.`,
      });
    return { set, contents: set.files.map((f) => readKeptFile(c.paths, set, f).toString('base64')) } satisfies KeptSetBytes;
  }),
  attach: method(
    z.tuple([AbsPath, z.object({ snapshot: z.string().optional(), key: EnvKeyShape.optional() }).optional()]),
    async (c, [dir, o]) =>
      (await import('../../service/attach/attach.js')).attach(c.awc, dir, { snapshot: o?.snapshot, key: o?.key, asUser: asUser(c) }),
  ),
  detach: method(z.tuple([AbsPath, z.object({ force: z.boolean().optional() }).optional()]), async (c, [dir, o]) =>
    (await import('../../service/attach/attach.js')).detach(c.awc, dir, { force: o?.force === true, asUser: asUser(c) }),
  ),
  'content.readRoot': method(ContentArgs, (c, [snaps, d]) => c.content.readRoot(c.awc, snaps, d)),
  'content.readTree': method(ContentArgs, (c, [snaps, d]) => c.content.readTree(c.awc, snaps, d)),
};

/**
 * Calls `name` with the JSON arguments `raw` for the caller: the method must be in
 * {@link USER_METHODS} and its arguments must fit its shape (nulls read as left out,
 * trailing ones dropped), or nothing runs.
 * @throws E_USAGE (no such method, arguments of the wrong shape), what the method throws
 */
export async function callUserMethod(c: CallContext, name: string, raw: unknown[]): Promise<unknown> {
  const m = Object.hasOwn(USER_METHODS, name) ? USER_METHODS[name as RemoteMethod] : undefined;
  if (!m)
    throw new AwcError('E_USAGE', `no such method ${JSON.stringify(name)} through the daemon`, {
      hint: `Callable: ${Object.keys(USER_METHODS).join(', ')}.`,
    });
  const args = raw.map((a) => (a === null ? undefined : a));
  while (args.length > 0 && args[args.length - 1] === undefined) args.pop();
  return m.run(c, parseShape(m.args, args, name));
}

/**
 * Labels under `awc.` an ordinary user may change through setLabels: the ones the Claude hook
 * run as that user writes (`set`) or removes (`remove`), and `awc.git.commit` (the hint of
 * E_GIT_NO_BASE; it names a commit only looked up in a repository the exporter owns).
 * Every other `awc.` key (`awc.git.origin`, `awc.path`, `awc.env-key`, `awc.claude.uid`, …)
 * is set only by AWC itself, when it makes the object.
 */
const USER_SETTABLE_AWC_LABELS: Readonly<Record<string, 'set' | 'remove' | 'both'>> = {
  'awc.git.commit': 'both',
  'awc.claude.session': 'set',
  'awc.claude.name': 'set',
  'awc.claude.checkpoint-of': 'set',
  'awc.claude.project': 'remove',
  'awc.claude.refs': 'set',
  'awc.claude.branch': 'set',
  'awc.claude.gitdir': 'set',
  'awc.claude.env-stale': 'set',
};

/**
 * Labels of {@link USER_SETTABLE_AWC_LABELS} a user may set only on a workspace they mounted
 * (the mounter rule): `awc.claude.refs` decides whether WorktreeRemove keeps the workspace's
 * commits and `awc.claude.gitdir` which worktree registration it removes, so another member
 * of the namespace must not be able to write them.
 */
const MOUNTER_ONLY_LABELS = ['awc.claude.refs', 'awc.claude.branch', 'awc.claude.gitdir'];

/**
 * Refuses a label patch from an ordinary user that sets or removes a reserved `awc.` label
 * (docs/reference/labels.md): another member of the namespace could otherwise point
 * `awc.git.origin` of a shared snapshot at a repository they control.
 * @throws E_PERMISSION
 */
export function refuseReservedLabels(patch: Readonly<Record<string, string | null>>): void {
  for (const [key, value] of Object.entries(patch)) {
    if (!key.startsWith('awc.')) continue;
    const allowed = USER_SETTABLE_AWC_LABELS[key];
    if (allowed === 'both' || allowed === (value === null ? 'remove' : 'set')) continue;
    throw new AwcError(
      'E_PERMISSION',
      `label ${JSON.stringify(key)} is reserved for AWC: an ordinary user may not ${value === null ? 'remove' : 'set'} it`,
      {
        hint: 'Labels under "awc." are written by AWC itself (docs/reference/labels.md); use a key of your own, e.g. team/origin.',
        details: { label: key },
      },
    );
  }
}
