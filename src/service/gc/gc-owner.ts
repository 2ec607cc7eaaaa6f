import { randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { AwcError } from '../../core/errors.js';
import type { GcCatalog } from '../../catalog/port/gc-catalog.js';

/**
 * Who holds the gc lock, and whether that holder is a process of this machine that is gone
 * (docs/explanation/crash-safety.md "gc"). An owner is `<hostname>:<pid>:<random>@<boot id>:<pid
 * namespace inode>:<start time>`: the part after `@` names one process of one running kernel
 * exactly (a pid reused later has another start time; another container has another pid
 * namespace; another machine or a reboot another boot id), so a gc killed on this machine
 * (SIGKILL, OOM) does not block every later gc until its lock expires.
 */

/** This process's identity on this kernel (`<boot id>:<pid namespace inode>:<start time in clock ticks>`), or undefined without /proc. */
function processKey(pid: number): string | undefined {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const ns = statSync(`/proc/self/ns/pid`).ino;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return start === undefined ? undefined : `${boot}:${ns}:${start}`;
  } catch {
    return undefined;
  }
}

/** A new gc lock owner for this process (see the module doc). */
export function newGcOwner(): string {
  const key = processKey(process.pid);
  return `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}${key ? `@${key}` : ''}`;
}

/**
 * True when `owner` was made by {@link newGcOwner} in a process of this kernel and pid
 * namespace that no longer runs (its pid is gone, or is another process now). Anything else
 * (another machine, another container, an owner without the `@` part, no /proc) is false: only
 * the lock's expiry frees it.
 */
export function isDeadLocalOwner(owner: string): boolean {
  const m = /^.*:(\d+):[0-9a-f]+@([^:]+):(\d+):(\d+)$/.exec(owner);
  if (!m) return false;
  const mine = processKey(process.pid);
  if (!mine) return false;
  const [boot, ns] = mine.split(':');
  if (m[2] !== boot || m[3] !== ns) return false;
  const now = processKey(Number(m[1]));
  return now === undefined || now !== `${m[2]}:${m[3]}:${m[4]}`;
}

/**
 * Takes the gc lock (GcCatalog.acquireLock); a lock held by a dead gc of this machine
 * ({@link isDeadLocalOwner}) is released first, once, and taken.
 * @throws E_GC_RUNNING (a live gc, or one of another host, holds it)
 */
export async function takeGcLock(gc: GcCatalog, owner: string, ttlMs: number): Promise<void> {
  try {
    await gc.acquireLock(owner, ttlMs);
  } catch (err) {
    const held =
      err instanceof AwcError && err.code === 'E_GC_RUNNING' ? (err.details as { owner?: unknown } | undefined)?.owner : undefined;
    if (typeof held !== 'string' || !isDeadLocalOwner(held)) throw err;
    await gc.releaseLock(held); // only that owner's row: a gc that took it meanwhile keeps it
    await gc.acquireLock(owner, ttlMs);
  }
}
