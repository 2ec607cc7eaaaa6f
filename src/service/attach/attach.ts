import { createHash } from 'node:crypto';
import * as fs from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { mkdirPrivate, replaceFilePrivate } from '../../core/private-fs.js';
import type { SnapshotRow } from '../../catalog/port/catalog.js';
import { attachMountsDir, unmount } from '../../host/mount/mount-commands.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { bindMountNoSuid, detachMountFd } from '../../drivers/copy/bind-mount.js';
import { openOwnedDir } from '../../host/mount/owned-target.js';
import type { Awc } from '../workspace/awc.js';
import { envKey, type EnvKeyOptions, type EnvKeyResult } from './env-key.js';
import { readGitLink } from '../git/worktree-git.js';
import { checkBindTarget, checkEnvDir, createMountPoint, removeMountPoint, type AttachBind } from './attach-target.js';

/**
 * `awc attach` / `awc detach` (docs/explanation/attach.md): a prepared environment's
 * dependency directories mounted into a worktree a tool made. The snapshot is forked into a
 * private workspace mounted under the host state (`<home>/host/attach/mnt/<id>`), and each
 * dependency directory of it is bind-mounted (nosuid,nodev) at the same place in the
 * worktree. A record per attached worktree (`<home>/host/attach/<digest of its path>.json`)
 * says what to undo.
 */

/** Label of a snapshot: its environment key (docs/explanation/attach.md#the-environment-key). */
export const ENV_KEY_LABEL = 'awc.env-key';
/** Label of a snapshot: its dependency directories, comma-separated relative paths. */
export const ENV_DIRS_LABEL = 'awc.env-dirs';
/** Label of an attach workspace: the real path of the worktree it is attached to. */
export const ATTACH_DIR_LABEL = 'awc.attach.dir';

/** What a record of an attached worktree holds (`<home>/host/attach/<digest of its path>.json`). JSON. */
export interface AttachRecord {
  v: 1;
  /** The worktree (real path). */
  dir: string;
  workspace: string;
  snapshot: string;
  /** The worktree's environment key (null with an explicit snapshot and no lockfile). */
  envKey: string | null;
  /** Where the private workspace is mounted (under the host state). */
  mountPath: string;
  binds: AttachBind[];
  /** The ordinary user (uid) who attached it through the root daemon: only they detach it. Absent: root. */
  owner?: number;
  /** The namespace of the workspace (absent in records of older versions: the namespace `awc prune` runs in). */
  namespace?: string;
  /**
   * What the worktree's `.git` was when it was attached (worktree-git.ts): `file`, a linked git
   * worktree; `dir`, a repository of its own. Absent: no git worktree (or an older record):
   * `awc prune` then judges it by its directory and bind mounts only.
   */
  git?: 'dir' | 'file';
}

/** What `attach` did (or found done): the record, and what this call did. JSON. */
export interface AttachResult extends AttachRecord {
  /** The worktree was attached already: nothing was changed. */
  already: boolean;
  /**
   * The worktree was attached but its bind mounts no longer showed the workspace (the host
   * daemon restarted and mounted it anew): they were made again on the same workspace, whose
   * private writes are kept.
   */
  restored?: boolean;
}

/** What `detach` undid. JSON. */
export interface DetachResult {
  dir: string;
  workspace: string;
  /** Bind mounts removed (absolute paths). */
  unmounted: string[];
  /** Mount points attach had created and detach removed. */
  removedDirs: string[];
}

/** The directory of the attach records of a home. */
export function attachRecordsDir(awc: Pick<Awc, 'paths'>): string {
  return join(awc.paths.hostDir, 'attach');
}

/** The record file of the worktree `real`. */
export function recordPath(awc: Pick<Awc, 'paths'>, real: string): string {
  return join(attachRecordsDir(awc), `${createHash('sha256').update(real).digest('hex').slice(0, 32)}.json`);
}

/** The record at `path`, undefined when there is none. @throws a JSON or read error */
export async function readRecord(path: string): Promise<AttachRecord | undefined> {
  const text = await fs.readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  return text === undefined ? undefined : (JSON.parse(text) as AttachRecord);
}

/**
 * The real path of an existing directory outside the home; for an ordinary user (`uid`), an
 * absolute path without symlinks to a directory of theirs (openOwnedDir).
 * @throws E_SOURCE_NOT_FOUND, E_USAGE, E_PERMISSION (a user's: a symlink on the way, not theirs)
 */
