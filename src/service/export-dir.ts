import { execFile, spawn } from 'node:child_process';
import { constants as fsc } from 'node:fs';
import { chmod, lchown, link, lstat, lutimes, mkdir, open, readdir, realpath, stat, symlink, type FileHandle } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { setAttributeSync } from 'fs-xattr';
import type { Digest } from '../core/digest.js';
import { AwcError, toAwcError } from '../core/errors.js';
import type { Entry, EntryAttrs, FileEntry } from '../core/tree.js';
import type { ContentReader } from '../store/content-reader.js';
import { splitDev, type ExportCounts } from './export-tar.js';

/**
 * Exporting a snapshot into a directory on the local file system.
 *
 * Recreates regular files (streamed; aligned all-zero 4 KiB blocks are left as holes, so
 * sparse files stay sparse), directories (also empty ones), symlinks (verbatim targets;
 * never followed), hardlinks (`link(2)` to the first name), fifos (`mkfifo`), and device
 * nodes (`mknod`, root only: E_PERMISSION otherwise). Then mode bits incl.
 * setuid/setgid/sticky, owner (`lchown`, root only; otherwise the files belong to the
 * caller), xattrs, and last the modification times of everything (directories after
 * their contents, symlinks with `lutimes`; atime is set to the same value).
 *
 * Safety: every file is created with O_CREAT|O_EXCL|O_NOFOLLOW, directories with mkdir,
 * links with symlink/link, all of which fail rather than follow an existing name; the
 * target starts empty, so nothing can be written through a symlink. A name that exists
 * anyway (a concurrent writer) is E_PATH_TRAVERSAL when it is a symlink, else
 * E_TARGET_BUSY. Hardlink targets must be regular files exported earlier (a path through a
 * symlink or with `..` is E_PATH_TRAVERSAL).
 *
 * Modification-time precision: Node cannot set nanoseconds. fs.utimes/futimes/lutimes take
 * seconds as a double (numbers, numeric strings and Dates all become a double), and the
 * libuv of Node 20 (1.46) converts it to a timespec and then truncates it to whole
 * microseconds (`uv__fs_to_timespec`; nodejs/node#50859 asks for bigint times, libuv
 * removed the truncation only in late 2025). A double also holds only ~240 ns at today's
 * epoch. So, with `mtimes: 'auto'` (the default), times are set exactly by one helper
 * process for the whole export, `python3 -I` calling `os.utime(path, ns=…,
 * follow_symlinks=False)` (utimensat with nanoseconds; ~0.15 s for 5,000 files); when
 * python3 is absent, or with `mtimes: 'node'`, they are set with `lutimes` to the exact
 * microsecond (the ns remainder is truncated; the double is biased by +0.5 µs so that it
 * never rounds down a microsecond; times before 1970 may be off by up to 1 µs there). The result
 * says which precision was reached.
 *
 * On failure the target directory is left partially written (it was new or empty: remove it).
 */

/** Options of `exportDir`. */
export interface ExportDirOptions {
  /** Called after each regular file with cumulative counts (files, bytes). */
  onProgress?: (p: ExportCounts) => void;
  /** `auto` (default): exact ns via a python3 helper when available, else µs; `node`: µs via Node only. */
  mtimes?: 'auto' | 'node';
  /** Regular files written at the same time (default 8). */
  concurrency?: number;
}

/** Result of `exportDir`: counts plus the precision the modification times were set with. */
export interface ExportDirResult extends ExportCounts {
  /** `ns`: exact; `us`: truncated to whole microseconds. */
  mtimePrecision: 'ns' | 'us';
}

const execFileP = promisify(execFile);
/** Holes are left for whole zero blocks of this many bytes, aligned in the file. */
const HOLE_BLOCK = 4096;
const ZERO = Buffer.alloc(HOLE_BLOCK);

const UTIME_SCRIPT = [
  'import os, sys',
  'd = sys.stdin.buffer.read().split(b"\\0")',
  'for i in range(0, len(d) - 1, 2):',
  '    t = int(d[i + 1])',
  '    os.utime(d[i], ns=(t, t), follow_symlinks=False)',
].join('\n');

