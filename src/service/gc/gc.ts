import { killPoint } from '../../core/kill-point.js';
import { newGcOwner, takeGcLock } from './gc-owner.js';
import type { Catalog } from '../../catalog/port/catalog.js';
import type { GcPack } from '../../catalog/port/gc-catalog.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { AwcError } from '../../core/errors.js';
import { gitProofRoot } from '../../store/content/git-proof-record.js';
import { markLive } from './gc-mark.js';
import { countRepack, DEFAULT_REPACK_BELOW, planRepack, repack, type RepackCount } from './gc-repack.js';
import { packKeyHex } from '../../store/pack/pack.js';

/** Default grace period between condemning a pack and deleting it: 24 h. */
export const DEFAULT_GRACE_MS = 24 * 3_600_000;
/** Default retention of unnamed, unheld snapshots: 7 days. */
export const DEFAULT_RETENTION_MS = 7 * 86_400_000;
/** Default time-to-live of the gc lock, renewed at every step: 15 min. */
export const DEFAULT_LOCK_TTL_MS = 15 * 60_000;

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
}

const count = (ps: readonly { size: number }[]): PackCount => ({ count: ps.length, bytes: ps.reduce((n, p) => n + p.size, 0) });

/**
 * One run of gc, fleet-wide, by the protocol of docs/explanation/gc.md#one-run-of-gc (after
 * kopia's two-phase maintenance and restic's exclusive prune lock): lock, finish deletions a
 * dead gc left, remove unreferenced snapshot rows, mark, un-condemn what is live again,
 * delete what a previous run condemned more than `graceMs` ago and this mark still finds
 * unreachable, condemn what this mark finds unreachable, repack live packs that are mostly
 * garbage (src/service/gc/gc-repack.ts), sweep incomplete uploads and the git-index proofs of removed snapshots (both older than `graceMs`), unlock.
 * @throws E_USAGE (repackBelow outside 0..1), E_GC_RUNNING (another gc holds the lock), E_GC_LOCK_LOST (this one stalled past
 *   its lock), E_OBJECT_NOT_FOUND / E_INTEGRITY (a live blob cannot be read: nothing is
 *   condemned or deleted then)
 */
