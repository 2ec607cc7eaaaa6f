/**
 * Which processes hold a mount: a busy unmount names them (pid and command), so that whoever
 * cannot force it (a Claude Code hook) knows what to end. Read from /proc only: for every
 * process, the mount id of each open file (`/proc/<pid>/fdinfo/<n>` `mnt_id`), and of its
 * working directory, root and mappings (an O_PATH open of `/proc/<pid>/{cwd,root,map_files/*}`,
 * whose own fdinfo gives the id). An O_PATH open and fdinfo never call into the file system,
 * so a hung FUSE cannot block the scan. Processes this one cannot read are not named.
 */
import { closeSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { readMountInfo } from './mount-table.js';

/** A process that keeps a mount alive: pid, command name, and what it holds. */
export interface MountHolder {
  pid: number;
  command: string;
  /** `fd <n>`, `cwd`, `root`, `map`, or `mount` (the mount is in the process's mount namespace). */
  via: string;
  /** The path the process sees (for a detached mount, relative to the mount's root). */
  path?: string;
}

/** O_PATH (Linux, every architecture Node runs on but alpha/parisc/sparc). */
const O_PATH = 0o10000000;

function safe<T>(f: () => T, fallback: T): T {
  try {
    return f();
  } catch {
    return fallback;
  }
}

/** The `mnt_id` of an fdinfo file, or undefined. */
export function fdinfoMountId(path: string): number | undefined {
  const m = safe(() => /^mnt_id:\s*(\d+)/m.exec(readFileSync(path, 'utf8')), null);
  return m ? Number(m[1]) : undefined;
}

/** Mount id of what `/proc/<pid>/<link>` points at (an O_PATH open, never reaching the file system), or undefined. */
function linkMountId(link: string): number | undefined {
  const fd = safe(() => openSync(link, O_PATH), -1);
  if (fd < 0) return undefined;
  try {
    return fdinfoMountId(`/proc/self/fdinfo/${fd}`);
  } finally {
    closeSync(fd);
  }
}

/** The command name of `pid` (`/proc/<pid>/comm`), `?` when it cannot be read. */
export function commandOf(pid: number): string {
  return safe(() => readFileSync(`/proc/${pid}/comm`, 'utf8').trim(), '?');
}

/**
 * How `pid` holds one of the mounts `ids` (the first found: an open file, its working
 * directory or root, a mapping), or undefined when it holds none.
 */
export function holderOf(pid: number, ids: ReadonlySet<number>): MountHolder | undefined {
  const base = `/proc/${pid}`;
  const held = (via: string, link: string): MountHolder => ({
    pid,
    command: commandOf(pid),
    via,
    path: safe(() => readlinkSync(link), undefined),
  });
  for (const fd of safe(() => readdirSync(`${base}/fd`), [] as string[])) {
    const id = fdinfoMountId(`${base}/fdinfo/${fd}`);
    if (id !== undefined && ids.has(id)) return held(`fd ${fd}`, `${base}/fd/${fd}`);
  }
  for (const link of ['cwd', 'root']) {
    const id = linkMountId(`${base}/${link}`);
    if (id !== undefined && ids.has(id)) return held(link, `${base}/${link}`);
  }
  const seen = new Set<string>();
  for (const range of safe(() => readdirSync(`${base}/map_files`), [] as string[])) {
    const target = safe(() => readlinkSync(`${base}/map_files/${range}`), '');
    if (seen.has(target)) continue;
    seen.add(target);
    const id = linkMountId(`${base}/map_files/${range}`);
    if (id !== undefined && ids.has(id)) return { pid, command: commandOf(pid), via: 'map', path: target };
  }
  return undefined;
}

/** Every process id in /proc but this process's. */
export function otherPids(): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((p) => p !== process.pid);
}

/**
 * The processes (in this process's view of /proc) holding the mount at `target` or one below
 * it, in this process's mount namespace. Synchronous; a few ms per hundred processes. Empty
 * when nothing is mounted there or no holder can be seen (another PID namespace).
 */
export function mountHolders(target: string): MountHolder[] {
  const t = Buffer.from(target, 'utf8').toString('latin1');
  const ids = new Set(
    readMountInfo()
      .filter((m) => m.mountPoint === t || m.mountPoint.startsWith(t.endsWith('/') ? t : `${t}/`))
      .map((m) => m.mountId),
  );
  if (ids.size === 0) return [];
  return otherPids().flatMap((pid) => holderOf(pid, ids) ?? []);
}

/** "pid 123 (sh, fd 3), pid 456 (bash, cwd /x)" for messages; at most `max` named. */
export function describeMountHolders(holders: readonly MountHolder[], max = 5): string {
  const named = holders.slice(0, max).map((h) => `pid ${h.pid} (${h.command}, ${h.via}${h.path ? ` ${h.path}` : ''})`);
  if (holders.length > max) named.push(`${holders.length - max} more`);
  return named.join(', ');
}

/** The pids of `holders`, for a hint: `kill 123 456`. */
export function holderPids(holders: readonly MountHolder[]): string {
  return [...new Set(holders.map((h) => h.pid))].join(' ');
}
