import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import { DirFd } from '../../core/dir-fd.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { removeTreeSync } from '../../core/remove-tree.js';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, mkdirPrivateSync, replaceFilePrivateSync } from '../../core/private-fs.js';

/** One kept file: its path in the workspace, its size in bytes and where the host keeps it. */
export interface KeptFile {
  path: string;
  size: number;
  keptAt: string;
}

/** A set of files kept when a workspace's host state was dropped (`awc kept ls`). */
export interface KeptSet {
  /** The set's id (`<workspace id>-<ms since epoch>`), what `awc kept restore|rm` take. */
  id: string;
  workspace: string;
  name: string | null;
  /** When they were kept (ms since epoch). */
  atMs: number;
  files: KeptFile[];
  /**
   * The user who mounted the workspace (its host state's `owner`): their files, 0600, and only
   * they (and root) list, restore or remove the set through the daemon. Absent: root's.
   */
  owner?: { uid: number; gid: number };
}

const MANIFEST = 'kept.json';

/** Where kept files live: `<home>/<host dir>/kept/` beside the workspaces' host directories (0700). */
export function keptRoot(paths: { workspaces: string }): string {
  return join(dirname(paths.workspaces), 'kept');
}

/**
 * Keeps the secret files of a workspace whose host state is dropped (rm, unmount --discard):
 * each is copied, from the descriptor the walk opened (never through a path), to
 * `<kept>/<set id>/files/<path>` (0700 directories, 0600 files); `finish` writes the set's
 * manifest. docs/explanation/capture-classes.md#nothing-lost-on-remove says why it keeps rather than refuses.
 */
export class Keeper {
  readonly files: KeptFile[] = [];
  readonly id: string;
  private readonly dir: string;

  constructor(
    paths: { workspaces: string },
    private readonly ws: { id: string; name: string | null },
    private readonly atMs = Date.now(),
    private readonly owner?: { uid: number; gid: number },
  ) {
    this.id = `${ws.id}-${atMs}`;
    this.dir = join(keptRoot(paths), this.id);
  }

  /** Copies the file open at `fd` (`rel` its slash path in the workspace). @throws E_NO_SPACE, E_PERMISSION… (nothing is removed then) */
  keep(rel: string, fd: number, size: number): void {
    const dest = join(this.dir, 'files', rel);
    try {
      mkdirPrivateSync(join(this.dir, 'files'));
      // through descriptors, one directory at a time: a workspace path may be longer than PATH_MAX
      const parent = openKeptParent(join(this.dir, 'files'), rel, true);
      try {
        const out = fs.openSync(
          parent.path(baseName(rel)),
          fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
          PRIVATE_FILE_MODE,
        );
        try {
          // a user's secrets stay theirs (docs/explanation/security.md#per-user-sockets)
          if (this.owner) fs.fchownSync(out, this.owner.uid, this.owner.gid);
          copyFd(fd, out);
        } finally {
          fs.closeSync(out);
        }
      } finally {
        parent.close();
      }
    } catch (err) {
      throw toAwcError(err);
    }
    this.files.push({ path: rel, size, keptAt: dest });
  }

  /** Writes the manifest (when anything was kept) and returns the kept files. */
  finish(): KeptFile[] {
    if (this.files.length === 0) return [];
    const set: KeptSet = {
      id: this.id,
      workspace: this.ws.id,
      name: this.ws.name,
      atMs: this.atMs,
      files: this.files,
      ...(this.owner ? { owner: this.owner } : {}),
    };
    replaceFilePrivateSync(join(this.dir, MANIFEST), JSON.stringify(set, null, 2) + '\n');
    return this.files;
  }
}

/** The last name of a slash path. */
function baseName(rel: string): string {
  return rel.slice(rel.lastIndexOf('/') + 1);
}

/**
 * Opens the parent directory of `rel` (a kept file's slash path, any length) below `filesDir`
 * one directory at a time, never through a symlink; with `create`, missing directories are
 * made 0700 on the way. Close it.
 * @throws AwcError E_PATH_TRAVERSAL when a directory on the way is not one; E_NOT_FOUND when missing (without `create`)
 */
function openKeptParent(filesDir: string, rel: string, create: boolean): DirFd {
  const opened = DirFd.openRoot(filesDir);
  if (!opened) throw new AwcError('E_NOT_FOUND', `kept files are gone: ${filesDir}`);
  let parent = opened.dir;
  try {
    for (const p of rel.split('/').slice(0, -1)) {
      if (create && !parent.lstat(p)) {
        fs.mkdirSync(parent.path(p), PRIVATE_DIR_MODE);
        fs.chmodSync(parent.path(p), PRIVATE_DIR_MODE);
      }
      const next = parent.openRel(p);
      parent.close();
      parent = next;
    }
    return parent;
  } catch (err) {
    parent.close();
    throw err;
  }
}

/**
 * The bytes of one kept file of `set`, read through descriptors (its path may be longer than PATH_MAX).
 * @throws AwcError E_NOT_FOUND when it is gone, E_PATH_TRAVERSAL when the kept tree was tampered with
 */
