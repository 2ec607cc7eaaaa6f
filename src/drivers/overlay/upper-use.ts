/**
 * Is an overlay upper directory still in use by a mount, and by whom?
 *
 * Two overlays on one upper are undefined behaviour (the kernel only warns with index=off).
 * An overlay lazily detached (`umount -l`) leaves /proc/self/mountinfo but lives on while a
 * process holds a file, a working directory or a mapping in it, and a copy of the mount in
 * another mount namespace keeps it alive too. Measured on Linux 6.18 (see docs/decisions.md):
 *
 * - The kernel's own answer is the upper inode's in-use flag (I_OVL_INUSE), set while any
 *   overlay superblock uses it. A probe mount with `index=on` fails with EBUSY on an upper in
 *   use; with `workdir=/proc` (never on the upper's mount) it fails in every case before it
 *   writes anything, with EINVAL ("workdir and upperdir must reside under the same mount")
 *   when the upper is free.
 * - The holders: `/proc/<pid>/fdinfo/<n>` gives the mount id of every open file, and an O_PATH
 *   open of `/proc/<pid>/{cwd,root,map_files/*}` gives it for directories and mappings (our
 *   own fdinfo of that descriptor); a detached mount keeps its id. An O_PATH open and fdinfo
 *   never call into the file system, so a hung FUSE cannot block the scan. (st_dev does not
 *   work for mappings: /proc/<pid>/maps shows the underlying file's device.)
 */
import { mkdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { commandOf, holderOf, otherPids } from '../../host/mount/mount-holders.js';
import { join } from 'node:path';
import { readMountInfo, unescapeMountField, type MountInfo } from '../../host/mount/mount-table.js';
import { runCommand } from '../../host/mount/mount-commands.js';
import type { Holder, MountUse } from '../port/mount-use.js';

/** The `upperdir=` of an overlay's super options (unescaped), or undefined. */
export function overlayUpper(m: MountInfo): string | undefined {
  if (m.fsType !== 'overlay') return undefined;
  for (const opt of m.superOptions.split(','))
    if (opt.startsWith('upperdir=')) return Buffer.from(unescapeMountField(opt.slice(9)), 'latin1').toString('utf8');
  return undefined;
}

/**
 * The kernel's answer: does an overlay superblock (mounted, detached, or in another
 * namespace) use `upper` as its upper directory? `scratch` is a directory on any file system
 * where the probe's empty lower and target directories are made (and removed).
 * Never mounts anything (see the file comment); false when the probe could not run.
 */
export async function probeUpperInUse(upper: string, scratch: string): Promise<boolean> {
  return (await probeUpper(upper, scratch)) === 'busy';
}

/** {@link probeUpperInUse} with its third answer: `free` only when the kernel said so (EINVAL), `unknown` when the probe could not run. */
async function probeUpper(upper: string, scratch: string): Promise<'busy' | 'free' | 'unknown'> {
  const lower = join(scratch, 'probe-lower');
  const target = join(scratch, 'probe-target');
  mkdirSync(lower, { recursive: true, mode: 0o700 });
  mkdirSync(target, { recursive: true, mode: 0o700 });
  try {
    // LC_ALL=C: the answer is read from mount(8)'s message
    const r = await runCommand(
      'mount',
      ['-t', 'overlay', 'overlay', '-o', `index=on,lowerdir=${lower},upperdir=${upper},workdir=/proc`, target],
      [],
      30_000,
      { ...process.env, LC_ALL: 'C' },
    );
    if (r.code === 0) {
      // cannot happen (workdir on /proc): undo it and say free, which the kernel just proved
      await runCommand('umount', ['-l', target]);
      return 'free';
    }
    const said = r.stderr + r.stdout;
    // EBUSY reads "already mounted"; EINVAL (workdir not on the upper's mount) "wrong fs type, bad option"
    return /busy|already mounted/i.test(said) ? 'busy' : /wrong fs type|bad option/i.test(said) ? 'free' : 'unknown';
  } finally {
    rmSync(lower, { recursive: true, force: true });
    rmSync(target, { recursive: true, force: true });
  }
}

function safe<T>(f: () => T, fallback: T): T {
  try {
    return f();
  } catch {
    return fallback;
  }
}

/**
 * Processes that keep an overlay on `upper` alive, in any mount namespace this process can see
 * through /proc: those with a file, directory or mapping on one of its mounts (`mountIds`: the
 * ids recorded when it was mounted, detached or not, plus every mount of it found in a
 * namespace's mountinfo), and those in another mount namespace where it is still mounted.
 * The kernel reuses the id of a mount that is gone: a recorded id that a namespace's mountinfo
 * shows as another mount is left out (an id seen nowhere may still be reused by a detached
 * mount: {@link upperInUse} passes recorded ids only while the upper is not free).
 * Synchronous; a few ms per hundred processes. Never includes this process.
 */
export function findHolders(upper: string, mountIds: Iterable<number> = []): Holder[] {
  const ids = new Set(mountIds);
  const reused = new Set<number>();
  const ownNs = safe(() => readlinkSync('/proc/self/ns/mnt'), '');
  const pids = otherPids();
  const nsMounts = new Map<string, MountInfo[]>();
  const nsOf = new Map<number, string>();
  for (const pid of pids) {
    const ns = safe(() => readlinkSync(`/proc/${pid}/ns/mnt`), '');
    nsOf.set(pid, ns);
    if (ns === '' || nsMounts.has(ns)) continue;
    const all = safe(() => readMountInfo(readFileSync(`/proc/${pid}/mountinfo`, 'latin1')), [] as MountInfo[]);
    const mounts = all.filter((m) => overlayUpper(m) === upper);
    nsMounts.set(ns, mounts);
    for (const m of mounts) ids.add(m.mountId);
    for (const m of all) if (overlayUpper(m) !== upper) reused.add(m.mountId);
  }
  for (const id of reused) ids.delete(id);
  const out: Holder[] = [];
  for (const pid of pids) {
    const ns = nsOf.get(pid) ?? '';
    if (ns !== ownNs) {
      const m = nsMounts.get(ns)?.[0];
      if (m) {
        out.push({ pid, command: commandOf(pid), via: 'mount', path: Buffer.from(m.mountPoint, 'latin1').toString('utf8') });
        continue;
      }
    }
    if (ids.size === 0) continue;
    const h = holderOf(pid, ids);
    if (h) out.push(h);
  }
  return out;
}

/**
 * Whether an earlier overlay on `upper` is alive anywhere, and who holds it: the kernel's
 * in-use flag (probe) and the holder scan. `scratch` is where the probe makes its directories.
 */
export async function upperInUse(upper: string, scratch: string, mountIds: Iterable<number> = []): Promise<MountUse> {
  const probe = await probeUpper(upper, scratch);
  const busy = probe === 'busy';
  // a free upper has no overlay left, detached or not: a recorded id may now name another mount
  const holders = findHolders(upper, probe === 'free' ? [] : mountIds);
  const mountedAt = readMountInfo()
    .filter((m) => overlayUpper(m) === upper)
    .map((m) => Buffer.from(m.mountPoint, 'latin1').toString('utf8'));
  return { inUse: busy || holders.length > 0 || mountedAt.length > 0, holders, mountedAt };
}
