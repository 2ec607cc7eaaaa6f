import { readdir } from 'node:fs/promises';
import { allocatedBytesOf } from '../../core/allocated-bytes.js';
import { join, relative } from 'node:path';
import { digestHex } from '../../core/digest.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import { readHostState, workspaceDirs, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import { formatBytes } from '../../core/format-bytes.js';
import { textTable as table } from '../../core/text-table.js';
import type { Awc } from './awc.js';

/**
 * `awc usage`: what a namespace costs (docs/explanation/design.md#economics). All sizes are bytes.
 *
 * Three measures:
 * - **logical**: what the workspaces would occupy as full copies, i.e. the sum over
 *   workspaces of their head snapshot's `byteCount` (regular-file bytes, hardlinked inodes
 *   once). Snapshots also carry their own logical size.
 * - **unique stored**: the sum of the sizes of the namespace's pack objects in the object
 *   store (catalog pack rows; compressed, deduplicated, trees included).
 * - **materialised on this host**: ALLOCATED bytes (`st_blocks × 512`, hardlinked inodes
 *   once, never crossing into another file system, so sparse layer placeholders cost ~0 and
 *   live mounts are never read through) of the chunk cache (`<home>/host/cache`), the layer
 *   directories (`<home>/host/layers`), each workspace's host directory
 *   (`<home>/host/workspaces/<id>`: upper, overlay work dir, state file) and, for
 *   copy-driver mounts, the materialised target directory. The cache and the layers are
 *   shared by every namespace on the host; uppers and copy targets are this namespace's.
 *
 * JSON shape (`awc usage --json`):
 *
 *     {
 *       namespace: string, hostName: string, home: string,
 *       totals: {
 *         workspaces: number, snapshots: number,
 *         logicalBytes: number,          // Σ over workspaces of head.byteCount
 *         snapshotLogicalBytes: number,  // Σ over snapshots of their own byteCount
 *         uniqueStoredBytes: number,     // = stored.bytes
 *         hostBytes: number,             // = host.totalBytes
 *         dedupRatio: number | null      // logicalBytes / uniqueStoredBytes (null when nothing is stored)
 *         snapshotDedupRatio: number | null  // snapshotLogicalBytes / uniqueStoredBytes: what content addressing saved in the store
 *         hostOverCopies: number | null  // hostBytes / logicalBytes: this host's bytes against the workspaces as full copies
 *       },
 *       stored: { packs: number, blobs: number, bytes: number },
 *       host: {
 *         cacheBytes: number,   // <home>/host/cache (host-wide)
 *         layerBytes: number,   // <home>/host/layers (host-wide)
 *         upperBytes: number,   // Σ workspaces[].upperBytes
 *         copyBytes: number,    // Σ workspaces[].copyBytes
 *         totalBytes: number    // sum of the four
 *       },
 *       snapshots: [{
 *         id, name: string | null, parentId: string | null, createdAt: string, files: number,
 *         logicalBytes: number,           // the snapshot's own byteCount
 *         headOf: number,                 // workspaces whose head it is
 *         workspaceLogicalBytes: number,  // logicalBytes × headOf
 *         layerBytes: number              // its layer directory on this host (0 when not built)
 *       }],                               // newest first
 *       workspaces: [{
 *         id, name: string | null, headSnapshotId: string,
 *         mountState: 'mounted' | 'unmounted', mountDriver: 'overlay' | 'copy' | null, mountPath: string | null,
 *         logicalBytes: number,  // head snapshot's byteCount
 *         upperBytes: number,    // <home>/host/workspaces/<id> on this host
 *         copyBytes: number,     // copy driver: the materialised tree (bound at the target)
 *         hostBytes: number,     // upperBytes + copyBytes
 *         withheld?: true        // through the daemon: another user's (or root's) mount, not measured (0s)
 *       }]                       // oldest first
 *     }
 */
export interface UsageReport {
  namespace: string;
  /** This host's name (config `host`). */
  hostName: string;
  home: string;
  totals: {
    workspaces: number;
    snapshots: number;
    logicalBytes: number;
    snapshotLogicalBytes: number;
    uniqueStoredBytes: number;
    hostBytes: number;
    dedupRatio: number | null;
    /** Σ of the snapshots' own logical sizes over the unique stored bytes (null when nothing is stored). */
    snapshotDedupRatio: number | null;
    /** This host's allocated bytes over the workspaces as full copies (null with no workspace bytes). */
    hostOverCopies: number | null;
  };
  stored: { packs: number; blobs: number; bytes: number };
  host: { cacheBytes: number; layerBytes: number; upperBytes: number; copyBytes: number; totalBytes: number };
  snapshots: SnapshotUsage[];
  workspaces: WorkspaceUsage[];
}

/** One snapshot's row in {@link UsageReport}. */
export interface SnapshotUsage {
  id: string;
  name: string | null;
  parentId: string | null;
  createdAt: string;
  files: number;
  logicalBytes: number;
  headOf: number;
  workspaceLogicalBytes: number;
  layerBytes: number;
}

