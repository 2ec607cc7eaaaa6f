import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { sql } from 'kysely';
import type { Catalog } from '../../../src/catalog/port/catalog.js';
import { MIGRATIONS } from '../../../src/catalog/sql/migrations.js';
import { openCatalog } from '../../../src/catalog/open/open-catalog.js';
import { PostgresCatalog, postgresDialect } from '../../../src/catalog/postgres/postgres-catalog.js';
import { toNum } from '../../../src/catalog/sql/rows.js';
import type { WrittenPack } from '../../../src/store/pack/pack-types.js';
import { blobIndexContract } from '../../contracts/blob-index.contract.js';
import { catalogContract } from '../../contracts/catalog.contract.js';
import { gcCatalogContract } from '../../contracts/gc-catalog.contract.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc } from '../../helpers/cli.js';
import { tempDirFor } from '../../helpers/temp-dir.js';
import { mkPack, NS, snap } from '../../helpers/catalog-fixtures.js';
import { freshDatabase, freshDatabaseFor, postgresAdminUrl, withDatabase, type FreshDatabase } from '../../helpers/postgres.js';

/** The database each catalog under test was opened on, dropped at cleanup. */
const databases = new WeakMap<object, FreshDatabase>();

async function openFresh(): Promise<PostgresCatalog> {
  const db = await freshDatabase();
  try {
    const cat = await PostgresCatalog.open(db.url);
    databases.set(cat, db);
    return cat;
  } catch (err) {
    await db.drop();
    throw err;
  }
}

async function cleanup(cat: Catalog): Promise<void> {
  await cat.close();
  await databases.get(cat)?.drop();
}

catalogContract('PostgresCatalog', {
  create: openFresh,
  cleanup,
  connect: (cat) => PostgresCatalog.open(databases.get(cat)!.url),
});

gcCatalogContract('PostgresCatalog', { create: openFresh, cleanup });

const indexOwners = new WeakMap<object, PostgresCatalog>();
blobIndexContract('PostgresCatalog.blobIndex', {
  async create() {
    const cat = await openFresh();
    const t = {
      index: cat.blobIndex(NS),
      record: async (packs: readonly WrittenPack[]) => void (await cat.createSnapshot(snap({ packs: [...packs] }))),
    };
    indexOwners.set(t, cat);
    return t;
  },
  cleanup: (t) => cleanup(indexOwners.get(t)!),
});

/** The admin URL with another password (the same server, user and database). */
function withPassword(url: string, password: string): string {
  const u = new URL(url);
  u.password = password;
  return u.toString();
}

