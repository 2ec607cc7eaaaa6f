import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { CLI, awc, awcOk, cleanupMounts, errorOf, type CliResult } from '../../helpers/cli.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { ERROR_CODES } from '../../../src/core/errors.js';
import { QUOTA_DAY_MS } from '../../../src/catalog/port/quotas.js';
import { PostgresCatalog } from '../../../src/catalog/postgres/postgres-catalog.js';
import { sql } from 'kysely';

/** Asserts `r` is the CLI's E_QUOTA (exit status from the registry); returns the JSON error. */
function quotaRefused(r: CliResult): {
  code: string;
  message: string;
  hint: string;
  retryable: boolean;
  details?: Record<string, unknown>;
} {
  assert.equal(r.code, ERROR_CODES.E_QUOTA.exit, r.stderr.slice(0, 800));
  const e = errorOf(r) as ReturnType<typeof quotaRefused>;
  assert.equal(e.code, 'E_QUOTA');
  return e;
}

/** `awc` run asynchronously (two at once race). */
function awcAsync(home: string, args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CLI, '--home', home, '--json', ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('close', (code) => {
      let json: unknown;
      try {
        json = JSON.parse(stdout);
      } catch {
        json = undefined;
      }
      resolve({ code: code ?? -1, stdout, stderr, json });
    });
  });
}

/** A directory with one file of `bytes` random (incompressible) bytes. */
function treeOf(dir: string, bytes: number): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'data.bin'), randomBytes(bytes));
  return dir;
}

