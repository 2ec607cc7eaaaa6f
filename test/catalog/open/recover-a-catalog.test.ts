import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sql } from 'kysely';
import { awc, awcOk, errorOf, readTreeInfo, type CliResult } from '../../helpers/cli.js';
import { tempDirFor } from '../../helpers/temp-dir.js';
import { openCatalog } from '../../../src/catalog/open/open-catalog.js';
import type { KyselyCatalog } from '../../../src/catalog/sql/kysely-catalog.js';
import { STORE_IDENTITY_KEY } from '../../../src/catalog/open/store-binding.js';

/**
 * docs/how-to/recover-a-catalog.md, followed step by step through the CLI: each refusal the
 * page names, and each step it tells the operator to take, does what the page says.
 */

function makeSource(root: string, tag: string): void {
  mkdirSync(join(root, 'd'), { recursive: true });
  writeFileSync(join(root, 'a.txt'), `alpha ${tag}\n`.repeat(100));
  writeFileSync(join(root, 'd', 'b.bin'), Buffer.alloc(150_000, tag));
}

/** Keys (`packs/<aa>/<hex>`) of the packs of a directory store. */
function packKeys(objects: string): string[] {
  const dir = join(objects, 'packs');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .flatMap((aa) => readdirSync(join(dir, aa)).map((f) => relative(objects, join(dir, aa, f))))
    .sort();
}

function identityOf(objects: string): { storeId: string; catalogId: string } {
  return JSON.parse(readFileSync(join(objects, STORE_IDENTITY_KEY), 'utf8'));
}

async function identityRow(url: string) {
  const c = await openCatalog(url);
  try {
    return await c.identity().read();
  } finally {
    await c.close();
  }
}

/** An awc of before the upgrade: the catalog has no identity table (a copy made before it, or a home not yet upgraded). */
async function downgradeTo0004(url: string): Promise<void> {
  const c = (await openCatalog(url)) as KyselyCatalog;
  try {
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
  } finally {
    await c.close();
  }
}

function refused(r: CliResult, code: string): { code: string; message: string; hint: string } {
  assert.equal(r.code, 5, `exit 5, got ${r.code}: ${r.stderr}`);
  const e = errorOf(r);
  assert.equal(e.code, code, r.stderr);
  return e;
}

interface Problem {
  kind: string;
  code: string;
  key?: string;
  snapshots: string[];
}

/** A home with three snapshots, each imported alone (so each has packs of its own). */
function threeSnapshots(dir: string) {
  const home = join(dir, 'home');
  const objects = join(home, 'objects');
  const url = `sqlite:${join(home, 'catalog.sqlite')}`;
  const snaps: Record<string, { id: string; src: string; packs: string[] }> = {};
  for (const name of ['one', 'two', 'three']) {
    const src = join(dir, `src-${name}`);
    makeSource(src, name[1]!);
    const before = new Set(packKeys(objects));
    const r = awcOk(home, ['snapshot', 'import', src, '--name', name]) as { id: string };
    snaps[name] = { id: r.id, src, packs: packKeys(objects).filter((k) => !before.has(k)) };
    assert.ok(snaps[name]!.packs.length > 0);
  }
  return { home, objects, url, snaps };
}

