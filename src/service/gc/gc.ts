/**
 * One run of gc, as a plan and its execution (after restic's PlanPrune → plan.Execute): the
 * plan steps only read the catalog and the store; a dry run computes the whole plan and reports
 * it; a real run takes the lock and executes step by step, each step planned just before it runs
 * (the mark after the snapshot rows are removed, the store listed after the condemnation), so
 * that races and kill points meet the protocol of docs/explanation/gc.md#one-run-of-gc.
 */
import { killPoint } from '../../core/kill-point.js';
import { newGcOwner, takeGcLock } from './gc-owner.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import { DEFAULT_LOCK_TTL_MS, type GcCatalog, type GcPack, type GcSnapshot } from '../../catalog/port/gc-catalog.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { AwcError } from '../../core/errors.js';
import { gitProofRoot } from '../../store/content/git-proof-record.js';
import { planLayerImages, removeLayerImages, type LayerImagePlan } from './gc-images.js';
import { markLive, type MarkResult } from './gc-mark.js';
import { countRepack, DEFAULT_REPACK_BELOW, planRepack, repack, type RepackCandidate, type RepackCount } from './gc-repack.js';
import { packKeyHex } from '../../store/pack/pack.js';

/** Default grace period between condemning a pack and deleting it: 24 h. */
export const DEFAULT_GRACE_MS = 24 * 3_600_000;
/** Default retention of unnamed, unheld snapshots: 7 days. */
export const DEFAULT_RETENTION_MS = 7 * 86_400_000;

/** Options of {@link runGc}. Durations in ms. */
export interface GcOptions {
  catalog: Catalog;
  store: ObjectStore;
  /** Report only: no lock, no write to the catalog or the store. */
  dryRun?: boolean;
  graceMs?: number;
  retentionMs?: number;
  lockTtlMs?: number;
  /**
   * Repack a live pack whose live blobs would fill less than this fraction of it (0..1;
   * default 0.5; 0 turns repacking off). See docs/explanation/gc.md#repack.
   */
  repackBelow?: number;
  /** Target size in bytes of the packs a repack writes (default 32 MiB). */
  repackPackBytes?: number;
  /** Lock owner (default `<hostname>:<pid>:<random>@<process key>`: src/service/gc/gc-owner.ts). */
  owner?: string;
  /** Test-only injection points, awaited at each step (races are driven through them, never by timers). */
  hooks?: {
    afterMark?(): void | Promise<void>;
    afterCondemn?(): void | Promise<void>;
    /** After the repack's copies were uploaded, before its commit (namespace). */
    beforeRepackCommit?(namespace: string): void | Promise<void>;
    afterRepack?(): void | Promise<void>;
    beforeDelete?(key: string): void | Promise<void>;
  };
}

/** A count of packs and their bytes (pack object sizes). */
export interface PackCount {
  count: number;
  bytes: number;
}

/** What a gc run did (or, in a dry run, would do). See docs/reference/rm-gc.md. */
export interface GcReport {
  dryRun: boolean;
  snapshots: { removed: string[]; live: number };
  packs: {
    live: number;
    condemned: PackCount;
    uncondemned: PackCount;
    deleted: PackCount;
    repacked: RepackCount;
    /** Pack objects with no row (or a tombstone), stored more than the grace ago, adopted as condemned (or, dry, to adopt). */
    adopted: PackCount;
  };
  blobs: { live: number };
  incomplete: { removed: number; bytes: number };
  /** Git-index proof records (`gitproof/…`) of roots no live snapshot holds, stored more than the grace ago: removed (or, dry, to remove). */
  gitProofs: { removed: number };
  /** Shared layer images (src/service/gc/gc-images.ts): catalog records of roots no live snapshot holds, and `images/…` objects no record names, older than the grace: removed (or, dry, to remove). */
  layerImages: { records: number; objects: number };
}

const count = (ps: readonly { size: number }[]): PackCount => ({ count: ps.length, bytes: ps.reduce((n, p) => n + p.size, 0) });

/** A pack object in the store: its key and size in bytes. */
export interface PackObject {
  key: string;
  size: number;
}

/**
 * What one gc run does, in the shape of its steps: computed by reading only (a dry run reports
 * this), or, after a real run, what it did (then `removeSnapshots` holds the rows removed and
 * `delete` also the packs a dead gc left half deleted).
 */
