import * as fs from 'node:fs';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { DirFd } from '../../core/dir-fd.js';
import { detachMountFd } from '../../drivers/copy/bind-mount.js';
import { fdinfoMountId, mountHolders, type MountHolder } from '../../host/mount/mount-holders.js';
import { isMounted, readMountInfo } from '../../host/mount/mount-table.js';
import type { Awc } from '../workspace/awc.js';
import { attachRecordsDir, readRecord, type AttachRecord } from './attach.js';
import { removeMountPoint } from './attach-target.js';
import { worktreeGone } from '../git/worktree-git.js';

/**
 * The attach side of `awc prune` and of the host daemon's worktree sweep
 * (docs/explanation/attach.md#when-the-tool-removes-the-worktree): finds worktrees a tool
 * removed without `awc detach` (Cursor deleting its worktree, `git worktree remove --force`,
 * `git worktree prune`) and releases their private workspaces.
 *
 * What git does to an attached worktree, found with real git and real bind mounts: `git
 * worktree remove --force` deletes the worktree's files depth first, through the bind mounts
 * (the workspace's dependency files are deleted in its upper), removes the worktree's `.git`
 * file and its registration in the project (`.git/worktrees/<name>`), then fails on the
 * mount point (EBUSY: "failed to delete"): the directory stays, holding the bind mounts and
 * whatever git had not reached yet. The workspace then holds deletions only, which are not
 * work (the prepared snapshot has the files back); anything else it holds (a file added or
 * changed, outside what git reached) is checkpointed before it is released.
 */

/** Label of the checkpoint a prune makes of an attach workspace: the worktree it was attached to. */
export const ATTACH_CHECKPOINT_LABEL = 'awc.attach.checkpoint-of';

/**
 * Why an attached worktree is orphaned: its directory is gone; its `.git` is gone
 * (`not-a-worktree`); its registration in the project is gone (`unregistered`: `git
 * worktree prune` / `remove` ran); a bind mount is no longer at its attach path
 * (`binds-gone`); or the workspace of the record no longer exists (`workspace-gone`).
 */
export type AttachOrphanReason = 'directory-gone' | 'not-a-worktree' | 'unregistered' | 'binds-gone' | 'workspace-gone';

/**
 * What the prune did with one orphaned worktree: `released` (checkpointed when it held
 * work, bind mounts detached, workspace removed, record dropped), `would-release` (dry
 * run), `busy` (a process uses a mount: `holders`; left as it is), `in-progress` (another
 * prune holds its lock), `gone` (released meanwhile by another prune), `failed` (`error`).
 */
export type AttachPruneStatus = 'released' | 'would-release' | 'busy' | 'in-progress' | 'gone' | 'failed';

/** One orphaned attached worktree and what the prune did. JSON. */
export interface AttachPruneEntry {
  /** The worktree (real path when it was attached). */
  dir: string;
  workspace: string;
  reason: AttachOrphanReason;
  status: AttachPruneStatus;
  /** Whether the workspace held work (changes other than deletions), and why; null: the diff failed (it is checkpointed). */
  work?: { work: boolean | null; why: string };
  /** The checkpoint that keeps its work (absent: nothing to keep, or a dry run). */
  checkpoint?: string;
  /** Bind mounts detached (absolute paths). */
  unmounted?: string[];
  /** The processes that hold a mount (status `busy`): pid, command, how. */
  holders?: MountHolder[];
  /** The worktree's directory is still there after the release (git's removal stopped at the mount): the user's to remove. */
  left?: boolean;
  error?: { code: string; message: string };
}

/** The attach part of a prune report. JSON. */
export interface AttachPruneReport {
  /** Orphaned attached worktrees found, with what was done. */
  orphaned: AttachPruneEntry[];
  /** Attached worktrees that are live (kept). */
  kept: number;
  /** Records of other namespaces, left to a prune there. */
  others: number;
}

/** A record with its file. */
interface Found {
  rec: AttachRecord;
  path: string;
}

/** Every attach record of the home (unreadable ones skipped). */
async function records(awc: Pick<Awc, 'paths'>): Promise<Found[]> {
  const dir = attachRecordsDir(awc);
  const names = await fs.promises.readdir(dir).catch(() => [] as string[]);
  const out: Found[] = [];
  for (const n of names.filter((n) => n.endsWith('.json')).sort()) {
    const rec = await readRecord(join(dir, n)).catch(() => undefined);
    if (rec?.v === 1 && typeof rec.dir === 'string' && Array.isArray(rec.binds)) out.push({ rec, path: join(dir, n) });
  }
  return out;
}