/** Sets modification (and access) times exactly with one python3 process; false when python3 cannot be started. */
async function setTimesExact(items: readonly [string, string][]): Promise<boolean> {
  const child = spawn('python3', ['-I', '-c', UTIME_SCRIPT], { stdio: ['pipe', 'ignore', 'pipe'] });
  const started = await new Promise<boolean>((res) => {
    child.once('spawn', () => res(true));
    child.once('error', () => res(false));
  });
  if (!started) return false;
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-4000)));
  const exited = new Promise<number | null>((res) => child.once('close', (code) => res(code)));
  child.stdin!.on('error', () => undefined); // reported through the exit status
  let batch: Buffer[] = [];
  let size = 0;
  for (const [path, ns] of items) {
    const b = Buffer.from(`${path}\0${ns}\0`, 'utf8');
    batch.push(b);
    size += b.length;
    if (size >= 1 << 16) {
      if (!child.stdin!.write(Buffer.concat(batch))) await Promise.race([new Promise((r) => child.stdin!.once('drain', r)), exited]);
      batch = [];
      size = 0;
    }
  }
  child.stdin!.end(Buffer.concat(batch));
  const code = await exited;
  if (code !== 0) {
    const errCode = /PermissionError/.test(stderr) ? 'E_PERMISSION' : 'E_INTERNAL';
    throw new AwcError(errCode, `setting modification times failed: ${stderr.trim().split('\n').pop() ?? `exit ${code}`}`);
  }
  return true;
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

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Maps a creation failure: an existing name is a symlink (E_PATH_TRAVERSAL) or a concurrent writer (E_TARGET_BUSY). */
async function createError(path: string, err: unknown): Promise<AwcError> {
  if ((err as NodeJS.ErrnoException).code === 'EEXIST' || (err as NodeJS.ErrnoException).code === 'ELOOP') {
    const st = await lstat(path).catch(() => undefined);
    if (st?.isSymbolicLink()) return new AwcError('E_PATH_TRAVERSAL', `refusing to write through the symlink ${path}`);
    return new AwcError('E_TARGET_BUSY', `${path} appeared while exporting`);
  }
  return toAwcError(err);
}

/**
 * Writes the snapshot `root` into `dir`, which must be missing (it is created) or an
 * empty directory; the root's own attributes are applied to `dir` itself.
 *
 * @returns regular files (each hardlinked inode once), their bytes, and the precision the
 *   modification times were set with (see the module docs).
 * @throws AwcError E_TARGET_BUSY (dir not empty or not a directory), E_PATH_TRAVERSAL
 *   (a hardlink target outside the exported files, or writing through a symlink),
 *   E_PERMISSION (device nodes when not root, or a denied operation), E_UNSUPPORTED (the
 *   file system refuses the xattrs), E_OBJECT_NOT_FOUND/E_INTEGRITY from the reader.
 */
