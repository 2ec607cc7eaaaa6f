import { spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { basename, join } from 'node:path';

/** Milliseconds since an arbitrary origin (monotonic). */
export const now = (): number => performance.now();

/** Median of a non-empty list. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** p-th percentile (0..100, nearest rank). */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/** Regular files of a tree (relative paths in a stable order), with counts. Hardlinked inodes count once in `files`/`bytes`. */
export interface TreeStats {
  files: number;
  bytes: number;
  dirs: number;
  symlinks: number;
  /** Every regular-file path (hardlinks included), depth-first, names sorted. */
  paths: string[];
  /** Sum of the sizes of `paths` (hardlinks counted per name: what reading every path reads). */
  pathBytes: number;
}

/** Walks a native tree with lstat (never follows symlinks). */
export function treeStats(root: string): TreeStats {
  const out: TreeStats = { files: 0, bytes: 0, dirs: 0, symlinks: 0, paths: [], pathBytes: 0 };
  const inodes = new Set<string>();
  const walk = (dir: string, rel: string) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    names.sort();
    for (const name of names) {
      const p = join(dir, name);
      const r = rel === '' ? name : `${rel}/${name}`;
      const st = lstatSync(p);
      if (st.isDirectory()) {
        out.dirs++;
        walk(p, r);
      } else if (st.isSymbolicLink()) out.symlinks++;
      else if (st.isFile()) {
        out.paths.push(r);
        out.pathBytes += st.size;
        const key = `${st.dev}:${st.ino}`;
        if (!inodes.has(key)) {
          inodes.add(key);
          out.files++;
          out.bytes += st.size;
        }
      }
    }
  };
  walk(root, '');
  return out;
}

/**
 * Reads every listed file under `root` once, sequentially, with blocking reads into one
 * 1 MiB buffer (what `cat`, `tar` or `grep -r` do). Runs in the bench process, never in the
 * daemon. @returns bytes read and wall time in ms.
 */
export function readAllSync(root: string, paths: readonly string[]): { bytes: number; ms: number } {
  const buf = Buffer.allocUnsafe(1 << 20);
  let bytes = 0;
  const t0 = now();
  for (const p of paths) {
    const fd = openSync(join(root, p), 'r');
    try {
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) break;
        bytes += n;
      }
    } finally {
      closeSync(fd);
    }
  }
  return { bytes, ms: now() - t0 };
}

let asideCount = 0;

/**
 * Moves `path` (if present) into the run's `trash` directory (same file system: one rename)
 * instead of deleting it; the trash goes when the run ends. Why: on a journal-less ext4 (this
 * machine's root file system), inodes freed in the last 60–360 s are skipped one by one when
 * new ones are allocated (ext4 `recently_deleted()`), so a figure that creates many files
 * right after a mass deletion (the first mount after removing a `cp -a` copy, a cold read
 * after emptying the cache) is timed at several times its cost.
 */
export function setAside(path: string, trash: string): void {
  if (!existsSync(path)) return;
  mkdirSync(trash, { recursive: true });
  renameSync(path, join(trash, `${++asideCount}-${basename(path)}`));
}

/** `sync`, then drops the page cache, dentries and inodes (`echo 3 > /proc/sys/vm/drop_caches`). Needs root. */
export function dropCaches(): void {
  spawnSync('sync');
  writeFileSync('/proc/sys/vm/drop_caches', '3');
}

/**
 * How many times anyone on this machine has dropped the page cache (`drop_pagecache` in
 * /proc/vmstat). A "warm" pass during which this moved was not warm: callers discard it.
 */
export function dropCount(): number {
  const m = /^drop_pagecache (\d+)$/m.exec(readFileSync('/proc/vmstat', 'utf8'));
  return m ? Number(m[1]) : 0;
}

/**
 * Runs one measured round until no page-cache drop (by anyone) happened during it, at most
 * `tries` times; `prepare` (untimed, e.g. a warm-up) runs before every attempt.
 * @returns the last round's result, how many attempts were discarded, and whether it is clean.
 */
export async function cleanRound<T>(
  round: () => Promise<T> | T,
  opts: { tries?: number; prepare?: () => Promise<void> | void } = {},
): Promise<{ value: T; discarded: number; clean: boolean }> {
  const tries = opts.tries ?? 10;
  let discarded = 0;
  for (;;) {
    await opts.prepare?.();
    const c0 = dropCount();
    const value = await round();
    if (dropCount() === c0) return { value, discarded, clean: true };
    if (discarded + 1 >= tries) return { value, discarded, clean: false };
    discarded++;
  }
}

/** Allocated bytes of a directory on its own file system (`du -sx --block-size=1`; never enters mounts). 0 when absent. */
export function duBytes(dir: string): number {
  const r = spawnSync('du', ['-sx', '--block-size=1', dir], { encoding: 'utf8' });
  if (r.status !== 0 && !r.stdout) return 0;
  return Number(r.stdout.split(/\s+/)[0]) || 0;
}

/** Runs a command; resolves with its wall time and output; rejects on a non-zero exit (with stderr). */
export function runTimed(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ ms: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const t0 = now();
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => {
      const ms = now() - t0;
      if (code === 0) resolve({ ms, stdout, stderr });
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${(stderr || stdout).trim().slice(-2000)}`));
    });
  });
}

/** Mount points at or under `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === dir || p.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
}

/** Last resort: lazily unmounts everything at or under `dir`. Never throws. */
export function lazyUnmountUnder(dir: string): number {
  const ms = mountsUnder(dir);
  for (const m of ms) spawnSync('umount', ['-l', m]);
  return ms.length;
}

/** The machine, for the report. */
export interface MachineInfo {
  cpu: string;
  cores: number;
  ramBytes: number;
  kernel: string;
  diskFs: string;
  node: string;
  date: string;
  /** 1/5/15-minute load averages when the run started (other work on the machine skews timings). */
  loadAvg: number[];
}

/** Describes this machine; `dir` is where the bench data lives (its file system is reported). */
export function machineInfo(dir: string): MachineInfo {
  let cpu = cpus()[0]?.model ?? 'unknown';
  try {
    const m = /model name\s*:\s*(.+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) cpu = m[1].trim();
  } catch {
    // keep os.cpus()
  }
  const df = spawnSync('df', ['--output=source,fstype', dir], { encoding: 'utf8' }).stdout.trim().split('\n').pop() ?? '';
  const [src, fstype] = df.trim().split(/\s+/);
  return {
    cpu,
    cores: cpus().length,
    ramBytes: totalmem(),
    kernel: spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim(),
    diskFs: fstype ? `${fstype} on ${src}` : 'unknown',
    node: process.version,
    date: new Date().toISOString(),
    loadAvg: loadavg(),
  };
}

/** Bytes for people (binary units). */
export function fmtBytes(n: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${u[i]}`;
}

/** Milliseconds for people. */
export function fmtMs(ms: number): string {
  if (ms < 10) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${ms.toFixed(1)} ms`;
  return `${(ms / 1000).toFixed(2)} s`;
}
