import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { sql } from 'kysely';
import { awc, awcOk, CLI, errorOf, readTreeInfo, type CliResult } from '../../helpers/cli.js';
import { freshDatabaseFor } from '../../helpers/postgres.js';
import { freshBucket } from '../../helpers/s3.js';
import { tempDirFor } from '../../helpers/temp-dir.js';
import { openCatalog } from '../../../src/catalog/open/open-catalog.js';
import type { KyselyCatalog } from '../../../src/catalog/sql/kysely-catalog.js';
import { newIdentityId, STORE_IDENTITY_KEY } from '../../../src/catalog/open/store-binding.js';

/**
 * A catalog and its object store know each other (docs/explanation/integrity.md#a-catalog-and-its-store-know-each-other):
 * the identity both record at creation is checked on every open; a mismatch is E_STORE_MISMATCH, an empty or missing
 * catalog in front of a store with packs is E_CATALOG_EMPTY (never re-created), an old home gets its identity on its
 * first open once its packs are found in the store, and `awc fsck --adopt-store` rebuilds a lost catalog from the packs.
 */

function makeSource(root: string, tag: string): void {
  mkdirSync(join(root, 'd'), { recursive: true });
  writeFileSync(join(root, 'a.txt'), `alpha ${tag}\n`.repeat(100));
  writeFileSync(join(root, 'd', 'b.bin'), Buffer.alloc(200_000, tag));
}

/** Pack files of a directory store. */
function packFiles(objects: string): string[] {
  const dir = join(objects, 'packs');
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((aa) => readdirSync(join(dir, aa)).map((f) => join(dir, aa, f)));
}

function identityOf(objects: string): { storeId: string; catalogId: string } {
  return JSON.parse(readFileSync(join(objects, STORE_IDENTITY_KEY), 'utf8'));
}

async function withCatalog<T>(url: string, fn: (c: KyselyCatalog) => Promise<T>): Promise<T> {
  const c = (await openCatalog(url)) as KyselyCatalog;
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

/** Takes a catalog back to before 0005 (an awc of before the upgrade): no identity table, no migration row. */
async function downgradeTo0004(url: string): Promise<void> {
  await withCatalog(url, async (c) => {
    // and every migration after 0005, so the upgrade applies them again in order
    await c.db.schema.dropTable('namespace_usage').execute();
    await sql`delete from awc_migration where name = '0010_namespace_usage'`.execute(c.db);
    await c.db.schema.dropIndex('packs_namespace_committed_idx').execute();
    await c.db.schema.alterTable('packs').dropColumn('committed_at_ms').execute();
    await c.db.schema.dropTable('namespace_quotas').execute();
    await sql`delete from awc_migration where name = '0009_namespace_quotas'`.execute(c.db);
    await c.db.schema.dropTable('build_leases').execute();
    await sql`delete from awc_migration where name = '0008_build_leases'`.execute(c.db);
    await c.db.schema.dropIndex('snapshots_namespace_root_idx').execute();
    await c.db.schema.dropTable('layer_images').execute();
    await sql`delete from awc_migration where name = '0007_layer_images'`.execute(c.db);
    await c.db.schema.alterTable('snapshots').dropColumn('classes').execute();
    await sql`delete from awc_migration where name = '0006_snapshot_classes'`.execute(c.db);
    await c.db.schema.dropTable('catalog_identity').execute();
    await sql`delete from awc_migration where name = '0005_identity'`.execute(c.db);
  });
}

function refused(r: CliResult, code: string): { code: string; message: string; hint: string } {
  assert.equal(r.code, 5, `exit 5 (integrity), got ${r.code}: ${r.stderr}`);
  const e = errorOf(r);
  assert.equal(e.code, code, r.stderr);
  return e;
}

function spawnAwc(home: string, args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, '--home', home, '--json', ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    c.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr, json: undefined }));
  });
}