export interface GcPlan {
  /** Step 3: snapshot rows to remove (unnamed, unheld, created before the retention). */
  removeSnapshots: GcSnapshot[];
  /** Step 4: the snapshots the mark walks (those left after step 3). */
  live: GcSnapshot[];
  /** Live blobs the mark found (digests, summed over namespaces). */
  liveBlobs: number;
  /** Pack rows (live or condemned) holding a live blob. */
  livePacks: number;
  /** Step 5: condemned packs the mark finds live again. */
  uncondemn: GcPack[];
  /** Step 6: condemned by an earlier run, past the grace, unreachable in this mark. */
  delete: GcPack[];
  /** Step 7: live packs this mark finds unreachable. */
  condemn: GcPack[];
  /** Step 7b: pack objects no row names (or a tombstone), stored more than the grace ago. */
  adopt: PackObject[];
  /** Step 8: live packs mostly garbage, to copy out of. */
  repack: RepackCandidate[];
  /** Step 9: keys of git-index proof records of roots no live snapshot holds, older than the grace. */
  gitProofs: string[];
  /** Step 10: shared layer images of removed roots. */
  layerImages: LayerImagePlan;
}

/** The options of one run with their defaults applied. */
interface GcRun {
  catalog: Catalog;
  store: ObjectStore;
  gc: GcCatalog;
  graceMs: number;
  retentionMs: number;
  ttl: number;
  owner: string;
  hooks: NonNullable<GcOptions['hooks']>;
  repackBelow: number;
  repackPackBytes?: number;
}

/**
 * One run of gc, fleet-wide, by the protocol of docs/explanation/gc.md#one-run-of-gc (after
 * kopia's two-phase maintenance and restic's exclusive prune lock): lock, finish deletions a
 * dead gc left, remove unreferenced snapshot rows, mark, un-condemn what is live again,
 * delete what a previous run condemned more than `graceMs` ago and this mark still finds
 * unreachable, condemn what this mark finds unreachable, repack live packs that are mostly
 * garbage (src/service/gc/gc-repack.ts), sweep incomplete uploads, the git-index proofs and the shared layer images of removed snapshots (all older than `graceMs`), unlock.
 * A dry run computes the plan ({@link planGc}) and reports it: no lock, no write.
 * @throws E_USAGE (repackBelow outside 0..1), E_GC_RUNNING (another gc holds the lock), E_GC_LOCK_LOST (this one stalled past
 *   its lock), E_OBJECT_NOT_FOUND / E_INTEGRITY (a live blob cannot be read: nothing is
 *   condemned or deleted then)
 */
export async function runGc(opts: GcOptions): Promise<GcReport> {
  const run = gcRun(opts);
  if (opts.dryRun ?? false) return reportOf(true, await planGc(run), { removed: 0, bytes: 0 });
  return executeGc(run);
}

/** The options with their defaults. @throws E_USAGE (repackBelow outside 0..1) */
function gcRun(opts: GcOptions): GcRun {
  const repackBelow = opts.repackBelow ?? DEFAULT_REPACK_BELOW;
  if (!(repackBelow >= 0 && repackBelow <= 1)) {
    throw new AwcError('E_USAGE', `repack threshold ${repackBelow} is not a fraction between 0 and 1`, {
      hint: 'Pass --repack-below a percentage from 0 (never repack) to 100.',
    });
  }
  return {
    catalog: opts.catalog,
    store: opts.store,
    gc: opts.catalog.gc(),
    graceMs: opts.graceMs ?? DEFAULT_GRACE_MS,
    retentionMs: opts.retentionMs ?? DEFAULT_RETENTION_MS,
    ttl: opts.lockTtlMs ?? DEFAULT_LOCK_TTL_MS,
    owner: opts.owner ?? newGcOwner(),
    hooks: opts.hooks ?? {},
    repackBelow,
    repackPackBytes: opts.repackPackBytes,
  };
}

/** The report of a plan (dry run) or of what a run did; `incomplete` is what the sweep of incomplete uploads removed. */
function reportOf(dryRun: boolean, p: GcPlan, incomplete: { removed: number; bytes: number }): GcReport {
  return {
    dryRun,
    snapshots: { removed: p.removeSnapshots.map((s) => s.id), live: p.live.length },
    packs: {
      live: p.livePacks,
      condemned: count(p.condemn),
      uncondemned: count(p.uncondemn),
      deleted: count(p.delete),
      repacked: countRepack(p.repack),
      adopted: count(p.adopt),
    },
    blobs: { live: p.liveBlobs },
    incomplete,
    gitProofs: { removed: p.gitProofs.length },
    layerImages: { records: p.layerImages.records.length, objects: p.layerImages.keys.length },
  };
}

/**
 * The whole plan of a run, reading only: the rows step 3 would remove, the mark over the
 * snapshots left, and what steps 5 to 9 would do after it. A dead gc's half-done deletions and
 * the incomplete uploads are not part of it (a dry run reports neither).
 * @throws what the mark throws (E_OBJECT_NOT_FOUND / E_INTEGRITY / E_FORMAT), the catalog's and the store's errors
 */
