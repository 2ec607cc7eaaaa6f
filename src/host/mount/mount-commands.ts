/**
 * Running mount(8) and umount(8): overlay and bind mounts of workspaces, unmounts, and the
 * checks of a mount target. Commands run asynchronously (never spawnSync): mount(2) and
 * umount(2) may wait on replies that this very process's FUSE server must send.
 */
import { spawn, type StdioOptions } from 'node:child_process';
import { mkdir, readdir, stat } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { describeMountHolders, holderPids, mountHolders } from './mount-holders.js';
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
 * defaults to this process's environment; `timeoutMs` (ms) and `signal` kill it (SIGKILL).
 * Never rejects: a command that cannot start or is killed resolves with `code` null.
 */
export function runCommand(
  cmd: string,
  args: string[],
  extraFds: number[] = [],
  timeoutMs = 30_000,
  env?: NodeJS.ProcessEnv,
  signal?: AbortSignal,
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const stdio: StdioOptions = ['ignore', 'pipe', 'pipe', ...extraFds];
    let stdout = '';
    let stderr = '';
    let settled = false;
    const child = spawn(cmd, args, { stdio, env: env ?? process.env, ...(signal && { signal, killSignal: 'SIGKILL' as const }) });
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

/** Unmounts `target`; with `lazy`, detaches even when busy. Absent mounts are not an error. @throws E_TARGET_BUSY (see busyError) */
export async function unmount(target: string, lazy = false): Promise<void> {
  if (!isMounted(target)) return;
  try {
    await run('umount', lazy ? ['-l', target] : [target], { what: `umount ${target}` });
  } catch (err) {
    if (/busy/i.test((err as Error).message)) throw busyError(target, err);
    throw err;
  }
}

/**
 * The E_TARGET_BUSY of a mount at `target` that cannot be unmounted because processes use
 * it: the message names them (pid and command, read from /proc: open files, working
 * directories, roots, mappings under the mount) and the hint says which to end, never a flag
 * (the caller may be a hook that cannot pass one). `details`: `path`, `holders`
 * ({pid, command, via, path}).
 */
export function busyError(target: string, cause?: unknown): AwcError {
  const holders = mountHolders(target);
  const who = holders.length > 0 ? describeMountHolders(holders) : 'no process visible here (another PID namespace?)';
  return new AwcError('E_TARGET_BUSY', `${target} is busy: in use by ${who}`, {
    hint:
      holders.length > 0
        ? `End those processes (\`kill ${holderPids(holders)}\`), or move the shells among them out of ${target} (\`cd\` elsewhere), then run the same command again.`
        : `Close the shells and programs using ${target}, then run the same command again.`,
    details: { path: target, holders },
    cause,
  });
}

/**
 * Checks a workspace mount target: an absolute path outside the AWC `home`, an existing
 * empty directory, not a mount point (so a mount never hides anything, e.g. a system
 * directory, whoever asked for it).
 * @throws E_USAGE (relative, or inside the home), E_TARGET_BUSY (missing or not a directory, not empty, a mount point)
 */
export async function checkMountTarget(target: string, home: string): Promise<void> {
  if (!isAbsolute(target)) throw new AwcError('E_USAGE', `target must be absolute: ${target}`);
  refuseInsideHome(target, home);
  const st = await stat(target).catch(() => undefined);
  if (!st?.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${target} is not a directory`);
  if ((await readdir(target)).length > 0) throw new AwcError('E_TARGET_BUSY', `${target} is not empty`);
  if (isMounted(target)) throw new AwcError('E_TARGET_BUSY', `${target} is already a mount point`);
}

/**
 * Prepares a workspace mount target: creates it when missing, then checks it (see
 * {@link checkMountTarget}).
 * @throws E_USAGE (relative, or inside the home), E_TARGET_BUSY (a file, not empty, a mount point)
 */
export async function prepareMountTarget(target: string, home: string): Promise<void> {
  if (!isAbsolute(target)) throw new AwcError('E_USAGE', `target must be absolute: ${target}`);
  refuseInsideHome(target, home);
  const existing = await stat(target).catch(() => undefined);
  if (existing && !existing.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${target} exists and is not a directory`);
  await mkdir(target, { recursive: true });
  await checkMountTarget(target, home);
}

/**
 * Where `awc attach` mounts its private workspaces (`<home>/host/attach/mnt`,
 * docs/explanation/attach.md): the one place inside the home a workspace may be mounted.
 */
export function attachMountsDir(home: string): string {
  return join(resolve(home), 'host', 'attach', 'mnt');
}

/**
 * Refuses a mount target inside the AWC home (a mount there would hide AWC's own data),
 * except a direct child of {@link attachMountsDir}.
 * @throws E_USAGE
 */
export function refuseInsideHome(target: string, home: string): void {
  const h = resolve(home);
  const t = resolve(target);
  if (dirname(t) === attachMountsDir(h) && t.length > attachMountsDir(h).length + 1) return;
  if (t === h || t.startsWith(h + '/'))
    throw new AwcError('E_USAGE', `${t} is inside the AWC home ${h}`, { hint: 'Mount workspaces outside the data directory.' });
}
