/**
 * Layer images: a layer directory (src/drivers/overlay/layer-builder.ts) packed into one EROFS
 * file, built once per snapshot and meant to be shared through the object store, as composefs
 * does (docs/explanation/layer-images.md). This module builds an image deterministically and
 * hashes it; src/drivers/overlay/layer-image-mount.ts verifies and mounts one.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { chmod, open, rename, rm } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import { runCommand } from '../../host/mount/mount-commands.js';

/** What {@link buildLayerImage} made: the image's sha256 (of its bytes), its size in bytes, and the build time in ms. */
export interface LayerImage {
  digest: Digest;
  bytes: number;
  ms: number;
}

/** Options of {@link buildLayerImage}. */
export interface BuildLayerImageOptions {
  /** mkfs.erofs to run (default: `mkfs.erofs` on PATH). */
  mkfs?: string;
  /** How long mkfs.erofs may run, in ms (default 30 min). */
  timeoutMs?: number;
  /** Cancels the build: mkfs.erofs is killed, nothing is left, and the build throws E_CANCELLED. */
  signal?: AbortSignal;
}

/**
 * The fixed file system UUID of every image: the same tree gives the same bytes. overlayfs
 * compares lower UUIDs only for its index and nfs_export features, which AWC does not use.
 */
export const LAYER_IMAGE_UUID = '00000000-0000-0000-0000-000000000000';

/**
 * SOURCE_DATE_EPOCH given to mkfs.erofs: 2^64 - 2, the largest it takes. erofs-utils 1.5 then
 * writes this as the superblock's build time instead of the clock, forces extended (64-byte)
 * inodes, and keeps every file's own nanosecond mtime that is below it ("clamping"). Its `-T`
 * would set every mtime to one value, and `--preserve-mtime` does not undo that in 1.5.
 * mkfs.erofs compares mtimes as unsigned 64-bit seconds, so the two seconds before the epoch
 * (-2 s ≤ mtime < 0) are the only ones it would change: {@link checkLayerTree} refuses them.
 */
export const LAYER_IMAGE_EPOCH = '18446744073709551614';

/**
 * Chunk size of the images' regular files, in bytes. A placeholder's bytes are zeros never
 * read (the overlay reads data from the content lower), but mkfs.erofs 1.5 copies them all;
 * in chunk mode it stores each distinct chunk once, so a placeholder costs its chunk index
 * (4 bytes per 4 KiB of size) and at most one tail chunk shared with every file of the same
 * size modulo 4 KiB: the image's data is at most 4096 blocks plus the real files (`.git/index`).
 */
export const LAYER_IMAGE_CHUNK_BYTES = 4096;

/** The arguments of mkfs.erofs for an image of `treeDir` written to `outFile` (the environment adds {@link LAYER_IMAGE_EPOCH}). */
export function mkfsArgs(outFile: string, treeDir: string): string[] {
  return ['--quiet', '-U', LAYER_IMAGE_UUID, `--chunksize=${LAYER_IMAGE_CHUNK_BYTES}`, outFile, treeDir];
}

