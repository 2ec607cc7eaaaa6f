import { renameSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { allocatedBytesOf } from '../../core/allocated-bytes.js';
import { removeTree } from '../../core/remove-tree.js';
import { unmountLayerTree } from './shared-image.js';
import { join } from 'node:path';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { readMountInfo, unescapeMountField, type MountInfo } from '../../host/mount/mount-table.js';
import { readHostState } from '../port/workspace-state.js';
import type { LayerUse } from './layer-use.js';

const HEX64 = /^[0-9a-f]{64}$/;
/** A build that died: `<hex>.tmp-<pid>-<ms>` (layer-builder.ts). */
const BUILD_TMP = /^[0-9a-f]{64}\.tmp-(\d+)-\d+$/;
/** A layer this sweep renamed away and had not removed yet (a crash in between). */
const TRASH = /^\.drop-[0-9a-f]{64}-\d+-\d+$/;

/** Options of {@link sweepLayers}. */
export interface LayerSweepOptions {
  /** `<home>/host/layers`. */
  layersDir: string;
  /** `<home>/host/workspaces` (every `state.json` there holds its `layerRoot`). */
  workspacesDir: string;
  /** The mounts in progress in this process (OverlayHost's). */
  use: LayerUse;
  /** The roots of every snapshot row of the catalog, every namespace (read after the sweep window opened). */
  liveRoots(): Promise<ReadonlySet<Digest>>;
  /** Forgets a layer the process keeps in memory (called in the same turn as the rename). */
  forget(root: Digest): void;
  /** Report only: nothing is removed. */
  dryRun?: boolean;
  /** The mount table (default /proc/self/mountinfo). */
  mountinfo?: () => MountInfo[];
}

/** A layer dropped (or, in a dry run, that would be): its root and the disk it held (allocated bytes). */
export interface DroppedLayer {
  root: Digest;
  bytes: number;
}

/** What {@link sweepLayers} did. */
export interface LayerSweepResult {
  dropped: DroppedLayer[];
  /** Layers kept (live in the catalog, or in use on this host). */
  kept: number;
  /** Leftovers of crashed builds or sweeps removed (not counted in `dropped`). */
  leftovers: number;
  /** Bytes the leftovers held. */
  leftoverBytes: number;
}

/**
 * Drops the layer directories of this host that nothing needs, by the rule of
 * docs/explanation/gc.md#host-local-state: a layer `<layers>/<root hex>` goes only when its
 * root is the root of no snapshot row in the catalog, no workspace `state.json` of this host
 * names it as its `layerRoot` (mounted, kept changes, or a lazily detached mount), no overlay
 * in the mount table has it as its lower, and no mount of this process holds it or took it
 * since the sweep began (LayerUse). The last check and the rename that takes the layer out
 * of reach happen in one event-loop turn; the directory is then removed from its new name.
 * Leftovers of crashed builds (`<hex>.tmp-<pid>-…` of a dead pid) and sweeps go too.
 *
 * @throws E_FORMAT when a workspace's `state.json` cannot be read (nothing is dropped: which
 *   layer it holds is unknown); E_PERMISSION / E_INTERNAL from the file system.
 */
export async function sweepLayers(opts: LayerSweepOptions): Promise<LayerSweepResult> {
  const out: LayerSweepResult = { dropped: [], kept: 0, leftovers: 0, leftoverBytes: 0 };
  opts.use.beginSweep();
  try {
    const live = await opts.liveRoots();
    const held = await heldRoots(opts.workspacesDir);
    for (const r of loweredRoots(opts.layersDir, (opts.mountinfo ?? readMountInfo)())) held.add(r);
    let seq = 0;
    for (const name of await listDir(opts.layersDir)) {
      const path = join(opts.layersDir, name);
      if (!HEX64.test(name)) {
        if (!isLeftover(name) || opts.dryRun) continue;
        out.leftoverBytes += await allocatedBytes(path);
        await removeTree(path);
        out.leftovers++;
        continue;
      }
      const root = `sha256:${name}` as Digest;
      if (live.has(root) || held.has(root) || !opts.use.mayDrop(root)) {
        out.kept++;
        continue;
      }
      if (opts.dryRun) {
        out.dropped.push({ root, bytes: await allocatedBytes(path) });
        continue;
      }
      // no await between the last check and the rename: a mount of this process cannot slip in
      const trash = join(opts.layersDir, `.drop-${name}-${process.pid}-${++seq}`);
      if (!opts.use.mayDrop(root)) {
        out.kept++;
        continue;
      }
      renameSync(path, trash);
      opts.forget(root);
      await unmountLayerTree(trash); // an image-backed layer: its image's own bytes are counted, not its mount's
      const bytes = await allocatedBytes(trash);
      await removeTree(trash);
      out.dropped.push({ root, bytes });
    }
    return out;
  } finally {
    opts.use.endSweep();
  }
}

/** The `layerRoot` of every workspace state of this host. @throws E_FORMAT on a state that cannot be read */
async function heldRoots(workspacesDir: string): Promise<Set<Digest>> {
  const roots = new Set<Digest>();
  for (const id of await listDir(workspacesDir)) {
    let root: Digest | undefined;
    try {
      root = (await readHostState(workspacesDir, id))?.layerRoot;
    } catch (err) {
      throw new AwcError('E_FORMAT', `cannot read the host state of workspace ${id}: ${(err as Error).message}`, {
        hint: `No layer is dropped while it is unreadable. Check ${join(workspacesDir, id, 'state.json')}.`,
        cause: err,
      });
    }
    if (root) roots.add(root);
  }
  return roots;
}

/** Roots of the layers under `layersDir` that an overlay of the mount table has as a lower. */
function loweredRoots(layersDir: string, mounts: MountInfo[]): Set<Digest> {
  const roots = new Set<Digest>();
  const prefix = `${layersDir}/`;
  for (const m of mounts) {
    if (m.fsType !== 'overlay') continue;
    for (const opt of m.superOptions.split(',')) {
      if (!opt.startsWith('lowerdir=')) continue;
      const value = Buffer.from(unescapeMountField(opt.slice(9)), 'latin1').toString('utf8');
      for (const dir of value.split(':')) {
        if (!dir.startsWith(prefix)) continue;
        const hex = dir.slice(prefix.length).split('/')[0]!;
        if (HEX64.test(hex)) roots.add(`sha256:${hex}`);
      }
    }
  }
  return roots;
}

/** A crashed build (its pid is gone) or a crashed sweep's trash. */
function isLeftover(name: string): boolean {
  if (TRASH.test(name)) return true;
  const m = BUILD_TMP.exec(name);
  if (!m) return false;
  const pid = Number(m[1]);
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Names in a directory; none when it does not exist. */
async function listDir(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/**
 * Disk allocated under `path` (st_blocks × 512, every entry, symlinks not followed, any depth):
 * the room a layer takes. Its placeholders are sparse, so their apparent sizes would overstate it.
 */
export async function allocatedBytes(path: string): Promise<number> {
  return allocatedBytesOf(path);
}
