import { randomBytes, randomInt } from 'node:crypto';
import { hostname } from 'node:os';
import type { Catalog } from '../../catalog/port/catalog.js';
import { DEFAULT_LOCK_TTL_MS, type GcPack, type GcSnapshot } from '../../catalog/port/gc-catalog.js';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { checkCacheFiles } from './fsck-cache.js';
import { checkGitProofs, type ProofRoot } from './fsck-gitproof.js';
import { checkLayerImages } from './fsck-images.js';
import { checkPacks, type PackCheck } from './fsck-packs.js';
import { reindexFromPacks, type Relocate } from './fsck-repair.js';
import type { FsckProblem, FsckReport, FsckWarning } from './fsck-report.js';
import { attribute, walkSnapshots, type NamespaceNeeds } from './fsck-walk.js';

export type { FsckKind, FsckProblem, FsckReport, FsckWarning } from './fsck-report.js';

/** Options of {@link runFsck}. */
export interface FsckOptions {
  catalog: Catalog;
  store: ObjectStore;
  /** Read every byte of the packs (or of `subset` of them) and of this host's chunk cache. */
  readData?: boolean;
  /** With `readData`: the fraction (0 < f ≤ 1) of packs to read, chosen at random (default 1). */
  subset?: number;
  /** Re-index packs from their own indexes and drop chunk cache files that fail; takes the gc lock. */
  repair?: boolean;
  /** This host's chunk cache directory (checked with `readData`); none: not checked. */
  cacheDir?: string;
  /** Lock owner for `repair` (default `<hostname>:<pid>:<random>`). */
  owner?: string;
  /** With `repair`: drop lost packs even when most or all of the catalog's packs are missing (see refuseMassDrop). */
  force?: boolean;
  /** Time to live of the gc lock `repair` holds, in ms (default DEFAULT_LOCK_TTL_MS); renewed every third of it. */
  lockTtlMs?: number;
  /** Test-only: awaited after the catalog and store were listed, before any pack is read. */
  hooks?: { afterList?(): void | Promise<void> };
}

/** Pack states whose objects must exist: gc only deletes a pack after it is `deleting`. */
const KEPT = new Set(['live', 'condemned']);

/**
 * `awc fsck` (docs/reference/fsck.md): proves the integrity of the catalog and the object
 * store, every namespace, as restic's `check` does for a repository. It
 * 1. lists the catalog's snapshots and packs, then the store (in that order: a pack a
 *    checkpoint commits meanwhile is not listed, one gc deletes meanwhile is re-checked),
 * 2. checks every live or condemned pack: present, of its recorded size, its own index
 *    readable, and the catalog's rows for it agreeing with that index; with `readData` the
 *    packs (all, or a random `subset`) are read whole: their bytes must hash to their key and
 *    every blob decode to its digest,
 * 3. walks every snapshot's root, trees and chunks (every tree read is verified): each needed
 *    blob must be indexed, with the size its file lists, in a pack that can serve it,
 * 4. checks the git-index proof records (recomputed with `readData`), the shared layer image
 *    records' objects (read whole with `readData`) and, with `readData` and `cacheDir`, this
 *    host's chunk cache files,
 * 5. attributes each problem to the snapshots it makes unreadable, and drops what a
 *    concurrent gc explains (a pack it deleted or condemned, a snapshot it removed).
 * With `repair` it then, under the gc lock, re-indexes packs from their own indexes, moves
 * rows of needed blobs to packs that hold them, drops cache files and layer image records
 * that fail, and checks again:
 * the report's problems are what is left.
 * Read-only without `repair`: safe beside checkpoints and gc on any host.
 * @throws E_USAGE (subset outside (0, 1], or without readData; a repair that would drop most
 *   packs, without `force`: see refuseMassDrop), E_GC_RUNNING (repair while a gc
 *   runs), E_GC_LOCK_LOST, what the catalog or the store throws when unreachable
 */
