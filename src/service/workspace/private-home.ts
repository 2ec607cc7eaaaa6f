import { chmod, lstat, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { mkdirPrivate, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../../core/private-fs.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import type { AwcPaths } from '../../config/config.js';

/**
 * Makes sure the home exists and is private before anything is stored in it: created
 * 0700 (with its `objects` directory) when missing. A home that exists with looser modes
 * (made by an older AWC) is tightened once: the home itself
 * 0700, the catalog files, config, pid and log files 0600, every directory and file of the
 * object store and the chunk cache 0700/0600, and the host directories 0700. Layer trees,
 * uppers and work directories keep their snapshot modes (they sit under the 0700 host
 * directory).
 * @throws E_PERMISSION when the home belongs to another user (whoever owns it could read
 *   or replace anything AWC writes there), or from a mapped fs error; E_READ_ONLY / E_NO_SPACE
 */
export async function prepareHome(paths: AwcPaths): Promise<void> {
  try {
    let st;
    try {
      st = await stat(paths.home);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const uid = process.getuid?.();
    if (st && uid !== undefined && st.uid !== uid) {
      throw new AwcError('E_PERMISSION', `the AWC home ${paths.home} belongs to uid ${st.uid}, not to this user (uid ${uid})`, {
        hint: 'Use a home owned by the user AWC runs as (pass --home or AWC_HOME), or fix its owner.',
      });
    }
    if (st && (st.mode & 0o077) !== 0) await tightenHome(paths);
    await mkdirPrivate(paths.objects);
  } catch (err) {
    throw toAwcError(err);
  }
}

/** Tightens an existing home (see {@link prepareHome}). Never follows a symlink inside it. */
async function tightenHome(paths: AwcPaths): Promise<void> {
  await chmod(paths.home, PRIVATE_DIR_MODE);
  for (const f of [
    paths.catalog,
    `${paths.catalog}-wal`,
    `${paths.catalog}-shm`,
    join(paths.home, 'config.json'),
    paths.pidFile,
    paths.logFile,
  ])
    await tightenFile(f);
  await tightenTree(paths.objects);
  if (!(await isDir(paths.hostDir))) return;
  await chmod(paths.hostDir, PRIVATE_DIR_MODE);
  await tightenTree(paths.cache);
  for (const top of [paths.layers, paths.workspaces]) {
    if (!(await isDir(top))) continue;
    await chmod(top, PRIVATE_DIR_MODE);
    // one level: <layers>/<root hex> and <workspaces>/<id>, with their json files; not the trees, uppers or work dirs
    for (const name of await readdir(top)) {
      const d = join(top, name);
      if (!(await isDir(d))) continue;
      await chmod(d, PRIVATE_DIR_MODE);
      for (const f of await readdir(d)) if (f.endsWith('.json')) await tightenFile(join(d, f));
    }
  }
}

/** Every directory 0700 and every regular file 0600 under `dir` (symlinks are left alone, never followed). */
async function tightenTree(dir: string): Promise<void> {
  if (!(await isDir(dir))) return;
  await chmod(dir, PRIVATE_DIR_MODE);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await tightenTree(p);
    else if (e.isFile()) await chmod(p, PRIVATE_FILE_MODE);
  }
}

async function tightenFile(path: string): Promise<void> {
  const st = await lstat(path).catch(() => undefined);
  if (st?.isFile()) await chmod(path, PRIVATE_FILE_MODE);
}

async function isDir(path: string): Promise<boolean> {
  const st = await lstat(path).catch(() => undefined);
  return st?.isDirectory() === true;
}