export async function exportDir(reader: ContentReader, root: Digest, dir: string, opts: ExportDirOptions = {}): Promise<ExportDirResult> {
  const target = resolve(dir);
  try {
    const st = await stat(target);
    if (!st.isDirectory()) throw new AwcError('E_TARGET_BUSY', `${dir} exists and is not a directory`);
    if ((await readdir(target)).length > 0) throw new AwcError('E_TARGET_BUSY', `${dir} is not empty`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw toAwcError(err);
    if (await exists(target)) throw new AwcError('E_TARGET_BUSY', `${dir} is a dangling symlink`);
    await mkdir(target, { recursive: true }).catch((e) => {
      throw toAwcError(e);
    });
  }
  const top = await realpath(target);
  const isRoot = process.getuid?.() === 0;
  const counts: ExportCounts = { files: 0, bytes: 0 };
  const times: [string, string][] = []; // (absolute path, mtimeNs), applied last
  const exported = new Map<string, Promise<void>>(); // relative path of each regular file → done
  const symlinks = new Set<string>();
  const limit = Math.max(1, opts.concurrency ?? 8);
  let running = 0;
  const waiters: (() => void)[] = [];
  let failure: unknown;

  /** Owner, xattrs and mode of something just created (times come last). */
  const applyAttrs = async (abs: string, a: EntryAttrs): Promise<void> => {
    setXattrs(abs, a);
    if (isRoot) await lchown(abs, a.uid, a.gid);
    await chmod(abs, a.mode);
    times.push([abs, a.mtimeNs]);
  };

  const writeFile = async (abs: string, e: FileEntry): Promise<void> => {
    const fh = await open(abs, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600).catch(async (err) => {
      throw await createError(abs, err);
    });
    try {
      let pos = 0;
      for await (const buf of reader.readFile(e)) {
        await writeSparse(fh, buf, pos);
        pos += buf.length;
      }
      if (pos !== e.size) throw new AwcError('E_INTEGRITY', `${abs}: content has ${pos} bytes, the tree says ${e.size}`);
      await fh.truncate(e.size); // extends over a trailing hole
      setXattrs(abs, e);
      if (isRoot) await fh.chown(e.uid, e.gid);
      await fh.chmod(e.mode);
    } finally {
      await fh.close();
    }
    times.push([abs, e.mtimeNs]);
    counts.files++;
    counts.bytes += e.size;
    opts.onProgress?.({ ...counts });
  };

  /** Starts a file write when a slot is free; returns (boxed) its completion. */
  const submit = async (fn: () => Promise<void>): Promise<{ done: Promise<void> }> => {
    while (running >= limit) await new Promise<void>((r) => waiters.push(r));
    if (failure !== undefined) throw failure;
    running++;
    const done = fn().finally(() => {
      running--;
      waiters.shift()?.();
    });
    done.catch((err) => {
      failure ??= err;
    });
    return { done };
  };

  const walk = async (tree: Digest, absDir: string, relDir: string): Promise<Promise<void>[]> => {
    const t = await reader.readTree(tree);
    const pending: Promise<void>[] = [];
    for (const e of t.entries) {
      const abs = join(absDir, e.name);
      const rel = relDir === '' ? e.name : `${relDir}/${e.name}`;
      switch (e.type) {
        case 'dir': {
          await mkdir(abs, 0o700).catch(async (err) => {
            throw await createError(abs, err);
          });
          const inner = await walk(e.tree, abs, rel);
          const done = Promise.all(inner).then(() => applyAttrs(abs, e));
          done.catch(() => undefined);
          pending.push(done);
          break;
        }
        case 'file': {
          const { done } = await submit(() => writeFile(abs, e));
          exported.set(rel, done);
          pending.push(done);
          break;
        }
        case 'hardlink': {
          const first = exported.get(e.target);
          if (!first) {
            const parts = e.target.split('/');
            const escapes = e.target.startsWith('/') || parts.includes('..') || parts.includes('.') || parts.some((_, i) => symlinks.has(parts.slice(0, i + 1).join('/')));
            throw new AwcError(escapes ? 'E_PATH_TRAVERSAL' : 'E_FORMAT', `hardlink ${rel} names ${JSON.stringify(e.target)}, which is not an earlier regular file of the snapshot`);
          }
          const done = first.then(() =>
            link(join(top, ...e.target.split('/')), abs).catch(async (err) => {
              throw await createError(abs, err);
            }),
          );
          done.catch(() => undefined);
          pending.push(done);
          break;
        }
        case 'symlink':
          await symlink(e.target, abs).catch(async (err) => {
            throw await createError(abs, err);
          });
          symlinks.add(rel);
          if (isRoot) await lchown(abs, e.uid, e.gid);
          times.push([abs, e.mtimeNs]);
          break;
        case 'fifo':
        case 'chardev':
        case 'blockdev':
          await makeSpecial(abs, e, isRoot);
          await applyAttrs(abs, e);
          break;
        default:
          throw new AwcError('E_FORMAT', `${rel}: unknown entry type ${JSON.stringify((e as { type: unknown }).type)}`);
      }
    }
    return pending;
  };

  let all: Promise<void>[] = [];
  try {
    const r = await reader.readRoot(root);
    all = await walk(r.tree, top, '');
    await Promise.all(all);
    setXattrs(top, r);
    if (isRoot) await lchown(top, r.uid, r.gid);
    await chmod(top, r.mode);
    times.push([top, r.mtimeNs]);
  } catch (err) {
    await Promise.allSettled(all);
    while (running > 0) await new Promise<void>((r) => waiters.push(r));
    throw toAwcError(err);
  }

  let precision: 'ns' | 'us' = 'us';
  if (opts.mtimes !== 'node' && (await setTimesExact(times))) {
    precision = 'ns';
  } else {
    for (const [abs, ns] of times) {
      const s = utimeSeconds(ns);
      await lutimes(abs, s, s).catch((err) => {
        throw toAwcError(err);
      });
    }
  }
  return { ...counts, mtimePrecision: precision };
}

/** Writes `buf` at file offset `pos`, skipping (leaving holes for) aligned all-zero blocks of HOLE_BLOCK bytes. */
async function writeSparse(fh: FileHandle, buf: Buffer, pos: number): Promise<void> {
  const writeAll = async (from: number, to: number): Promise<void> => {
    while (from < to) from += (await fh.write(buf, from, to - from, pos + from)).bytesWritten;
  };
  let run = -1; // start of the pending non-zero run, or -1
  for (let i = 0; i < buf.length; ) {
    const end = Math.min(buf.length, (Math.floor((pos + i) / HOLE_BLOCK) + 1) * HOLE_BLOCK - pos);
    const zero = end - i === HOLE_BLOCK && buf.subarray(i, end).equals(ZERO);
    if (zero) {
      if (run >= 0) await writeAll(run, i);
      run = -1;
    } else if (run < 0) {
      run = i;
    }
    i = end;
  }
  if (run >= 0) await writeAll(run, buf.length);
}

function setXattrs(abs: string, a: EntryAttrs): void {
  for (const [name, b64] of Object.entries(a.xattrs ?? {})) {
    if (name.startsWith('trusted.overlay.')) throw new AwcError('E_FORMAT', `${abs}: trees never carry trusted.overlay.* xattrs`);
    try {
      setAttributeSync(abs, name, Buffer.from(b64, 'base64'));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTSUP' || code === 'EOPNOTSUPP') throw new AwcError('E_UNSUPPORTED', `${abs}: the target file system does not support xattr ${name}`, { cause: err });
      throw toAwcError(err);
    }
  }
}

/** Creates a fifo (`mkfifo`) or, as root, a device node (`mknod`). */
async function makeSpecial(abs: string, e: Extract<Entry, { type: 'fifo' | 'chardev' | 'blockdev' }>, isRoot: boolean): Promise<void> {
  if (e.type !== 'fifo' && !isRoot) throw new AwcError('E_PERMISSION', `${abs}: creating device nodes needs root`);
  if (await exists(abs)) throw await createError(abs, Object.assign(new Error('exists'), { code: 'EEXIST' }));
  const args = e.type === 'fifo' ? ['mkfifo', ['-m', '600', '--', abs]] : ['mknod', ['-m', '600', '--', abs, e.type === 'chardev' ? 'c' : 'b', String(splitDev(e.rdev).major), String(splitDev(e.rdev).minor)]];
  try {
    await execFileP(args[0] as string, args[1] as string[]);
  } catch (err) {
    const stderr = String((err as { stderr?: string }).stderr ?? '');
    if (/exists/i.test(stderr)) throw await createError(abs, Object.assign(new Error(stderr), { code: 'EEXIST' }));
    if (/permission|not permitted/i.test(stderr)) throw new AwcError('E_PERMISSION', `${abs}: ${stderr.trim()}`);
    throw new AwcError('E_INTERNAL', `${args[0]} failed for ${abs}: ${stderr.trim() || (err as Error).message}`, { cause: err });
  }
}
