import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { lutimes } from 'node:fs/promises';
import type { DirFd } from '../core/dir-fd.js';
import { AwcError, toAwcError } from '../core/errors.js';

/**
 * Setting the modification times of an exported tree (see src/host/export-dir.ts for
 * why Node alone cannot set nanoseconds), and running path-taking tools on a directory
 * descriptor: the tool gets the directory as its fd 3 and names `/proc/self/fd/3/<name>`
 * (or uses `dir_fd=3`), so no path it resolves can be swapped under it.
 */

/**
 * Sets the times of `items` (path relative to `top`, '' for `top` itself; mtime in ns as
 * a decimal string; atime set to the same) after everything was written: exactly with
 * one python3 process (`auto`, when python3 can be started), else (`node`, or no python3)
 * to the microsecond with lutimes. Parents are opened through descriptors, symlinks are
 * never followed.
 * @returns the precision reached. @throws AwcError E_PERMISSION, E_INTERNAL (helper failure)
 */
export async function setTreeTimes(top: DirFd, items: readonly [string, string][], how: 'auto' | 'node'): Promise<'ns' | 'us'> {
  if (how !== 'node' && (await setTimesExact(top, items))) return 'ns';
  await setTimesNode(top, items);
  return 'us';
}

/**
 * Sets times by paths relative to the directory open as fd 3: each parent is opened one
 * component at a time with O_PATH|O_DIRECTORY|O_NOFOLLOW (openat), the time set with
 * utimensat(…, AT_SYMLINK_NOFOLLOW). '' is the directory itself.
 */
const UTIME_SCRIPT = [
  'import os, sys',
  'd = sys.stdin.buffer.read().split(b"\\0")',
  'cache = {}',
  'def opendir(rel):',
  '    if rel == b"": return 3',
  '    if rel in cache: return cache[rel]',
  '    if len(cache) > 256:',
  '        for f in cache.values(): os.close(f)',
  '        cache.clear()',
  '    head, _, name = rel.rpartition(b"/")',
  '    fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=opendir(head))',
  '    cache[rel] = fd',
  '    return fd',
  'for i in range(0, len(d) - 1, 2):',
  '    rel, t = d[i], int(d[i + 1])',
  '    if rel == b"":',
  '        os.utime(3, ns=(t, t))',
  '        continue',
  '    head, _, name = rel.rpartition(b"/")',
  '    os.utime(name, ns=(t, t), dir_fd=opendir(head), follow_symlinks=False)',
].join('\n');

/** Runs `cmd` with the directory `dir` as its fd 3 (stdin from `input` when given); resolves with its exit status and stderr (or undefined when it cannot start). */
export async function runWithDir(
  cmd: string,
  args: string[],
  dir: DirFd,
  input?: Buffer[],
): Promise<{ code: number | null; stderr: string } | undefined> {
  const child = spawn(cmd, args, { stdio: [input ? 'pipe' : 'ignore', 'ignore', 'pipe', dir.fd] });
  const started = await new Promise<boolean>((res) => {
    child.once('spawn', () => res(true));
    child.once('error', () => res(false));
  });
  if (!started) return undefined;
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-4000)));
  const exited = new Promise<number | null>((res) => child.once('close', (code) => res(code)));
  if (input) {
    child.stdin!.on('error', () => undefined); // reported through the exit status
    let batch: Buffer[] = [];
    let size = 0;
    for (const b of input) {
      batch.push(b);
      size += b.length;
      if (size >= 1 << 16) {
        if (!child.stdin!.write(Buffer.concat(batch))) await Promise.race([new Promise((r) => child.stdin!.once('drain', r)), exited]);
        batch = [];
        size = 0;
      }
    }
    child.stdin!.end(Buffer.concat(batch));
  }
  return { code: await exited, stderr };
}

/** Sets modification (and access) times exactly with one python3 process; false when python3 cannot be started. */
async function setTimesExact(top: DirFd, items: readonly [string, string][]): Promise<boolean> {
  const r = await runWithDir(
    'python3',
    ['-I', '-c', UTIME_SCRIPT],
    top,
    items.map(([rel, ns]) => Buffer.from(`${rel}\0${ns}\0`, 'utf8')),
  );
  if (!r) return false;
  if (r.code !== 0) {
    const errCode = /PermissionError/.test(r.stderr) ? 'E_PERMISSION' : 'E_INTERNAL';
    throw new AwcError(errCode, `setting modification times failed: ${r.stderr.trim().split('\n').pop() ?? `exit ${r.code}`}`);
  }
  return true;
}

/** Sets times to the microsecond with lutimes, each parent opened through descriptors. */
async function setTimesNode(top: DirFd, items: readonly [string, string][]): Promise<void> {
  const dirs = new Map<string, DirFd>();
  try {
    for (const [rel, ns] of items) {
      const s = utimeSeconds(ns);
      if (rel === '') {
        fs.futimesSync(top.fd, s, s);
        continue;
      }
      const cut = rel.lastIndexOf('/');
      const head = cut < 0 ? '' : rel.slice(0, cut);
      let d = dirs.get(head);
      if (!d) {
        if (dirs.size > 256) for (const x of dirs.values()) x.close();
        if (dirs.size > 256) dirs.clear();
        d = top.openRel(head);
        dirs.set(head, d);
      }
      await lutimes(d.path(rel.slice(cut + 1)), s, s);
    }
  } catch (err) {
    throw toAwcError(err);
  } finally {
    for (const x of dirs.values()) x.close();
  }
}

/** Seconds (double) that Node/libuv turns into exactly the microsecond of `ns` (the remainder below 1 µs is lost). */
function utimeSeconds(ns: string): number {
  const n = BigInt(ns);
  let sec = n / 1_000_000_000n;
  let rem = n % 1_000_000_000n;
  if (rem < 0n) {
    sec -= 1n;
    rem += 1_000_000_000n;
  }
  return Number(sec) + (Number(rem / 1000n) + 0.5) / 1e6;
}