export function readKeptFile(paths: { workspaces: string }, set: KeptSet, f: KeptFile): Buffer {
  const parent = openKeptParent(join(keptRoot(paths), set.id, 'files'), f.path, false);
  try {
    const fd = fs.openSync(parent.path(baseName(f.path)), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      return fs.readFileSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch (err) {
    throw toAwcError(err);
  } finally {
    parent.close();
  }
}

function copyFd(from: number, to: number): void {
  const buf = Buffer.alloc(1024 * 1024);
  for (let pos = 0; ;) {
    const n = fs.readSync(from, buf, 0, buf.length, pos);
    if (n === 0) return;
    fs.writeSync(to, buf, 0, n);
    pos += n;
  }
}

/** The kept sets on this host, oldest first; `ref` keeps those of one workspace (id or name) or one set (its id). */
export function listKept(paths: { workspaces: string }, ref?: string): KeptSet[] {
  const root = keptRoot(paths);
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return [];
  }
  const sets: KeptSet[] = [];
  for (const n of names) {
    try {
      sets.push(JSON.parse(fs.readFileSync(join(root, n, MANIFEST), 'utf8')) as KeptSet);
    } catch {
      // a set being written (no manifest yet): not listed
    }
  }
  return sets.filter((s) => ref === undefined || s.id === ref || s.workspace === ref || s.name === ref).sort((a, b) => a.atMs - b.atMs);
}

/**
 * The one set `ref` names (a set id, or a workspace: its newest set) among those `mine`
 * accepts (an ordinary user's: theirs). @throws E_NOT_FOUND
 */
export function oneSet(paths: { workspaces: string }, ref: string, mine: (s: KeptSet) => boolean = () => true): KeptSet {
  const sets = listKept(paths, ref).filter(mine);
  const set = sets.find((s) => s.id === ref) ?? sets.at(-1);
  if (!set) throw new AwcError('E_NOT_FOUND', `no kept files for ${JSON.stringify(ref)}`, { hint: 'List them with `awc kept ls`.' });
  return set;
}

/**
 * Copies a kept set's files into directory `dir` (a workspace's mount, usually) at their
 * paths: parent directories are created (0700), never through a symlink (E_PATH_TRAVERSAL),
 * and files are created 0600, never over an existing name: when any exists nothing is
 * written (E_TARGET_EXISTS, listing them). The kept copies stay until `removeKept`.
 * @throws E_NOT_FOUND, E_SOURCE_NOT_FOUND (no directory), E_TARGET_EXISTS, E_PATH_TRAVERSAL
 */
export function restoreKept(paths: { workspaces: string }, ref: string, dir: string): { id: string; restored: string[] } {
  const set = oneSet(paths, ref);
  return restoreKeptSet(set, dir, (f, dest) =>
    fs.writeFileSync(dest, readKeptFile(paths, set, f), { flag: 'wx', mode: PRIVATE_FILE_MODE }),
  );
}

/**
 * restoreKept's writer, with the bytes from `write(file, dest)`, which creates `dest` (a path
 * through the opened parent) exclusively: the kept copy on this host, or (an ordinary
 * user's CLI, as the user) the bytes the daemon sent. Files end 0600.
 * @throws E_SOURCE_NOT_FOUND (no directory), E_TARGET_EXISTS, E_PATH_TRAVERSAL
 */
export function restoreKeptSet(
  set: KeptSet,
  dir: string,
  write: (f: KeptFile, dest: string | Buffer) => void,
): { id: string; restored: string[] } {
  const opened = DirFd.openRoot(dir);
  if (!opened) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
  const root = opened.dir;
  try {
    const exists = set.files.filter((f) => existsBelow(root, f.path));
    if (exists.length > 0)
      throw new AwcError(
        'E_TARGET_EXISTS',
        `${exists.length} kept file(s) exist in ${dir} already: ${exists.map((f) => f.path).join(', ')}`,
        {
          hint: 'Move them away first, or restore into an empty directory and compare.',
          details: { paths: exists.map((f) => f.path) },
        },
      );
    for (const f of set.files) restoreOne(root, f, write);
  } catch (err) {
    throw toAwcError(err);
  } finally {
    root.close();
  }
  return { id: set.id, restored: set.files.map((f) => f.path) };
}

/** Writes kept file `f` below `root` at its path with `write`, creating missing parents (0700) through opened descriptors; the file ends 0600. */
function restoreOne(root: DirFd, f: KeptFile, write: (f: KeptFile, dest: string | Buffer) => void): void {
  const parts = f.path.split('/');
  let parent = root.openRel('');
  try {
    for (const p of parts.slice(0, -1)) {
      if (!fs.existsSync(parent.path(p))) fs.mkdirSync(parent.path(p), PRIVATE_DIR_MODE);
      const next = parent.openRel(p);
      parent.close();
      parent = next;
    }
    write(f, parent.path(parts[parts.length - 1]!));
    fs.chmodSync(parent.path(parts[parts.length - 1]!), PRIVATE_FILE_MODE);
  } finally {
    parent.close();
  }
}

/** Whether `rel` (a slash path, any length) names something below `root`; false when a directory on the way is missing or not a directory. */
function existsBelow(root: DirFd, rel: string): boolean {
  const slash = rel.lastIndexOf('/');
  let parent: DirFd;
  try {
    parent = root.openRel(slash < 0 ? '' : rel.slice(0, slash));
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_PATH_TRAVERSAL') return false;
    throw err;
  }
  try {
    return parent.lstat(rel.slice(slash + 1)) !== undefined;
  } finally {
    parent.close();
  }
}

/** Deletes a kept set (`awc kept rm`) among those `mine` accepts (see oneSet). @throws E_NOT_FOUND */
export function removeKept(
  paths: { workspaces: string },
  ref: string,
  mine: (s: KeptSet) => boolean = () => true,
): { id: string; files: number } {
  const set = oneSet(paths, ref, mine);
  removeTreeSync(join(keptRoot(paths), set.id));
  return { id: set.id, files: set.files.length };
}