async function worktreeOf(awc: Awc, dir: string, uid?: number): Promise<string> {
  let real: string | undefined;
  if (uid !== undefined) {
    const owned = openOwnedDir(dir, uid);
    real = owned.path;
    owned.close();
  } else {
    real = await fs.realpath(dir).catch(() => undefined);
    const st = real === undefined ? undefined : await fs.stat(real);
    if (!real || !st?.isDirectory()) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
  }
  const home = resolve(awc.config.home);
  if (real === home || real.startsWith(home + '/') || home.startsWith(real + '/'))
    throw new AwcError('E_USAGE', `${real} is, holds or lies inside the AWC home ${home}`);
  return real;
}

/**
 * The newest snapshot of the namespace labelled with the environment key `key`.
 * @returns undefined when there is none
 */
export async function findEnvSnapshot(awc: Awc, key: string): Promise<SnapshotRow | undefined> {
  return (await awc.listSnapshots({ labels: { [ENV_KEY_LABEL]: key } }))[0];
}

/** Options of `attach`. */
export interface AttachOptions extends EnvKeyOptions {
  /** Attach this snapshot instead of the newest one matching the worktree's environment key. */
  snapshot?: string;
  /**
   * An ordinary user's attach through the root daemon (docs/explanation/attach.md#ordinary-users):
   * the worktree and every directory to the mount points must be theirs (walked without following
   * symlinks), the workspace is mounted for them, and each bind goes through the opened descriptor.
   */
  asUser?: { uid: number; gid: number };
  /** The worktree's environment key as the user's CLI computed it (root never reads the user's lockfiles). */
  key?: EnvKeyResult;
}

/** An ordinary user's record that is not `uid`'s. @throws E_PERMISSION */
function checkOwner(rec: AttachRecord, uid: number | undefined): void {
  if (uid !== undefined && rec.owner !== uid)
    throw new AwcError('E_PERMISSION', `${rec.dir} was attached by ${rec.owner === undefined ? 'root' : `uid ${rec.owner}`}`, {
      hint: 'Only who attached a worktree (or root) detaches it.',
    });
}

/**
 * `awc attach <dir>`: picks the snapshot (`opts.snapshot`, else the newest with the
 * worktree's environment key), forks it into a workspace labelled `awc.attach.dir=<real
 * path>`, mounts it privately under the host state and bind-mounts each of its dependency
 * directories (label `awc.env-dirs`) into the worktree, nosuid,nodev. Idempotent: a
 * worktree whose binds all show its mounted workspace is answered with `already`; binds
 * that show a workspace mount that is gone (the host daemon restarted and remounted it) are
 * made again (`restored`); a record whose workspace is gone is cleaned and attached anew. On failure everything done is
 * undone. JSON in and out, so the host daemon can run it for an ordinary user.
 * @throws E_NO_ENV (no snapshot matches; the hint names the installs and `awc prepare`), E_SOURCE_NOT_FOUND,
 *   E_USAGE (no awc.env-dirs label, a bad path, a worktree in the home), E_TARGET_EXISTS (a non-empty dependency directory),
 *   E_SYMLINK, E_TARGET_BUSY, E_MOUNT_FAILED, and what Awc.fork and Awc.mount throw
 */
