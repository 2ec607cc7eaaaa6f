/**
 * The catalog writes the lease protocol costs (docs/explanation/scale.md): one heartbeat is ONE
 * statement per host per interval, whatever the number of workspaces it holds (counted with
 * Kysely's log hook on a real SQLite catalog), and the statements of fork, mount and checkpoint
 * commit, printed for the scale page.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely } from 'kysely';
import type { Database } from '../../../src/catalog/sql/schema.js';
import { KyselyCatalog } from '../../../src/catalog/sql/kysely-catalog.js';
import { ImmediateSqliteDialect } from '../../../src/catalog/sqlite/immediate-dialect.js';
import { sqliteDialect } from '../../../src/catalog/sqlite/sqlite-catalog.js';
import { HostHeartbeat } from '../../../src/daemon/session/heartbeat.js';
import { mkPack, NS, snap } from '../../helpers/catalog-fixtures.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

let dir: string;
before(async () => {
  dir = await makeTempDir('awc-lease-writes-');
});
after(() => removeTempDir(dir));

/** A catalog whose every statement is recorded in `log` (SQL text). */
async function counted(name: string): Promise<{ cat: KyselyCatalog; log: string[] }> {
  const log: string[] = [];
  const db = new Kysely<Database>({
    dialect: new ImmediateSqliteDialect({ database: new BetterSqlite3(join(dir, `${name}.sqlite`)) }),
    log: (e) => void (e.level === 'query' && log.push(e.query.sql)),
  });
  const cat = new KyselyCatalog(db, sqliteDialect);
  await cat.migrate();
  return { cat, log };
}

/** Statements `fn` runs, and how many of them write (INSERT / UPDATE / DELETE). */
async function statements(log: string[], fn: () => Promise<unknown>): Promise<{ all: number; writes: number; sql: string[] }> {
  const from = log.length;
  await fn();
  const sql = log.slice(from);
  return { all: sql.length, writes: sql.filter((q) => /^\s*(insert|update|delete)/i.test(q)).length, sql };
}

test('one heartbeat is one statement per host per interval, whatever the number of workspaces it holds', async () => {
  const per: number[] = [];
  for (const n of [1, 100]) {
    const { cat, log } = await counted(`hb-${n}`);
    const s = await cat.createSnapshot(snap());
    const ws = await cat.forkWorkspaces(
      NS,
      s.id,
      Array.from({ length: n }, () => null),
    );
    const beat = new HostHeartbeat(cat, { host: 'h', ttlMs: 60_000, intervalMs: 60_000 });
    await beat.start();
    await beat.stop(); // no timer: the test drives the intervals
    for (const [i, w] of ws.entries()) await cat.mountLeased(w.id, { path: `/mnt/${i}`, driver: 'copy', host: 'h' });
    const five = await statements(log, async () => {
      for (let i = 0; i < 5; i++) await beat.beat();
    });
    assert.equal(five.all, 5, `5 intervals, 5 statements with ${n} workspaces: ${five.sql.join('; ')}`);
    assert.ok(
      five.sql.every((q) => /^update "hosts"/i.test(q)),
      'each is one UPDATE of the host row',
    );
    for (const w of ws.slice(0, 3)) assert.equal((await cat.getLease(w.id))?.state, 'live');
    per.push(five.all / 5);
    await cat.close();
  }
  assert.deepEqual(per, [1, 1]);
});

test('catalog statements per fork, mount, heartbeat and checkpoint commit (for docs/explanation/scale.md)', async () => {
  const { cat, log } = await counted('ops');
  await cat.registerHost({ id: 'h', ttlMs: 60_000 });
  const s = await cat.createSnapshot(snap());
  const rows: Record<string, { all: number; writes: number }> = {};
  rows['fork 1'] = await statements(log, () => cat.forkWorkspaces(NS, s.id, [null]));
  rows['fork 100'] = await statements(log, () =>
    cat.forkWorkspaces(
      NS,
      s.id,
      Array.from({ length: 100 }, () => null),
    ),
  );
  const [w] = await cat.forkWorkspaces(NS, s.id, [null]);
  rows.mount = await statements(log, () =>
    cat.mountLeased(w!.id, { path: '/mnt/w', driver: 'copy', host: 'h' }, { layerSnapshotId: s.id }),
  );
  rows.heartbeat = await statements(log, () => cat.heartbeat('h', 1));
  rows['checkpoint commit (1 pack, 20 blobs)'] = await statements(log, () =>
    cat.commitCheckpoint({
      workspaceId: w!.id,
      expectedHeadId: s.id,
      snapshot: snap({ packs: [mkPack('packs/c1', 20, 'c1')] }),
      lease: { host: 'h', epoch: 1 },
    }),
  );
  rows['unmount + release'] = await statements(log, async () => {
    await cat.setMount(w!.id, null);
    await cat.releaseLease(w!.id, 'h');
  });
  for (const [op, r] of Object.entries(rows)) console.log(`# ${op}: ${r.all} statements, ${r.writes} writes`);
  assert.equal(rows.heartbeat!.all, 1);
  assert.equal(rows['fork 100']!.writes, rows['fork 1']!.writes, 'a fork is one multi-row INSERT whatever the count');
  assert.ok(rows.mount!.writes <= 2, 'a mount writes the lease row and the workspace row (its mount record and layer snapshot)');
  await cat.close();
});
