import { Kysely, Migrator, sql, type Migration, type MigrationProvider } from 'kysely';
import { AwcError, toAwcError } from '../../core/errors.js';

/**
 * Catalog migrations, in code, run through Kysely's `Migrator` with a static provider.
 *
 * Rules for every migration (so one set serves SQLite and PostgreSQL):
 * - only portable types: `text`, `integer`, `bigint`; timestamps are ISO-8601 UTC `text`;
 * - every index and unique constraint is explicit and named;
 * - partial unique indexes (`WHERE name IS NOT NULL`) work on both dialects;
 * - migrations are append-only: never edit a released one, add the next `NNNN_*` instead.
 *
 * Times judged by the database's clock (host sessions, leases) are `bigint` ms since the Unix
 * epoch of that clock (`SqlDialect.nowMs()`), never a host's (docs/explanation/leases.md).
 */

/** 0001, step 1: `namespaces` and `packs`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- migrations run on any schema (kysely's documented pattern)
async function createNamespacesAndPacks(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('namespaces')
    .addColumn('id', 'text', (c) => c.primaryKey().notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('namespaces_name_uq', ['name'])
    .execute();

  await db.schema
    .createTable('packs')
    .addColumn('key', 'text', (c) => c.primaryKey().notNull())
    .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
    .addColumn('size', 'bigint', (c) => c.notNull())
    .addColumn('blob_count', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('packs_namespace_idx').on('packs').columns(['namespace', 'created_at']).execute();
}

/** 0001, step 2: `blobs` (one row per stored blob: which pack, where in it, how encoded). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
async function createBlobs(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('blobs')
    .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('pack', 'text', (c) => c.notNull().references('packs.key'))
    .addColumn('offset', 'bigint', (c) => c.notNull())
    .addColumn('stored_length', 'bigint', (c) => c.notNull())
    .addColumn('raw_length', 'bigint', (c) => c.notNull())
    .addColumn('codec', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('blobs_pk', ['namespace', 'digest'])
    .execute();
  await db.schema.createIndex('blobs_pack_idx').on('blobs').column('pack').execute();
}

/** 0001, step 3: `snapshots` and their indexes. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
async function createSnapshots(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('snapshots')
    .addColumn('id', 'text', (c) => c.primaryKey().notNull())
    .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
    .addColumn('name', 'text')
    .addColumn('root', 'text', (c) => c.notNull())
    .addColumn('parent_id', 'text', (c) => c.references('snapshots.id'))
    .addColumn('message', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('file_count', 'integer', (c) => c.notNull())
    .addColumn('byte_count', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('snapshots_namespace_name_uq')
    .unique()
    .on('snapshots')
    .columns(['namespace', 'name'])
    .where(sql.ref('name'), 'is not', null)
    .execute();
  await db.schema.createIndex('snapshots_namespace_created_idx').on('snapshots').columns(['namespace', 'created_at']).execute();
  await db.schema.createIndex('snapshots_parent_idx').on('snapshots').column('parent_id').execute();
}

/** 0001, step 4: `workspaces` and their indexes. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
async function createWorkspaces(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('workspaces')
    .addColumn('id', 'text', (c) => c.primaryKey().notNull())
    .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
    .addColumn('name', 'text')
    .addColumn('base_snapshot_id', 'text', (c) => c.notNull().references('snapshots.id'))
    .addColumn('head_snapshot_id', 'text', (c) => c.notNull().references('snapshots.id'))
    .addColumn('mount_state', 'text', (c) => c.notNull())
    .addColumn('mount_path', 'text')
    .addColumn('mount_driver', 'text')
    .addColumn('mount_host', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('workspaces_namespace_name_uq')
    .unique()
    .on('workspaces')
    .columns(['namespace', 'name'])
    .where(sql.ref('name'), 'is not', null)
    .execute();
  await db.schema.createIndex('workspaces_namespace_created_idx').on('workspaces').columns(['namespace', 'created_at']).execute();
  await db.schema.createIndex('workspaces_base_idx').on('workspaces').column('base_snapshot_id').execute();
  await db.schema.createIndex('workspaces_head_idx').on('workspaces').column('head_snapshot_id').execute();
  // One workspace per mount target per host.
  await db.schema
    .createIndex('workspaces_mount_uq')
    .unique()
    .on('workspaces')
    .columns(['mount_path', 'mount_host'])
    .where(sql.ref('mount_path'), 'is not', null)
    .execute();
  await db.schema
    .createIndex('workspaces_mount_host_idx')
    .on('workspaces')
    .column('mount_host')
    .where(sql.ref('mount_host'), 'is not', null)
    .execute();
}

/** 0001: namespaces, packs, blobs, snapshots, workspaces. */
const m0001Initial: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- migrations run on any schema (kysely's documented pattern)
  async up(db: Kysely<any>): Promise<void> {
    await createNamespacesAndPacks(db);
    await createBlobs(db);
    await createSnapshots(db);
    await createWorkspaces(db);
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    for (const t of ['workspaces', 'snapshots', 'blobs', 'packs', 'namespaces']) {
      await db.schema.dropTable(t).execute();
    }
  },
};