/** The executable `cmd` resolves to on PATH (or `cmd` itself when it is a path that exists), else undefined. */
export function findExecutable(cmd: string): string | undefined {
  const candidates = cmd.includes('/')
    ? [cmd]
    : (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(delimiter).map((d) => join(d, cmd));
  for (const c of candidates) {
    try {
      fs.accessSync(c, fs.constants.X_OK);
      return c;
    } catch {
      // next
    }
  }
  return undefined;
}

/** Raw bytes of `lost+found`: mkfs.erofs 1.5 silently leaves out every entry whose name starts with them, at any depth. */
const LOST_FOUND = Buffer.from('lost+found');

/**
 * Checks that mkfs.erofs 1.5 would copy the layer tree at `treeDir` exactly: no name starting
 * with `lost+found` (it leaves those out), no name of 255 bytes (it cuts names to 254 and then
 * fails), no mtime in the two seconds before the epoch (see {@link LAYER_IMAGE_EPOCH}).
 * (erofs-utils 1.8.5 takes 255-byte names.) Walks with raw (Buffer) names; never follows a symlink.
 * Cost: one readdir per directory and one lstat per entry, asynchronous (the daemon's event
 * loop stays free; 2 s for 108k entries on a busy 2-core machine when it was synchronous).
 * @throws E_UNSUPPORTED naming the first such path (`details.path`, relative to the tree)
 */
export async function checkLayerTree(treeDir: string): Promise<void> {
  const walk = async (dir: Buffer, rel: string): Promise<void> => {
    for (const name of await fs.promises.readdir(dir, { encoding: 'buffer' })) {
      const path = Buffer.concat([dir, Buffer.from('/'), name]);
      const relPath = rel === '' ? name.toString() : `${rel}/${name.toString()}`;
      if (name.subarray(0, LOST_FOUND.length).equals(LOST_FOUND))
        refuse(relPath, 'its name starts with lost+found, which mkfs.erofs 1.5 leaves out');
      if (name.length >= 255) refuse(relPath, 'its name has 255 bytes, one more than mkfs.erofs 1.5 keeps');
      const st = await fs.promises.lstat(path, { bigint: true });
      if (st.mtimeNs < 0n && st.mtimeNs >= -2_000_000_000n)
        refuse(relPath, 'its mtime is in the two seconds before 1970, which mkfs.erofs 1.5 rounds');
      if (st.isDirectory()) await walk(path, relPath);
    }
  };
  await walk(Buffer.from(treeDir), '');
}

function refuse(path: string, why: string): never {
  throw new AwcError('E_UNSUPPORTED', `cannot pack ${JSON.stringify(path)} into a layer image: ${why}`, {
    details: { path },
    hint: 'Mount this snapshot on a layer directory instead (the default).',
  });
}

/** sha256 of the file open as `fd` (read from offset 0), and its size in bytes. */
export async function hashFd(fd: number): Promise<{ digest: Digest; bytes: number }> {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(1 << 20);
  let bytes = 0;
  for (;;) {
    const n = await new Promise<number>((resolve, reject) =>
      fs.read(fd, buf, 0, buf.length, bytes, (e, r) => (e ? reject(e) : resolve(r))),
    );
    if (n === 0) break;
    h.update(buf.subarray(0, n));
    bytes += n;
  }
  return { digest: `sha256:${h.digest('hex')}`, bytes };
}

/**
 * Builds the EROFS image of the layer tree at `layerTreeDir` (a built layer's `tree`) into
 * `outFile`: runs mkfs.erofs (erofs-utils 1.5 or later) with a fixed UUID, a fixed build time
 * and 4 KiB chunks ({@link mkfsArgs}), so the same tree gives the same bytes on any host
 * (mkfs.erofs sorts directory entries and shared xattrs; inodes are laid out in that order).
 * Owners, modes, nanosecond mtimes, xattrs (`trusted.overlay.*` included), hardlinks, device
 * numbers and symlink targets are kept; a file's ctime in the image is its mtime.
 * Written to a temporary file (0600) beside `outFile` and renamed into place once complete;
 * on failure nothing is left. Cost: O(files), and mkfs.erofs reads (and hashes) every
 * placeholder's zeros: about 5 s a GiB of snapshot on a 2-core machine (docs/explanation/layer-images.md).
 * @returns the image's sha256, size in bytes and build time in ms
 * @throws E_LAYER_IMAGE_UNSUPPORTED without mkfs.erofs, E_UNSUPPORTED for a tree it would not copy exactly (see {@link checkLayerTree}),
 *   E_NO_SPACE on a full disk, E_CANCELLED when `opts.signal` aborts it, E_INTERNAL when mkfs.erofs fails otherwise
 */
export async function buildLayerImage(layerTreeDir: string, outFile: string, opts: BuildLayerImageOptions = {}): Promise<LayerImage> {
  const t0 = performance.now();
  const mkfs = findExecutable(opts.mkfs ?? 'mkfs.erofs');
  if (!mkfs) throw new AwcError('E_LAYER_IMAGE_UNSUPPORTED', `cannot build a layer image: ${opts.mkfs ?? 'mkfs.erofs'} is not installed`);
  await checkLayerTree(layerTreeDir);
  const tmp = `${outFile}.tmp-${process.pid}-${Date.now()}`;
  const fh = await open(tmp, 'wx+', 0o600);
  try {
    const env = { ...process.env, SOURCE_DATE_EPOCH: LAYER_IMAGE_EPOCH };
    const r = await runCommand(mkfs, mkfsArgs(tmp, layerTreeDir), [], opts.timeoutMs ?? 30 * 60_000, env, opts.signal);
    if (opts.signal?.aborted) throw new AwcError('E_CANCELLED', `the image build of ${layerTreeDir} was cancelled`);
    if (r.code !== 0) {
      const out = (r.stderr || r.stdout).trim().slice(-2000);
      const why = r.code === null ? `killed (${r.signal ?? out})` : `exit ${r.code}: ${out}`;
      // mkfs.erofs prints strerror: a full disk is the environment's; anything else is a tree AWC should have refused
      throw new AwcError(
        /No space left|Disk quota/i.test(out) ? 'E_NO_SPACE' : 'E_INTERNAL',
        `mkfs.erofs of ${layerTreeDir} failed (${why})`,
      );
    }
    await chmod(tmp, 0o600);
    await fh.sync();
    const { digest, bytes } = await hashFd(fh.fd);
    await fh.close();
    await rename(tmp, outFile);
    return { digest, bytes, ms: performance.now() - t0 };
  } catch (err) {
    await fh.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
}