describe('a catalog and its store know each other', () => {
  it('a new home records the identity in both: meta/identity.json names the catalog row, bound', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src'), 'x');
    const home = join(dir, 'home');
    awcOk(home, ['snapshot', 'import', join(dir, 'src'), '--name', 'one']);
    const obj = identityOf(join(home, 'objects'));
    assert.match(obj.storeId, /^st_[0-9a-f]{32}$/);
    assert.match(obj.catalogId, /^cat_[0-9a-f]{32}$/);
    const row = await withCatalog(`sqlite:${join(home, 'catalog.sqlite')}`, (c) => c.identity().read());
    assert.equal(row?.state, 'bound');
    assert.equal(row?.storeId, obj.storeId);
    assert.equal(row?.catalogId, obj.catalogId);
  });

  it('two homes on one PostgreSQL catalog, a directory store and S3: the second is refused with E_STORE_MISMATCH and nothing is imported', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    const db = await freshDatabaseFor(t);
    const bucket = await freshBucket(t);
    makeSource(join(dir, 'src'), 'y');
    const homeA = join(dir, 'a');
    const homeB = join(dir, 'b');
    const envA = { AWC_CATALOG: db.url, AWC_HOST: 'host-a' };
    const envB = { ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('awc'), AWC_HOST: 'host-b' };
    awcOk(homeA, ['snapshot', 'import', join(dir, 'src'), '--name', 'one'], envA);
    const idA = identityOf(join(homeA, 'objects'));

    const r = awc(homeB, ['snapshot', 'import', join(dir, 'src'), '--name', 'two'], envB);
    const e = refused(r, 'E_STORE_MISMATCH');
    assert.match(e.message, new RegExp(idA.catalogId));
    assert.match(e.message, new RegExp(idA.storeId));
    assert.match(e.hint, /AWC_OBJECT_STORE/);
    for (const cmd of [['export', 'one', '--dir', join(dir, 'out')], ['gc'], ['fsck'], ['snapshot', 'ls']])
      refused(awc(homeB, cmd, envB), 'E_STORE_MISMATCH');
    const listed = await bucket.client.send(new ListObjectsV2Command({ Bucket: bucket.name }));
    assert.deepEqual(listed.Contents ?? [], [], 'nothing was written to the bucket');
    const snaps = (awcOk(homeA, ['snapshot', 'ls'], envA) as { snapshots: { name: string }[] }).snapshots;
    assert.deepEqual(
      snaps.map((s) => s.name),
      ['one'],
      'nothing was imported',
    );
    assert.equal(awc(homeA, ['fsck'], envA).code, 0, 'the first home is untouched');
  });

  it("a catalog in front of another home's store is refused with E_STORE_MISMATCH naming both identities, and nothing is written", async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src'), 'z');
    const homeA = join(dir, 'a');
    const homeB = join(dir, 'b');
    awcOk(homeA, ['snapshot', 'import', join(dir, 'src')]);
    awcOk(homeB, ['snapshot', 'import', join(dir, 'src')]);
    const a = identityOf(join(homeA, 'objects'));
    const b = identityOf(join(homeB, 'objects'));
    // home A's catalog in front of home B's store
    const r = awc(homeA, ['snapshot', 'import', join(dir, 'src')], { AWC_OBJECT_STORE: `file:${join(homeB, 'objects')}` });
    const e = refused(r, 'E_STORE_MISMATCH');
    for (const id of [a.catalogId, a.storeId, b.catalogId, b.storeId]) assert.match(e.message, new RegExp(id));
    const packsB = packFiles(join(homeB, 'objects'));
    refused(awc(homeA, ['gc', '--grace', '0s'], { AWC_OBJECT_STORE: `file:${join(homeB, 'objects')}` }), 'E_STORE_MISMATCH');
    assert.deepEqual(packFiles(join(homeB, 'objects')), packsB, "home B's store is untouched");
    assert.deepEqual(identityOf(join(homeB, 'objects')), b);
  });

  it("the host daemon refuses to start on a catalog in front of another home's store (E_STORE_MISMATCH in its log)", async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src'), 'd');
    const homeA = join(dir, 'a');
    const homeB = join(dir, 'b');
    awcOk(homeA, ['snapshot', 'import', join(dir, 'src')]);
    awcOk(homeB, ['snapshot', 'import', join(dir, 'src')]);
    const env = { AWC_OBJECT_STORE: `file:${join(homeB, 'objects')}` };
    t.after(() => void awc(homeA, ['daemon', 'stop'], env));
    const r = awc(homeA, ['daemon', 'start'], env, { timeoutMs: 60_000 });
    assert.notEqual(r.code, 0, 'the daemon did not start');
    const log = readFileSync(join(homeA, 'host', 'awcd.log'), 'utf8');
    assert.match(log, /"msg":"start failed","code":"E_STORE_MISMATCH"/);
    assert.match(awc(homeA, ['daemon', 'status'], env, { json: false }).stdout, /not running/);
  });

  for (const how of ['truncated to 0 bytes', 'deleted'] as const) {
    it(`a SQLite catalog ${how} in front of a store with packs is refused with E_CATALOG_EMPTY, not re-created, and gc never runs`, async (t) => {
      const dir = await tempDirFor(t, 'awc-ident-');
      makeSource(join(dir, 'src'), 'w');
      const home = join(dir, 'home');
      const catalogFile = join(home, 'catalog.sqlite');
      awcOk(home, ['snapshot', 'import', join(dir, 'src'), '--name', 'one']);
      const packs = packFiles(join(home, 'objects'));
      assert.ok(packs.length > 0);
      if (how === 'deleted') rmSync(catalogFile);
      else truncateSync(catalogFile, 0);
      for (const cmd of [['snapshot', 'ls'], ['snapshot', 'import', join(dir, 'src')], ['gc', '--grace', '0s'], ['fsck'], ['doctor']]) {
        const r = awc(home, cmd);
        if (cmd[0] === 'doctor') continue; // doctor reports; it never creates a catalog (checked below)
        const e = refused(r, 'E_CATALOG_EMPTY');
        assert.match(e.hint, /--adopt-store/);
      }
      if (how === 'deleted') assert.equal(existsSync(catalogFile), false, 'the catalog was not re-created');
      else assert.equal(statSync(catalogFile).size, 0, 'the catalog was not re-created');
      assert.deepEqual(packFiles(join(home, 'objects')), packs, 'every pack is still there');
      // a store of before the upgrade (packs, no identity object) is judged by its packs
      rmSync(join(home, 'objects', STORE_IDENTITY_KEY));
      refused(awc(home, ['gc', '--grace', '0s']), 'E_CATALOG_EMPTY');
      assert.deepEqual(packFiles(join(home, 'objects')), packs);
    });
  }

  it('a PostgreSQL catalog emptied in front of its S3 store is refused with E_CATALOG_EMPTY', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    const db1 = await freshDatabaseFor(t);
    const db2 = await freshDatabaseFor(t);
    const bucket = await freshBucket(t);
    makeSource(join(dir, 'src'), 'p');
    const home = join(dir, 'home');
    const env = { ...bucket.env, AWC_CATALOG: db1.url, AWC_OBJECT_STORE: bucket.url('awc') };
    awcOk(home, ['snapshot', 'import', join(dir, 'src')], env);
    const r = awc(home, ['gc', '--grace', '0s'], { ...env, AWC_CATALOG: db2.url });
    refused(r, 'E_CATALOG_EMPTY');
    assert.equal(awc(home, ['fsck'], env).code, 0, 'the store still holds everything');
  });

  it('an old home without identity gets it recorded on its first open, once its packs are found in the store', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src'), 'o');
    const home = join(dir, 'home');
    const url = `sqlite:${join(home, 'catalog.sqlite')}`;
    awcOk(home, ['snapshot', 'import', join(dir, 'src'), '--name', 'one']);
    await downgradeTo0004(url);
    // a catalog restored from a copy made before the upgrade, in front of the upgraded store: refused until the operator removes the store's identity
    refused(awc(home, ['snapshot', 'ls']), 'E_STORE_MISMATCH');
    rmSync(join(home, 'objects', STORE_IDENTITY_KEY));
    awcOk(home, ['snapshot', 'ls']);
    const obj = identityOf(join(home, 'objects'));
    const row = await withCatalog(url, (c) => c.identity().read());
    assert.equal(row?.state, 'bound');
    assert.deepEqual([row?.catalogId, row?.storeId], [obj.catalogId, obj.storeId]);
    awcOk(home, ['export', 'one', '--dir', join(dir, 'out')]);
    assert.deepEqual(readTreeInfo(join(dir, 'out')), readTreeInfo(join(dir, 'src')));
  });

  it('a fleet upgrading at once: 6 hosts open an old PostgreSQL catalog and S3 store together, all succeed, one identity', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    const db = await freshDatabaseFor(t);
    const bucket = await freshBucket(t);
    makeSource(join(dir, 'src'), 'f');
    const env = { ...bucket.env, AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('awc') };
    awcOk(join(dir, 'h0'), ['snapshot', 'import', join(dir, 'src'), '--name', 'one'], env);
    await downgradeTo0004(db.url);
    await bucket.client.send(new DeleteObjectCommand({ Bucket: bucket.name, Key: `awc/${STORE_IDENTITY_KEY}` }));
    const results = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((i) => spawnAwc(join(dir, `h${i}`), ['snapshot', 'ls'], { ...env, AWC_HOST: `h${i}` })),
    );
    for (const r of results) assert.equal(r.code, 0, r.stderr);
    const row = await withCatalog(db.url, (c) => c.identity().read());
    assert.equal(row?.state, 'bound');
    const got = await bucket.client.send(new GetObjectCommand({ Bucket: bucket.name, Key: `awc/${STORE_IDENTITY_KEY}` }));
    const obj = JSON.parse(await got.Body!.transformToString());
    assert.deepEqual([obj.catalogId, obj.storeId], [row?.catalogId, row?.storeId]);
  });

  it('a new fleet: 6 hosts open a fresh PostgreSQL catalog and directory store together, all succeed, one identity', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    const db = await freshDatabaseFor(t);
    makeSource(join(dir, 'src'), 'n');
    const objects = join(dir, 'objects');
    const env = { AWC_CATALOG: db.url, AWC_OBJECT_STORE: `file:${objects}` };
    const results = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((i) => spawnAwc(join(dir, `h${i}`), ['snapshot', 'import', join(dir, 'src')], { ...env, AWC_HOST: `h${i}` })),
    );
    for (const r of results) assert.equal(r.code, 0, r.stderr);
    const row = await withCatalog(db.url, (c) => c.identity().read());
    const obj = identityOf(objects);
    assert.equal(row?.state, 'bound');
    assert.deepEqual([obj.catalogId, obj.storeId], [row?.catalogId, row?.storeId]);
  });

  it('a pending row left by a host that died between its two steps is taken over by the next open (new ids: the dead host never binds)', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    const db = await freshDatabaseFor(t);
    makeSource(join(dir, 'src'), 'q');
    const objects = join(dir, 'objects');
    const proposed = await withCatalog(db.url, async (c) => {
      const p = await c.identity().propose({ catalogId: newIdentityId('cat'), storeId: newIdentityId('st') });
      // the host died a while ago (the row is older than the 60 s after which it is taken over at once)
      await sql`update catalog_identity set created_at = ${new Date(Date.now() - 5 * 60_000).toISOString()}`.execute(c.db);
      return p;
    });
    assert.equal(proposed.state, 'pending');
    const started = Date.now();
    awcOk(join(dir, 'home'), ['snapshot', 'import', join(dir, 'src')], { AWC_CATALOG: db.url, AWC_OBJECT_STORE: `file:${objects}` });
    assert.ok(Date.now() - started < 8_000, 'taken over at once, not after the 10 s wait');
    const row = await withCatalog(db.url, (c) => c.identity().read());
    assert.equal(row?.state, 'bound');
    assert.notEqual(row?.catalogId, proposed.catalogId, "the dead host's ids are never bound: it may still write them into its own store");
    assert.notEqual(row?.storeId, proposed.storeId);
    const obj = identityOf(objects);
    assert.deepEqual([obj.catalogId, obj.storeId], [row?.catalogId, row?.storeId]);
  });

  for (const backend of ['sqlite', 'postgres'] as const)
    it(`two processes with different stores open one new ${backend} catalog at once: exactly one binds it, the other gets E_STORE_MISMATCH`, async (t) => {
      const dir = await tempDirFor(t, 'awc-ident-');
      const url = backend === 'sqlite' ? `sqlite:${join(dir, 'shared.sqlite')}` : (await freshDatabaseFor(t)).url;
      const stores = [join(dir, 'objects-a'), join(dir, 'objects-b')];
      makeSource(join(dir, 'src'), 'r');
      const results = await Promise.all(
        stores.map((s, i) =>
          spawnAwc(join(dir, `h${i}`), ['snapshot', 'import', join(dir, 'src')], {
            AWC_CATALOG: url,
            AWC_OBJECT_STORE: `file:${s}`,
            AWC_HOST: `h${i}`,
          }),
        ),
      );
      const won = results.flatMap((r, i) => (r.code === 0 ? [i] : []));
      assert.equal(won.length, 1, results.map((r) => `${r.code} ${r.stderr}`).join('\n'));
      const lost = results[1 - won[0]!]!;
      const e = refused(lost, 'E_STORE_MISMATCH');
      assert.match(e.hint, /AWC_OBJECT_STORE/);
      const row = await withCatalog(url, (c) => c.identity().read());
      assert.equal(row?.state, 'bound');
      const obj = identityOf(stores[won[0]!]!);
      assert.deepEqual([obj.catalogId, obj.storeId], [row?.catalogId, row?.storeId]);
      assert.equal(existsSync(join(stores[1 - won[0]!]!, STORE_IDENTITY_KEY)), false, 'the losing store holds no identity');
    });

  it("a store missing the catalog's packs is refused at the upgrade, and no identity is recorded", async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src'), 'm');
    const home = join(dir, 'home');
    const url = `sqlite:${join(home, 'catalog.sqlite')}`;
    awcOk(home, ['snapshot', 'import', join(dir, 'src'), '--name', 'one']);
    await downgradeTo0004(url);
    rmSync(join(home, 'objects', STORE_IDENTITY_KEY));
    const packs = packFiles(join(home, 'objects'));
    rmSync(packs[0]!);
    const e = refused(awc(home, ['snapshot', 'ls']), 'E_STORE_MISMATCH');
    assert.match(e.message, /lacks 1 of the catalog's \d+ packs/);
    assert.equal(existsSync(join(home, 'objects', STORE_IDENTITY_KEY)), false, 'no identity written to the store');
    assert.equal(await withCatalog(url, (c) => c.identity().read()), undefined, 'no identity row');
    // a different, empty store in front of the old catalog: the same
    refused(awc(home, ['snapshot', 'ls'], { AWC_OBJECT_STORE: `file:${join(dir, 'elsewhere')}` }), 'E_STORE_MISMATCH');
    assert.equal(existsSync(join(dir, 'elsewhere', STORE_IDENTITY_KEY)), false);
  });

  it('awc fsck --adopt-store rebuilds a lost catalog from the packs: every snapshot back, named, readable, kept by gc', async (t) => {
    const dir = await tempDirFor(t, 'awc-ident-');
    makeSource(join(dir, 'src1'), '1');
    makeSource(join(dir, 'src2'), '2');
    const home = join(dir, 'home');
    const catalogFile = join(home, 'catalog.sqlite');
    awcOk(home, ['snapshot', 'import', join(dir, 'src1'), '--name', 'one']);
    awcOk(home, ['snapshot', 'import', join(dir, 'src2'), '--name', 'two']);
    const before = identityOf(join(home, 'objects'));
    truncateSync(catalogFile, 0);
    const r = awcOk(home, ['fsck', '--adopt-store']) as {
      catalogId: string;
      storeId: string;
      previousCatalogId: string;
      snapshots: { name: string }[];
    };
    assert.equal(r.storeId, before.storeId, 'the store keeps its id');
    assert.equal(r.previousCatalogId, before.catalogId);
    assert.notEqual(r.catalogId, before.catalogId);
    assert.equal(r.snapshots.length, 2);
    const after = identityOf(join(home, 'objects'));
    assert.deepEqual([after.catalogId, after.storeId], [r.catalogId, before.storeId], 'the store names the new catalog');
    const packs = packFiles(join(home, 'objects'));
    assert.equal(awc(home, ['fsck']).code, 0);
    awcOk(home, ['gc', '--grace', '0s']);
    awcOk(home, ['gc', '--grace', '0s']);
    assert.deepEqual(packFiles(join(home, 'objects')).sort(), packs.sort(), 'gc keeps the rebuilt snapshots');
    const outs = r.snapshots.map((s, i) => {
      const out = join(dir, `out${i}`);
      awcOk(home, ['export', s.name, '--dir', out]);
      return readTreeInfo(out);
    });
    const want = [readTreeInfo(join(dir, 'src1')), readTreeInfo(join(dir, 'src2'))];
    const key = (m: Map<string, unknown>) => JSON.stringify([...m.entries()].map(([k, v]) => [k, (v as { hash?: string }).hash ?? '']));
    assert.deepEqual(outs.map(key).sort(), want.map(key).sort(), 'both trees come back byte for byte');
    // once bound, adopting again is refused: the catalog is not empty
    const again = awc(home, ['fsck', '--adopt-store']);
    assert.equal(again.code, 2);
    assert.equal(errorOf(again).code, 'E_USAGE');
  });
});