export async function attach(awc: Awc, dir: string, opts: AttachOptions = {}): Promise<AttachResult> {
  const uid = opts.asUser?.uid;
  const real = await worktreeOf(awc, dir, uid);
  const recPath = recordPath(awc, real);
  const rec = await readRecord(recPath);
  if (rec) {
    checkOwner(rec, uid);
    // a user's binds are not made again in place (only through new descriptors): attached anew
    const restored = uid === undefined ? await restore(awc, rec) : (await healthy(awc, rec)) ? false : undefined;
    if (restored !== undefined) return { ...rec, already: !restored, ...(restored ? { restored } : {}) };
    await undo(awc, rec, recPath, { force: true });
  }
  const key = opts.key ?? (await envKey(real, opts));
  let snap: SnapshotRow | undefined;
  if (opts.snapshot !== undefined) snap = await awc.getSnapshot(opts.snapshot);
  else if (key.lockfiles.length === 0)
    throw new AwcError('E_NO_ENV', `${real} has no lockfile, so no environment key to pick a snapshot by`, {
      hint: 'Name the snapshot: `awc attach <dir> --snapshot <ref>`.',
    });
  else snap = await findEnvSnapshot(awc, key.key);
  if (!snap) {
    const installs = key.installs.join(' && ');
    throw new AwcError('E_NO_ENV', `no prepared environment matches ${real} (environment key ${key.key})`, {
      hint: `In a checkout with these lockfiles (${key.lockfiles.map((l) => l.path).join(', ')}) run \`${installs}\`, then \`awc prepare <that checkout>\`; attach again.`,
      details: { envKey: key.key, lockfiles: key.lockfiles.map((l) => l.path), installs: key.installs },
    });
  }
  const rels = (snap.labels[ENV_DIRS_LABEL] ?? '').split(',').filter((d) => d !== '');
  if (rels.length === 0)
    throw new AwcError('E_USAGE', `snapshot ${snap.id} has no ${ENV_DIRS_LABEL} label: it names no dependency directory`, {
      hint: 'Prepare the environment with `awc prepare <dir>`, which labels the snapshot with the directories it holds.',
    });
  rels.forEach(checkEnvDir);
  const plan = rels.map((rel) => ({ rel, target: `${real}/${rel}`, created: checkBindTarget(real, rel, uid).create }));
  const [ws] = await awc.fork(snap.id, { labels: { [ATTACH_DIR_LABEL]: real } });
  const record: AttachRecord = {
    v: 1,
    dir: real,
    workspace: ws!.id,
    snapshot: snap.id,
    envKey: key.lockfiles.length ? key.key : null,
    mountPath: join(attachMountsDir(awc.config.home), ws!.id),
    binds: [],
    ...(uid !== undefined ? { owner: uid } : {}),
    namespace: awc.namespace,
    ...gitKind(real),
  };
  try {
    await mkdirPrivate(attachMountsDir(awc.config.home));
    await replaceFilePrivate(recPath, JSON.stringify(record));
    if (opts.asUser) {
      // the user's mount wants a directory of theirs (under the 0700 home, out of their reach)
      await fs.mkdir(record.mountPath, { mode: 0o700 });
      await fs.chown(record.mountPath, opts.asUser.uid, opts.asUser.gid);
    }
    await awc.mount(ws!.id, record.mountPath, opts.asUser ? { asUser: opts.asUser } : undefined);
    for (const b of plan) {
      const src = join(record.mountPath, b.rel);
      const st = await fs.lstat(src).catch(() => undefined);
      if (!st?.isDirectory())
        throw new AwcError('E_USAGE', `snapshot ${snap.id} has no directory ${b.rel} (its ${ENV_DIRS_LABEL} label names it)`);
      if (b.created) createMountPoint(real, b.rel, uid);
      record.binds.push(b);
      await replaceFilePrivate(recPath, JSON.stringify(record));
      if (uid === undefined) await bindMountNoSuid(src, b.target);
      else {
        const t = openOwnedDir(b.target, uid);
        try {
          await bindMountNoSuid(src, b.target, t.fd);
        } finally {
          t.close();
        }
      }
      // the walk checked every component; a swap since would have put the mount elsewhere
      if (!isMounted(b.target)) throw new AwcError('E_MOUNT_FAILED', `${b.target} is not a mount point after the bind mount`);
    }
  } catch (err) {
    await undo(awc, record, recPath, { force: true }).catch(() => undefined);
    throw err;
  }
  return { ...record, already: false };
}

/** What the worktree's `.git` is now (`git` of the record), when it is a git worktree. */
function gitKind(real: string): { git?: 'dir' | 'file' } {
  const link = readGitLink(real);
  return link.kind === 'dir' || link.kind === 'file' ? { git: link.kind } : {};
}

/** The device of the file system at `path` (undefined when it cannot be reached: a mount whose FUSE server is gone). */
async function devOf(path: string): Promise<number | undefined> {
  return (await fs.stat(path).catch(() => undefined))?.dev;
}

/** Whether every bind of an attached worktree shows its workspace's mount (same device). */
async function healthy(awc: Awc, rec: AttachRecord): Promise<boolean> {
  if (!(await awc.getWorkspace(rec.workspace).catch(() => undefined)) || !isMounted(rec.mountPath)) return false;
  const mnt = await devOf(rec.mountPath);
  for (const b of rec.binds) if (!isMounted(b.target) || (await devOf(b.target)) !== mnt) return false;
  return mnt !== undefined;
}

/**
 * Checks an attached worktree: false when every bind shows the workspace mount (same
 * device), true when the binds were made again onto the workspace's current mount (mounted
 * anew, resuming its private changes, if it was not mounted), undefined when the workspace
 * is gone (the caller attaches anew).
 */
