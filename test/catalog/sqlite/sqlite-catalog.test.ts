import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
import { sha256, type Digest } from '../../../src/core/digest.js';
import type { AwcError } from '../../../src/core/errors.js';
import { idTime, isId, newId, newIds } from '../../../src/catalog/port/ids.js';
import { MIGRATIONS } from '../../../src/catalog/sql/migrations.js';
import { toNum } from '../../../src/catalog/sql/rows.js';
import { SqliteCatalog } from '../../../src/catalog/sqlite/sqlite-catalog.js';
import type { WrittenPack } from '../../../src/store/pack/pack-types.js';
import { blobIndexContract } from '../../contracts/blob-index.contract.js';
import { catalogContract } from '../../contracts/catalog.contract.js';
import { sqliteUrl } from '../../../src/config/backend-url.js';
import { gcCatalogContract } from '../../contracts/gc-catalog.contract.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { openRemoteCatalog } from '../../helpers/remote-catalog.js';
import { mkPack, NS, snap } from '../../helpers/catalog-fixtures.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

let dir: string;

before(async () => {
  dir = await makeTempDir('awc-catalog-');
});
after(async () => {
  await removeTempDir(dir);
});

let dbCounter = 0;
async function openFresh(): Promise<{ cat: SqliteCatalog; path: string }> {
  const path = join(dir, `db${dbCounter++}`, 'sub', 'catalog.db');
  return { cat: await SqliteCatalog.open(path), path };
}

async function count(cat: SqliteCatalog, table: 'snapshots' | 'workspaces' | 'packs' | 'blobs' | 'namespaces'): Promise<number> {
  const r = await cat.db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return toNum(r.n as number | string);
}

/** The file of each catalog under test, for the other connections of the contract's races. */
const paths = new WeakMap<object, string>();
catalogContract('SqliteCatalog', {
  async create() {
    const { cat, path } = await openFresh();
    paths.set(cat, path);
    return cat;
  },
  cleanup: (cat) => cat.close(),
  // better-sqlite3 blocks its thread while it waits for the file lock: each other connection runs in a worker thread
  connect: (cat) => openRemoteCatalog(sqliteUrl(paths.get(cat)!)),
});

gcCatalogContract('SqliteCatalog', {
  create: async () => (await openFresh()).cat,
  cleanup: (cat) => cat.close(),
});

const indexOwners = new WeakMap<object, SqliteCatalog>();
blobIndexContract('SqliteCatalog.blobIndex', {
  async create() {
    const { cat } = await openFresh();
    const t = {
      index: cat.blobIndex(NS),
      record: async (packs: readonly WrittenPack[]) => void (await cat.createSnapshot(snap({ packs: [...packs] }))),
    };
    indexOwners.set(t, cat);
    return t;
  },
  cleanup: (t) => indexOwners.get(t)!.close(),
});

describe('ids', () => {
  it('are prefixed, lowercase, time-sortable and monotonic', () => {
    const ids = newIds('ws', 2000);
    assert.equal(new Set(ids).size, 2000);
    for (const id of ids) assert.ok(isId(id, 'ws'), id);
    const sorted = [...ids].sort();
    assert.deepEqual(sorted, ids);
    const t = idTime(newId('sn'));
    assert.ok(Math.abs(t - Date.now()) < 5000);
    assert.match(newId('sn'), /^sn_[0-9a-z]{20}$/);
  });
  it('toNum converts pg bigint strings', () => {
    assert.equal(toNum('5000000000'), 5_000_000_000);
    assert.equal(toNum(7), 7);
    assert.equal(toNum(null), 0);
  });
});

