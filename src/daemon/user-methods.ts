import { AwcError } from '../core/errors.js';
import type { AwcPaths } from '../config/config.js';
import type { Awc } from '../service/awc.js';
import { listKept, oneSet, readKeptFile, removeKept, type KeptSet } from '../service/kept-files.js';
import type { RemoteMethod } from '../service/remote-methods.js';
import { computeUsage } from '../service/usage.js';
import type { AllowedUser } from './user-access.js';
import type { EnvKeyResult } from '../service/env-key.js';

/** An environment key from a user's CLI, checked for its shape (it only picks a snapshot). @throws E_USAGE */
function checkKey(k: EnvKeyResult): EnvKeyResult {
  const strings = (a: unknown) => Array.isArray(a) && a.every((x) => typeof x === 'string');
  if (
    typeof k.key !== 'string' ||
    !Array.isArray(k.lockfiles) ||
    !k.lockfiles.every((l) => typeof l?.path === 'string') ||
    !strings(k.installs) ||
    !strings(k.envDirs)
  )
    throw new AwcError('E_USAGE', 'attach: key is not an environment key');
  return k;
}

/** The methods of REMOTE_METHODS the daemon answers itself: they are not Awc methods, or need the caller. */
export const DAEMON_SIDE: ReadonlySet<RemoteMethod> = new Set(['usage', 'kept.ls', 'kept.rm', 'kept.read', 'attach', 'detach']);

/** The most bytes `kept.read` sends in one answer (64 MiB): kept files are secrets (keys, `.env`), small. */
const KEPT_READ_MAX_BYTES = 64 * 1024 * 1024;

/** A kept set as `kept.read` answers it: the set and each file's bytes (base64, in the set's order). JSON. */
export interface KeptSetBytes {
  set: KeptSet;
  contents: string[];
}

/**
 * Answers one of {@link DAEMON_SIDE} for `user` (docs/explanation/security.md#per-user-sockets):
 *
 * - `usage()` → the UsageReport of the call's namespace (already checked against the user's rules)
 * - `kept.ls(ref?)` → `{sets}`: only the sets of workspaces this user mounted (`owner` = their uid)
 * - `kept.rm(ref)` → `{id, files}`: one of those, deleted
 * - `kept.read(ref)` → {@link KeptSetBytes}: one of those with its bytes, which the user's CLI
 *   writes as the user (`awc kept restore`); root never opens the directory the user names
 * - `attach(dir, {snapshot?, key?})`, `detach(dir, {force?})` → as src/service/attach.ts with
 *   `asUser` the caller: `dir` (the real path their CLI found) and every directory down to the
 *   mount points must be theirs, walked without following symlinks; `key` is the environment key
 *   their CLI computed (it only picks a snapshot of the namespace)
 *
 * @throws E_NOT_FOUND (no such set of theirs), E_USAGE (a set over 64 MiB: root restores it), what computeUsage throws
 */
export async function callDaemonSide(user: AllowedUser, awc: Awc, paths: AwcPaths, m: RemoteMethod, args: unknown[]): Promise<unknown> {
  const mine = (s: KeptSet): boolean => s.owner?.uid === user.uid;
  const ref = (i: number): string => {
    if (typeof args[i] !== 'string') throw new AwcError('E_USAGE', `${m} needs a string argument`);
    return args[i] as string;
  };
  if (m === 'usage') return computeUsage(awc);
  const asUser = { uid: user.uid, gid: user.gid };
  const opts = (typeof args[1] === 'object' && args[1] !== null ? args[1] : {}) as Record<string, unknown>;
  if (m === 'attach') {
    const { attach } = await import('../service/attach.js');
    const snapshot = typeof opts.snapshot === 'string' ? opts.snapshot : undefined;
    const key = typeof opts.key === 'object' && opts.key !== null ? (opts.key as EnvKeyResult) : undefined;
    return attach(awc, ref(0), { snapshot, key: key && checkKey(key), asUser });
  }
  if (m === 'detach') return (await import('../service/attach.js')).detach(awc, ref(0), { force: opts.force === true, asUser });
  if (m === 'kept.ls') return { sets: listKept(paths, args[0] === undefined ? undefined : ref(0)).filter(mine) };
  if (m === 'kept.rm') return removeKept(paths, ref(0), mine);
  if (m === 'kept.read') {
    const set = oneSet(paths, ref(0), mine);
    const bytes = set.files.reduce((n, f) => n + f.size, 0);
    if (bytes > KEPT_READ_MAX_BYTES)
      throw new AwcError('E_USAGE', `kept set ${set.id} holds ${bytes} bytes: too large to restore through the daemon`, {
        hint: `Ask an administrator to run \`awc kept restore ${set.id} <dir>\` as root.`,
      });
    return { set, contents: set.files.map((f) => readKeptFile(paths, set, f).toString('base64')) } satisfies KeptSetBytes;
  }
  throw new AwcError('E_INTERNAL', `${m} is not answered by the daemon itself`);
}