describe('PostgresCatalog', () => {
  it('opens through openCatalog, migrates once, and a reopen finds nothing to do', async (t) => {
    const db = await freshDatabaseFor(t);
    const cat = await openCatalog(db.url);
    assert.ok(cat instanceof PostgresCatalog);
    assert.deepEqual(cat.appliedOnOpen, Object.keys(MIGRATIONS));
    await cat.close();
    const again = await PostgresCatalog.open(db.url);
    try {
      assert.deepEqual(again.appliedOnOpen, []);
      assert.deepEqual(await again.migrate(), []);
      const s = await again.createSnapshot(snap({ name: 'x' }));
      assert.equal((await again.getSnapshot(NS, 'x')).id, s.id);
      // the database's clock, in ms: clock_timestamp(), not the transaction's start
      const r = await sql<{ now: string }>`select ${postgresDialect.nowMs()} as now`.execute(again.db);
      assert.ok(Math.abs(toNum(r.rows[0]!.now) - Date.now()) < 60_000, r.rows[0]!.now);
    } finally {
      await again.close();
    }
  });

  it('a wrong password is E_CONFIG naming the URL with its password redacted', async () => {
    const url = withPassword(postgresAdminUrl(), 'not-the-password-7f3a');
    const e = await rejectsWith(PostgresCatalog.open(url), 'E_CONFIG');
    assert.match(e.message, /password authentication failed|refused the login/);
    for (const text of [e.message, e.hint, JSON.stringify(e.toJSON())]) {
      assert.doesNotMatch(text, /not-the-password-7f3a/);
    }
    assert.match(e.hint, /:\*\*\*@/);
    assert.equal(e.details?.sqlstate, '28P01');
  });

  it('an unknown database is E_CONFIG with a hint naming the URL', async () => {
    const url = withDatabase(postgresAdminUrl(), 'awc_no_such_database');
    const e = await rejectsWith(PostgresCatalog.open(url), 'E_CONFIG');
    assert.match(e.message, /does not exist/);
    assert.match(e.hint, /awc_no_such_database/);
    assert.equal(e.details?.sqlstate, '3D000');
  });

  it('an unreachable server is E_CATALOG_UNAVAILABLE (retryable) with a hint naming the URL, password redacted', async () => {
    const u = new URL(postgresAdminUrl());
    u.hostname = '127.0.0.1';
    u.port = '1'; // nothing listens on port 1
    u.password = 'secret-pw-91c2';
    u.search = '';
    const e = await rejectsWith(PostgresCatalog.open(u.toString(), { connectTimeoutMs: 5_000 }), 'E_CATALOG_UNAVAILABLE');
    assert.equal(e.retryable, true);
    assert.match(e.message, /ECONNREFUSED/);
    assert.match(e.hint, /127\.0\.0\.1:1/);
    assert.match(e.hint, /pg_ctlcluster/);
    assert.doesNotMatch(e.message + e.hint, /secret-pw-91c2/);
  });

  it('a write cancelled by statement_timeout while another session holds the row lock is E_CATALOG_BUSY, and wrote nothing', async (t) => {
    const db = await freshDatabaseFor(t);
    const cat = await PostgresCatalog.open(db.url, { statementTimeoutMs: 300 });
    const holder = new pg.Client({ connectionString: db.url });
    try {
      const s = await cat.createSnapshot(snap());
      const [w] = await cat.forkWorkspaces(NS, s.id, ['w']);
      await holder.connect();
      await holder.query('begin');
      await holder.query('select id from workspaces where id = $1 for update', [w!.id]);
      const e = await rejectsWith(cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: s.id, snapshot: snap() }), 'E_CATALOG_BUSY');
      assert.equal(e.retryable, true);
      assert.equal(e.details?.sqlstate, '57014');
      await holder.query('rollback');
      assert.equal((await cat.listSnapshots(NS)).length, 1, 'the cancelled commit wrote nothing');
      const c = await cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: s.id, snapshot: snap() });
      assert.equal((await cat.getWorkspace(NS, 'w')).headSnapshotId, c.id);
    } finally {
      await holder.end().catch(() => undefined);
      await cat.close();
    }
  });

  it('a fresh database opened by 4 processes at once is migrated exactly once', async (t) => {
    const db = await freshDatabaseFor(t);
    const moduleUrl = new URL('../../../src/catalog/postgres/postgres-catalog.js', import.meta.url).href;
    const script = `import { PostgresCatalog } from ${JSON.stringify(moduleUrl)};
const cat = await PostgresCatalog.open(process.argv[1]);
process.stdout.write(JSON.stringify(cat.appliedOnOpen));
await cat.close();
`;
    const run = () =>
      new Promise<{ code: number; out: string; err: string }>((resolve) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', script, db.url], {
          stdio: ['ignore', 'pipe', 'pipe'],
          cwd: fileURLToPath(new URL('.', import.meta.url)),
        });
        let out = '';
        let err = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (err += d));
        child.on('exit', (code) => resolve({ code: code ?? -1, out, err }));
      });
    const results = await Promise.all([run(), run(), run(), run()]);
    for (const r of results) assert.equal(r.code, 0, r.err);
    const applied = results.map((r) => JSON.parse(r.out) as string[]);
    assert.equal(applied.filter((a) => a.length > 0).length, 1, `one process migrated: ${JSON.stringify(applied)}`);
    assert.deepEqual(
      applied.find((a) => a.length > 0),
      Object.keys(MIGRATIONS),
    );
    const cat = await PostgresCatalog.open(db.url);
    try {
      const rows = await cat.db
        .selectFrom('awc_migration' as never)
        .selectAll()
        .execute();
      assert.equal(rows.length, Object.keys(MIGRATIONS).length);
    } finally {
      await cat.close();
    }
  });
});