/**
 * 0002: host sessions and workspace leases with a fencing epoch (docs/explanation/leases.md).
 * `hosts`: one row per host id, its current session (incarnation) and that session's expiry
 * (ms by the database clock); one heartbeat renews it, and with it every lease of the session.
 * `leases`: one row per workspace ever leased, kept on release (host null) so the epoch only grows.
 */
const m0002HostsLeases: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('hosts')
      .addColumn('id', 'text', (c) => c.primaryKey().notNull())
      .addColumn('session', 'bigint', (c) => c.notNull())
      .addColumn('address', 'text')
      .addColumn('pid', 'integer')
      .addColumn('daemon_version', 'text')
      .addColumn('ttl_ms', 'bigint', (c) => c.notNull())
      .addColumn('started_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('heartbeat_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('leases')
      .addColumn('workspace_id', 'text', (c) => c.primaryKey().notNull().references('workspaces.id'))
      .addColumn('host', 'text')
      .addColumn('session', 'bigint')
      .addColumn('epoch', 'bigint', (c) => c.notNull())
      .addColumn('acquired_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('taken_from', 'text')
      .addColumn('taken_at_ms', 'bigint')
      .execute();
    await db.schema
      .createIndex('leases_host_idx')
      .on('leases')
      .columns(['host', 'session'])
      .where(sql.ref('host'), 'is not', null)
      .execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable('leases').execute();
    await db.schema.dropTable('hosts').execute();
  },
};

/**
 * 0003: what gc needs (docs/explanation/gc.md): the fleet-wide gc lock (`gc_lock`: one row
 * per lock name, owner, taken_at and expires_at in ms by the database's clock), the pack
 * states (`packs.state` live | condemned | deleting | deleted, `condemned_at`,
 * `deleted_at` in ms by the database's clock) and the snapshot each workspace's host state
 * (overlay layer or copy) was built from (`workspaces.layer_snapshot_id`).
 */
const m0003Gc: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('gc_lock')
      .addColumn('name', 'text', (c) => c.primaryKey().notNull())
      .addColumn('owner', 'text', (c) => c.notNull())
      .addColumn('taken_at', 'bigint', (c) => c.notNull())
      .addColumn('expires_at', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema
      .alterTable('packs')
      .addColumn('state', 'text', (c) => c.notNull().defaultTo('live'))
      .execute();
    await db.schema.alterTable('packs').addColumn('condemned_at', 'bigint').execute();
    await db.schema.alterTable('packs').addColumn('deleted_at', 'bigint').execute();
    await db.schema.createIndex('packs_state_idx').on('packs').columns(['state', 'namespace']).execute();
    await db.schema
      .alterTable('workspaces')
      .addColumn('layer_snapshot_id', 'text', (c) => c.references('snapshots.id'))
      .execute();
    await db.schema.createIndex('workspaces_layer_idx').on('workspaces').column('layer_snapshot_id').execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropIndex('workspaces_layer_idx').execute();
    await db.schema.alterTable('workspaces').dropColumn('layer_snapshot_id').execute();
    await db.schema.dropIndex('packs_state_idx').execute();
    for (const c of ['deleted_at', 'condemned_at', 'state']) await db.schema.alterTable('packs').dropColumn(c).execute();
    await db.schema.dropTable('gc_lock').execute();
  },
};

/**
 * 0004: labels on snapshots and workspaces (`labels`: a JSON object of strings, keys sorted,
 * `{}` by default; src/catalog/port/labels.ts). Filtering is done on the rows read, so no index.
 */