/** The quota cases every catalog runs through the CLI: `env` selects the catalog (AWC_CATALOG) and the copy driver. */
function quotaCases(
  label: string,
  setup: () => Promise<{
    home: string;
    work: string;
    env: NodeJS.ProcessEnv;
    agePacks(ms: number): Promise<void>;
    cleanup(): Promise<void>;
  }>,
) {
  describe(`awc quota through the CLI (${label})`, () => {
    let home: string;
    let work: string;
    let env: NodeJS.ProcessEnv;
    let agePacks: (ms: number) => Promise<void>;
    let cleanup: () => Promise<void>;
    const show = () => awcOk(home, ['quota', 'show'], env) as { quota: Record<string, number | null>; usage: Record<string, number> };

    before(async () => {
      ({ home, work, env, agePacks, cleanup } = await setup());
      awcOk(home, ['snapshot', 'import', treeOf(join(work, 'src0'), 100_000), '--name', 'base'], env);
    });
    after(async () => {
      cleanupMounts(home, work, env);
      await cleanup();
    });

    it('set, show (--json and text), sizes, bad values, a namespace by name, unset', () => {
      assert.deepEqual(show().quota, { storedBytes: null, dailyNewBytes: null, workspaces: null });
      assert.ok(show().usage.storedBytes >= 100_000);
      const set = awcOk(home, ['quota', 'set', '--stored-bytes', '9000000', '--workspaces', '7'], env);
      assert.deepEqual(set.quota, { storedBytes: 9_000_000, dailyNewBytes: null, workspaces: 7 });
      assert.equal(set.namespace, 'default');
      const text = awc(home, ['quota', 'show'], env, { json: false }).stdout;
      assert.match(text, /^namespace default\n +used +limit +left\n/);
      assert.match(text, /\nstored bytes +\d+\.\d KiB +8\.6 MiB +\d+\.\d MiB\n/);
      assert.match(text, /\nnew bytes, last 24 h +\d+\.\d KiB +none +-\n/);
      assert.match(text, /\nworkspaces +0 +7 +7$/m);
      assert.equal(awcOk(home, ['quota', 'set', '--daily-new-bytes', '1.5G'], env).quota.dailyNewBytes, 1.5 * 2 ** 30);
      assert.equal(awcOk(home, ['quota', 'set', '--stored', '10G'], env).quota.storedBytes, 10 * 2 ** 30, 'the older name');
      for (const bad of [['--stored-bytes', '10x'], ['--stored-bytes', '10GB'], ['--workspaces', '1.5'], []]) {
        const r = awc(home, ['quota', 'set', ...bad], env);
        assert.equal(r.code, 2, bad.join(' '));
        assert.equal(errorOf(r).code, 'E_USAGE', bad.join(' '));
      }
      assert.deepEqual(awcOk(home, ['quota', 'set', '--stored-bytes', 'none', '--daily-new-bytes', 'none'], env).quota, {
        storedBytes: null,
        dailyNewBytes: null,
        workspaces: 7,
      });
      assert.equal(awcOk(home, ['quota', 'unset'], env).cleared, true);
      assert.equal(awcOk(home, ['quota', 'clear'], env).cleared, false, 'clear: the older name of unset');
      assert.equal(awcOk(home, ['--namespace', 'other', 'quota', 'set', '--workspaces', '0'], env).quota.workspaces, 0);
      assert.equal(show().quota.workspaces, null, 'per namespace');
      const named = awcOk(home, ['quota', 'set', 'third', '--stored-bytes', '1M'], env);
      assert.deepEqual([named.namespace, named.quota.storedBytes], ['third', 2 ** 20]);
      assert.equal(awcOk(home, ['quota', 'show', 'third'], env).quota.storedBytes, 2 ** 20);
      assert.equal(awcOk(home, ['quota', 'show', 'other'], env).quota.workspaces, 0);
      assert.equal(awcOk(home, ['quota', 'unset', 'other'], env).cleared, true);
      assert.equal(awcOk(home, ['quota', 'unset', 'third'], env).cleared, true);
    });

    it('workspaces: a fork past the limit is E_QUOTA and forks none', () => {
      awcOk(home, ['quota', 'set', '--workspaces', '2'], env);
      awcOk(home, ['fork', 'base', '--name', 'w1'], env);
      const e = quotaRefused(awc(home, ['fork', 'base', '--name', 'x', '--count', '2'], env));
      assert.equal(e.retryable, false);
      assert.match(e.message, /quota of 2 workspaces \(in use: 1\)/);
      assert.match(e.hint, /awc rm/);
      assert.equal(show().usage.workspaces, 1);
      awcOk(home, ['fork', 'base', '--name', 'w2'], env);
      quotaRefused(awc(home, ['fork', 'base'], env));
      awcOk(home, ['quota', 'set', '--workspaces', 'none'], env);
    });

    it('stored bytes: an import and a checkpoint over the limit are E_QUOTA and commit nothing; under it they pass', () => {
      const used = show().usage.storedBytes;
      awcOk(home, ['quota', 'set', '--stored-bytes', String(used + 150_000)], env);
      const snaps = (awcOk(home, ['snapshot', 'ls'], env) as unknown[]).length;
      const e = quotaRefused(awc(home, ['snapshot', 'import', treeOf(join(work, 'big'), 200_000), '--name', 'big'], env));
      assert.equal(e.retryable, false);
      assert.match(e.message, /over its quota/);
      assert.match(e.hint, /awc gc/);
      assert.equal((awcOk(home, ['snapshot', 'ls'], env) as unknown[]).length, snaps, 'no snapshot');
      assert.equal(errorOf(awc(home, ['show', 'big'], env)).code, 'E_NOT_FOUND', 'no name');
      assert.equal(show().usage.storedBytes, used, 'no pack rows');
      awcOk(home, ['snapshot', 'import', treeOf(join(work, 'small'), 50_000), '--name', 'small'], env);

      const mnt = join(work, 'mnt-w1');
      mkdirSync(mnt);
      awcOk(home, ['mount', 'w1', mnt], env);
      const head = awcOk(home, ['show', 'w1'], env).headSnapshotId as string;
      const grown = randomBytes(200_000);
      writeFileSync(join(mnt, 'grown.bin'), grown);
      quotaRefused(awc(home, ['checkpoint', 'w1'], env));
      assert.equal(awcOk(home, ['show', 'w1'], env).headSnapshotId, head, 'the head stays');
      assert.ok(readFileSync(join(mnt, 'grown.bin')).equals(grown), "the workspace's write is kept");
      awcOk(home, ['quota', 'set', '--stored-bytes', String(used + 1_000_000)], env);
      awcOk(home, ['checkpoint', 'w1'], env);
      const newHead = awcOk(home, ['show', 'w1'], env).headSnapshotId as string;
      assert.notEqual(newHead, head);
      const changes = (awcOk(home, ['diff', head, newHead], env) as { changes: { path: string; status: string }[] }).changes;
      assert.deepEqual(
        changes.map((c) => [c.path, c.status]),
        [['grown.bin', 'added']],
        'the later checkpoint commits the write',
      );
      awcOk(home, ['unmount', 'w1'], env);
      // the refused commits' uploaded packs are garbage: fsck accepts them and gc deletes them
      assert.equal(awc(home, ['fsck'], env).code, 0, 'fsck');
      awcOk(home, ['quota', 'unset'], env);
    });

    it('daily new bytes: refused retryably, with when it frees; passes once the window moved', async () => {
      const daily = show().usage.dailyNewBytes;
      awcOk(home, ['quota', 'set', '--daily-new-bytes', String(daily + 10_000)], env);
      const e = quotaRefused(awc(home, ['snapshot', 'import', treeOf(join(work, 'day'), 100_000), '--name', 'day'], env));
      assert.equal(e.retryable, true);
      assert.equal(e.details?.limit, 'dailyNewBytes');
      assert.ok(typeof e.details?.retryAtMs === 'number' && (e.details.retryAtMs as number) > Date.now() - 60_000);
      assert.match(e.hint, /run the command again then/);
      await agePacks(QUOTA_DAY_MS);
      assert.equal(show().usage.dailyNewBytes, 0);
      awcOk(home, ['snapshot', 'import', join(work, 'day'), '--name', 'day'], env);
      awcOk(home, ['quota', 'unset'], env);
    });
  });
}