/** The namespaces of the attach records of a home (a record of an older version names none: left out). */
export async function attachNamespaces(home: Pick<Awc, 'paths'>): Promise<string[]> {
  const found = await records(home);
  return [...new Set(found.flatMap((f) => (f.rec.namespace ? [f.rec.namespace] : [])))];
}

/** Why the attached worktree of `rec` is orphaned, or undefined while it is live. */
export async function attachOrphanReason(awc: Awc, rec: AttachRecord): Promise<AttachOrphanReason | undefined> {
  const ws = await awc.getWorkspace(rec.workspace).catch((err: unknown) => {
    if (err instanceof AwcError && err.code === 'E_NOT_FOUND') return undefined;
    throw err;
  });
  if (!ws) return 'workspace-gone';
  if (!fs.lstatSync(rec.dir, { throwIfNoEntry: false })) return 'directory-gone';
  const gone = rec.git ? worktreeGone(rec.dir) : undefined;
  if (gone) return gone;
  if (rec.binds.some((b) => !isMounted(b.target))) return 'binds-gone';
  return undefined;
}

/**
 * Finds the orphaned attached worktrees of `awc`'s namespace on this host (records of the
 * home; see attachOrphanReason) and releases each (releaseOrphan). A failure is reported on
 * its entry; the others go on. `dryRun` changes nothing (busy mounts and work are still
 * reported). Needs the home in process (root's, or a user's own).
 */
export async function pruneAttached(awc: Awc, opts: { dryRun?: boolean } = {}): Promise<AttachPruneReport> {
  const report: AttachPruneReport = { orphaned: [], kept: 0, others: 0 };
  for (const f of await records(awc)) {
    if ((f.rec.namespace ?? awc.namespace) !== awc.namespace) {
      report.others++;
      continue;
    }
    const reason = await attachOrphanReason(awc, f.rec).catch(() => undefined);
    if (reason === undefined) {
      report.kept++;
      continue;
    }
    const entry: AttachPruneEntry = { dir: f.rec.dir, workspace: f.rec.workspace, reason, status: 'failed' };
    try {
      await releaseOrphan(awc, f.path, entry, opts.dryRun === true);
    } catch (err) {
      const e = toAwcError(err);
      entry.status = 'failed';
      entry.error = { code: e.code, message: e.message };
    }
    report.orphaned.push(entry);
  }
  return report;
}

/**
 * Releases one orphaned attached worktree under its lock (`<record>.prune`, so two prunes
 * never release one twice): read its record again (gone: `gone`); a mount some process
 * uses (a bind or the workspace's own) is left alone (`busy`, naming them); the workspace's
 * changes other than deletions are checkpointed (labelled `awc.attach.checkpoint-of=<dir>`);
 * each bind mount is detached lazily through a descriptor walked from `/` without following
 * symlinks (what git left in the dead directory may be anything), the mount points attach
 * made are removed (rmdir through descriptors), the workspace removed and the record dropped.
 * The rest of the directory is the user's: reported (`left`), never removed.
 * @throws what checkpoint, diff and rm throw (the record is kept: a later prune goes on)
 */
async function releaseOrphan(awc: Awc, recPath: string, entry: AttachPruneEntry, dryRun: boolean): Promise<void> {
  const unlock = dryRun ? () => undefined : lock(`${recPath}.prune`);
  if (unlock === undefined) {
    entry.status = 'in-progress';
    return;
  }
  try {
    const rec = await readRecord(recPath);
    if (!rec || rec.workspace !== entry.workspace) {
      entry.status = 'gone';
      return;
    }
    const holders = holdersOf(rec);
    if (holders.length > 0) {
      entry.status = 'busy';
      entry.holders = holders;
      return;
    }
    const ws = entry.reason === 'workspace-gone' ? undefined : await awc.getWorkspace(rec.workspace).catch(() => undefined);
    if (ws) entry.work = await workOf(awc, ws.id);
    if (dryRun) {
      entry.status = 'would-release';
      return;
    }
    if (ws && entry.work?.work !== false) {
      const cp = await awc.checkpoint(ws.id, { message: `attached ${rec.dir}: pruned (${entry.reason})` });
      if (cp.changed) await awc.setLabels(cp.id, { [ATTACH_CHECKPOINT_LABEL]: rec.dir });
      entry.checkpoint = cp.id;
    }
    entry.unmounted = await detachBinds(rec);
    if (ws) await awc.rm(ws.id, { force: true }).catch(ignoreNotFound);
    await fs.promises.rmdir(rec.mountPath).catch(() => undefined);
    await fs.promises.rm(recPath, { force: true });
    entry.left = fs.lstatSync(rec.dir, { throwIfNoEntry: false }) !== undefined;
    entry.status = 'released';
  } finally {
    unlock();
  }
}

