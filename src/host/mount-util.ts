import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { AwcError } from '../core/errors.js';

/**
 * Runs a command asynchronously (never spawnSync: a mount(2) may wait on our own FUSE
 * server's replies, which the event loop must stay free to send).
 * @returns stdout. @throws E_MOUNT_FAILED with stderr when it exits non-zero.
 */
export function run(cmd: string, args: string[], opts: { what?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', (e) => reject(new AwcError('E_MOUNT_FAILED', `${opts.what ?? cmd}: ${e.message}`, { cause: e })));
    child.on('close', (code) => {
      if (code === 0) resolve(out);
      else reject(new AwcError('E_MOUNT_FAILED', `${opts.what ?? cmd} failed (exit ${code}): ${err.trim() || out.trim()}`));
    });
  });
}

/** Mount points currently listed in /proc/self/mountinfo (decoded paths). */
export function mountPoints(): Set<string> {
  const out = new Set<string>();
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f.length > 4) out.add(f[4].replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8))));
  }
  return out;
}

/** True when `path` is a mount point. */
export function isMounted(path: string): boolean {
  return mountPoints().has(path);
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
    if (/busy/i.test((err as Error).message)) throw new AwcError('E_TARGET_BUSY', `${target} is busy: ${(err as Error).message}`, { hint: 'Close the shells and programs using it, or pass --force for a lazy unmount.' });
    throw err;
  }
}
