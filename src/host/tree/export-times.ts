import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import type { DirFd } from '../../core/dir-fd.js';
import { toAwcError } from '../../core/errors.js';
import { exactTimesSupported, futimesNs, microSeconds, utimesNsAt } from '../sys/utimens.js';

/**
 * Setting the modification times of an exported tree (see src/host/tree/export-dir.ts for
 * why Node alone cannot set nanoseconds), and running path-taking tools on a directory
 * descriptor: the tool gets the directory as its fd 3 and names `/proc/self/fd/3/<name>`
 * (or uses `dir_fd=3`), so no path it resolves can be swapped under it.
 */

/**
 * Sets the times of `items` (path relative to `top`, '' for `top` itself; mtime in ns as
 * a decimal string; atime set to the same) after everything was written: exactly with
 * utimensat(2) through koffi (`auto`, where it loads; src/host/sys/utimens.ts), else (`node`, or
 * no koffi) to the microsecond with lutimes. Parents are opened through descriptors, one
 * component at a time with O_NOFOLLOW (DirFd.openRel), and symlinks are never followed.
 * @returns the precision reached. @throws AwcError E_PERMISSION, E_SOURCE_NOT_FOUND (by errno)
 */
export async function setTreeTimes(top: DirFd, items: readonly [string, string][], how: 'auto' | 'node'): Promise<'ns' | 'us'> {
  if (how !== 'node' && exactTimesSupported()) {
    withParents(top, items, (d, name, ns) => (name === '' ? futimesNs(d.fd, ns) : utimesNsAt(d.fd, name, ns)));
    return 'ns';
  }
  setTimesNode(top, items);
  return 'us';
}

/** Calls `set` for each item with its parent directory open (a bounded cache of descriptors) and its last name ('' for `top`). */
function withParents(top: DirFd, items: readonly [string, string][], set: (d: DirFd, name: string, ns: string) => void): void {
  const dirs = new Map<string, DirFd>();
  try {
    for (const [rel, ns] of items) {
      if (rel === '') {
        set(top, '', ns);
        continue;
      }
      const cut = rel.lastIndexOf('/');
      const head = cut < 0 ? '' : rel.slice(0, cut);
      set(head === '' ? top : (dirs.get(head) ?? openParent(top, dirs, head)), rel.slice(cut + 1), ns);
    }
  } catch (err) {
    throw toAwcError(err);
  } finally {
    for (const x of dirs.values()) x.close();
  }
}

/** Opens the directory `head` below `top` into the cache `dirs` (emptied, closing them all, when it holds more than 256). */
function openParent(top: DirFd, dirs: Map<string, DirFd>, head: string): DirFd {
  if (dirs.size > 256) for (const x of dirs.values()) x.close();
  if (dirs.size > 256) dirs.clear();
  const d = top.openRel(head);
  dirs.set(head, d);
  return d;
}

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

/** Sets times to the microsecond with lutimes (Node alone), each parent opened through descriptors. */
function setTimesNode(top: DirFd, items: readonly [string, string][]): void {
  withParents(top, items, (d, name, ns) => {
    const s = microSeconds(ns);
    if (name === '') fs.futimesSync(d.fd, s, s);
    else fs.lutimesSync(d.path(name), s, s);
  });
}
