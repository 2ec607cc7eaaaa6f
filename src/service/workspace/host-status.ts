import { readFile, statfs } from 'node:fs/promises';
import { relative } from 'node:path';
import { allocatedBytesOf } from '../../core/allocated-bytes.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { SnapshotRow, WorkspaceRow } from '../../catalog/port/catalog.js';
import { readHostState, workspaceDirs, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import type { Awc } from './awc.js';
import { lastActivityMs } from './idle.js';
import type { LeaseView } from './lease-guard.js';
import { scopesByWorkspace } from './scope-registry.js';

/**
 * `awc status` (docs/reference/cli.md#awc-status): one host's workspaces and its read path, from
 * its own state. JSON shape (`awc status --json`; times ISO 8601, durations ms, sizes bytes):
 *
 *     {
 *       kind: 'host', at: string, namespace: string,
 *       viewer: { uid: number | null, through: 'home' | 'daemon' },
 *       host: {
 *         name: string, home: string,
 *         daemon: { running: boolean, pid: number | null, startedAt: string | null },
 *         figures: HostFigures | null,   // null: no daemon runs (the read path lives in it)
 *         disk: { totalBytes, freeBytes, availableBytes } | null   // the home's file system
 *       },
 *       workspaces: WorkspaceStatus[],   // oldest first
 *       hidden: number                   // through the daemon: workspaces whose live state is another's, left out
 *     }
 */
export interface HostStatusReport {
  kind: 'host';
  /** When the report was made. */
  at: string;
  namespace: string;
  /** Who asked: this process's uid, in process (`home`) or through the root daemon (`daemon`). */
  viewer: { uid: number | null; through: 'home' | 'daemon' };
  host: HostSection;
  workspaces: WorkspaceStatus[];
  /** Workspaces left out for the viewer (another's live state on this host); 0 in process. */
  hidden: number;
}

/** The host part of a {@link HostStatusReport}. */
export interface HostSection {
  /** This host's name (config `host`). */
  name: string;
  home: string;
  daemon: DaemonFigures;
  /** The read path's counters (null when no daemon runs). */
  figures: HostFigures | null;
  /** The home's file system (statfs), null when it cannot be read. Bytes. */
  disk: { totalBytes: number; freeBytes: number; availableBytes: number } | null;
}

/** Whether the host daemon runs, its pid and start time (null when not running). */
export interface DaemonFigures {
  running: boolean;
  pid: number | null;
  startedAt: string | null;
}

/**
 * The read path of the host daemon since it started, from its metrics (src/daemon/metrics/metrics.ts):
 * chunk cache hits and misses (`hitRate`: hits / (hits + misses), null before any lookup), bytes
 * held against its budget; object-store reads made for content and their bytes; the host
 * object cache; overlays mounted.
 */
export interface HostFigures {
  cache: { hits: number; misses: number; hitRate: number | null; bytes: number; budgetBytes: number };
  backend: { reads: number; bytes: number };
  objectCache: { bytes: number; objects: number };
  mountedWorkspaces: number;
}

/** One workspace of a {@link HostStatusReport}. Sizes in bytes, durations in ms. */
export interface WorkspaceStatus {
  id: string;
  name: string | null;
  /** `released`: unmounted by the idle release (labels `awc.released-*`). */
  state: 'mounted' | 'unmounted' | 'released';
  mountDriver: MountDriverName | null;
  mountPath: string | null;
  mountHost: string | null;
  owner: WorkspaceOwner;
  createdAt: string;
  ageMs: number;
  /** The last write, mount or checkpoint seen on this host (src/service/workspace/idle.ts); null without state here. */
  lastActivityAt: string | null;
  idleMs: number | null;
  /** Its host directory (overlay upper, work dir, state; usage's upperBytes), null without state here. Allocated bytes. */
  upperBytes: number | null;
  /** Copy driver: its materialised tree; 0 for an overlay; null without state here. */
  copyBytes: number | null;
  lease: Pick<LeaseView, 'state' | 'here' | 'holder' | 'expiresAt'>;
  /** Its head when a checkpoint moved it past its base (id, when made); null before the first checkpoint. */
  lastCheckpoint: { snapshot: string; at: string } | null;
}

/**
 * Who a workspace is for: the uid that mounted it on this host (root: 0) or whose Claude hook
 * made it (label `awc.claude.uid`), that uid's name, the MCP scopes that own it
 * (`<home>/mcp-scopes`), the Claude Code session (label `awc.claude.session`) and the tool
 * that made it (`claude`, `attach`, `mcp`); null or empty when unknown.
 */
export interface WorkspaceOwner {
  uid: number | null;
  user: string | null;
  scopes: string[];
  session: string | null;
  tool: 'claude' | 'attach' | 'mcp' | null;
}

/** Options of {@link computeHostStatus}. */
export interface HostStatusOptions {
  /** The clock (ms since the epoch; default now). */
  nowMs?: number;
  /** Leave out the workspaces whose live state on this host is not this uid's (the mounter rule; through the daemon). */
  forUid?: number;
  /** Whether the daemon runs (default: not running). */
  daemon?: DaemonFigures;
  /** The daemon's read-path figures (default null). */
  figures?: HostFigures | null;
  /** The home whose MCP scope markers name owners (default: the service's home). */
  scopeHome?: string;
  /** Recorded as `viewer.through` (default `home`). */
  through?: 'home' | 'daemon';
}

/**
 * The status of the service's namespace on this host (shape: {@link HostStatusReport}). Reads
 * the catalog (workspaces, snapshots, leases: three queries) and, per workspace with state on
 * this host, its state file and its host directory with lstat (O(files written)); never reads
 * through a mount. @throws what the catalog throws (E_CATALOG_UNAVAILABLE…)
 */
export async function computeHostStatus(awc: Awc, opts: HostStatusOptions = {}): Promise<HostStatusReport> {
  const nowMs = opts.nowMs ?? Date.now();
  const [rows, snapshots, scopes, names] = await Promise.all([
    awc.listWorkspaces(),
    awc.listSnapshots(),
    scopesByWorkspace(opts.scopeHome ?? awc.config.home),
    userNames(),
  ]);
  const heads = new Map(snapshots.map((s) => [s.id, s]));
  const workspaces: WorkspaceStatus[] = [];
  let hidden = 0;
  for (const w of await awc.leases.list(rows)) {
    const read = await readHostState(awc.paths.workspaces, w.id).then(
      (state) => ({ state, ok: true }),
      () => ({ state: undefined, ok: false }),
    );
    if (opts.forUid !== undefined && !(read.ok && visibleTo(opts.forUid, w, read.state))) {
      hidden++;
      continue;
    }
    const owner = ownerOf(w, read.state, scopes.get(w.id) ?? [], names);
    workspaces.push(await statusOf(awc, w, read.state, owner, heads.get(w.headSnapshotId), nowMs));
  }
  return {
    kind: 'host',
    at: new Date(nowMs).toISOString(),
    namespace: awc.namespace,
    viewer: { uid: opts.forUid ?? process.getuid?.() ?? null, through: opts.through ?? 'home' },
    host: {
      name: awc.config.host,
      home: awc.config.home,
      daemon: opts.daemon ?? { running: false, pid: null, startedAt: null },
      figures: opts.figures ?? null,
      disk: await diskOf(awc.config.home),
    },
    workspaces,
    hidden,
  };
}

/** One workspace's status (its host measures only when it has state here). */
async function statusOf(
  awc: Awc,
  w: WorkspaceRow & { lease: LeaseView },
  state: WorkspaceHostState | undefined,
  owner: WorkspaceOwner,
  head: SnapshotRow | undefined,
  nowMs: number,
): Promise<WorkspaceStatus> {
  const here = state !== undefined;
  const activity = here ? await lastActivityMs(w, state, awc.paths.workspaces) : undefined;
  const dirs = workspaceDirs(awc.paths.workspaces, w.id);
  const tree = state && awc.materialised(state);
  const measure = (root: string, skip?: string) =>
    allocatedBytesOf(root, { oneFileSystem: true, skipRel: skip === undefined ? undefined : relative(root, skip) }).catch(() => 0);
  return {
    ...rowBasics(w, head, nowMs),
    owner,
    lastActivityAt: activity === undefined ? null : new Date(activity).toISOString(),
    idleMs: activity === undefined ? null : Math.max(0, nowMs - activity),
    upperBytes: here ? await measure(dirs.dir, dirs.tree) : null,
    copyBytes: here ? (tree ? await measure(tree) : 0) : null,
  };
}

/** What the catalog alone says of a workspace (`awc status` and `awc status --fleet`). */
export type WorkspaceBasics = Pick<
  WorkspaceStatus,
  'id' | 'name' | 'state' | 'mountDriver' | 'mountPath' | 'mountHost' | 'createdAt' | 'ageMs' | 'lease' | 'lastCheckpoint'
>;

/** The catalog's part of a workspace's status: its row, its lease, its head (`head`: the head's row when known). */
export function rowBasics(w: WorkspaceRow & { lease: LeaseView }, head: SnapshotRow | undefined, nowMs: number): WorkspaceBasics {
  const released = w.mountState !== 'mounted' && w.labels['awc.released-at'] !== undefined;
  return {
    id: w.id,
    name: w.name,
    state: w.mountState === 'mounted' ? 'mounted' : released ? 'released' : 'unmounted',
    mountDriver: w.mountDriver,
    mountPath: w.mountPath,
    mountHost: w.mountHost,
    createdAt: w.createdAt,
    ageMs: Math.max(0, nowMs - Date.parse(w.createdAt)),
    lease: { state: w.lease.state, here: w.lease.here, holder: w.lease.holder, expiresAt: w.lease.expiresAt },
    lastCheckpoint: w.headSnapshotId !== w.baseSnapshotId ? { snapshot: w.headSnapshotId, at: head?.createdAt ?? w.updatedAt } : null,
  };
}

/**
 * Whether `uid` may see `w` (the mounter rule, docs/explanation/security.md): not when its
 * state on this host is another's (root's included), nor when another user's Claude hook made it.
 */
function visibleTo(uid: number, w: WorkspaceRow, state: WorkspaceHostState | undefined): boolean {
  if (state !== undefined && state.owner?.uid !== uid) return false;
  const hook = w.labels['awc.claude.uid'];
  return hook === undefined || hook === String(uid);
}

/** The owner of `w` (see {@link WorkspaceOwner}). */
function ownerOf(w: WorkspaceRow, state: WorkspaceHostState | undefined, scopes: string[], names: Map<number, string>): WorkspaceOwner {
  const hook = Number(w.labels['awc.claude.uid']);
  const uid = state !== undefined ? (state.owner?.uid ?? 0) : Number.isSafeInteger(hook) && hook >= 0 ? hook : null;
  const session = w.labels['awc.claude.session'] ?? null;
  const tool =
    session !== null || w.labels['awc.claude.name'] !== undefined
      ? 'claude'
      : w.labels['awc.attach.dir'] !== undefined
        ? 'attach'
        : scopes.length > 0
          ? 'mcp'
          : null;
  return { uid, user: uid === null ? null : (names.get(uid) ?? null), scopes, session, tool };
}

/** uid → user name from /etc/passwd (empty when it cannot be read). */
async function userNames(): Promise<Map<number, string>> {
  const text = await readFile('/etc/passwd', 'utf8').catch(() => '');
  const out = new Map<number, string>();
  for (const line of text.split('\n')) {
    const [name, , uid] = line.split(':');
    if (name && uid !== undefined && /^\d+$/.test(uid) && !out.has(Number(uid))) out.set(Number(uid), name);
  }
  return out;
}

/** The file system of `path` (statfs), null when it cannot be read. */
async function diskOf(path: string): Promise<HostSection['disk']> {
  try {
    const s = await statfs(path);
    return { totalBytes: s.blocks * s.bsize, freeBytes: s.bfree * s.bsize, availableBytes: s.bavail * s.bsize };
  } catch {
    return null;
  }
}

/**
 * The {@link HostFigures} of the daemon's metrics, flattened as src/daemon/metrics/metrics.ts
 * flattenMetrics makes them (`{<sample name>: number | [{labels, value}]}`): a sample that is
 * missing or labelled counts 0.
 */
export function hostFiguresOf(flat: Readonly<Record<string, unknown>>): HostFigures {
  const n = (name: string): number => (typeof flat[name] === 'number' ? (flat[name] as number) : 0);
  const hits = n('awc_cache_hits_total');
  const misses = n('awc_cache_misses_total');
  return {
    cache: {
      hits,
      misses,
      hitRate: hits + misses > 0 ? hits / (hits + misses) : null,
      bytes: n('awc_cache_bytes'),
      budgetBytes: n('awc_cache_budget_bytes'),
    },
    backend: { reads: n('awc_backend_reads_total'), bytes: n('awc_backend_read_bytes_total') },
    objectCache: { bytes: n('awc_object_cache_bytes'), objects: n('awc_object_cache_objects') },
    mountedWorkspaces: n('awc_mounted_workspaces'),
  };
}