export async function runFsck(opts: FsckOptions): Promise<FsckReport> {
  const subset = opts.subset ?? 1;
  if (!(subset > 0 && subset <= 1))
    throw new AwcError('E_USAGE', `subset ${subset} is not a fraction in (0, 1]`, {
      hint: 'Pass --subset a percentage above 0, up to 100.',
    });
  if (opts.subset !== undefined && !opts.readData)
    throw new AwcError('E_USAGE', '--subset needs --read-data', { hint: 'Run `awc fsck --read-data --subset 10%`.' });
  if (!opts.repair) return (await check(opts, subset, false)).report;
  const gc = opts.catalog.gc();
  const owner = opts.owner ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}:fsck`;
  const ttl = opts.lockTtlMs ?? DEFAULT_LOCK_TTL_MS;
  await gc.acquireLock(owner, ttl);
  // the checks can take far longer than the lock lives (--read-data reads every pack): renew it
  // meanwhile, as gc's mark does; a renewal that fails is told by the next write (E_GC_LOCK_LOST)
  const renew = setInterval(() => void gc.renewLock(owner, ttl).catch(() => undefined), Math.max(1, Math.floor(ttl / 3)));
  renew.unref();
  try {
    const first = await check(opts, subset, true);
    if (!opts.force) refuseMassDrop(first.checks);
    const fix = await reindexFromPacks(gc, opts.store, owner, ttl, first.checks, first.relocate);
    const after = (await check({ ...opts, repair: false }, subset, false, first.readWhole)).report;
    const repaired = {
      blobRows: fix.written,
      droppedRows: fix.dropped,
      lostPacks: fix.lostPacks,
      cacheFiles: first.cacheDropped,
      layerImages: first.imagesDropped,
    };
    return { ...after, repaired: { ...repaired, remaining: after.problems.length } };
  } finally {
    clearInterval(renew);
    await gc.releaseLock(owner).catch(() => undefined);
  }
}

/**
 * Refuses a repair that would drop every pack as lost, or more than half of 4 or more: that is
 * most likely a store other than the catalog's (a wrong AWC_OBJECT_STORE, bucket, prefix or
 * endpoint), not damage, and dropping would unindex every snapshot's blobs for good (`force`
 * drops them: a store really lost, so that imports upload its content again).
 * @throws E_USAGE
 */
function refuseMassDrop(checks: ReadonlyMap<string, PackCheck>): void {
  let missing = 0;
  for (const c of checks.values()) if (c.missing) missing++;
  if (missing > 0 && (missing === checks.size || (checks.size >= 4 && missing * 2 > checks.size)))
    throw new AwcError(
      'E_USAGE',
      `${missing} of ${checks.size} packs of the catalog are not in the object store: it looks like another store`,
      {
        hint: 'Check AWC_OBJECT_STORE (bucket, prefix, endpoint) against the catalog; if the packs are really lost, `awc fsck --repair --force` drops them.',
        details: { missing, packs: checks.size },
      },
    );
}

interface CheckState {
  report: FsckReport;
  checks: Map<string, PackCheck>;
  relocate: Relocate;
  readWhole: Set<string>;
  cacheDropped: number;
  imagesDropped: number;
}

/** One pass of the checks (see runFsck); `readWhole` reuses an earlier pass's choice of packs. */
async function check(opts: FsckOptions, subset: number, repair: boolean, readWhole?: Set<string>): Promise<CheckState> {
  const { catalog, store } = opts;
  const gc = catalog.gc();
  const problems: FsckProblem[] = [];
  const warnings: FsckWarning[] = [];
  // 1. the catalog first, then the store
  const { snapshots, rows, stored, kept, unreferenced } = await listAll(opts);
  // 2. packs
  readWhole ??= new Set(opts.readData ? pick(kept, subset).map((p) => p.key) : []);
  const checks = await checkPacks({ store, gc, packs: kept, stored, readWhole, problems });
  // 3. reachability
  const walk = await walkSnapshots(catalog, store, snapshots);
  // a location in a pack fsck did not list: a commit or a gc repack wrote it since; its row now says
  let late: Map<string, GcPack> | undefined;
  const rowNow = async (key: string): Promise<GcPack | undefined> =>
    (late ??= new Map((await gc.listPacks()).map((p): [string, GcPack] => [p.key, p]))).get(key);
  const reach: Reachability = { catalog, checks, byKey: new Map(rows.map((p) => [p.key, p])), rowNow, relocate: new Map(), problems };
  let blobs = 0;
  for (const [ns, needs] of walk.byNamespace) {
    blobs += needs.needed.size;
    await checkNamespace(reach, ns, needs);
  }
  // 4. git proofs, the chunk cache
  const proofs = await checkGitProofs(store, proofRootsOf(snapshots, walk.byNamespace), opts.readData === true, problems, warnings);
  unreferenced.gitProofs = proofs.unreferenced;
  const images = await checkLayerImages(catalog, store, opts.readData === true, repair, problems);
  unreferenced.images = images.unreferenced;
  const cache = opts.readData && opts.cacheDir ? await checkCacheFiles(opts.cacheDir, problems, repair) : { files: 0, dropped: 0 };
  // 5. what a concurrent gc explains
  const left = await confirm(opts, problems, checks);
  let bytes = 0;
  for (const k of readWhole) bytes += reach.byKey.get(k)?.size ?? 0;
  const report: FsckReport = {
    ok: left.length === 0,
    checked: {
      snapshots: snapshots.length,
      trees: walk.trees,
      blobs,
      packs: kept.length,
      gitProofs: proofs.checked,
      layerImages: images.checked,
    },
    readData: opts.readData ? { packs: readWhole.size, of: kept.length, bytes, cacheFiles: cache.files } : null,
    problems: left,
    warnings,
    unreferenced,
    repaired: null,
  };
  return {
    report,
    checks,
    relocate: reach.relocate,
    readWhole,
    cacheDropped: cache.dropped,
    imagesDropped: images.dropped,
  };
}

/** What step 1 lists: the catalog's snapshots and pack rows, then the store's pack objects (key → size), the rows whose objects must exist, and the stored packs no row names. */
interface Listing {
  snapshots: GcSnapshot[];
  rows: GcPack[];
  stored: Map<string, number>;
  kept: GcPack[];
  unreferenced: FsckReport['unreferenced'];
}

/** Step 1: lists the catalog first, then the store (a pack committed meanwhile is not listed). */
async function listAll(opts: FsckOptions): Promise<Listing> {
  const gc = opts.catalog.gc();
  const snapshots = await gc.listSnapshots();
  const rows = await gc.listPacks();
  const stored = new Map<string, number>();
  for await (const o of opts.store.list('packs/')) stored.set(o.key, o.size);
  await opts.hooks?.afterList?.();
  const known = new Set(rows.map((p) => p.key));
  const unreferenced = { packs: 0, bytes: 0, gitProofs: 0, images: 0 };
  for (const [key, size] of stored)
    if (!known.has(key)) {
      unreferenced.packs++;
      unreferenced.bytes += size;
    }
  return { snapshots, rows, stored, kept: rows.filter((p) => KEPT.has(p.state)), unreferenced };
}

/** Step 3's state across namespaces: the pack checks, the listed rows by key, a row as it is now, the blobs a repair relocates (by namespace), the problems found. */
interface Reachability {
  catalog: Catalog;
  checks: ReadonlyMap<string, PackCheck>;
  byKey: Map<string, GcPack>;
  rowNow: (key: string) => Promise<GcPack | undefined>;
  relocate: Relocate;
  problems: FsckProblem[];
}

/**
 * Step 3 for namespace `ns`: each needed blob must be indexed, with the size its file lists,
 * in a pack that can serve it; problems are attributed to the snapshots they break.
 */
async function checkNamespace(r: Reachability, ns: string, needs: NamespaceNeeds): Promise<void> {
  const { checks, byKey, problems } = r;
  const bad = new Set<Digest>(needs.unreadable.keys());
  const moving = new Set<Digest>();
  r.relocate.set(ns, moving);
  const at = new Map<Digest, string>(); // needed digest → pack key
  const found = await r.catalog.blobIndex(ns).lookup([...needs.needed.keys()]);
  const gone = new Map<string, number>(); // pack key → needed blobs located in it although it is gone
  for (const [d, size] of needs.needed) {
    const loc = found.get(d);
    const say = (kind: FsckProblem['kind'], code: FsckProblem['code'], message: string, key?: string) => {
      bad.add(d);
      problems.push({ kind, code, message, namespace: ns, ...(key ? { key } : {}), digest: d, snapshots: [] });
    };
    if (!loc) {
      if (!needs.unreadable.has(d)) say('blob-unindexed', 'E_OBJECT_NOT_FOUND', `blob ${d} is needed but not in the blob index`);
      moving.add(d);
      continue;
    }
    at.set(d, loc.pack);
    const c = checks.get(loc.pack);
    const row = byKey.get(loc.pack);
    if (size !== undefined && loc.rawLength !== size)
      say('blob-size', 'E_INTEGRITY', `chunk ${d} is indexed with ${loc.rawLength} bytes; its file lists ${size}`, loc.pack);
    if (!row && KEPT.has((await r.rowNow(loc.pack))?.state ?? '')) continue; // committed after the listing: not checked
    if (!row || !KEPT.has(row.state)) {
      gone.set(loc.pack, (gone.get(loc.pack) ?? 0) + 1);
      bad.add(d);
      moving.add(d);
    } else if (c?.broken || c?.badBlobs.has(d) || c?.mismatched.has(d)) {
      bad.add(d); // the pack's own problem says why
      moving.add(d);
    }
  }
  for (const [key, n] of gone) {
    const state = byKey.get(key)?.state;
    problems.push({
      kind: 'blob-lost',
      code: 'E_OBJECT_NOT_FOUND',
      message: `${n} needed blob(s) are located in pack ${key}, which ${state ? `is ${state}` : 'has no catalog row'}`,
      namespace: ns,
      key,
      snapshots: [],
    });
  }
  for (const [d, err] of needs.unreadable)
    if (!checks.get(at.get(d) ?? '')?.broken)
      // else the pack's own problem says why
      problems.push({ kind: 'tree-unreadable', code: err.code, message: err.message, namespace: ns, digest: d, snapshots: [] });
  await attributeAll(needs, bad, problems, ns, checks, at);
}

/** Step 4's roots: each snapshot root with the snapshots holding it and a reader of its namespace. */
function proofRootsOf(snapshots: readonly GcSnapshot[], byNamespace: ReadonlyMap<string, NamespaceNeeds>): Map<Digest, ProofRoot> {
  const proofRoots = new Map<Digest, ProofRoot>();
  for (const s of snapshots) {
    const r = proofRoots.get(s.root);
    if (r) r.snapshots.push(s.id);
    else proofRoots.set(s.root, { snapshots: [s.id], reader: byNamespace.get(s.namespace)!.reader });
  }
  return proofRoots;
}

/**
 * Fills in the snapshots of namespace `ns` that the problems break: those reaching a blob the
 * problem concerns, for the namespace's own problems and for every pack's (whatever namespace
 * its row has: `ns`'s rows may name it too). Adds to `p.snapshots`, called once per namespace.
 */
async function attributeAll(
  needs: NamespaceNeeds,
  bad: Set<Digest>,
  problems: FsckProblem[],
  ns: string,
  checks: ReadonlyMap<string, PackCheck>,
  at: ReadonlyMap<Digest, string>,
): Promise<void> {
  // a pack that cannot serve reads makes every needed blob located in it bad
  for (const [d, key] of at) if (checks.get(key)?.broken) bad.add(d);
  const who = await attribute(needs, bad);
  const inPack = new Map<string, Set<string>>();
  for (const [d, ids] of who) {
    const key = at.get(d);
    if (!key) continue;
    const s = inPack.get(key) ?? new Set<string>();
    for (const id of ids) s.add(id);
    inPack.set(key, s);
  }
  for (const p of problems) {
    // a pack's own problems carry its row's namespace, but another namespace's rows can name the
    // same pack (the same blobs in the same order make the same key): they break its snapshots too
    const ofPack = p.kind === 'pack-missing' || p.kind === 'pack-size' || p.kind === 'blob-corrupt' || p.kind === 'index-mismatch';
    if (p.namespace !== ns && !ofPack) continue;
    const ids = new Set(p.snapshots);
    // a corrupt or mis-indexed copy in a pack matters only where the blob's row points at it
    const used = p.kind !== 'index-mismatch' && p.kind !== 'blob-corrupt' ? true : at.get(p.digest!) === p.key;
    if (p.digest && used) for (const id of who.get(p.digest) ?? []) ids.add(id);
    if (!p.digest && p.key && (p.kind === 'pack-missing' || p.kind === 'pack-size' || p.kind === 'blob-lost'))
      for (const id of inPack.get(p.key) ?? []) ids.add(id);
    p.snapshots = [...ids].sort();
  }
}

/**
 * The problems still true now: a pack problem whose pack gc has since moved past `condemned`
 * (or whose row is gone) is gc's doing, a missing pack that is now there was a slow listing,
 * and a problem all of whose snapshots gc has since removed touches nothing.
 */
async function confirm(opts: FsckOptions, problems: FsckProblem[], checks: ReadonlyMap<string, PackCheck>): Promise<FsckProblem[]> {
  if (problems.length === 0) return problems;
  const gc = opts.catalog.gc();
  const rows = new Map((await gc.listPacks()).map((p): [string, GcPack] => [p.key, p]));
  const ids = new Set((await gc.listSnapshots()).map((s) => s.id));
  const out: FsckProblem[] = [];
  for (const p of problems) {
    const packLevel = p.kind.startsWith('pack-') || p.kind === 'blob-corrupt' || p.kind === 'index-mismatch';
    if (packLevel && p.key && checks.has(p.key)) {
      const row = rows.get(p.key);
      if (!row || !KEPT.has(row.state)) continue;
      if (p.kind === 'pack-missing' && (await opts.store.has(p.key))) continue;
    }
    if (p.snapshots.length > 0 && !packLevel) {
      const still = p.snapshots.filter((id) => ids.has(id));
      if (still.length === 0) continue;
      p.snapshots = still;
    }
    out.push(p);
  }
  return out;
}

/** A random `fraction` of `packs` (at least one when there is any), as restic's `--read-data-subset`. */
function pick(packs: readonly GcPack[], fraction: number): GcPack[] {
  if (fraction >= 1) return [...packs];
  const n = Math.max(1, Math.round(packs.length * fraction));
  const a = [...packs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, Math.min(n, a.length));
}