async function planGc(run: GcRun): Promise<GcPlan> {
  const snaps = await planSnapshots(run);
  const gone = new Set(snaps.garbage.map((s) => s.id));
  const marked = await planMark(
    run,
    snaps.now,
    async () => snaps.all.filter((s) => !gone.has(s.id)),
    async () => undefined,
  );
  return {
    ...marked.plan,
    removeSnapshots: snaps.garbage,
    adopt: await planAdopt(run, marked.rows, snaps.now),
    repack: planRepack(marked.packs, marked.mark.locations, run.repackBelow),
    gitProofs: await planGitProofs(run, marked.plan.live),
    layerImages: await planLayerImages(run.catalog, run.store, marked.plan.live, run.graceMs),
  };
}

/**
 * A real run: lock, then each step planned and executed in the protocol's order, kill points
 * after each write (docs/explanation/crash-safety.md), unlock.
 * @throws see {@link runGc}
 */
async function executeGc(run: GcRun): Promise<GcReport> {
  await takeGcLock(run.gc, run.owner, run.ttl); // (a lock of a dead gc of this machine is taken over)
  killPoint('gc.lock.after');
  try {
    const leftovers = await finishLeftovers(run);
    killPoint('gc.leftovers.after');
    const snaps = await planSnapshots(run);
    const removed = await removeSnapshots(run, snaps.garbage, snaps.cutoff);
    const marked = await planMark(
      run,
      snaps.now,
      () => run.gc.listSnapshots(),
      () => run.gc.renewLock(run.owner, run.ttl),
    );
    await run.gc.uncondemnPacks(
      run.owner,
      run.ttl,
      marked.plan.uncondemn.map((p) => p.key),
    );
    const deleted = [...leftovers, ...(await deletePacks(run, marked.plan.delete))];
    await run.gc.condemnPacks(
      run.owner,
      run.ttl,
      marked.plan.condemn.map((p) => p.key),
    );
    killPoint('gc.condemn.after');
    await run.hooks.afterCondemn?.();
    const adopt = await planAdopt(run, marked.rows, snaps.now);
    await run.gc.adoptPacks(run.owner, run.ttl, adopt);
    killPoint('gc.adopt.after');
    const repacked = await repackPacks(run, planRepack(marked.packs, marked.mark.locations, run.repackBelow));
    const incomplete = await run.store.sweepIncomplete(run.graceMs);
    const gitProofs = await planGitProofs(run, marked.plan.live);
    for (const key of gitProofs) await run.store.delete(key);
    const layerImages = await planLayerImages(run.catalog, run.store, marked.plan.live, run.graceMs);
    await removeLayerImages(run.catalog, run.store, layerImages);
    killPoint('gc.sweep.after');
    const done = { ...marked.plan, removeSnapshots: removed, delete: deleted, adopt, repack: repacked, gitProofs, layerImages };
    return reportOf(false, done, incomplete);
  } finally {
    await run.gc.releaseLock(run.owner).catch(() => undefined);
  }
}

/** Step 2 (real run only): finishes the deletions a dead gc left half done. @returns the packs deleted */
async function finishLeftovers(run: GcRun): Promise<GcPack[]> {
  const deleted: GcPack[] = [];
  for (const p of (await run.gc.listPacks()).filter((x) => x.state === 'deleting')) {
    await run.store.delete(p.key);
    await run.gc.finishDelete(run.owner, run.ttl, p.key);
    deleted.push(p);
  }
  return deleted;
}

/** The snapshot rows as step 3 sees them: the catalog's clock, the retention cutoff (ISO time), every row, and the garbage among them. */
interface SnapshotPlan {
  now: number;
  cutoff: string;
  all: GcSnapshot[];
  garbage: GcSnapshot[];
}

/** Step 3, plan: snapshot rows no workspace holds, unnamed and created before the retention. */
async function planSnapshots(run: GcRun): Promise<SnapshotPlan> {
  const now = await run.catalog.nowMs();
  const cutoff = new Date(now - run.retentionMs).toISOString();
  const held = new Set<string>();
  for (const h of await run.gc.listHolds()) for (const id of [h.base, h.head, h.layer]) if (id) held.add(id);
  const all = await run.gc.listSnapshots();
  const garbage = all.filter((s) => s.name === null && s.createdAt < cutoff && !held.has(s.id));
  return { now, cutoff, all, garbage };
}

/** Step 3, execution: removes each row still garbage (the catalog checks again under the lock). @returns the rows removed */
async function removeSnapshots(run: GcRun, garbage: readonly GcSnapshot[], cutoff: string): Promise<GcSnapshot[]> {
  const removed: GcSnapshot[] = [];
  for (const s of garbage)
    if (await run.gc.removeGarbageSnapshot(run.owner, run.ttl, s.namespace, s.id, cutoff)) {
      removed.push(s);
      killPoint('gc.row.removed');
    }
  return removed;
}