/** One workspace's row in {@link UsageReport}. */
export interface WorkspaceUsage {
  id: string;
  name: string | null;
  headSnapshotId: string;
  mountState: 'mounted' | 'unmounted';
  mountDriver: MountDriverName | null;
  mountPath: string | null;
  logicalBytes: number;
  upperBytes: number;
  copyBytes: number;
  hostBytes: number;
  /**
   * True when the report was made for a user who did not mount this workspace (through the
   * root daemon: docs/explanation/security.md "Live state belongs to its mounter"): its state
   * on this host was not measured, and its three host measures are 0 (also in the totals).
   */
  withheld?: true;
}

/** Options of {@link computeUsage}. */
export interface UsageOptions {
  /**
   * Whether the caller may see the measures of a workspace's state on this host (`state`:
   * its host state, undefined when it has none). Absent: every workspace is measured. A
   * state that cannot be read is withheld whenever this is given.
   */
  measures?: (state: WorkspaceHostState | undefined) => boolean;
}

/**
 * Computes the usage report of the service's current namespace (shape: see the module
 * doc above). Reads the catalog and walks host directories with lstat only (never through
 * a mount, so it is safe while workspaces are mounted); missing directories count 0.
 * Cost: O(snapshots + workspaces) catalog reads plus O(files) lstat calls on this host.
 * @throws E_INTERNAL / E_PERMISSION on unexpected file-system errors (ENOENT is never one)
 */
export async function computeUsage(awc: Awc, opts: UsageOptions = {}): Promise<UsageReport> {
  const [snapshots, workspaces, stored] = await Promise.all([
    awc.listSnapshots(),
    awc.listWorkspaces(),
    awc.catalog.packStats(awc.namespace),
  ]);
  const seen = new Set<string>();

  // layer directories: one per snapshot root (<layers>/<root hex>), plus temporaries
  const layerByHex = new Map<string, number>();
  let layerBytes = await allocatedOf(awc.paths.layers, seen, { shallow: true });
  for (const name of await readdirOrEmpty(awc.paths.layers)) {
    const n = await allocatedOf(join(awc.paths.layers, name), seen);
    layerBytes += n;
    if (/^[0-9a-f]{64}$/.test(name)) layerByHex.set(name, n);
  }
  const cacheBytes = await allocatedOf(awc.paths.cache, seen);

  const byId = new Map(snapshots.map((s) => [s.id, s]));
  const headOf = new Map<string, number>();
  const wsRows: WorkspaceUsage[] = [];
  for (const w of workspaces) {
    headOf.set(w.headSnapshotId, (headOf.get(w.headSnapshotId) ?? 0) + 1);
    const head = byId.get(w.headSnapshotId) ?? (await awc.getSnapshot(w.headSnapshotId));
    const dirs = workspaceDirs(awc.paths.workspaces, w.id);
    const read = await readHostState(awc.paths.workspaces, w.id).then(
      (state) => ({ state, ok: true }),
      () => ({ state: undefined, ok: false }),
    );
    const state = read.state;
    if (opts.measures && !(read.ok && opts.measures(state))) {
      // another's live state: not walked, not counted (its size would say what they wrote)
      wsRows.push({ ...rowOf(w, head.byteCount), upperBytes: 0, copyBytes: 0, hostBytes: 0, withheld: true });
      continue;
    }
    // the copy driver's private tree (bound at the target) is counted once, as copyBytes
    const upperBytes = await allocatedOf(dirs.dir, seen, { skip: dirs.tree });
    const tree = state && awc.materialised(state);
    const copyBytes = tree ? await allocatedOf(tree, seen) : 0;
    wsRows.push({
      ...rowOf(w, head.byteCount),
      upperBytes,
      copyBytes,
      hostBytes: upperBytes + copyBytes,
    });
  }

  const snapRows: SnapshotUsage[] = snapshots.map((s) => {
    const n = headOf.get(s.id) ?? 0;
    return {
      id: s.id,
      name: s.name,
      parentId: s.parentId,
      createdAt: s.createdAt,
      files: s.fileCount,
      logicalBytes: s.byteCount,
      headOf: n,
      workspaceLogicalBytes: s.byteCount * n,
      layerBytes: layerByHex.get(digestHex(s.root)) ?? 0,
    };
  });

  const upperBytes = sum(wsRows.map((w) => w.upperBytes));
  const copyBytes = sum(wsRows.map((w) => w.copyBytes));
  const totalBytes = cacheBytes + layerBytes + upperBytes + copyBytes;
  const logicalBytes = sum(wsRows.map((w) => w.logicalBytes));
  return {
    namespace: awc.namespace,
    hostName: awc.config.host,
    home: awc.config.home,
    totals: {
      workspaces: wsRows.length,
      snapshots: snapRows.length,
      logicalBytes,
      snapshotLogicalBytes: sum(snapRows.map((s) => s.logicalBytes)),
      uniqueStoredBytes: stored.bytes,
      hostBytes: totalBytes,
      dedupRatio: stored.bytes > 0 ? logicalBytes / stored.bytes : null,
      snapshotDedupRatio: stored.bytes > 0 ? sum(snapRows.map((s) => s.logicalBytes)) / stored.bytes : null,
      hostOverCopies: logicalBytes > 0 ? totalBytes / logicalBytes : null,
    },
    stored,
    host: { cacheBytes, layerBytes, upperBytes, copyBytes, totalBytes },
    snapshots: snapRows,
    workspaces: wsRows,
  };
}

