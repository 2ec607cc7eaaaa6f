import { constants as fsc } from 'node:fs';
import { access } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import {
  CompiledQuery,
  Kysely,
  SqliteDialect,
  SqliteDriver,
  sql,
  type DatabaseConnection,
  type Driver,
  type SqliteDialectConfig,
  type Transaction,
} from 'kysely';
import type { Digest } from '../core/digest.js';
import { AwcError, toAwcError } from '../core/errors.js';
import { mkdirPrivate, touchPrivateSync } from '../core/private-fs.js';
import type { BlobIndex, BlobKind, BlobLocation, Codec, WrittenPack } from '../store/pack-types.js';
import type { Catalog, MountDriver, NewSnapshot, SnapshotRow, WorkspaceRow } from './catalog.js';
import { newId, newIds, type IdPrefix } from './ids.js';
import { checkName } from './names.js';
import { migrateToLatest } from './migrations.js';
import type { Database, NewBlobRecord, NewWorkspaceRecord, SnapshotRecord, WorkspaceRecord } from './schema.js';

/**
 * `SqlCatalog`: the `Catalog` port over Kysely. One schema and one set of migrations
 * (migrations.ts) serve SQLite (better-sqlite3, embedded default, `openSqlite`) and, later,
 * PostgreSQL (pg) through the same queries.
 *
 * Concurrency: several processes (the CLI and the daemon) may open the same SQLite file. It
 * runs in WAL mode (readers never block), with a busy timeout, and every write transaction
 * starts with `BEGIN IMMEDIATE` so two writers queue on the file lock instead of failing on
 * a lock upgrade. A lock not obtained within the busy timeout is `E_CATALOG_BUSY`
 * (retryable). Open one `SqlCatalog` per file per process: better-sqlite3 is synchronous,
 * so two instances in one process that write concurrently would wait on each other while
 * blocking the event loop.
 *
 * Check-and-set operations (checkpoint commit, fork, mount) are written so they stay
 * correct under PostgreSQL's READ COMMITTED too: conditional `UPDATE … WHERE head = ?`
 * and unique indexes are the guards, pre-checks only give better messages.
 */

/** Options of `SqlCatalog`. */
export interface SqlCatalogOptions {
  /**
   * Most bind parameters in one statement; multi-row INSERTs are split to stay under it.
   * Default 30000 (SQLite allows 32766, PostgreSQL 65535).
   */
  maxParams?: number;
}

/** Options of `SqlCatalog.openSqlite`. */
export interface OpenSqliteOptions extends SqlCatalogOptions {
  /** How long a writer waits for another process's write lock, in ms. Default 5000. */
  busyTimeoutMs?: number;
}

/** Digests per `WHERE digest IN (…)` query of a blob index lookup. */
export const LOOKUP_BATCH = 500;

/** Minimum length of an id prefix a ref may use (characters after `sn_` / `ws_`). */
export const MIN_PREFIX = 4;

const DEFAULT_MAX_PARAMS = 30_000;
const DEFAULT_BUSY_TIMEOUT_MS = 5_000;

/** SQLite driver whose transactions start with `BEGIN IMMEDIATE` (take the write lock up front). */
class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
  /**
   * SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, SQLITE_IOERR…);
   * the ROLLBACK that follows would then fail with "no transaction is active" and hide the
   * error that mattered: that failure is ignored.
   */
  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await connection.executeQuery(CompiledQuery.raw('rollback'));
    } catch (err) {
      if (!/no transaction is active/.test((err as Error).message)) throw err;
    }
  }
}

/** `SqliteDialect` using `ImmediateSqliteDriver`. */
class ImmediateSqliteDialect extends SqliteDialect {
  readonly #cfg: SqliteDialectConfig;
  constructor(cfg: SqliteDialectConfig) {
    super(cfg);
    this.#cfg = cfg;
  }
  override createDriver(): Driver {
    return new ImmediateSqliteDriver(this.#cfg);
  }
}

type Db = Kysely<Database> | Transaction<Database>;

/** A bigint column value as a JS number (pg returns bigint as a decimal string). */
export function toNum(v: number | string | bigint | null | undefined): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'number' ? v : Number(v);
}