export async function runGc(opts: GcOptions): Promise<GcReport> {
  const { catalog, store } = opts;
  const gc = catalog.gc();
  const dryRun = opts.dryRun ?? false;
  const graceMs = opts.graceMs ?? DEFAULT_GRACE_MS;
  const retentionMs = opts.retentionMs ?? DEFAULT_RETENTION_MS;
  const ttl = opts.lockTtlMs ?? DEFAULT_LOCK_TTL_MS;
  const owner = opts.owner ?? newGcOwner();
  const hooks = opts.hooks ?? {};
  const repackBelow = opts.repackBelow ?? DEFAULT_REPACK_BELOW;
  if (!(repackBelow >= 0 && repackBelow <= 1)) {
    throw new AwcError('E_USAGE', `repack threshold ${repackBelow} is not a fraction between 0 and 1`, {
      hint: 'Pass --repack-below a percentage from 0 (never repack) to 100.',
    });
  }
  if (!dryRun) await takeGcLock(gc, owner, ttl); // (a lock of a dead gc of this machine is taken over)
  killPoint('gc.lock.after');
  try {
    const report: GcReport = {
      dryRun,
      snapshots: { removed: [], live: 0 },
      packs: { live: 0, condemned: count([]), uncondemned: count([]), deleted: count([]), repacked: countRepack([]), adopted: count([]) },
      blobs: { live: 0 },
      incomplete: { removed: 0, bytes: 0 },
      gitProofs: { removed: 0 },
    };
    const deleted: GcPack[] = [];
    // 2. deletions a dead gc left half done
    if (!dryRun) {
      for (const p of (await gc.listPacks()).filter((x) => x.state === 'deleting')) {
        await store.delete(p.key);
        await gc.finishDelete(owner, ttl, p.key);
        deleted.push(p);
      }
    }
    killPoint('gc.leftovers.after');
    // 3. snapshot rows no live root holds
    const now = await catalog.nowMs();
    const cutoff = new Date(now - retentionMs).toISOString();
    const held = new Set<string>();
    for (const h of await gc.listHolds()) for (const id of [h.base, h.head, h.layer]) if (id) held.add(id);
    const all = await gc.listSnapshots();
    const garbage = all.filter((s) => s.name === null && s.createdAt < cutoff && !held.has(s.id));
    if (dryRun) report.snapshots.removed = garbage.map((s) => s.id);
    else
      for (const s of garbage)
        if (await gc.removeGarbageSnapshot(owner, ttl, s.namespace, s.id, cutoff)) {
          report.snapshots.removed.push(s.id);
          killPoint('gc.row.removed');
        }
    // 4. mark: the packs that exist before the roots are read, then every root left
    const rows = await gc.listPacks();
    const packs = rows.filter((p) => p.state === 'live' || p.state === 'condemned');
    const removed = new Set(report.snapshots.removed);
    const live = dryRun ? all.filter((s) => !removed.has(s.id)) : await gc.listSnapshots();
    report.snapshots.live = live.length;
    const mark = await markLive(catalog, store, live, () => (dryRun ? Promise.resolve() : gc.renewLock(owner, ttl)));
    for (const d of mark.digests.values()) report.blobs.live += d.size;
    await hooks.afterMark?.();
    killPoint('gc.mark.after');
    // 5. condemned but live again
    const back = packs.filter((p) => p.state === 'condemned' && mark.packs.has(p.key));
    if (!dryRun)
      await gc.uncondemnPacks(
        owner,
        ttl,
        back.map((p) => p.key),
      );
    report.packs.uncondemned = count(back);
    // 6. condemned by an earlier run, past the grace period, and unreachable in this (later) mark
    const due = packs.filter((p) => p.state === 'condemned' && !mark.packs.has(p.key) && now - (p.condemnedAtMs ?? now) >= graceMs);
    for (const p of due) {
      if (dryRun) {
        deleted.push(p);
        continue;
      }
      await hooks.beforeDelete?.(p.key);
      if (!(await gc.beginDelete(owner, ttl, p.key, graceMs))) continue; // un-condemned meanwhile (a commit uploaded it again)
      killPoint('gc.delete.begun');
      await store.delete(p.key);
      killPoint('gc.delete.object.after');
      await gc.finishDelete(owner, ttl, p.key);
      killPoint('gc.delete.finished');
      deleted.push(p);
    }
    report.packs.deleted = count(deleted);
    // 7. live packs this mark finds unreachable
    const doomed = packs.filter((p) => p.state === 'live' && !mark.packs.has(p.key));
    if (!dryRun)
      await gc.condemnPacks(
        owner,
        ttl,
        doomed.map((p) => p.key),
      );
    killPoint('gc.condemn.after');
    report.packs.condemned = count(doomed);
    report.packs.live = packs.filter((p) => mark.packs.has(p.key)).length;
    await hooks.afterCondemn?.();
    // 7b. pack objects no row names (a writer uploaded them and never committed), stored more than the grace ago
    const states = new Map(rows.map((p) => [p.key, p.state]));
    const orphans: { key: string; size: number }[] = [];
    for await (const o of store.list('packs/')) {
      if (packKeyHex(o.key) === undefined || now - o.modifiedMs < graceMs) continue;
      const state = states.get(o.key);
      if (state === undefined || state === 'deleted') orphans.push({ key: o.key, size: o.size });
    }
    if (!dryRun) await gc.adoptPacks(owner, ttl, orphans);
    killPoint('gc.adopt.after');
    report.packs.adopted = count(orphans);
    // 8. live packs that are mostly garbage: copy their live blobs out, condemn them
    const plan = planRepack(packs, mark.locations, repackBelow);
    const repacked = dryRun
      ? plan
      : await repack(plan, {
          catalog,
          store,
          owner,
          lockTtlMs: ttl,
          packBytes: opts.repackPackBytes,
          beforeCommit: hooks.beforeRepackCommit,
        });
    report.packs.repacked = countRepack(repacked);
    await hooks.afterRepack?.();
    // 9. what dead writers left in the store, and proofs of removed snapshots
    if (!dryRun) report.incomplete = await store.sweepIncomplete(graceMs);
    report.gitProofs.removed = await sweepGitProofs(store, new Set(live.map((s) => s.root)), graceMs, dryRun);
    killPoint('gc.sweep.after');
    return report;
  } finally {
    if (!dryRun) await gc.releaseLock(owner).catch(() => undefined);
  }
}

/**
 * Removes the git-index proof records (src/store/content/git-proof-record.ts) of roots no live snapshot
 * holds that were stored more than `graceMs` ago (the store's clock against this host's): an
 * import puts its proof before its snapshot commits, and a younger record may be one still
 * committing. A proof is a hint (without one a workspace's git re-reads the files), so even a
 * record removed under a slow import costs speed, never correctness.
 * @returns how many were removed (dry: would be). @throws what the store throws
 */
async function sweepGitProofs(store: ObjectStore, roots: ReadonlySet<string>, graceMs: number, dryRun: boolean): Promise<number> {
  const before = Date.now() - graceMs;
  let n = 0;
  for await (const o of store.list('gitproof/')) {
    const root = gitProofRoot(o.key);
    if (!root || roots.has(root) || o.modifiedMs > before) continue;
    if (!dryRun) await store.delete(o.key);
    n++;
  }
  return n;
}