describe('SqliteCatalog', () => {
  it('creates the parent dir, uses WAL, and migrations are idempotent on reopen', async () => {
    const { cat, path } = await openFresh();
    const s = await cat.createSnapshot(snap({ name: 'keep' }));
    assert.deepEqual(await cat.migrate(), []);
    await cat.close();

    const again = await SqliteCatalog.open(path);
    assert.deepEqual(await again.migrate(), []);
    const applied = await again.db
      .selectFrom('awc_migration' as never)
      .selectAll()
      .execute();
    assert.equal(applied.length, Object.keys(MIGRATIONS).length);
    assert.equal((await again.getSnapshot(NS, 'keep')).id, s.id);
    const raw = await sql<{ journal_mode: string }>`pragma journal_mode`.execute(again.db);
    assert.equal(raw.rows[0]!.journal_mode, 'wal');
    await again.close();
  });

  it('refuses a taken snapshot name and writes nothing of that snapshot', async () => {
    const { cat } = await openFresh();
    try {
      await cat.createSnapshot(snap({ name: 'v1', packs: [mkPack('packs/a', 10, 'a')] }));
      const before = { s: await count(cat, 'snapshots'), p: await count(cat, 'packs'), b: await count(cat, 'blobs') };
      const e = await rejectsWith(cat.createSnapshot(snap({ name: 'v1', packs: [mkPack('packs/b', 10, 'b')] })), 'E_NAME_TAKEN');
      assert.equal(e.retryable, false);
      assert.deepEqual({ s: await count(cat, 'snapshots'), p: await count(cat, 'packs'), b: await count(cat, 'blobs') }, before);
      // Same name in another namespace is fine; unnamed snapshots never clash.
      await cat.createSnapshot(snap({ namespace: 'team-b', name: 'v1' }));
      await cat.createSnapshot(snap());
      await cat.createSnapshot(snap());
    } finally {
      await cat.close();
    }
  });

  it('forks 1000 workspaces in one call', async () => {
    const { cat } = await openFresh();
    try {
      const s = await cat.createSnapshot(snap({ name: 'base' }));
      const names = Array.from({ length: 1000 }, (_, i) => (i % 2 === 0 ? `agent-${i}` : null));
      const t0 = performance.now();
      const ws = await cat.forkWorkspaces(NS, s.id, names);
      const ms = performance.now() - t0;
      console.log(`fork of 1000 workspaces: ${ms.toFixed(1)} ms`);
      assert.equal(ws.length, 1000);
      assert.equal(new Set(ws.map((w) => w.id)).size, 1000);
      assert.deepEqual(
        ws.map((w) => w.name),
        names,
      );
      assert.ok(ws.every((w) => w.baseSnapshotId === s.id && w.headSnapshotId === s.id && w.mountState === 'unmounted'));
      assert.equal(await count(cat, 'workspaces'), 1000);
      const listed = await cat.listWorkspaces(NS);
      assert.deepEqual(
        listed.map((w) => w.id),
        ws.map((w) => w.id),
        'oldest first, in fork order',
      );
      assert.deepEqual(await cat.getWorkspace(NS, 'agent-998'), ws[998]);
      // A fork of 1 right after also works, and an empty fork is a no-op.
      assert.equal((await cat.forkWorkspaces(NS, s.id, ['one'])).length, 1);
      assert.deepEqual(await cat.forkWorkspaces(NS, s.id, []), []);
      await rejectsWith(cat.forkWorkspaces(NS, 'sn_unknown', [null]), 'E_NOT_FOUND');
      await rejectsWith(cat.forkWorkspaces('nobody', s.id, [null]), 'E_NOT_FOUND');
    } finally {
      await cat.close();
    }
  });

  it('a fork with a taken or repeated name creates none', async () => {
    const { cat } = await openFresh();
    try {
      const s = await cat.createSnapshot(snap());
      await cat.forkWorkspaces(NS, s.id, ['taken']);
      const names = Array.from({ length: 600 }, (_, i) => `n${i}`);
      names[599] = 'taken';
      const e = await rejectsWith(cat.forkWorkspaces(NS, s.id, names), 'E_NAME_TAKEN');
      assert.deepEqual(e.details?.names, ['taken']);
      assert.equal(await count(cat, 'workspaces'), 1);
      await rejectsWith(cat.forkWorkspaces(NS, s.id, ['x', null, 'x']), 'E_NAME_TAKEN');
      assert.equal(await count(cat, 'workspaces'), 1);
      await rejectsWith(cat.forkWorkspaces(NS, s.id, ['ws_0123456789abcdefghjk']), 'E_USAGE');
      assert.equal(await count(cat, 'workspaces'), 1);
    } finally {
      await cat.close();
    }
  });

  it('commits a checkpoint: moves the head, sets the parent, inserts packs and blobs', async () => {
    const { cat } = await openFresh();
    try {
      const base = await cat.createSnapshot(snap({ name: 'base', packs: [mkPack('packs/base', 5, 'x')] }));
      const [w] = await cat.forkWorkspaces(NS, base.id, ['w']);
      // The new pack repeats 5 blobs of the base pack: they keep their first location.
      const p = mkPack('packs/cp1', 8, 'x');
      const c1 = await cat.commitCheckpoint({
        workspaceId: w!.id,
        expectedHeadId: base.id,
        snapshot: snap({ message: 'cp1', packs: [p] }),
      });
      assert.equal(c1.parentId, base.id);
      assert.equal(c1.message, 'cp1');
      const after1 = await cat.getWorkspace(NS, 'w');
      assert.equal(after1.headSnapshotId, c1.id);
      assert.equal(after1.baseSnapshotId, base.id);
      assert.ok(after1.updatedAt >= after1.createdAt);
      assert.equal(await count(cat, 'packs'), 2);
      assert.equal(await count(cat, 'blobs'), 8);
      const loc = await cat.blobIndex(NS).lookup([sha256('x/0'), sha256('x/7')]);
      assert.equal(loc.get(sha256('x/0'))!.pack, 'packs/base');
      assert.equal(loc.get(sha256('x/7'))!.pack, 'packs/cp1');

      const c2 = await cat.commitCheckpoint({
        workspaceId: w!.id,
        expectedHeadId: c1.id,
        snapshot: snap({ name: 'second', parentId: 'ignored' }),
      });
      assert.equal(c2.parentId, c1.id);
      assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, c2.id);
      await rejectsWith(cat.commitCheckpoint({ workspaceId: 'ws_nope', expectedHeadId: c2.id, snapshot: snap() }), 'E_NOT_FOUND');
      await rejectsWith(
        cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: c2.id, snapshot: snap({ name: 'base' }) }),
        'E_NAME_TAKEN',
      );
      assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, c2.id);
    } finally {
      await cat.close();
    }
  });

  it('refuses a checkpoint with a stale expected head and writes nothing', async () => {
    const { cat } = await openFresh();
    try {
      const base = await cat.createSnapshot(snap());
      const [w] = await cat.forkWorkspaces(NS, base.id, [null]);
      const c1 = await cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: base.id, snapshot: snap() });
      const before = { s: await count(cat, 'snapshots'), p: await count(cat, 'packs'), b: await count(cat, 'blobs') };
      const e = await rejectsWith(
        cat.commitCheckpoint({
          workspaceId: w!.id,
          expectedHeadId: base.id,
          snapshot: snap({ name: 'stale', packs: [mkPack('packs/stale', 50, 's')] }),
        }),
        'E_CHANGED_DURING_READ',
      );
      assert.equal(e.retryable, true);
      assert.match(e.hint, /head moved; run checkpoint again/);
      assert.deepEqual({ s: await count(cat, 'snapshots'), p: await count(cat, 'packs'), b: await count(cat, 'blobs') }, before);
      assert.equal((await cat.getWorkspace(NS, w!.id)).headSnapshotId, c1.id);
      await rejectsWith(cat.getSnapshot(NS, 'stale'), 'E_NOT_FOUND');

      // Two concurrent commits from the same head: exactly one wins.
      const results = await Promise.allSettled([
        cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: c1.id, snapshot: snap() }),
        cat.commitCheckpoint({ workspaceId: w!.id, expectedHeadId: c1.id, snapshot: snap() }),
      ]);
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
      const rejected = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      assert.equal((rejected.reason as AwcError).code, 'E_CHANGED_DURING_READ');
    } finally {
      await cat.close();
    }
  });

  it('indexes tens of thousands of blobs and looks up more than 500 digests', async () => {
    const { cat } = await openFresh();
    try {
      const packs = [mkPack('packs/big1', 20_000, 'big1'), mkPack('packs/big2', 15_000, 'big2')];
      const t0 = performance.now();
      await cat.createSnapshot(snap({ packs }));
      console.log(`snapshot with 35000 blob rows: ${(performance.now() - t0).toFixed(0)} ms`);
      assert.equal(await cat.countBlobs(NS), 35_000);
      assert.deepEqual(await cat.packStats(NS), { packs: 2, bytes: 10_000_000_000 + 35_000 * 100, blobs: 35_000 });

      const wanted: Digest[] = [];
      for (let i = 0; i < 1200; i++) wanted.push(sha256(`big1/${i * 7}`));
      for (let i = 0; i < 100; i++) wanted.push(sha256(`missing/${i}`));
      wanted.push(sha256('big2/14999'), sha256('big2/14999')); // duplicate input
      const t1 = performance.now();
      const found = await cat.blobIndex(NS).lookup(wanted);
      console.log(`lookup of ${wanted.length} digests: ${(performance.now() - t1).toFixed(1)} ms`);
      assert.equal(found.size, 1201);
      const loc = found.get(sha256('big1/7'))!;
      assert.deepEqual(loc, {
        digest: sha256('big1/7'),
        kind: 'chunk',
        codec: 'lz4',
        pack: 'packs/big1',
        offset: 5_000_000_700,
        storedLength: 90,
        rawLength: 100,
      });
      assert.equal(typeof loc.offset, 'number');
      assert.equal(found.get(sha256('big2/14999'))!.pack, 'packs/big2');
      assert.equal(found.has(sha256('missing/1')), false);
      // Dedup stops at the namespace.
      assert.equal((await cat.blobIndex('elsewhere').lookup(wanted)).size, 0);
      assert.equal((await cat.blobIndex(NS).lookup([])).size, 0);
      // A blob listed under the wrong pack is a caller bug.
      const bad = mkPack('packs/bad', 1, 'bad');
      bad.blobs[0]!.pack = 'packs/other';
      await rejectsWith(cat.createSnapshot(snap({ packs: [bad] })), 'E_INTERNAL');
    } finally {
      await cat.close();
    }
  });

  it('two instances on the same file (CLI + daemon) both read and write', async () => {
    const { cat: a, path } = await openFresh();
    const b = await SqliteCatalog.open(path);
    try {
      const s = await a.createSnapshot(snap({ name: 'shared', packs: [mkPack('packs/s', 10, 's')] }));
      assert.equal((await b.getSnapshot(NS, 'shared')).id, s.id);
      const ws = await b.forkWorkspaces(NS, s.id, ['from-b']);
      assert.equal((await a.getWorkspace(NS, 'from-b')).id, ws[0]!.id);
      await a.setMount(ws[0]!.id, { path: '/mnt/x', driver: 'copy', host: 'h' });
      assert.equal((await b.findWorkspaceByMountPath('/mnt/x'))?.id, ws[0]!.id);
      const c = await b.commitCheckpoint({ workspaceId: ws[0]!.id, expectedHeadId: s.id, snapshot: snap() });
      // a's view of the head is stale now: refused.
      await rejectsWith(a.commitCheckpoint({ workspaceId: ws[0]!.id, expectedHeadId: s.id, snapshot: snap() }), 'E_CHANGED_DURING_READ');
      assert.equal((await a.getWorkspace(NS, 'from-b')).headSnapshotId, c.id);
      assert.equal((await b.blobIndex(NS).lookup([sha256('s/3')])).size, 1);
      await rejectsWith(b.createSnapshot(snap({ name: 'shared' })), 'E_NAME_TAKEN');
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a write blocked by another connection past the busy timeout is E_CATALOG_BUSY', async () => {
    const { cat: first, path } = await openFresh();
    await first.close();
    const cat = await SqliteCatalog.open(path, { busyTimeoutMs: 100 });
    const holder = new BetterSqlite3(path);
    try {
      holder.exec('begin immediate');
      const e = await rejectsWith(cat.createSnapshot(snap()), 'E_CATALOG_BUSY');
      assert.equal(e.retryable, true);
      holder.exec('rollback');
      await cat.createSnapshot(snap());
    } finally {
      holder.close();
      await cat.close();
    }
  });

  it('a new catalog file opened by 4 processes at once: all open it, every migration applied once (they run in one IMMEDIATE transaction)', async () => {
    const moduleUrl = pathToFileURL(
      join(fileURLToPath(new URL('.', import.meta.url)), '../../../src/catalog/sqlite/sqlite-catalog.js'),
    ).href;
    const script = `import { SqliteCatalog } from ${JSON.stringify(moduleUrl)};
const cat = await SqliteCatalog.open(process.argv[1]);
await cat.close();
`;
    const run = (path: string) =>
      new Promise<{ code: number; err: string }>((res) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', script, path], { stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        child.stderr.on('data', (d) => (err += d));
        child.on('exit', (code) => res({ code: code ?? -1, err }));
      });
    for (let round = 0; round < 3; round++) {
      const path = join(dir, `db${dbCounter++}`, 'catalog.db');
      const results = await Promise.all([0, 1, 2, 3].map(() => run(path)));
      for (const r of results) assert.equal(r.code, 0, r.err);
      const db = new BetterSqlite3(path, { readonly: true });
      try {
        const names = (db.prepare('select name from awc_migration order by name').all() as { name: string }[]).map((r) => r.name);
        assert.deepEqual(names, Object.keys(MIGRATIONS));
      } finally {
        db.close();
      }
    }
  });

  it('another process writing the same file concurrently (busy timeout + BEGIN IMMEDIATE)', async () => {
    const { cat, path } = await openFresh();
    try {
      const base = await cat.createSnapshot(snap({ name: 'base' }));
      const moduleUrl = pathToFileURL(
        join(fileURLToPath(new URL('.', import.meta.url)), '../../../src/catalog/sqlite/sqlite-catalog.js'),
      ).href;
      const script = join(dir, `child-${dbCounter}.mjs`);
      await writeFile(
        script,
        `import { SqliteCatalog } from ${JSON.stringify(moduleUrl)};
const cat = await SqliteCatalog.open(process.argv[2]);
for (let i = 0; i < 30; i++) await cat.forkWorkspaces('default', process.argv[3], Array.from({ length: 20 }, (_, j) => 'child-' + i + '-' + j));
await cat.close();
`,
      );
      const child = spawn(process.execPath, [script, path, base.id], { stdio: ['ignore', 'inherit', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      const done = new Promise<number>((res) => child.on('exit', (code) => res(code ?? -1)));
      let head = base.id;
      const [w] = await cat.forkWorkspaces(NS, base.id, ['parent-w']);
      for (let i = 0; i < 30; i++) {
        const c = await cat.commitCheckpoint({
          workspaceId: w!.id,
          expectedHeadId: head,
          snapshot: snap({ packs: [mkPack(`packs/par${i}`, 200, `par${i}`)] }),
        });
        head = c.id;
      }
      assert.equal(await done, 0, stderr);
      assert.equal((await cat.listWorkspaces(NS)).length, 1 + 30 * 20);
      assert.equal((await cat.getWorkspace(NS, 'parent-w')).headSnapshotId, head);
      assert.equal(await cat.countBlobs(NS), 30 * 200);
    } finally {
      await cat.close();
    }
  });
});