/** A SQLite home: packs are aged in its catalog file. */
quotaCases('SQLite', async () => {
  const work = await makeTempDir('awc-quota-cli-');
  const home = join(work, 'home');
  return {
    home,
    work,
    cleanup: () => removeTempDir(work),
    env: { AWC_MOUNT_DRIVER: 'copy' },
    async agePacks(ms: number) {
      const db = new BetterSqlite3(join(home, 'catalog.sqlite'));
      db.prepare('update packs set committed_at_ms = committed_at_ms - ? where committed_at_ms is not null').run(ms);
      db.close();
    },
  };
});

quotaCases('PostgreSQL', async () => {
  const work = await makeTempDir('awc-quota-cli-pg-');
  const pg = await freshDatabase();
  const url = pg.url;
  return {
    home: join(work, 'home'),
    work,
    async cleanup() {
      await pg.drop();
      await removeTempDir(work);
    },
    env: { AWC_MOUNT_DRIVER: 'copy', AWC_CATALOG: url },
    async agePacks(ms: number) {
      const cat = await PostgresCatalog.open(url);
      try {
        await sql`update packs set committed_at_ms = committed_at_ms - ${ms} where committed_at_ms is not null`.execute(cat.db);
      } finally {
        await cat.close();
      }
    },
  };
});

describe('a quota hit at concurrent checkpoints on PostgreSQL', () => {
  let work: string;
  let db: FreshDatabase;
  let env: NodeJS.ProcessEnv;
  let home: string;
  before(async () => {
    work = await makeTempDir('awc-quota-race-');
    db = await freshDatabase();
    env = { AWC_MOUNT_DRIVER: 'copy', AWC_CATALOG: db.url };
    home = join(work, 'home');
  });
  after(async () => {
    cleanupMounts(home, work, env);
    await db.drop();
    await removeTempDir(work);
  });

  it('two checkpoints that each fit alone but not together: exactly one succeeds, the other is E_QUOTA', async () => {
    awcOk(home, ['snapshot', 'import', treeOf(join(work, 'src'), 10_000), '--name', 'base'], env);
    for (const w of ['a', 'b']) {
      awcOk(home, ['fork', 'base', '--name', w], env);
      mkdirSync(join(work, `mnt-${w}`));
      awcOk(home, ['mount', w, join(work, `mnt-${w}`)], env);
      writeFileSync(join(work, `mnt-${w}`, 'new.bin'), randomBytes(400_000));
    }
    const used = (awcOk(home, ['quota', 'show'], env) as { usage: { storedBytes: number } }).usage.storedBytes;
    awcOk(home, ['quota', 'set', '--stored-bytes', String(used + 600_000)], env);
    const rs = await Promise.all(['a', 'b'].map((w) => awcAsync(home, ['checkpoint', w], env)));
    const ok = rs.filter((r) => r.code === 0);
    assert.equal(ok.length, 1, rs.map((r) => r.stderr).join('\n'));
    quotaRefused(rs.find((r) => r.code !== 0)!);
    const after = (awcOk(home, ['quota', 'show'], env) as { usage: { storedBytes: number } }).usage.storedBytes;
    assert.ok(after > used + 400_000 && after <= used + 600_000, `one checkpoint's bytes: ${used} → ${after}`);
  });
});