const m0004Labels: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    for (const t of ['snapshots', 'workspaces']) {
      await db.schema
        .alterTable(t)
        .addColumn('labels', 'text', (c) => c.notNull().defaultTo('{}'))
        .execute();
    }
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    for (const t of ['workspaces', 'snapshots']) await db.schema.alterTable(t).dropColumn('labels').execute();
  },
};

/**
 * 0005: the catalog's identity and the object store it is bound to (`catalog_identity`, at
 * most one row, key `name` = 'home'): `catalog_id` and `store_id` (random, `cat_…` / `st_…`),
 * `state` pending (the row is agreed, the store's `meta/identity.json` not yet confirmed) |
 * bound, `created_at` / `bound_at` ISO-8601 UTC. src/catalog/open/store-binding.ts writes it on the
 * first open of a home (new or upgraded); docs/reference/formats.md#catalog-and-store-identity.
 */
const m0005Identity: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('catalog_identity')
      .addColumn('name', 'text', (c) => c.primaryKey().notNull())
      .addColumn('catalog_id', 'text', (c) => c.notNull())
      .addColumn('store_id', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('bound_at', 'text')
      .execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable('catalog_identity').execute();
  },
};

/**
 * 0006_snapshot_classes: `snapshots.classes`, the snapshot's files per capture class as JSON
 * (SnapshotClassCounts), null when not counted: a checkpoint adds what changed to its head's.
 */
const m0006SnapshotClasses: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema.alterTable('snapshots').addColumn('classes', 'text').execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.alterTable('snapshots').dropColumn('classes').execute();
  },
};

/**
 * 0007_layer_images: `layer_images`, one row per (namespace, root): the shared EROFS image of a
 * snapshot root's layer and its content index (digests `sha256:<hex>` as text, sizes in bytes),
 * the host that built it and `created_at` (ms by the database's clock). The first row of a root
 * wins (`INSERT … ON CONFLICT DO NOTHING`). `snapshots_namespace_root_idx` lets gc find the
 * records whose root no snapshot has any more (docs/explanation/layer-images.md).
 */
const m0007LayerImages: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('layer_images')
      .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
      .addColumn('root', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('image_bytes', 'bigint', (c) => c.notNull())
      .addColumn('index_digest', 'text', (c) => c.notNull())
      .addColumn('index_bytes', 'bigint', (c) => c.notNull())
      .addColumn('built_by', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('layer_images_pk', ['namespace', 'root'])
      .execute();
    await db.schema.createIndex('snapshots_namespace_root_idx').on('snapshots').columns(['namespace', 'root']).execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropIndex('snapshots_namespace_root_idx').execute();
    await db.schema.dropTable('layer_images').execute();
  },
};

/**
 * 0008: build leases (src/catalog/port/build-leases.ts): one row per (namespace, key) of a
 * build that concurrent callers share (`awc prepare` of one environment key).
 */
const m0008BuildLeases: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('build_leases')
      .addColumn('namespace', 'text', (c) => c.notNull().references('namespaces.id'))
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('holder', 'text')
      .addColumn('epoch', 'bigint', (c) => c.notNull())
      .addColumn('acquired_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
      .addColumn('result', 'text')
      .addPrimaryKeyConstraint('build_leases_pk', ['namespace', 'key'])
      .execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable('build_leases').execute();
  },
};

/**
 * 0009_namespace_quotas: `namespace_quotas`, at most one row per namespace (id), its limits
 * (null: no limit): `stored_bytes` (bytes of its packs not deleted), `daily_new_bytes` (bytes
 * of the packs its commits added in the last 24 h by the database's clock), `workspaces`;
 * `updated_at` ISO-8601 UTC. `packs.committed_at_ms`: when a snapshot or checkpoint commit
 * inserted the pack row, ms by the database's clock (null for rows from before this migration
 * and for gc's own rows: adopted packs, repack copies), indexed with the namespace for the
 * daily sum (src/catalog/sql/quota-queries.ts, docs/reference/quotas.md).
 */
