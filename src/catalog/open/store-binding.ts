import { randomBytes } from 'node:crypto';
import { AwcError } from '../../core/errors.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { packKeyHex } from '../../store/pack/pack.js';
import type { Catalog } from '../port/catalog.js';
import type { CatalogContent, CatalogIdentity } from '../port/identity.js';

/**
 * A catalog and its object store know each other (docs/explanation/integrity.md#a-catalog-and-its-store-know-each-other,
 * formats: docs/reference/formats.md#catalog-and-store-identity).
 *
 * The catalog holds one `catalog_identity` row (its own id, the id of the store it is bound
 * to, pending | bound); the store holds `meta/identity.json` naming the same two ids. The row
 * is always agreed first (insert-if-absent, read back: many hosts may race, one wins), and the
 * store object is written only after, and only by the host whose proposed ids won (fresh
 * random ids are each proposer's claimant token): two hosts with different stores racing on
 * one new catalog never both bind it. Hence: a store object with no row in the catalog means
 * the store belongs to another catalog (or this one was emptied); a bound row with no store
 * object, or a different one, means the store is not this catalog's.
 */

/** Key of the store's identity object. */
export const STORE_IDENTITY_KEY = 'meta/identity.json';

/** The store's identity object (`meta/identity.json`, version 1). */
export interface StoreIdentity {
  v: 1;
  type: 'awc-store-identity';
  storeId: string;
  catalogId: string;
  /** When the catalog's identity row was made (ISO-8601 UTC). */
  createdAt: string;
}

/**
 * The identity object's shape, checked by hand: zod costs ≈ 490 ms to load and this runs on
 * every command's open (docs/explanation/cli-latency.md).
 */
function parseStoreIdentity(v: unknown): StoreIdentity | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort().join(',');
  if (keys !== 'catalogId,createdAt,storeId,type,v') return undefined;
  if (o.v !== 1 || o.type !== 'awc-store-identity') return undefined;
  if (typeof o.storeId !== 'string' || !/^st_[0-9a-f]{32}$/.test(o.storeId)) return undefined;
  if (typeof o.catalogId !== 'string' || !/^cat_[0-9a-f]{32}$/.test(o.catalogId)) return undefined;
  if (typeof o.createdAt !== 'string' || o.createdAt.length > 64) return undefined;
  return { v: 1, type: 'awc-store-identity', storeId: o.storeId, catalogId: o.catalogId, createdAt: o.createdAt };
}

/** Where the two backends are (redacted URLs), for messages. */
export interface BindingPlaces {
  catalog: string;
  store: string;
}

/** A fresh identity id: `cat_` or `st_` and 32 hex digits (128 random bits). */
export function newIdentityId(prefix: 'cat' | 'st'): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}

/** The bytes of the store object for `row` (canonical: the same row gives the same bytes on every host). */
export function encodeStoreIdentity(row: { catalogId: string; storeId: string; createdAt: string }): Buffer {
  const o: StoreIdentity = { v: 1, type: 'awc-store-identity', storeId: row.storeId, catalogId: row.catalogId, createdAt: row.createdAt };
  return Buffer.from(`${JSON.stringify(o)}\n`);
}

/**
 * The store's identity object, or undefined when the store has none.
 * @throws E_FORMAT (the object is not a version-1 identity), what the store's `get` throws
 */