function ignoreNotFound(err: unknown): void {
  if (!(err instanceof AwcError && err.code === 'E_NOT_FOUND')) throw err;
}

/**
 * Takes the lock file `path` (O_EXCL, holding this process's pid); a lock whose process is
 * gone is taken over once.
 * @returns the release function, or undefined when a live process holds it
 */
function lock(path: string): (() => void) | undefined {
  for (let tries = 0; tries < 2; tries++) {
    try {
      const fd = fs.openSync(path, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      return () => fs.rmSync(path, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number(fs.readFileSync(path, 'utf8').trim());
      if (Number.isSafeInteger(pid) && pid > 0 && alive(pid)) return undefined;
      fs.rmSync(path, { force: true });
    }
  }
  return undefined;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The processes holding a bind mount of `rec` or its workspace's mount (deduplicated by pid). */
function holdersOf(rec: AttachRecord): MountHolder[] {
  const all = [...rec.binds.map((b) => b.target).filter((t) => isMounted(t)), rec.mountPath].flatMap((t) => mountHolders(t));
  const seen = new Set<number>();
  return all.filter((h) => !seen.has(h.pid) && seen.add(h.pid));
}

/**
 * Whether the workspace holds work: a change other than a deletion (what a removal through
 * the bind mounts leaves) against its head. A diff that fails says null (then it is checkpointed).
 */
async function workOf(awc: Awc, id: string): Promise<{ work: boolean | null; why: string }> {
  try {
    const { changes } = await awc.diff(id);
    const kept = changes.filter((c) => c.status !== 'deleted');
    if (kept.length === 0)
      return { work: false, why: changes.length ? `deletions only (${changes.length} path(s))` : 'no changes since it was attached' };
    return { work: true, why: `${kept.length} path(s) added or changed: ${kept[0]!.path}${kept.length > 1 ? ', …' : ''}` };
  } catch (err) {
    return { work: null, why: `the diff failed: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/**
 * Detaches (lazily) each bind mount of `rec` that is still at its path, and removes the mount
 * points attach made. Each target is walked from `/` one component at a time with
 * O_NOFOLLOW (DirFd.openRel): a symlink put in the dead directory stops the walk, and only a
 * mount whose root the descriptor is (its mount id is the one mounted at exactly that path)
 * is detached, through the descriptor.
 * @returns the targets detached
 */
async function detachBinds(rec: AttachRecord): Promise<string[]> {
  const out: string[] = [];
  for (const b of [...rec.binds].reverse()) {
    if (isMounted(b.target) && (await detachAt(b.target))) out.push(b.target);
    if (b.created) removeMountPoint(rec.dir, b.rel, rec.owner);
  }
  return out;
}

/** Detaches the mount at exactly `target` through a descriptor (see detachBinds). @returns whether it did */
async function detachAt(target: string): Promise<boolean> {
  const root = DirFd.openRoot('/');
  if (!root) return false;
  let dir: DirFd;
  try {
    dir = root.dir.openRel(target.slice(1));
  } catch {
    return false;
  } finally {
    root.dir.close();
  }
  try {
    const id = fdinfoMountId(`/proc/self/fdinfo/${dir.fd}`);
    const latin = Buffer.from(target, 'utf8').toString('latin1');
    if (id === undefined || !readMountInfo().some((m) => m.mountId === id && m.mountPoint === latin)) return false;
    await detachMountFd(dir.fd, target);
    return true;
  } finally {
    dir.close();
  }
}