describe('PostgresCatalog: blob rows inserted concurrently', () => {
  it('two checkpoints listing the same new digests in opposite orders, released together at the blob insert: both commit, no deadlock', async (t) => {
    const db = await freshDatabaseFor(t);
    // a barrier: both transactions hold their workspace row and pack row, then send their blob inserts at once
    let arrived = 0;
    let release!: () => void;
    const together = new Promise<void>((r) => (release = r));
    const hooks = {
      beforeBlobInsert: async () => {
        if (++arrived === 2) release();
        await together;
      },
    };
    const plain = await PostgresCatalog.open(db.url);
    const a = await PostgresCatalog.open(db.url, { hooks });
    const b = await PostgresCatalog.open(db.url, { hooks });
    try {
      const base = await plain.createSnapshot(snap());
      const [wa, wb] = await plain.forkWorkspaces(NS, base.id, ['a', 'b']);
      const pa = mkPack('packs/a', 5000, 'shared');
      const pb = mkPack('packs/b', 5000, 'shared');
      pb.blobs.reverse();
      const results = await Promise.allSettled([
        a.commitCheckpoint({ workspaceId: wa!.id, expectedHeadId: base.id, snapshot: snap({ packs: [pa] }) }),
        b.commitCheckpoint({ workspaceId: wb!.id, expectedHeadId: base.id, snapshot: snap({ packs: [pb] }) }),
      ]);
      assert.deepEqual(
        results.map((r) => (r.status === 'rejected' ? (r.reason as Error).message : 'ok')),
        ['ok', 'ok'],
      );
      const found = await plain.blobIndex(NS).lookup(pa.blobs.map((x) => x.digest));
      assert.equal(found.size, 5000);
      const winners = new Set([...found.values()].map((l) => l.pack));
      assert.equal(winners.size, 1, `one writer's locations for every digest: ${[...winners].join(', ')}`);
    } finally {
      await Promise.all([plain.close(), a.close(), b.close()]);
    }
  });
});

describe('awc doctor with a PostgreSQL catalog', () => {
  it('reports it reachable with its schema, or the code of what is wrong, never the password', async (t) => {
    const db = await freshDatabaseFor(t);
    const home = join(await tempDirFor(t, 'awc-pg-doctor-'), 'home');
    const check = (url: string) => {
      const r = awc(home, ['doctor'], { AWC_CATALOG: url });
      assert.equal(r.code, 0, r.stderr);
      assert.doesNotMatch(r.stdout, /:awc_test@|wrong-pw-55/, 'no password in the output');
      return r.json.checks.find((c: { name: string }) => c.name === 'catalog') as { ok: boolean; detail: string; code?: string };
    };
    const current = check(db.url);
    assert.equal(current.ok, true, current.detail);
    assert.match(current.detail, new RegExp(`reachable, schema ${Object.keys(MIGRATIONS).at(-1)}`));
    assert.match(current.detail, /:\*\*\*@/);
    const wrong = check(withPassword(db.url, 'wrong-pw-55'));
    assert.equal(wrong.ok, false);
    assert.equal(wrong.code, 'E_CONFIG');
    const down = new URL(db.url);
    down.port = '1';
    const unreachable = check(down.toString());
    assert.equal(unreachable.ok, false);
    assert.equal(unreachable.code, 'E_CATALOG_UNAVAILABLE');
  });
});