const m0009NamespaceQuotas: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('namespace_quotas')
      .addColumn('namespace', 'text', (c) => c.primaryKey().notNull().references('namespaces.id'))
      .addColumn('stored_bytes', 'bigint')
      .addColumn('daily_new_bytes', 'bigint')
      .addColumn('workspaces', 'integer')
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.alterTable('packs').addColumn('committed_at_ms', 'bigint').execute();
    await db.schema.createIndex('packs_namespace_committed_idx').on('packs').columns(['namespace', 'committed_at_ms']).execute();
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropIndex('packs_namespace_committed_idx').execute();
    await db.schema.alterTable('packs').dropColumn('committed_at_ms').execute();
    await db.schema.dropTable('namespace_quotas').execute();
  },
};

/**
 * 0010_namespace_usage: `namespace_usage`, at most one row per namespace (id), the running
 * totals the quota checks read instead of summing rows: `stored_bytes` (bytes of the
 * namespace's packs whose state is not `deleted`) and `workspaces` (its workspace rows). Every
 * statement that inserts a pack row, moves one into or out of `deleted`, or inserts or deletes
 * a workspace adds its change to the row in the same transaction (src/catalog/sql/usage-counter.ts).
 * Filled here from the rows already there; a namespace without a row uses nothing.
 */
const m0010NamespaceUsage: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async up(db: Kysely<any>): Promise<void> {
    await db.schema
      .createTable('namespace_usage')
      .addColumn('namespace', 'text', (c) => c.primaryKey().notNull().references('namespaces.id'))
      .addColumn('stored_bytes', 'bigint', (c) => c.notNull())
      .addColumn('workspaces', 'integer', (c) => c.notNull())
      .execute();
    await sql`insert into namespace_usage (namespace, stored_bytes, workspaces)
      select n.id,
        coalesce((select sum(p.size) from packs p where p.namespace = n.id and p.state != 'deleted'), 0),
        (select count(*) from workspaces w where w.namespace = n.id)
      from namespaces n`.execute(db);
  },
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable('namespace_usage').execute();
  },
};

/** All migrations by name; names sort in application order. */
export const MIGRATIONS: Readonly<Record<string, Migration>> = Object.freeze({
  '0001_initial': m0001Initial,
  '0002_hosts_leases': m0002HostsLeases,
  '0003_gc': m0003Gc,
  '0004_labels': m0004Labels,
  '0005_identity': m0005Identity,
  '0006_snapshot_classes': m0006SnapshotClasses,
  '0007_layer_images': m0007LayerImages,
  '0008_build_leases': m0008BuildLeases,
  '0009_namespace_quotas': m0009NamespaceQuotas,
  '0010_namespace_usage': m0010NamespaceUsage,
});

/** The static migration provider handed to Kysely's `Migrator`. */
export const migrationProvider: MigrationProvider = {
  async getMigrations() {
    return { ...MIGRATIONS };
  },
};

/** Name of the table where applied migrations are recorded. */
export const MIGRATION_TABLE = 'awc_migration';
/** Name of Kysely's migration lock table. */
export const MIGRATION_LOCK_TABLE = 'awc_migration_lock';

/**
 * Applies every pending migration (idempotent: a no-op on an up-to-date database).
 * Returns the names of the migrations applied by this call. `toError` maps a driver error to
 * an AwcError: the dialect's mapping (a full disk → E_NO_SPACE…), `toAwcError` by default.
 * @throws E_NO_SPACE / E_READ_ONLY / E_IO when the disk fails it, else E_INTERNAL when a migration fails
 *   (the failed migration's transaction is rolled back),
 *   E_FORMAT when the database has migrations this version does not know (it was written by a newer awc).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the migrator takes a database of any schema
export async function migrateToLatest(db: Kysely<any>, toError: (err: unknown) => AwcError = toAwcError): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: migrationProvider,
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: MIGRATION_LOCK_TABLE,
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const msg = error instanceof Error ? error.message : String(error);
    if (/corrupted migrations/i.test(msg)) {
      throw new AwcError('E_FORMAT', `the catalog was written by a newer awc: ${msg}`, {
        hint: 'Upgrade awc to the version that wrote this catalog.',
        cause: error,
      });
    }
    // a full or read-only disk is the environment's failure (E_NO_SPACE, E_READ_ONLY…), not a bug
    const mapped = toError(error);
    throw new AwcError(mapped.code, `catalog migration failed: ${msg}`, { cause: error, hint: mapped.hint });
  }
  return (results ?? []).filter((r) => r.status === 'Success' && r.direction === 'Up').map((r) => r.migrationName);
}