describe('docs/how-to/recover-a-catalog.md, step by step', () => {
  it("E_STORE_MISMATCH: another home's store is refused (fsck too); the store whose meta/identity.json names the catalog is the right one", async (t) => {
    const dir = await tempDirFor(t, 'awc-howto-');
    makeSource(join(dir, 'src'), 'x');
    const [a, b] = [join(dir, 'a'), join(dir, 'b')];
    awcOk(a, ['snapshot', 'import', join(dir, 'src'), '--name', 'one']);
    awcOk(b, ['snapshot', 'import', join(dir, 'src'), '--name', 'other']);
    const [idA, idB] = [identityOf(join(a, 'objects')), identityOf(join(b, 'objects'))];
    const wrong = { AWC_OBJECT_STORE: `file:${join(b, 'objects')}` };
    const e = refused(awc(a, ['snapshot', 'ls'], wrong), 'E_STORE_MISMATCH');
    assert.ok(e.message.includes(`catalog ${idA.catalogId} is bound to object store ${idA.storeId}`), e.message);
    assert.ok(e.message.includes(`this object store is ${idB.storeId} of catalog ${idB.catalogId}`), e.message);
    refused(awc(a, ['fsck'], wrong), 'E_STORE_MISMATCH');
    refused(awc(a, ['fsck', '--repair', '--force'], wrong), 'E_STORE_MISMATCH');
    // "find the store that holds meta/identity.json with the catalog's id, and point the host at it"
    assert.equal(identityOf(join(a, 'objects')).catalogId, idA.catalogId);
    const ls = (awcOk(a, ['snapshot', 'ls']) as { snapshots: { name: string }[] }).snapshots;
    assert.deepEqual(
      ls.map((s) => s.name),
      ['one'],
    );
    assert.equal(awc(a, ['fsck']).code, 0);
    assert.deepEqual(identityOf(join(b, 'objects')), idB, "the other home's store is untouched");
  });

  it("lacks N of the catalog's M packs: fsck says what is missing; the right store, or fsck --repair on lost packs, records the identity; re-import heals, rm removes", async (t) => {
    const dir = await tempDirFor(t, 'awc-howto-');
    const { home, objects, url, snaps } = threeSnapshots(dir);
    const all = packKeys(objects);
    // a catalog restored from a copy made before the upgrade, in front of the upgraded store
    await downgradeTo0004(url);
    const before = refused(awc(home, ['snapshot', 'ls']), 'E_STORE_MISMATCH');
    assert.match(before.message, /this catalog has no identity yet, and the object store st_[0-9a-f]{32} belongs to catalog cat_/);
    // "delete the store's meta/identity.json": the next open checks the packs (here against the wrong store first)
    rmSync(join(objects, STORE_IDENTITY_KEY));

    // the wrong store (an empty one): every command refuses, fsck opens and lists every pack as missing
    const elsewhere = join(dir, 'elsewhere');
    const wrong = { AWC_OBJECT_STORE: `file:${elsewhere}` };
    const w = refused(awc(home, ['snapshot', 'ls'], wrong), 'E_STORE_MISMATCH');
    assert.ok(w.message.includes(`lacks ${all.length} of the catalog's ${all.length} packs`), w.message);
    assert.match(w.hint, /awc fsck/);
    const f = awc(home, ['fsck'], wrong);
    assert.equal(f.code, 5, f.stderr);
    const fp = f.json.problems as Problem[];
    assert.equal(fp[0]!.kind, 'store-unbound');
    assert.equal(fp[0]!.code, 'E_STORE_MISMATCH');
    assert.deepEqual(
      fp
        .filter((p) => p.kind === 'pack-missing')
        .map((p) => p.key)
        .sort(),
      all,
    );
    assert.equal(f.json.binding.outcome, 'unbound');
    // step 2: --repair refuses to drop most of the packs without --force (the wrong store), and writes nothing
    const rep = awc(home, ['fsck', '--repair'], wrong);
    assert.equal(rep.code, 2, rep.stderr);
    assert.equal(errorOf(rep).code, 'E_USAGE');
    assert.equal(existsSync(join(elsewhere, STORE_IDENTITY_KEY)), false, 'nothing recorded in the wrong store');
    assert.equal(await identityRow(url), undefined, 'nothing recorded in the catalog');
    // step 2: the right store: fsck finds nothing missing and records the identity
    const right = awc(home, ['fsck']);
    assert.equal(right.code, 0, right.stdout + right.stderr);
    assert.equal(right.json.binding.outcome, 'upgraded');
    const id1 = identityOf(objects);
    assert.deepEqual([right.json.binding.catalogId, right.json.binding.storeId], [id1.catalogId, id1.storeId]);
    awcOk(home, ['snapshot', 'ls']);

    // step 3: the packs of two snapshots are really lost, at the upgrade of this home
    await downgradeTo0004(url);
    rmSync(join(objects, STORE_IDENTITY_KEY));
    const lost = [...snaps.two!.packs, ...snaps.three!.packs].sort();
    for (const k of lost) rmSync(join(objects, k));
    const l = refused(awc(home, ['snapshot', 'ls']), 'E_STORE_MISMATCH');
    assert.ok(l.message.includes(`lacks ${lost.length} of the catalog's ${all.length} packs`), l.message);
    refused(awc(home, ['export', 'one', '--dir', join(dir, 'never')]), 'E_STORE_MISMATCH');
    // step 1: awc fsck lists each missing pack with the snapshots it breaks, and writes nothing
    const f1 = awc(home, ['fsck']);
    assert.equal(f1.code, 5);
    const missing = (f1.json.problems as Problem[]).filter((p) => p.kind === 'pack-missing');
    assert.deepEqual(missing.map((p) => p.key).sort(), lost);
    for (const p of missing) {
      const owner = snaps.two!.packs.includes(p.key!) ? snaps.two! : snaps.three!;
      assert.deepEqual(p.snapshots, [owner.id], `${p.key} breaks its own snapshot only`);
    }
    assert.equal((f1.json.problems as Problem[])[0]!.kind, 'store-unbound');
    assert.equal(existsSync(join(objects, STORE_IDENTITY_KEY)), false, 'fsck recorded nothing');
    assert.equal(await identityRow(url), undefined);
    const text = awc(home, ['fsck'], {}, { json: false });
    assert.match(text.stdout, /E_STORE_MISMATCH store-unbound: the catalog is not bound to this object store/);
    assert.match(text.stdout, new RegExp(`E_OBJECT_NOT_FOUND pack-missing: .*${lost[0]!.slice(-64)}.*\\[snapshots: sn_`));
    // step 3: awc fsck --repair drops the lost packs and records the identity; every command works again
    const r = awc(home, ['fsck', '--repair']);
    assert.equal(r.code, 5, 'two snapshots still cannot be read whole');
    assert.equal(r.json.repaired.lostPacks, lost.length);
    assert.equal(r.json.binding.outcome, 'upgraded');
    const row = await identityRow(url);
    const obj = identityOf(objects);
    assert.equal(row?.state, 'bound');
    assert.deepEqual([obj.catalogId, obj.storeId], [row?.catalogId, row?.storeId]);
    assert.notEqual(obj.storeId, id1.storeId);
    awcOk(home, ['snapshot', 'ls']);
    awcOk(home, ['export', 'one', '--dir', join(dir, 'out-one')]);
    assert.deepEqual(readTreeInfo(join(dir, 'out-one')), readTreeInfo(snaps.one!.src));
    const after = awc(home, ['fsck']);
    assert.equal(after.code, 5);
    const broken = new Set((after.json.problems as Problem[]).flatMap((p) => p.snapshots));
    assert.deepEqual([...broken].sort(), [snaps.two!.id, snaps.three!.id].sort(), 'the report names the broken snapshots');
    assert.ok(!(after.json.problems as Problem[]).some((p) => p.kind === 'store-unbound'));
    // step 4: re-importing two's content heals it; three is removed
    awcOk(home, ['snapshot', 'import', snaps.two!.src]);
    awcOk(home, ['rm', 'three']);
    const healed = awc(home, ['fsck']);
    assert.equal(healed.code, 0, healed.stdout);
    awcOk(home, ['export', 'two', '--dir', join(dir, 'out-two')]);
    assert.deepEqual(readTreeInfo(join(dir, 'out-two')), readTreeInfo(snaps.two!.src));
  });

  it('E_CATALOG_EMPTY: restoring the catalog from a copy keeps everything; --adopt-store rebuilds it, and runs again after an interruption', async (t) => {
    const dir = await tempDirFor(t, 'awc-howto-');
    makeSource(join(dir, 'src'), 'e');
    const home = join(dir, 'home');
    const file = join(home, 'catalog.sqlite');
    awcOk(home, ['snapshot', 'import', join(dir, 'src'), '--name', 'one', '--label', 'k=v']);
    assert.deepEqual(
      readdirSync(home).filter((f) => f.startsWith('catalog.sqlite')),
      ['catalog.sqlite'],
      'one file to copy',
    );
    copyFileSync(file, join(dir, 'catalog.copy'));
    truncateSync(file, 0);
    const e = refused(awc(home, ['snapshot', 'ls']), 'E_CATALOG_EMPTY');
    assert.match(e.hint, /awc fsck --adopt-store/);
    refused(awc(home, ['fsck']), 'E_CATALOG_EMPTY');
    // 1. restore the catalog from a copy: names and labels are back
    copyFileSync(join(dir, 'catalog.copy'), file);
    const ls = (awcOk(home, ['snapshot', 'ls']) as { snapshots: { name: string; labels: Record<string, string> }[] }).snapshots;
    assert.deepEqual(
      ls.map((s) => [s.name, s.labels.k]),
      [['one', 'v']],
    );
    // 2. no copy: --adopt-store, interrupted (the new catalog deleted), run again, then fsck
    truncateSync(file, 0);
    awcOk(home, ['fsck', '--adopt-store']);
    rmSync(file);
    const again = awcOk(home, ['fsck', '--adopt-store']) as { snapshots: { name: string }[] };
    assert.equal(again.snapshots.length, 1);
    assert.equal(awc(home, ['fsck']).code, 0);
    awcOk(home, ['export', again.snapshots[0]!.name, '--dir', join(dir, 'out')]);
    assert.deepEqual(readTreeInfo(join(dir, 'out')), readTreeInfo(join(dir, 'src')));
  });
});