export async function readStoreIdentity(store: ObjectStore): Promise<StoreIdentity | undefined> {
  let bytes: Buffer;
  try {
    bytes = await store.get(STORE_IDENTITY_KEY);
  } catch (err) {
    if (err instanceof AwcError && err.code === 'E_OBJECT_NOT_FOUND') return undefined;
    throw err;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  const r = parseStoreIdentity(parsed);
  if (!r)
    throw new AwcError('E_FORMAT', `the object store's ${STORE_IDENTITY_KEY} is not an AWC store identity (version 1)`, {
      hint: 'Upgrade awc if a newer one wrote it; otherwise the object store is not an AWC store, or the object was damaged.',
    });
  return r;
}

/** True when the store holds at least one pack object (`packs/<aa>/<64 hex>`); stops at the first. */
export async function storeHoldsPacks(store: ObjectStore): Promise<boolean> {
  for await (const o of store.list('packs/')) if (packKeyHex(o.key) !== undefined) return true;
  return false;
}

function mismatch(message: string, where: BindingPlaces, details: Record<string, unknown>): AwcError {
  return new AwcError('E_STORE_MISMATCH', `${message} (catalog ${where.catalog}, object store ${where.store})`, {
    hint: `The catalog and the object store belong to different homes: point AWC_CATALOG and AWC_OBJECT_STORE at the catalog and the store that were created together (docs/how-to/recover-a-catalog.md). Nothing was written.`,
    details,
  });
}

function catalogEmpty(message: string, where: BindingPlaces, details: Record<string, unknown>): AwcError {
  return new AwcError('E_CATALOG_EMPTY', `${message} (catalog ${where.catalog}, object store ${where.store})`, {
    hint: 'Restore the catalog from a copy, or fix AWC_CATALOG if it names the wrong one; to rebuild a catalog from the store instead, run `awc fsck --adopt-store` (docs/how-to/recover-a-catalog.md). Nothing was created in the store.',
    details,
  });
}

const isEmpty = (c: CatalogContent): boolean => c.packs === 0 && c.snapshots === 0;

/** Packs the catalog counts on that its store lacks: how many, of how many rows, the first keys (sorted). */
export interface LostPacks {
  missing: number;
  packs: number;
  /** Up to 10 keys of missing packs. */
  examples: string[];
}

/**
 * The packs the catalog counts on (rows `live` or `condemned`) that the store lacks: one
 * listing of the store's `packs/` (one LIST per 1000 packs on S3), and every key it lacks
 * checked again on its own (`has`) against the rows read again (a pack gc deleted meanwhile
 * is no longer counted on). Undefined when none is missing.
 */
export async function findLostPacks(catalog: Catalog, store: ObjectStore): Promise<LostPacks | undefined> {
  const counted = async () =>
    new Set((await catalog.gc().listPacks()).filter((p) => p.state === 'live' || p.state === 'condemned').map((p) => p.key));
  const rows = await counted();
  if (rows.size === 0) return undefined;
  const stored = new Set<string>();
  for await (const o of store.list('packs/')) stored.add(o.key);
  let missing = [...rows].filter((k) => !stored.has(k));
  if (missing.length > 0) {
    const again = await counted();
    const still: string[] = [];
    for (const k of missing) if (again.has(k) && !(await store.has(k))) still.push(k);
    missing = still.sort();
  }
  return missing.length > 0 ? { missing: missing.length, packs: rows.size, examples: missing.slice(0, 10) } : undefined;
}

function lostPacksError(lost: LostPacks, where: BindingPlaces): AwcError {
  return new AwcError(
    'E_STORE_MISMATCH',
    `the object store lacks ${lost.missing} of the catalog's ${lost.packs} packs (${lost.examples.slice(0, 3).join(', ')}…) (catalog ${where.catalog}, object store ${where.store})`,
    {
      hint: 'Point AWC_OBJECT_STORE at the store the catalog was written with; if the packs are really lost, `awc fsck` lists them and the snapshots they break, and `awc fsck --repair` drops them (docs/how-to/recover-a-catalog.md). Nothing was written.',
      details: { ...lost },
    },
  );
}

/**
 * Checks that every pack the catalog counts on is in the store (see {@link findLostPacks}).
 * Bound: every row, once, at a home's first open after the upgrade.
 * @throws E_STORE_MISMATCH naming how many packs are missing and a few of them
 */
export async function checkCatalogPacksInStore(catalog: Catalog, store: ObjectStore, where: BindingPlaces): Promise<{ checked: number }> {
  const lost = await findLostPacks(catalog, store);
  if (lost) throw lostPacksError(lost, where);
  return { checked: (await catalog.gc().listPacks()).filter((p) => p.state === 'live' || p.state === 'condemned').length };
}

/**
 * What `bindCatalogToStore` did: `created` (a new identity was recorded), `upgraded` (on a
 * catalog that had data), `checked`, or `unbound` (only with `lostPacks: 'report'`: the
 * catalog has no identity and the store lacks some of its packs, `lost`; nothing was recorded).
 */
export interface Binding {
  /** The identity row (undefined when `unbound` and no row exists). */
  identity?: CatalogIdentity;
  outcome: 'checked' | 'created' | 'upgraded' | 'unbound';
  lost?: LostPacks;
}

/** How `bindCatalogToStore` treats what it finds (defaults in brackets). */
export interface BindOptions {
  /**
   * `refuse` (E_STORE_MISMATCH) or `report` an unbound catalog whose packs the store lacks
   * [`refuse`]; `report` is `awc fsck`'s open: it returns outcome `unbound` and records nothing.
   */
  lostPacks?: 'refuse' | 'report';
  /**
   * Record an identity where none is yet (propose, take over, confirm) [true]; false (the
   * open of `awc fsck`, which records it after its check): an unbound catalog is judged and
   * returned `unbound`, a mismatch still refused.
   */
  record?: boolean;
  /** How long another host's pending row may stay unchanged before this host takes it over, in ms [10 000]. */
  pendingWaitMs?: number;
  /** A pending row whose `createdAt` is older than this (ms, this host's clock) is taken over at once [60 000]. */
  pendingAgeMs?: number;
  /** Interval between looks at another host's pending row, in ms [50]. */
  pollMs?: number;
}

/**
 * Checks that `catalog` and `store` belong together, and records their identity when neither
 * has one yet (a new home, or the first open of a home after the upgrade to 0005: then every
 * pack row of the catalog must be in the store first). Race-free among many hosts opening the
 * same catalog, with the same store or different ones: each proposes a row with fresh random
 * ids (its claimant token); only the host whose row won writes the store's identity object and
 * confirms; the others wait until the row is bound (their store must then hold the winner's
 * object: the same store) or, when it stays pending past `pendingWaitMs` (its proposer died),
 * take it over with ids of their own (compare-and-swap on the ids). A host that lost the
 * catalog to another store gets E_STORE_MISMATCH. A refusal is judged twice (a host that read
 * between another host's steps sees them done the second time). Costs one catalog read and one
 * store GET once bound.
 * @throws E_STORE_MISMATCH (the store is another catalog's, lacks this catalog's packs, or
 *   another host bound the catalog to its store first), E_CATALOG_EMPTY (an empty catalog in
 *   front of a store that holds packs or another catalog's identity), E_FORMAT (a damaged
 *   identity object), what the backends throw
 */
export async function bindCatalogToStore(
  catalog: Catalog,
  store: ObjectStore,
  where: BindingPlaces,
  opts: BindOptions = {},
): Promise<Binding> {
  try {
    return await bindOnce(catalog, store, where, opts);
  } catch (err) {
    if (err instanceof AwcError && (err.code === 'E_STORE_MISMATCH' || err.code === 'E_CATALOG_EMPTY'))
      return bindOnce(catalog, store, where, opts);
    throw err;
  }
}

type Ids = { catalogId: string; storeId: string };
const pair = (r: Ids): Ids => ({ catalogId: r.catalogId, storeId: r.storeId });
const sameIds = (a: Ids, b: Ids): boolean => a.catalogId === b.catalogId && a.storeId === b.storeId;
const freshIds = (): Ids => ({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function judgeBound(row: CatalogIdentity, obj: StoreIdentity | undefined, where: BindingPlaces): Binding {
  if (!obj)
    throw mismatch(
      `the catalog ${row.catalogId} is bound to object store ${row.storeId}, and this object store has no AWC identity`,
      where,
      {
        catalog: pair(row),
      },
    );
  if (!sameIds(obj, row))
    throw mismatch(
      `the catalog ${row.catalogId} is bound to object store ${row.storeId}, but this object store is ${obj.storeId} of catalog ${obj.catalogId}`,
      where,
      { catalog: pair(row), store: pair(obj) },
    );
  return { identity: row, outcome: 'checked' };
}

/** What the catalog holds, judged against the store before a row is proposed or taken over. */
async function judgeContent(
  catalog: Catalog,
  store: ObjectStore,
  where: BindingPlaces,
  opts: BindOptions,
): Promise<{ outcome: 'created' | 'upgraded'; lost?: LostPacks }> {
  if (isEmpty(await catalog.identity().content())) {
    if (await storeHoldsPacks(store)) throw catalogEmpty('the catalog is empty, and the object store holds packs', where, {});
    return { outcome: 'created' };
  }
  const lost = await findLostPacks(catalog, store);
  if (lost && opts.lostPacks !== 'report') throw lostPacksError(lost, where);
  return { outcome: 'upgraded', lost };
}

async function bindOnce(catalog: Catalog, store: ObjectStore, where: BindingPlaces, opts: BindOptions): Promise<Binding> {
  const port = catalog.identity();
  const row = await port.read();
  const obj = await readStoreIdentity(store);
  if (row?.state === 'bound') return judgeBound(row, obj, where);
  if (row && opts.record === false) {
    if (obj && !sameIds(obj, row))
      throw mismatch(
        `the catalog's pending identity names object store ${row.storeId}, but this object store is ${obj.storeId} of catalog ${obj.catalogId}`,
        where,
        { catalog: pair(row), store: pair(obj) },
      );
    return { identity: row, outcome: 'unbound' };
  }
  if (row) return follow(catalog, store, where, opts, row);
  if (obj) {
    // the object is written only after its row is committed: no row here means another catalog's store
    if (isEmpty(await port.content()))
      throw catalogEmpty(`the catalog is empty, and the object store ${obj.storeId} belongs to catalog ${obj.catalogId}`, where, {
        store: pair(obj),
      });
    throw mismatch(`this catalog has no identity yet, and the object store ${obj.storeId} belongs to catalog ${obj.catalogId}`, where, {
      store: pair(obj),
    });
  }
  const judged = await judgeContent(catalog, store, where, opts);
  if (judged.lost || opts.record === false) return { outcome: 'unbound', lost: judged.lost };
  const mine = freshIds();
  const won = await port.propose(mine);
  if (sameIds(won, mine)) return claim(catalog, store, where, won, judged.outcome);
  return follow(catalog, store, where, opts, won);
}

/**
 * This host's row won (its ids are its claimant token): it alone writes the store's identity
 * object, reads it back, and confirms the row, if the row still names its ids.
 */
async function claim(
  catalog: Catalog,
  store: ObjectStore,
  where: BindingPlaces,
  row: CatalogIdentity,
  outcome: 'created' | 'upgraded',
): Promise<Binding> {
  const obj = await readStoreIdentity(store);
  if (obj)
    throw mismatch(`the object store ${obj.storeId} belongs to catalog ${obj.catalogId}, not to catalog ${row.catalogId}`, where, {
      catalog: pair(row),
      store: pair(obj),
    });
  await store.put(STORE_IDENTITY_KEY, encodeStoreIdentity(row));
  const back = await readStoreIdentity(store);
  if (!back || !sameIds(back, row))
    throw mismatch(
      `the object store's identity is ${back ? `${back.storeId} of catalog ${back.catalogId}` : 'missing'} after writing ${row.storeId} of catalog ${row.catalogId}`,
      where,
      { catalog: pair(row), store: back && pair(back) },
    );
  const done = await catalog.identity().confirm(row.catalogId);
  if (done.state !== 'bound' || !sameIds(done, row)) {
    // judged dead while it wrote (a stalled host): its object names ids never bound; take it back
    await withdrawStoreIdentity(store, row);
    throw mismatch(`another host took over the catalog's pending identity ${row.catalogId} before this host confirmed it`, where, {
      catalog: pair(done),
      proposed: pair(row),
    });
  }
  return { identity: done, outcome };
}

/**
 * Removes the store's identity object if it still names `row`'s ids (a claim that lost its row
 * to a take-over), so the store is as it was and the next bind of this home starts clean. Best
 * effort: the caller reports the lost race either way.
 */
async function withdrawStoreIdentity(store: ObjectStore, row: CatalogIdentity): Promise<void> {
  try {
    const obj = await readStoreIdentity(store);
    if (obj && sameIds(obj, row)) await store.delete(STORE_IDENTITY_KEY);
  } catch {
    // the store is unreachable: the next bind reports the object it finds
  }
}

/**
 * Another host's pending row: only its proposer writes the store object. This host waits
 * until its own store holds that object (the same store: done; confirmed here too, should
 * the proposer have died after writing it), the row is bound without it (another store won:
 * E_STORE_MISMATCH), the row changes (taken over: followed anew), or the row stays unchanged
 * too long: then this host judges the catalog itself and takes the row over with its own ids.
 */
async function follow(
  catalog: Catalog,
  store: ObjectStore,
  where: BindingPlaces,
  opts: BindOptions,
  first: CatalogIdentity,
): Promise<Binding> {
  const port = catalog.identity();
  const waitMs = opts.pendingWaitMs ?? 10_000;
  const ageMs = opts.pendingAgeMs ?? 60_000;
  let row = first;
  let seen = Date.now();
  for (;;) {
    const obj = await readStoreIdentity(store);
    if (obj && sameIds(obj, row)) {
      // the proposer wrote this object into this very store: the same store (confirmed here too, should it have died since)
      const done = row.state === 'bound' ? row : await port.confirm(row.catalogId);
      if (done.state === 'bound' && sameIds(done, row)) return { identity: done, outcome: 'checked' };
      row = done;
      seen = Date.now();
      continue;
    }
    const now = await port.read();
    if (!now) return bindOnce(catalog, store, where, opts);
    if (!sameIds(now, row)) {
      row = now;
      seen = Date.now();
      continue;
    }
    if (now.state === 'bound') {
      if (obj) return judgeBound(now, obj, where);
      throw mismatch(
        `another host bound the catalog ${now.catalogId} to its object store ${now.storeId} first, and this object store has no AWC identity`,
        where,
        { catalog: pair(now), lostRace: true },
      );
    }
    const stale = Date.now() - seen > waitMs || Date.now() - Date.parse(now.createdAt) > ageMs;
    if (stale) {
      if (obj)
        throw mismatch(
          `the catalog's pending identity names object store ${now.storeId}, but this object store is ${obj.storeId} of catalog ${obj.catalogId}`,
          where,
          { catalog: pair(now), store: pair(obj) },
        );
      const judged = await judgeContent(catalog, store, where, opts);
      if (judged.lost) return { identity: now, outcome: 'unbound', lost: judged.lost };
      const mine = freshIds();
      const got = await port.takeOver(pair(now), mine);
      if (sameIds(got, mine) && got.state === 'pending') return claim(catalog, store, where, got, judged.outcome);
      row = got;
      seen = Date.now();
      continue;
    }
    await sleep(opts.pollMs ?? 50);
  }
}

/**
 * The operator's adoption (`awc fsck --adopt-store`, src/service/import/adopt-store.ts, which first
 * checks that the catalog was empty and rebuilds its rows): binds the catalog to `store` as it
 * is, keeping the store's id when it has one; its identity object is rewritten to name the
 * catalog's new id.
 */
export async function adoptStoreIdentity(
  catalog: Catalog,
  store: ObjectStore,
): Promise<{ identity: CatalogIdentity; previous?: StoreIdentity }> {
  const previous = await readStoreIdentity(store);
  const storeId = previous?.storeId ?? newIdentityId('st');
  const row = await catalog.identity().replace({ catalogId: newIdentityId('cat'), storeId });
  await store.delete(STORE_IDENTITY_KEY);
  await store.put(STORE_IDENTITY_KEY, encodeStoreIdentity(row));
  return { identity: row, previous };
}
