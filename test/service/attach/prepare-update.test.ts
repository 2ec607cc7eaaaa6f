/**
 * `awc prepare --update` and the build lease (src/service/attach/prepare.ts, build-once.ts;
 * docs/explanation/incremental-prepare.md), through the real CLI on SQLite and PostgreSQL:
 * concurrent prepares of one environment key build once (one import, the others wait and
 * return its snapshot), `--update` reads only what changed and replaces the earlier snapshot,
 * a crashed builder's lease expires and the next prepare builds, and `--background` returns
 * at once and prepares in a detached process.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import { prepare } from '../../../src/service/attach/prepare.js';
import { ENV_KEY_LABEL } from '../../../src/service/attach/attach.js';
import { RACY_MARGIN_MS } from '../../../src/service/import/stat-cache.js';
import { CLI } from '../../helpers/cli.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs the CLI asynchronously (so that several run at once); its exit code and parsed JSON stdout. */
function run(home: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; json: any; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [CLI, '--home', home, '--json', ...args], { env: { ...process.env, ...env } });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('error', reject);
    p.on('close', (code) => {
      let json: any;
      try {
        json = JSON.parse(out);
      } catch {
        json = undefined;
      }
      resolve({ code: code ?? -1, json, stderr: err });
    });
  });
}

/** A checkout with a lockfile and an installed node_modules of `n` files. */
function makeCheckout(dir: string, n: number): void {
  mkdirSync(join(dir, 'node_modules', 'dep'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{"name":"app","version":"1.0.0","dependencies":{"dep":"1.0.0"}}\n');
  writeFileSync(join(dir, 'package-lock.json'), '{"name":"app","lockfileVersion":3,"packages":{}}\n');
  for (let i = 0; i < n; i++) writeFileSync(join(dir, 'node_modules', 'dep', `m${i}.js`), `module.exports = ${i};\n`.repeat(20));
  for (let i = 0; i < 50; i++) writeFileSync(join(dir, `src${i}.ts`), `export const x${i} = ${i};\n`);
}

for (const backend of ['sqlite', 'postgres'] as const)
  describe(`awc prepare: --update and one build per environment key (${backend})`, () => {
    let work: string;
    let home: string;
    let db: FreshDatabase | undefined;
    let env: NodeJS.ProcessEnv = {};
    let repo: string;
    const prepared = async (): Promise<number> => {
      const svc = await Awc.open({ home, mountDriver: 'copy', catalog: db?.url });
      try {
        return (await svc.listSnapshots()).filter((s) => s.labels[ENV_KEY_LABEL] !== undefined).length;
      } finally {
        await svc.close();
      }
    };

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-prep-'));
      home = join(work, 'home');
      if (backend === 'postgres') {
        db = await freshDatabase();
        env = { AWC_CATALOG: db.url };
      }
      env = { ...env, AWC_MOUNT_DRIVER: 'copy' };
      repo = join(work, 'repo');
      makeCheckout(repo, 3000);
      await sleep(RACY_MARGIN_MS + 200);
    });
    after(async () => {
      rmSync(work, { recursive: true, force: true });
      await db?.drop();
    });

    it('four concurrent prepares of one key import once; the others return its snapshot', async () => {
      const rs = await Promise.all([0, 1, 2, 3].map(() => run(home, ['prepare', repo], env)));
      for (const r of rs) assert.equal(r.code, 0, r.stderr);
      const ids = new Set(rs.map((r) => r.json.id));
      assert.equal(ids.size, 1, `one snapshot: ${[...ids].join(', ')}`);
      const builders = rs.filter((r) => r.json.waitedFor === undefined);
      assert.equal(builders.length, 1, 'one build');
      for (const r of rs.filter((x) => x.json.waitedFor !== undefined)) assert.equal(r.json.newBytes, 0);
      assert.equal(await prepared(), 1, 'one prepared snapshot in the catalog');
    });

    it('--update reads only the changed files, is a child of the earlier snapshot and replaces it', async () => {
      const before = await run(home, ['prepare', repo], env);
      assert.equal(before.code, 0, before.stderr);
      await sleep(RACY_MARGIN_MS + 200); // the files the import read are now old enough to be trusted
      const base = await run(home, ['prepare', '--update', repo], env);
      assert.equal(base.code, 0, base.stderr);
      appendFileSync(join(repo, 'src1.ts'), '// changed\n');
      writeFileSync(join(repo, 'node_modules', 'dep', 'added.js'), 'module.exports = 1;\n');
      const r = await run(home, ['prepare', '--update', repo], env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.json.parent, base.json.id);
      // 3000 modules, 50 sources, the two package files and added.js: the changed and the added one are read
      assert.deepEqual(r.json.statCache, { reused: 3051, read: 2 });
      assert.deepEqual(r.json.replaced, { id: base.json.id, removed: true });
      const full = await run(home, ['snapshot', 'import', repo], env);
      assert.equal(full.code, 0, full.stderr);
      assert.equal(full.json.root, r.json.root, 'the same root as a full import');
    });

    it("a crashed builder's lease expires: the next prepare waits for it, then builds", async () => {
      const svc = await Awc.open({ home, mountDriver: 'copy', catalog: db?.url });
      try {
        const { envKey } = await import('../../../src/service/attach/env-key.js');
        const key = `prepare:${(await envKey(repo)).key}`;
        const crashed = await svc.catalog.acquireBuildLease(svc.namespace, key, 'crashed-host:1', 800);
        assert.equal(crashed.acquired, true);
        const t0 = Date.now();
        const r = await prepare(svc, repo, { buildLeases: svc.catalog, lease: { ttlMs: 5000, pollMs: 50 } });
        assert.equal(r.waitedFor, undefined, 'it built');
        assert.ok(Date.now() - t0 >= 500, `waited for the expiry (${Date.now() - t0} ms)`);
        const lease = await svc.catalog.getBuildLease(svc.namespace, key);
        assert.equal(lease?.state, 'released');
        assert.equal(lease?.result, r.id);
        assert.equal(lease?.epoch, crashed.lease.epoch + 1);
      } finally {
        await svc.close();
      }
    });

    it('--background returns at once and prepares in a detached process', async () => {
      const t0 = Date.now();
      const r = await run(home, ['prepare', '--update', '--background', repo], env);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(Number.isInteger(r.json.pid));
      assert.equal(r.json.log, join(home, 'host', 'prepare.log'));
      for (let i = 0; i < 600; i++) {
        try {
          process.kill(r.json.pid, 0);
        } catch {
          break;
        }
        await sleep(100);
      }
      const log = readFileSync(r.json.log, 'utf8');
      assert.match(log, /"envKey"/, log);
      assert.ok(Date.now() - t0 < 60_000);
    });
  });
