/**
 * Running mount(8) and umount(8): overlay and bind mounts of workspaces, unmounts, and the
 * checks of a mount target. Commands run asynchronously (never spawnSync): mount(2) and
 * umount(2) may wait on replies that this very process's FUSE server must send.
 */
import { spawn, type StdioOptions } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { AwcError } from '../core/errors.js';
import { isMounted } from './mount-table.js';

/** Result of a command run by {@link runCommand}. */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command asynchronously (never spawnSync: mount(2) and umount(2) may wait on replies
 * that this very process must send). `extraFds` become the child's fds 3, 4, …; `env`
 * defaults to this process's environment.
 */
export function runCommand(
  cmd: string,
  args: string[],
  extraFds: number[] = [],
  timeoutMs = 30_000,
  env?: NodeJS.ProcessEnv,
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const stdio: StdioOptions = ['ignore', 'pipe', 'pipe', ...extraFds];
    let stdout = '';
    let stderr = '';
    let settled = false;
    const child = spawn(cmd, args, { stdio, env: env ?? process.env });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const done = (r: CommandResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    child.on('error', (err) => done({ code: null, signal: null, stdout, stderr: stderr + String(err) }));
    child.on('close', (code, signal) => done({ code, signal, stdout, stderr }));
  });
}

/**
 * Runs a command asynchronously (see {@link runCommand}: mount(2) may wait on our own FUSE
 * server's replies, which the event loop must stay free to send).
 * @returns stdout. @throws E_MOUNT_FAILED with stderr when it exits non-zero.
 */
export async function run(cmd: string, args: string[], opts: { what?: string } = {}): Promise<string> {
  const r = await runCommand(cmd, args);
  if (r.code === 0) return r.stdout;
  const why =
    r.code === null ? `killed or failed to start: ${r.stderr.trim() || r.signal}` : `exit ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`;
  throw new AwcError('E_MOUNT_FAILED', `${opts.what ?? cmd} failed (${why})`);
}

/**
 * Mounts one overlayfs: `lowerdir=LAYER::CONTENT` (CONTENT a data-only lower), private
 * upper and work dirs, `metacopy=on,redirect_dir=on`, and nodev,nosuid by default (DESIGN §2, §7).
 * @throws E_MOUNT_FAILED
 */
export async function mountOverlay(o: { layer: string; content: string; upper: string; work: string; target: string }): Promise<void> {
  const opts = `lowerdir=${o.layer}::${o.content},upperdir=${o.upper},workdir=${o.work},metacopy=on,redirect_dir=on`;
  await run('mount', ['-t', 'overlay', 'overlay', '-o', `nodev,nosuid,${opts}`, o.target], { what: `mount overlay at ${o.target}` });
}

/** Unmounts `target`; with `lazy`, detaches even when busy. Absent mounts are not an error. @throws E_TARGET_BUSY */
export async function unmount(target: string, lazy = false): Promise<void> {
  if (!isMounted(target)) return;
  try {
    await run('umount', lazy ? ['-l', target] : [target], { what: `umount ${target}` });
  } catch (err) {
    if (/busy/i.test((err as Error).message))
      throw new AwcError('E_TARGET_BUSY', `${target} is busy: ${(err as Error).message}`, {
        hint: 'Close the shells and programs using it, or pass --force for a lazy unmount.',
      });
    throw err;
  }
}

/**
 * Exposes the directory `src` at `target` through a bind mount that carries `nosuid,nodev`
 * from its first moment: `src` is first bound onto itself and remounted `nosuid,nodev`
 * (where only root can reach it, under the 0700 home), that mount is bound at `target`
 * (a bind copies the mount's flags), and the self-bind is removed. Nothing is ever
 * reachable at `target` without the flags. On failure nothing stays mounted.
 * @throws E_MOUNT_FAILED
 */
export async function bindMountNoSuid(src: string, target: string): Promise<void> {
  try {
    await run('mount', ['--bind', src, src], { what: `bind mount of ${src}` });
    await run('mount', ['-o', 'remount,bind,nosuid,nodev', src], { what: `remount of ${src} nosuid,nodev` });
    await run('mount', ['--bind', src, target], { what: `bind mount at ${target}` });
  } catch (err) {
    await unmount(target, true).catch(() => undefined);
    await unmount(src, true).catch(() => undefined);
    throw err;
  }
  await unmount(src, true);
}

/**
 * Checks a workspace mount target: an absolute path outside the AWC `home`, an existing
 * empty directory, not a mount point (so a mount never hides anything, e.g. a system
 * directory, whoever asked for it).
 * @throws E_USAGE (relative, or inside the home), E_TARGET_BUSY (missing or not a directory, not empty, a mount point)
 */
export async function checkMountTarget(target: string, home: string): Promise<void> {
  if (!isAbsolute(target)) throw new AwcError('E_USAGE', `target must be absolute: ${target}`);
  const h = resolve(home);
  if (target === h || target.startsWith(h + '/'))
    throw new AwcError('E_USAGE', `${target} is inside the AWC home ${h}`, { hint: 'Mount workspaces outside the data directory.' });
  const st = await stat(target).catch(() => undefined);
  if (!st?.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${target} is not a directory`);
  if ((await readdir(target)).length > 0) throw new AwcError('E_TARGET_BUSY', `${target} is not empty`);
  if (isMounted(target)) throw new AwcError('E_TARGET_BUSY', `${target} is already a mount point`);
}