async function restore(awc: Awc, rec: AttachRecord): Promise<boolean | undefined> {
  const ws = await awc.getWorkspace(rec.workspace).catch(() => undefined);
  if (!ws) return undefined;
  const mnt = isMounted(rec.mountPath) ? await devOf(rec.mountPath) : undefined;
  if (mnt !== undefined) {
    let healthy = true;
    for (const b of rec.binds) healthy &&= isMounted(b.target) && (await devOf(b.target)) === mnt;
    if (healthy) return false;
  }
  // the binds first: after a daemon death they hold the old overlay, and the daemon remounts a
  // workspace only once its old overlay has no users (drivers/overlay/pending-remounts.ts)
  for (const b of rec.binds) await unmount(b.target, true);
  if (mnt === undefined) {
    await unmount(rec.mountPath, true);
    await mountOrAwaitRemount(awc, ws.id, rec.mountPath);
  }
  for (const b of rec.binds) await bindMountNoSuid(join(rec.mountPath, b.rel), b.target);
  return true;
}

/** How long restore waits for the daemon's own remount (ms; it retries every second). */
const REMOUNT_WAIT_MS = 30_000;

/**
 * Mounts workspace `id` at `path`; when the catalog already has it mounted there (the daemon
 * is remounting it after a restart, retrying every second), waits until the mount is there.
 * @throws E_ALREADY_MOUNTED when it is not there after REMOUNT_WAIT_MS; what Awc.mount throws
 */
async function mountOrAwaitRemount(awc: Awc, id: string, path: string): Promise<void> {
  try {
    await awc.mount(id, path);
    return;
  } catch (err) {
    if (!(err instanceof AwcError) || err.code !== 'E_ALREADY_MOUNTED') throw err;
    const deadline = Date.now() + REMOUNT_WAIT_MS;
    while (Date.now() < deadline) {
      if (isMounted(path)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw err;
  }
}

/**
 * `awc detach <dir>`: unmounts the bind mounts of an attached worktree, removes the mount
 * points attach created, then unmounts and removes the private workspace without a
 * checkpoint (its content is reconstructible: the prepared snapshot plus an install).
 * `force` detaches busy mounts lazily.
 * @throws E_NOT_MOUNTED (the worktree is not attached), E_TARGET_BUSY (a process uses a mount; use force)
 */
export async function detach(
  awc: Awc,
  dir: string,
  opts: { force?: boolean; asUser?: { uid: number; gid: number } } = {},
): Promise<DetachResult> {
  // a user's CLI sends the real path; root never resolves a user's symlinks
  const real = opts.asUser ? resolve(dir) : await fs.realpath(dir).catch(() => resolve(dir));
  const recPath = recordPath(awc, real);
  const rec = await readRecord(recPath);
  if (!rec)
    throw new AwcError('E_NOT_MOUNTED', `${real} is not attached`, {
      hint: 'Attach it with `awc attach <dir>`; `awc ls` lists workspaces.',
    });
  checkOwner(rec, opts.asUser?.uid);
  return undo(awc, rec, recPath, opts);
}

/** Undoes an attach as far as its record says it got (see detach). */
async function undo(awc: Awc, rec: AttachRecord, recPath: string, opts: { force?: boolean }): Promise<DetachResult> {
  const out: DetachResult = { dir: rec.dir, workspace: rec.workspace, unmounted: [], removedDirs: [] };
  for (const b of [...rec.binds].reverse()) {
    if (isMounted(b.target)) {
      if (rec.owner === undefined) await unmount(b.target, opts.force === true);
      else {
        // a user's worktree: the mount the walk (no symlink, theirs) reaches, detached through its descriptor
        const t = openOwnedDir(b.target, rec.owner);
        try {
          await detachMountFd(t.fd, b.target);
        } finally {
          t.close();
        }
      }
      out.unmounted.push(b.target);
    }
    // only the empty directory attach made (rmdir never removes content), through descriptors
    if (b.created && removeMountPoint(rec.dir, b.rel, rec.owner)) out.removedDirs.push(b.target);
  }
  await awc.rm(rec.workspace, { force: true }).catch((err: unknown) => {
    if (!(err instanceof AwcError && err.code === 'E_NOT_FOUND')) throw err;
  });
  await fs.rmdir(rec.mountPath).catch(() => undefined);
  await fs.rm(recPath, { force: true });
  return out;
}