function nowIso(): string {
  return new Date().toISOString();
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

function errCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

/** True for a unique / primary-key violation (better-sqlite3 or pg). */
function isUniqueViolation(err: unknown): boolean {
  const c = errCode(err);
  return c === 'SQLITE_CONSTRAINT_UNIQUE' || c === 'SQLITE_CONSTRAINT_PRIMARYKEY' || c === '23505';
}

/** True for "could not get the lock in time" (SQLite) or serialization/deadlock (pg). */
function isBusy(err: unknown): boolean {
  const c = errCode(err);
  return c === 'SQLITE_BUSY' || c === 'SQLITE_BUSY_SNAPSHOT' || c === 'SQLITE_LOCKED' || c === '40001' || c === '40P01';
}

/** Maps driver errors to AwcErrors where a code fits; others pass through unchanged. */
function mapError(err: unknown): unknown {
  if (err instanceof AwcError) return err;
  if (isBusy(err)) {
    return new AwcError('E_CATALOG_BUSY', `the catalog is locked: ${(err as Error).message}`, { cause: err });
  }
  return err;
}

/**
 * SQLite says only "unable to open database file" (SQLITE_CANTOPEN) or SQLITE_READONLY when
 * the catalog's directory is not writable: ask the file system why (EROFS, EACCES…) so that
 * the error gets its code (E_READ_ONLY, E_PERMISSION). Other errors are mapped as usual.
 */
async function whyCannotOpen(err: unknown, path: string): Promise<unknown> {
  const c = errCode(err) ?? '';
  if (path === ':memory:' || !(c.startsWith('SQLITE_CANTOPEN') || c.startsWith('SQLITE_READONLY'))) return mapError(err);
  try {
    await access(dirname(resolve(path)), fsc.W_OK);
    await access(path, fsc.W_OK).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
  } catch (probe) {
    const p = toAwcError(probe);
    return new AwcError(p.code, `cannot open the catalog ${path}: ${(probe as Error).message}`, { cause: err });
  }
  return toAwcError(err);
}

/** A snapshot record ready to insert (byte_count as a number). */
type SnapshotInsert = SnapshotRecord & { byte_count: number };
type WorkspaceWithNs = WorkspaceRecord & { namespace_name: string };

function toSnapshotRow(r: SnapshotRecord, namespace: string): SnapshotRow {
  return {
    id: r.id,
    namespace,
    name: r.name,
    root: r.root as Digest,
    parentId: r.parent_id,
    message: r.message,
    createdAt: r.created_at,
    fileCount: toNum(r.file_count),
    byteCount: toNum(r.byte_count),
  };
}

function toWorkspaceRow(r: WorkspaceRecord, namespace: string): WorkspaceRow {
  return {
    id: r.id,
    namespace,
    name: r.name,
    baseSnapshotId: r.base_snapshot_id,
    headSnapshotId: r.head_snapshot_id,
    mountState: r.mount_state === 'mounted' ? 'mounted' : 'unmounted',
    mountPath: r.mount_path,
    mountDriver: r.mount_driver as MountDriver | null,
    mountHost: r.mount_host,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

/** The `Catalog` port over SQL (see module doc). */
export class SqlCatalog implements Catalog {
  /** The Kysely instance (exposed for tests, fsck and future service queries). */
  readonly db: Kysely<Database>;
  readonly #maxParams: number;
  /** Namespace name → id. Namespaces are never renamed or deleted, so entries never go stale. */
  readonly #nsIds = new Map<string, string>();

  /**
   * Wraps a Kysely instance. The caller runs `migrate()` before use (`openSqlite` does).
   * For SQLite, use a dialect whose transactions begin IMMEDIATE, as `openSqlite` does.
   */
  constructor(db: Kysely<Database>, opts: SqlCatalogOptions = {}) {
    this.db = db;
    this.#maxParams = opts.maxParams ?? DEFAULT_MAX_PARAMS;
  }

  /**
   * Opens (creating it 0600 and its parent directory 0700 if needed) the SQLite catalog at `path`,
   * with WAL journal, `busy_timeout`, foreign keys on and `synchronous=FULL`, and applies
   * pending migrations. Safe to call from several processes on the same file.
   * @throws E_CATALOG_BUSY (another process held the lock too long), E_FORMAT (written by a newer awc)
   */
  static async openSqlite(path: string, opts: OpenSqliteOptions = {}): Promise<SqlCatalog> {
    const busy = opts.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (path !== ':memory:') {
      // created 0600 before SQLite opens it: SQLite gives its -wal and -shm files the same mode
      await mkdirPrivate(dirname(resolve(path)));
      try {
        touchPrivateSync(path);
      } catch {
        // a read-only or unwritable place: SQLite reports it when it opens the file
      }
    }
    let sqlite: BetterSqlite3.Database;
    try {
      sqlite = new BetterSqlite3(path, { timeout: busy });
    } catch (err) {
      throw await whyCannotOpen(err, path);
    }
    let db: Kysely<Database> | undefined;
    try {
      sqlite.pragma(`busy_timeout = ${Math.max(0, Math.floor(busy))}`);
      sqlite.pragma('journal_mode = WAL');
      sqlite.pragma('foreign_keys = ON');
      sqlite.pragma('synchronous = FULL');
      db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: sqlite }) });
      const cat = new SqlCatalog(db, opts);
      await cat.migrate();
      return cat;
    } catch (err) {
      if (db) await db.destroy().catch(() => undefined);
      else sqlite.close();
      throw await whyCannotOpen(err, path);
    }
  }

  /** Applies pending migrations; returns the names applied (empty when up to date). */
  async migrate(): Promise<string[]> {
    try {
      return await migrateToLatest(this.db);
    } catch (err) {
      throw mapError(err);
    }
  }

  /** Runs `fn` in one write transaction, mapping lock errors to E_CATALOG_BUSY. */
  async #tx<T>(fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    try {
      return await this.db.transaction().execute(fn);
    } catch (err) {
      throw mapError(err);
    }
  }

  /** Runs a read, mapping lock errors. */
  async #read<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw mapError(err);
    }
  }

  /** Id of namespace `name`, or undefined when it does not exist yet. */
  async #findNs(name: string): Promise<string | undefined> {
    const cached = this.#nsIds.get(name);
    if (cached) return cached;
    const row = await this.db.selectFrom('namespaces').select('id').where('name', '=', name).executeTakeFirst();
    if (row) this.#nsIds.set(name, row.id);
    return row?.id;
  }

  /** Id of namespace `name`, creating it on first use (its own autocommit statement). */
  async #ensureNs(name: string): Promise<string> {
    if (typeof name !== 'string' || name.length === 0) throw new AwcError('E_USAGE', 'a namespace name must be a non-empty string');
    const found = await this.#findNs(name);
    if (found) return found;
    await this.db
      .insertInto('namespaces')
      .values({ id: newId('ns'), name, created_at: nowIso() })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    const id = await this.#findNs(name);
    if (!id) throw new AwcError('E_INTERNAL', `namespace ${name} could not be created`);
    return id;
  }

  /** Rows per multi-row INSERT for a table with `columns` columns. */
  #rowsPerInsert(columns: number): number {
    return Math.max(1, Math.floor(this.#maxParams / columns));
  }

  // ---------------------------------------------------------------- blob index

  /**
   * Blob index of `namespace`. `lookup` dedups its input and queries `WHERE digest IN (…)`
   * in groups of `LOOKUP_BATCH`; unknown digests (or an unknown namespace) are absent from
   * the result. Offsets and lengths are bytes.
   */
  blobIndex(namespace: string): BlobIndex {
    return {
      lookup: (digests) =>
        this.#read(async () => {
          const out = new Map<Digest, BlobLocation>();
          if (digests.length === 0) return out;
          const nsId = await this.#findNs(namespace);
          if (!nsId) return out;
          const unique = [...new Set(digests)];
          for (const group of chunks(unique, LOOKUP_BATCH)) {
            const rows = await this.db
              .selectFrom('blobs')
              .select(['digest', 'kind', 'pack', 'offset', 'stored_length', 'raw_length', 'codec'])
              .where('namespace', '=', nsId)
              .where('digest', 'in', group)
              .execute();
            for (const r of rows) {
              out.set(r.digest as Digest, {
                digest: r.digest as Digest,
                kind: r.kind as BlobKind,
                codec: r.codec as Codec,
                pack: r.pack,
                offset: toNum(r.offset),
                storedLength: toNum(r.stored_length),
                rawLength: toNum(r.raw_length),
              });
            }
          }
          return out;
        }),
    };
  }

  /** Number of blobs indexed in `namespace` (0 for an unknown namespace). */
  async countBlobs(namespace: string): Promise<number> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) return 0;
      const r = await this.db
        .selectFrom('blobs')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('namespace', '=', nsId)
        .executeTakeFirstOrThrow();
      return toNum(r.n as number | string);
    });
  }

  /** Pack totals of `namespace`: pack count, stored bytes (sum of pack sizes), blob count. */
  async packStats(namespace: string): Promise<{ packs: number; bytes: number; blobs: number }> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) return { packs: 0, bytes: 0, blobs: 0 };
      const r = await this.db
        .selectFrom('packs')
        .select((eb) => [eb.fn.countAll().as('packs'), eb.fn.sum('size').as('bytes'), eb.fn.sum('blob_count').as('blobs')])
        .where('namespace', '=', nsId)
        .executeTakeFirstOrThrow();
      return {
        packs: toNum(r.packs as number | string),
        bytes: toNum(r.bytes as number | string | null),
        blobs: toNum(r.blobs as number | string | null),
      };
    });
  }

  /** Inserts pack rows (duplicates by key ignored) and blob rows (duplicates by (namespace, digest) ignored), batched. */
  async #insertPacks(trx: Transaction<Database>, nsId: string, packs: readonly WrittenPack[], now: string): Promise<void> {
    if (packs.length === 0) return;
    const packRows = packs.map((p) => ({ key: p.key, namespace: nsId, size: p.size, blob_count: p.blobs.length, created_at: now }));
    for (const group of chunks(packRows, this.#rowsPerInsert(5))) {
      await trx
        .insertInto('packs')
        .values(group)
        .onConflict((oc) => oc.column('key').doNothing())
        .execute();
    }
    const blobRows: NewBlobRecord[] = [];
    for (const p of packs) {
      for (const b of p.blobs) {
        if (b.pack !== p.key) {
          throw new AwcError('E_INTERNAL', `blob ${b.digest} is listed in pack ${p.key} but names pack ${b.pack}`);
        }
        blobRows.push({
          namespace: nsId,
          digest: b.digest,
          kind: b.kind,
          pack: p.key,
          offset: b.offset,
          stored_length: b.storedLength,
          raw_length: b.rawLength,
          codec: b.codec,
        });
      }
    }
    for (const group of chunks(blobRows, this.#rowsPerInsert(8))) {
      await trx
        .insertInto('blobs')
        .values(group)
        .onConflict((oc) => oc.columns(['namespace', 'digest']).doNothing())
        .execute();
    }
  }

  // ---------------------------------------------------------------- snapshots

  /** Throws E_NAME_TAKEN when a snapshot named `name` exists in the namespace. */
  async #checkSnapshotName(trx: Db, nsId: string, namespace: string, name: string | null | undefined): Promise<void> {
    if (name === null || name === undefined) return;
    const taken = await trx.selectFrom('snapshots').select('id').where('namespace', '=', nsId).where('name', '=', name).executeTakeFirst();
    if (taken) {
      throw new AwcError('E_NAME_TAKEN', `a snapshot named "${name}" already exists in namespace "${namespace}" (${taken.id})`, {
        details: { name, id: taken.id },
      });
    }
  }

  /** Inserts the snapshot row; maps a unique violation on its name to E_NAME_TAKEN. */
  async #insertSnapshot(trx: Transaction<Database>, row: SnapshotInsert, namespace: string): Promise<void> {
    try {
      await trx.insertInto('snapshots').values(row).execute();
    } catch (err) {
      if (isUniqueViolation(err) && row.name !== null) {
        throw new AwcError('E_NAME_TAKEN', `a snapshot named "${row.name}" already exists in namespace "${namespace}"`, {
          details: { name: row.name },
          cause: err,
        });
      }
      throw err;
    }
  }

  #snapshotRecord(nsId: string, s: NewSnapshot, parentId: string | null, now: string): SnapshotInsert {
    return {
      id: newId('sn'),
      namespace: nsId,
      name: s.name ?? null,
      root: s.root,
      parent_id: parentId,
      message: s.message ?? null,
      created_at: now,
      file_count: s.fileCount,
      byte_count: s.byteCount,
    };
  }

  /**
   * Inserts the packs, blobs and the snapshot in one transaction (creates the namespace on
   * first use). Blob rows already indexed in the namespace are kept as they are.
   * @throws E_NAME_TAKEN (name used in the namespace), E_NOT_FOUND (parentId not in the namespace), E_USAGE (bad name)
   */
  async createSnapshot(s: NewSnapshot): Promise<SnapshotRow> {
    checkName(s.name, 'snapshot');
    const nsId = await this.#read(() => this.#ensureNs(s.namespace));
    const now = nowIso();
    const rec = this.#snapshotRecord(nsId, s, s.parentId ?? null, now);
    await this.#tx(async (trx) => {
      if (rec.parent_id !== null) {
        const parent = await trx
          .selectFrom('snapshots')
          .select('id')
          .where('id', '=', rec.parent_id)
          .where('namespace', '=', nsId)
          .executeTakeFirst();
        if (!parent) {
          throw new AwcError('E_NOT_FOUND', `parent snapshot ${rec.parent_id} does not exist in namespace "${s.namespace}"`, {
            hint: 'List snapshots with `awc snapshot ls`.',
          });
        }
      }
      await this.#checkSnapshotName(trx, nsId, s.namespace, rec.name);
      await this.#insertPacks(trx, nsId, s.packs, now);
      await this.#insertSnapshot(trx, rec, s.namespace);
    });
    return toSnapshotRow(rec, s.namespace);
  }

  /**
   * Checkpoint commit in one transaction: packs, blobs, the snapshot (parent = the
   * workspace's head, `snapshot.parentId` is ignored), then
   * `UPDATE workspaces SET head = new WHERE id = ? AND head = expectedHeadId`; when that
   * updates no row, everything is rolled back.
   * @throws E_NOT_FOUND (no such workspace in `snapshot.namespace`), E_CHANGED_DURING_READ
   *   (the head is no longer `expectedHeadId`: retryable, nothing written), E_NAME_TAKEN
   */
  async commitCheckpoint(c: { workspaceId: string; expectedHeadId: string; snapshot: NewSnapshot }): Promise<SnapshotRow> {
    const s = c.snapshot;
    checkName(s.name, 'snapshot');
    const nsId = await this.#read(() => this.#findNs(s.namespace));
    if (!nsId) throw this.#workspaceNotFound(s.namespace, c.workspaceId);
    const now = nowIso();
    const rec = this.#snapshotRecord(nsId, s, c.expectedHeadId, now);
    const moved = (head: string | undefined) =>
      new AwcError(
        'E_CHANGED_DURING_READ',
        `workspace ${c.workspaceId}: its head moved from ${c.expectedHeadId} to ${head ?? 'another snapshot'} during the checkpoint`,
        {
          hint: "The workspace's head moved; run checkpoint again.",
          details: { workspaceId: c.workspaceId, expectedHeadId: c.expectedHeadId, headSnapshotId: head ?? null },
        },
      );
    await this.#tx(async (trx) => {
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'head_snapshot_id'])
        .where('id', '=', c.workspaceId)
        .where('namespace', '=', nsId)
        .executeTakeFirst();
      if (!ws) throw this.#workspaceNotFound(s.namespace, c.workspaceId);
      if (ws.head_snapshot_id !== c.expectedHeadId) throw moved(ws.head_snapshot_id);
      await this.#checkSnapshotName(trx, nsId, s.namespace, rec.name);
      await this.#insertPacks(trx, nsId, s.packs, now);
      await this.#insertSnapshot(trx, rec, s.namespace);
      const res = await trx
        .updateTable('workspaces')
        .set({ head_snapshot_id: rec.id, updated_at: now })
        .where('id', '=', c.workspaceId)
        .where('head_snapshot_id', '=', c.expectedHeadId)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) throw moved(undefined);
    });
    return toSnapshotRow(rec, s.namespace);
  }

  /**
   * Resolves `ref` to one id of `table` in namespace `nsId`: exact id, then exact name, then
   * unique id prefix. A prefix is the id's beginning, with or without the `sn_`/`ws_` part,
   * and has at least `MIN_PREFIX` characters after that part (case-insensitive).
   */
  async #resolveId(table: 'snapshots' | 'workspaces', prefix: IdPrefix, nsId: string, namespace: string, ref: string): Promise<string> {
    const what = table === 'snapshots' ? 'snapshot' : 'workspace';
    const db = this.db as unknown as Kysely<Record<'snapshots' | 'workspaces', { id: string; namespace: string; name: string | null }>>;
    const exact = await db
      .selectFrom(table)
      .select(['id', 'name'])
      .where('namespace', '=', nsId)
      .where((eb) => eb.or([eb('id', '=', ref), eb('name', '=', ref)]))
      .execute();
    const byId = exact.find((r) => r.id === ref);
    if (byId) return byId.id;
    if (exact.length > 0) return exact[0]!.id;

    const lower = ref.toLowerCase();
    const body = lower.startsWith(`${prefix}_`) ? lower.slice(prefix.length + 1) : lower;
    if (body.length >= MIN_PREFIX && /^[0-9a-z]+$/.test(body)) {
      const pattern = `${prefix}!_${body}%`;
      const rows = await db
        .selectFrom(table)
        .select('id')
        .where('namespace', '=', nsId)
        .where(sql<boolean>`${sql.ref('id')} like ${pattern} escape '!'`)
        .orderBy('id')
        .limit(6)
        .execute();
      if (rows.length === 1) return rows[0]!.id;
      if (rows.length > 1) {
        const ids = rows.slice(0, 5).map((r) => r.id);
        throw new AwcError(
          'E_AMBIGUOUS',
          `"${ref}" matches several ${what}s in namespace "${namespace}": ${ids.join(', ')}${rows.length > 5 ? ', …' : ''}`,
          {
            details: { ref, candidates: ids },
          },
        );
      }
    }
    throw table === 'snapshots' ? this.#snapshotNotFound(namespace, ref) : this.#workspaceNotFound(namespace, ref);
  }

  #snapshotNotFound(namespace: string, ref: string): AwcError {
    return new AwcError('E_NOT_FOUND', `no snapshot "${ref}" in namespace "${namespace}"`, {
      hint: `List snapshots with \`awc snapshot ls\`; a ref is an id, a name, or an id prefix of at least ${MIN_PREFIX} characters.`,
      details: { namespace, ref },
    });
  }

  #workspaceNotFound(namespace: string, ref: string): AwcError {
    return new AwcError('E_NOT_FOUND', `no workspace "${ref}" in namespace "${namespace}"`, {
      hint: `List workspaces with \`awc ls\`; a ref is an id, a name, or an id prefix of at least ${MIN_PREFIX} characters.`,
      details: { namespace, ref },
    });
  }

  /**
   * Resolves a snapshot by exact id, exact name, or unique id prefix (≥ 4 characters after
   * the optional `sn_`). @throws E_NOT_FOUND, E_AMBIGUOUS (details.candidates lists ids)
   */
  async getSnapshot(namespace: string, ref: string): Promise<SnapshotRow> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) throw this.#snapshotNotFound(namespace, ref);
      const id = await this.#resolveId('snapshots', 'sn', nsId, namespace, ref);
      const r = await this.db.selectFrom('snapshots').selectAll().where('id', '=', id).executeTakeFirst();
      if (!r) throw this.#snapshotNotFound(namespace, ref);
      return toSnapshotRow(r, namespace);
    });
  }

  /** Snapshots of `namespace`, newest first (created_at, then id, descending). */
  async listSnapshots(namespace: string): Promise<SnapshotRow[]> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) return [];
      const rows = await this.db
        .selectFrom('snapshots')
        .selectAll()
        .where('namespace', '=', nsId)
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .execute();
      return rows.map((r) => toSnapshotRow(r, namespace));
    });
  }

  /**
   * Deletes the snapshot row `id` (exact id). Its packs and blobs stay (GC collects them).
   * @throws E_NOT_FOUND, E_IN_USE (a workspace's base or head, or another snapshot's parent;
   *   details lists up to 5 of them)
   */
  async deleteSnapshot(namespace: string, id: string): Promise<void> {
    const nsId = await this.#read(() => this.#findNs(namespace));
    if (!nsId) throw this.#snapshotNotFound(namespace, id);
    await this.#tx(async (trx) => {
      const snap = await trx.selectFrom('snapshots').select('id').where('id', '=', id).where('namespace', '=', nsId).executeTakeFirst();
      if (!snap) throw this.#snapshotNotFound(namespace, id);
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'name'])
        .where((eb) => eb.or([eb('base_snapshot_id', '=', id), eb('head_snapshot_id', '=', id)]))
        .limit(5)
        .execute();
      if (ws.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the base or head of workspace(s) ${ws.map((w) => w.name ?? w.id).join(', ')}`, {
          hint: 'It cannot be deleted while those workspaces exist.',
          details: { workspaces: ws.map((w) => w.id) },
        });
      }
      const children = await trx.selectFrom('snapshots').select('id').where('parent_id', '=', id).limit(5).execute();
      if (children.length > 0) {
        throw new AwcError('E_IN_USE', `snapshot ${id} is the parent of snapshot(s) ${children.map((c) => c.id).join(', ')}`, {
          hint: 'Remove the snapshots made from it first.',
          details: { snapshots: children.map((c) => c.id) },
        });
      }
      await trx.deleteFrom('snapshots').where('id', '=', id).execute();
    });
  }

  // ---------------------------------------------------------------- workspaces

  /**
   * Creates one workspace per entry of `names` (null = unnamed), base and head =
   * `snapshotId` (an exact snapshot id), in one transaction with multi-row INSERTs (one
   * statement for up to ~2700 workspaces). Returned rows follow the order of `names`, and
   * their ids increase in that order.
   * @throws E_NOT_FOUND (snapshot), E_NAME_TAKEN (a name exists or repeats; nothing created), E_USAGE (bad name)
   */
  async forkWorkspaces(namespace: string, snapshotId: string, names: readonly (string | null)[]): Promise<WorkspaceRow[]> {
    const seen = new Set<string>();
    for (const n of names) {
      checkName(n, 'workspace');
      if (n !== null) {
        if (seen.has(n)) throw new AwcError('E_NAME_TAKEN', `the workspace name "${n}" is given twice`, { details: { name: n } });
        seen.add(n);
      }
    }
    const nsId = await this.#read(() => this.#findNs(namespace));
    if (!nsId) throw this.#snapshotNotFound(namespace, snapshotId);
    const now = nowIso();
    const ids = newIds('ws', names.length);
    const records: NewWorkspaceRecord[] = names.map((name, i) => ({
      id: ids[i]!,
      namespace: nsId,
      name,
      base_snapshot_id: snapshotId,
      head_snapshot_id: snapshotId,
      mount_state: 'unmounted',
      mount_path: null,
      mount_driver: null,
      mount_host: null,
      created_at: now,
      updated_at: now,
    }));
    await this.#tx(async (trx) => {
      const snap = await trx
        .selectFrom('snapshots')
        .select('id')
        .where('id', '=', snapshotId)
        .where('namespace', '=', nsId)
        .executeTakeFirst();
      if (!snap) throw this.#snapshotNotFound(namespace, snapshotId);
      const named = [...seen];
      for (const group of chunks(named, LOOKUP_BATCH)) {
        const taken = await trx
          .selectFrom('workspaces')
          .select('name')
          .where('namespace', '=', nsId)
          .where('name', 'in', group)
          .limit(5)
          .execute();
        if (taken.length > 0) {
          const list = taken.map((t) => t.name!);
          throw new AwcError('E_NAME_TAKEN', `workspace name(s) already used in namespace "${namespace}": ${list.join(', ')}`, {
            details: { names: list },
          });
        }
      }
      try {
        for (const group of chunks(records, this.#rowsPerInsert(11))) {
          await trx.insertInto('workspaces').values(group).execute();
        }
      } catch (err) {
        if (isUniqueViolation(err)) {
          throw new AwcError('E_NAME_TAKEN', `a workspace name is already used in namespace "${namespace}"`, { cause: err });
        }
        throw err;
      }
    });
    return records.map((r) => toWorkspaceRow(r as WorkspaceRecord, namespace));
  }

  /**
   * Resolves a workspace by exact id, exact name, or unique id prefix (≥ 4 characters after
   * the optional `ws_`). @throws E_NOT_FOUND, E_AMBIGUOUS (details.candidates lists ids)
   */
  async getWorkspace(namespace: string, ref: string): Promise<WorkspaceRow> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) throw this.#workspaceNotFound(namespace, ref);
      const id = await this.#resolveId('workspaces', 'ws', nsId, namespace, ref);
      const r = await this.db.selectFrom('workspaces').selectAll().where('id', '=', id).executeTakeFirst();
      if (!r) throw this.#workspaceNotFound(namespace, ref);
      return toWorkspaceRow(r, namespace);
    });
  }

  /** Workspaces of `namespace`, oldest first (created_at, then id, ascending). */
  async listWorkspaces(namespace: string): Promise<WorkspaceRow[]> {
    return this.#read(async () => {
      const nsId = await this.#findNs(namespace);
      if (!nsId) return [];
      const rows = await this.db
        .selectFrom('workspaces')
        .selectAll()
        .where('namespace', '=', nsId)
        .orderBy('created_at', 'asc')
        .orderBy('id', 'asc')
        .execute();
      return rows.map((r) => toWorkspaceRow(r, namespace));
    });
  }

  /** `workspaces` joined with its namespace name, for queries across namespaces. */
  #workspacesWithNs(db: Db) {
    return db
      .selectFrom('workspaces as w')
      .innerJoin('namespaces as n', 'n.id', 'w.namespace')
      .selectAll('w')
      .select('n.name as namespace_name');
  }

  /**
   * The workspace mounted at `path` (absolute), in any namespace and on any host; when
   * workspaces on several hosts use the same path, the most recently updated one.
   */
  async findWorkspaceByMountPath(path: string): Promise<WorkspaceRow | undefined> {
    return this.#read(async () => {
      const r = (await this.#workspacesWithNs(this.db)
        .where('w.mount_path', '=', path)
        .where('w.mount_state', '=', 'mounted')
        .orderBy('w.updated_at', 'desc')
        .executeTakeFirst()) as WorkspaceWithNs | undefined;
      return r ? toWorkspaceRow(r, r.namespace_name) : undefined;
    });
  }

  /** Workspaces mounted on `host`, in any namespace, oldest first. */
  async listMountedOnHost(host: string): Promise<WorkspaceRow[]> {
    return this.#read(async () => {
      const rows = (await this.#workspacesWithNs(this.db)
        .where('w.mount_host', '=', host)
        .where('w.mount_state', '=', 'mounted')
        .orderBy('w.created_at', 'asc')
        .orderBy('w.id', 'asc')
        .execute()) as WorkspaceWithNs[];
      return rows.map((r) => toWorkspaceRow(r, r.namespace_name));
    });
  }

  /**
   * Records a mount (state 'mounted' with absolute `path`, `driver`, `host`) or, with null,
   * an unmount (state 'unmounted', all mount fields null; idempotent). Recording the same
   * path and host again is idempotent (the driver is updated).
   * @throws E_NOT_FOUND (workspace id), E_ALREADY_MOUNTED (mounted at another path or host),
   *   E_TARGET_BUSY (another workspace is mounted at that path on that host), E_USAGE (relative path)
   */
  async setMount(workspaceId: string, m: { path: string; driver: MountDriver; host: string } | null): Promise<WorkspaceRow> {
    if (m && !m.path.startsWith('/')) throw new AwcError('E_USAGE', `a mount path must be absolute: ${JSON.stringify(m.path)}`);
    const now = nowIso();
    return this.#tx(async (trx) => {
      const ws = (await this.#workspacesWithNs(trx).where('w.id', '=', workspaceId).executeTakeFirst()) as WorkspaceWithNs | undefined;
      if (!ws) {
        throw new AwcError('E_NOT_FOUND', `no workspace with id ${workspaceId}`, {
          hint: 'List workspaces with `awc ls`.',
          details: { ref: workspaceId },
        });
      }
      if (m) {
        if (ws.mount_state === 'mounted' && (ws.mount_path !== m.path || ws.mount_host !== m.host)) {
          throw new AwcError(
            'E_ALREADY_MOUNTED',
            `workspace ${ws.name ?? ws.id} is already mounted at ${ws.mount_path} on ${ws.mount_host}`,
            {
              details: { path: ws.mount_path, host: ws.mount_host },
            },
          );
        }
        const other = await trx
          .selectFrom('workspaces')
          .select(['id', 'name'])
          .where('mount_path', '=', m.path)
          .where('mount_host', '=', m.host)
          .where('id', '!=', workspaceId)
          .executeTakeFirst();
        if (other) {
          throw new AwcError('E_TARGET_BUSY', `workspace ${other.name ?? other.id} is already mounted at ${m.path} on ${m.host}`, {
            hint: 'Unmount it first, or pick another directory.',
            details: { workspaceId: other.id },
          });
        }
      }
      const set = m
        ? { mount_state: 'mounted', mount_path: m.path, mount_driver: m.driver, mount_host: m.host, updated_at: now }
        : { mount_state: 'unmounted', mount_path: null, mount_driver: null, mount_host: null, updated_at: now };
      try {
        await trx.updateTable('workspaces').set(set).where('id', '=', workspaceId).execute();
      } catch (err) {
        if (isUniqueViolation(err))
          throw new AwcError('E_TARGET_BUSY', `another workspace is mounted at ${m?.path} on ${m?.host}`, { cause: err });
        throw err;
      }
      return toWorkspaceRow({ ...ws, ...set }, ws.namespace_name);
    });
  }

  /**
   * Deletes the workspace row `id` (exact id). Its snapshots stay.
   * @throws E_NOT_FOUND, E_ALREADY_MOUNTED (unmount it first)
   */
  async deleteWorkspace(namespace: string, id: string): Promise<void> {
    const nsId = await this.#read(() => this.#findNs(namespace));
    if (!nsId) throw this.#workspaceNotFound(namespace, id);
    await this.#tx(async (trx) => {
      const ws = await trx
        .selectFrom('workspaces')
        .select(['id', 'name', 'mount_state', 'mount_path', 'mount_host'])
        .where('id', '=', id)
        .where('namespace', '=', nsId)
        .executeTakeFirst();
      if (!ws) throw this.#workspaceNotFound(namespace, id);
      if (ws.mount_state === 'mounted') {
        throw new AwcError('E_ALREADY_MOUNTED', `workspace ${ws.name ?? ws.id} is mounted at ${ws.mount_path} on ${ws.mount_host}`, {
          details: { path: ws.mount_path, host: ws.mount_host },
        });
      }
      await trx.deleteFrom('workspaces').where('id', '=', id).execute();
    });
  }

  /** Closes the connection (idempotent). */
  async close(): Promise<void> {
    await this.db.destroy();
  }
}