/** What the mark (step 4) gives the later steps: every pack row, the live or condemned ones, the mark itself, and the plan of steps 4 to 7. */
interface MarkPlan {
  rows: GcPack[];
  packs: GcPack[];
  mark: MarkResult;
  plan: Pick<GcPlan, 'live' | 'liveBlobs' | 'livePacks' | 'uncondemn' | 'delete' | 'condemn'>;
}

/**
 * Step 4, the mark: the packs that exist before the roots are read, then every root of
 * `liveSnapshots()`; from it, the plan of steps 5 to 7. `tick` renews the lock (a real run).
 */
async function planMark(run: GcRun, now: number, liveSnapshots: () => Promise<GcSnapshot[]>, tick: () => Promise<void>): Promise<MarkPlan> {
  const rows = await run.gc.listPacks();
  const packs = rows.filter((p) => p.state === 'live' || p.state === 'condemned');
  const live = await liveSnapshots();
  const mark = await markLive(run.catalog, run.store, live, tick);
  let liveBlobs = 0;
  for (const d of mark.digests.values()) liveBlobs += d.size;
  await run.hooks.afterMark?.();
  killPoint('gc.mark.after');
  const reachable = (p: GcPack): boolean => mark.packs.has(p.key);
  const condemned = packs.filter((p) => p.state === 'condemned');
  return {
    rows,
    packs,
    mark,
    plan: {
      live,
      liveBlobs,
      livePacks: packs.filter(reachable).length,
      uncondemn: condemned.filter(reachable),
      delete: condemned.filter((p) => !reachable(p) && now - (p.condemnedAtMs ?? now) >= run.graceMs),
      condemn: packs.filter((p) => p.state === 'live' && !reachable(p)),
    },
  };
}

/** Step 6, execution: deletes each pack still condemned past the grace (row to `deleting`, object, row to `deleted`). @returns the packs deleted */
async function deletePacks(run: GcRun, due: readonly GcPack[]): Promise<GcPack[]> {
  const deleted: GcPack[] = [];
  for (const p of due) {
    await run.hooks.beforeDelete?.(p.key);
    if (!(await run.gc.beginDelete(run.owner, run.ttl, p.key, run.graceMs))) continue; // un-condemned meanwhile (a commit uploaded it again)
    killPoint('gc.delete.begun');
    await run.store.delete(p.key);
    killPoint('gc.delete.object.after');
    await run.gc.finishDelete(run.owner, run.ttl, p.key);
    killPoint('gc.delete.finished');
    deleted.push(p);
  }
  return deleted;
}

/** Step 7b, plan: pack objects no row names (a writer uploaded them and never committed), or only a tombstone, stored more than the grace ago. */
async function planAdopt(run: GcRun, rows: readonly GcPack[], now: number): Promise<PackObject[]> {
  const states = new Map(rows.map((p) => [p.key, p.state]));
  const orphans: PackObject[] = [];
  for await (const o of run.store.list('packs/')) {
    if (packKeyHex(o.key) === undefined || now - o.modifiedMs < run.graceMs) continue;
    const state = states.get(o.key);
    if (state === undefined || state === 'deleted') orphans.push({ key: o.key, size: o.size });
  }
  return orphans;
}

/** Step 8, execution: copies the live blobs out of `candidates` and condemns them (src/service/gc/gc-repack.ts). @returns the packs repacked */
async function repackPacks(run: GcRun, candidates: readonly RepackCandidate[]): Promise<RepackCandidate[]> {
  const repacked = await repack(candidates, {
    catalog: run.catalog,
    store: run.store,
    owner: run.owner,
    lockTtlMs: run.ttl,
    packBytes: run.repackPackBytes,
    beforeCommit: run.hooks.beforeRepackCommit,
  });
  await run.hooks.afterRepack?.();
  return repacked;
}

/**
 * Step 9, plan: the git-index proof records (src/store/content/git-proof-record.ts) of roots no
 * live snapshot holds that were stored more than the grace ago (the store's clock against this
 * host's): an import puts its proof before its snapshot commits, and a younger record may be one
 * still committing. A proof is a hint (without one a workspace's git re-reads the files), so even
 * a record removed under a slow import costs speed, never correctness.
 * @returns their keys. @throws what the store throws
 */
async function planGitProofs(run: GcRun, live: readonly GcSnapshot[]): Promise<string[]> {
  const roots = new Set<string>(live.map((s) => s.root));
  const before = Date.now() - run.graceMs;
  const keys: string[] = [];
  for await (const o of run.store.list('gitproof/')) {
    const root = gitProofRoot(o.key);
    if (!root || roots.has(root) || o.modifiedMs > before) continue;
    keys.push(o.key);
  }
  return keys;
}
