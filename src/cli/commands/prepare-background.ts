import { spawn } from 'node:child_process';
import { closeSync, openSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { mkdirPrivate, PRIVATE_FILE_MODE } from '../../core/private-fs.js';
import { AwcError } from '../../core/errors.js';
import { throughDaemon, type OpenedAwc } from '../remote/through-daemon.js';

/** What `awc prepare --background` answers: the detached process and where it writes. */
export interface BackgroundPrepare {
  dir: string;
  pid: number;
  log: string;
}

/**
 * `awc prepare … --background`: runs the same command without `--background` in a detached
 * process (its own session, no terminal, stdin closed; stdout and stderr appended to
 * `<home>/host/prepare.log`, 0600), and returns at once, so a `post-merge` or
 * `post-checkout` git hook does not wait for it (docs/how-to/cursor.md#keep-the-prepared-snapshot-following-main).
 * Concurrent ones of one environment key build once (the build lease).
 * @throws E_SOURCE_NOT_FOUND (no such directory), E_IO (the process could not start)
 */
export async function prepareInBackground(awc: OpenedAwc, dir: string): Promise<BackgroundPrepare> {
  const abs = resolve(dir);
  try {
    realpathSync(abs);
  } catch {
    throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`, { details: { path: dir } });
  }
  const logDir = throughDaemon(awc) ? join(tmpdir(), `awc-${process.getuid?.() ?? 'user'}`) : awc.paths.hostDir;
  await mkdirPrivate(logDir);
  const log = join(logDir, 'prepare.log');
  const fd = openSync(log, 'a', PRIVATE_FILE_MODE);
  try {
    const args = [...process.execArgv, realpathSync(process.argv[1]!), ...process.argv.slice(2).filter((a) => a !== '--background')];
    const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', fd, fd], env: process.env, cwd: process.cwd() });
    const pid = await new Promise<number>((res, rej) => {
      child.once('spawn', () => res(child.pid!));
      child.once('error', (e) => rej(new AwcError('E_IO', `could not start the background prepare: ${e.message}`)));
    });
    child.unref();
    return { dir: abs, pid, log };
  } finally {
    closeSync(fd);
  }
}
