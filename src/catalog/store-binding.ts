import { randomBytes } from 'node:crypto';
import { AwcError } from '../core/errors.js';
import type { ObjectStore } from '../store/object-store.js';
import { packKeyHex } from '../store/pack.js';
import type { Catalog } from './catalog.js';
import type { CatalogContent, CatalogIdentity } from './identity.js';

/**
 * A catalog and its object store know each other (docs/explanation/integrity.md#a-catalog-and-its-store-know-each-other,
 * formats: docs/reference/formats.md#catalog-and-store-identity).
 *
 * The catalog holds one `catalog_identity` row (its own id, the id of the store it is bound
 * to, pending | bound); the store holds `meta/identity.json` naming the same two ids. The row
 * is always agreed first (insert-if-absent, read back: many hosts may race, one wins), and the
 * store object is written only after, with bytes that depend on the row alone, so every
 * racing host writes the same object. Hence: a store object with no row in the catalog means
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

/**
 * Checks that every pack the catalog counts on (rows `live` or `condemned`) is in the store:
 * one listing of the store's `packs/` (one LIST per 1000 packs on S3), and every key it lacks
 * checked again on its own (`has`) against the rows read again (a pack gc deleted meanwhile
 * is no longer counted on). Bound: every row, once, at a home's first open after the upgrade.
 * @throws E_STORE_MISMATCH naming how many packs are missing and a few of them
 */
export async function checkCatalogPacksInStore(catalog: Catalog, store: ObjectStore, where: BindingPlaces): Promise<{ checked: number }> {
  const counted = async () =>
    new Set((await catalog.gc().listPacks()).filter((p) => p.state === 'live' || p.state === 'condemned').map((p) => p.key));
  const rows = await counted();
  if (rows.size === 0) return { checked: 0 };
  const stored = new Set<string>();
  for await (const o of store.list('packs/')) stored.add(o.key);
  let missing = [...rows].filter((k) => !stored.has(k));
  if (missing.length > 0) {
    const again = await counted();
    const still: string[] = [];
    for (const k of missing) if (again.has(k) && !(await store.has(k))) still.push(k);
    missing = still;
  }
  if (missing.length > 0)
    throw mismatch(
      `the object store lacks ${missing.length} of the catalog's ${rows.size} packs (${missing.slice(0, 3).join(', ')}…)`,
      where,
      {
        missing: missing.length,
        packs: rows.size,
        examples: missing.slice(0, 10),
      },
    );
  return { checked: rows.size };
}

/** What `bindCatalogToStore` did: `created` (a new identity was recorded), `upgraded` (on a catalog that had data), or `checked`. */
export interface Binding {
  identity: CatalogIdentity;
  outcome: 'checked' | 'created' | 'upgraded';
}

/**
 * Checks that `catalog` and `store` belong together, and records their identity when neither
 * has one yet (a new home, or the first open of a home after the upgrade to 0005: then every
 * pack row of the catalog must be in the store first). Race-free among many hosts opening the
 * same pair (module doc). A refusal is judged twice (a host that read between another host's
 * steps sees them done the second time). Costs one catalog read and one store GET once bound.
 * @throws E_STORE_MISMATCH (the store is another catalog's, or lacks this catalog's packs),
 *   E_CATALOG_EMPTY (an empty catalog in front of a store that holds packs or another catalog's identity),
 *   E_FORMAT (a damaged identity object), what the backends throw
 */
export async function bindCatalogToStore(catalog: Catalog, store: ObjectStore, where: BindingPlaces): Promise<Binding> {
  try {
    return await bindOnce(catalog, store, where);
  } catch (err) {
    if (err instanceof AwcError && (err.code === 'E_STORE_MISMATCH' || err.code === 'E_CATALOG_EMPTY'))
      return bindOnce(catalog, store, where);
    throw err;
  }
}

async function bindOnce(catalog: Catalog, store: ObjectStore, where: BindingPlaces): Promise<Binding> {
  const port = catalog.identity();
  let row = await port.read();
  const obj = await readStoreIdentity(store);
  const pair = (r: { catalogId: string; storeId: string }) => ({ catalogId: r.catalogId, storeId: r.storeId });
  if (row?.state === 'bound') {
    if (!obj)
      throw mismatch(
        `the catalog ${row.catalogId} is bound to object store ${row.storeId}, and this object store has no AWC identity`,
        where,
        {
          catalog: pair(row),
        },
      );
    if (obj.storeId !== row.storeId || obj.catalogId !== row.catalogId)
      throw mismatch(
        `the catalog ${row.catalogId} is bound to object store ${row.storeId}, but this object store is ${obj.storeId} of catalog ${obj.catalogId}`,
        where,
        { catalog: pair(row), store: pair(obj) },
      );
    return { identity: row, outcome: 'checked' };
  }
  let content: CatalogContent | undefined;
  let outcome: Binding['outcome'] = 'checked';
  if (!row) {
    content = await port.content();
    if (obj) {
      // the object is written only after its row is committed: no row here means another catalog's store
      if (isEmpty(content))
        throw catalogEmpty(`the catalog is empty, and the object store ${obj.storeId} belongs to catalog ${obj.catalogId}`, where, {
          store: pair(obj),
        });
      throw mismatch(`this catalog has no identity yet, and the object store ${obj.storeId} belongs to catalog ${obj.catalogId}`, where, {
        store: pair(obj),
      });
    }
    if (isEmpty(content)) {
      if (await storeHoldsPacks(store)) throw catalogEmpty('the catalog is empty, and the object store holds packs', where, {});
      outcome = 'created';
    } else {
      await checkCatalogPacksInStore(catalog, store, where);
      outcome = 'upgraded';
    }
    row = await port.propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
  }
  // pending: the row is agreed; the store object may be there (another host's) or not yet
  if (obj) {
    if (obj.storeId !== row.storeId || obj.catalogId !== row.catalogId)
      throw mismatch(
        `the catalog ${row.catalogId} names object store ${row.storeId}, but this object store is ${obj.storeId} of catalog ${obj.catalogId}`,
        where,
        {
          catalog: pair(row),
          store: pair(obj),
        },
      );
    return { identity: await port.confirm(row.catalogId), outcome };
  }
  content ??= await port.content();
  if (outcome === 'checked') {
    // a row another host proposed and never confirmed: judged as that host would have judged it
    if (!isEmpty(content)) await checkCatalogPacksInStore(catalog, store, where);
    else if (await storeHoldsPacks(store)) throw catalogEmpty('the catalog is empty, and the object store holds packs', where, {});
  }
  await store.put(STORE_IDENTITY_KEY, encodeStoreIdentity(row));
  const back = await readStoreIdentity(store);
  if (!back || back.storeId !== row.storeId || back.catalogId !== row.catalogId)
    throw mismatch(
      `the object store's identity is ${back ? `${back.storeId} of catalog ${back.catalogId}` : 'missing'} after writing ${row.storeId} of catalog ${row.catalogId}`,
      where,
      {
        catalog: pair(row),
        store: back && pair(back),
      },
    );
  return { identity: await port.confirm(row.catalogId), outcome };
}

/**
 * The operator's adoption (`awc fsck --adopt-store`, src/service/adopt-store.ts, which first
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