/** The catalog's part of a workspace's usage row. */
function rowOf(
  w: WorkspaceRow,
  logicalBytes: number,
): Pick<WorkspaceUsage, 'id' | 'name' | 'headSnapshotId' | 'mountState' | 'mountDriver' | 'mountPath' | 'logicalBytes'> {
  return {
    id: w.id,
    name: w.name,
    headSnapshotId: w.headSnapshotId,
    mountState: w.mountState,
    mountDriver: w.mountDriver,
    mountPath: w.mountPath,
    logicalBytes,
  };
}

/** Renders a report for people: a summary, then aligned snapshot and workspace tables (binary units). */
export function formatUsage(u: UsageReport): string {
  const b = formatBytes;
  const summary = table(
    ['', 'BYTES', ''],
    [
      [`snapshots (${u.totals.snapshots}, their own logical size)`, b(u.totals.snapshotLogicalBytes), ''],
      [
        `unique stored (${u.stored.packs} packs, ${u.stored.blobs} blobs)`,
        b(u.totals.uniqueStoredBytes),
        ratio(u.totals.snapshotDedupRatio, 'dedup: snapshots logical / stored'),
      ],
      [`workspaces as full copies (${u.totals.workspaces})`, b(u.totals.logicalBytes), ''],
      [
        `materialised on ${u.hostName} (allocated)`,
        b(u.host.totalBytes),
        u.totals.hostOverCopies === null ? '' : `${(100 * u.totals.hostOverCopies).toFixed(1)}% of the full copies`,
      ],
      ['  chunk cache (host-wide)', b(u.host.cacheBytes), ''],
      ['  layer directories (host-wide)', b(u.host.layerBytes), ''],
      ['  workspace uppers', b(u.host.upperBytes), ''],
      ['  copy-driver mounts', b(u.host.copyBytes), ''],
    ],
    [false, true, false],
  );
  const snaps = table(
    ['SNAPSHOT', 'NAME', 'FILES', 'LOGICAL', 'HEAD OF', 'AS COPIES', 'LAYER'],
    u.snapshots.map((s) => [
      s.id,
      s.name ?? '-',
      String(s.files),
      b(s.logicalBytes),
      String(s.headOf),
      b(s.workspaceLogicalBytes),
      b(s.layerBytes),
    ]),
    [false, false, true, true, true, true, true],
  );
  const wss = table(
    ['WORKSPACE', 'NAME', 'HEAD', 'MOUNT', 'LOGICAL', 'UPPER', 'COPY', 'HOST'],
    u.workspaces.map((w) => [
      w.id,
      w.name ?? '-',
      w.headSnapshotId,
      w.mountState === 'mounted' ? (w.mountDriver ?? '?') : '-',
      b(w.logicalBytes),
      ...(w.withheld ? ['-', '-', '-'] : [b(w.upperBytes), b(w.copyBytes), b(w.hostBytes)]),
    ]),
    [false, false, false, false, true, true, true, true],
  );
  return [`namespace ${u.namespace}`, summary, '', snaps, '', wss].join('\n');
}

/** `label` and a ratio as `12.34x`, or '' when there is none. */
function ratio(x: number | null, label: string): string {
  return x === null ? '' : `${x.toFixed(2)}x ${label}`;
}

function sum(xs: number[]): number {
  return xs.reduce((a, x) => a + x, 0);
}

async function readdirOrEmpty(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return [];
    throw err;
  }
}

/**
 * Allocated bytes (`st_blocks × 512`) of `root` and everything below it, without following
 * symlinks or descending into another file system (a mount point below `root`, e.g. a live
 * FUSE or overlay mount, is not entered), through directory descriptors (any depth). Inodes
 * with several links are counted once across all calls sharing `seen`. `shallow` counts
 * `root` itself only; `skip` is a path below `root` that is neither counted nor entered.
 * Missing paths (also ones vanishing during the walk) count 0.
 */
async function allocatedOf(root: string, seen: Set<string>, opts: { shallow?: boolean; skip?: string } = {}): Promise<number> {
  const skipRel = opts.skip === undefined ? undefined : relative(root, opts.skip);
  return allocatedBytesOf(root, { seen, shallow: opts.shallow, skipRel, oneFileSystem: true });
}
