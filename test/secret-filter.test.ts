/**
 * The capture classes and the secret filter (docs/explanation/capture-classes.md), on both
 * real drivers through the built CLI: only the opted-in secret reaches the snapshot and the
 * object store, the others are listed and stay on the host, node_modules is kept, tmp is
 * dropped, a remove keeps the secrets (restorable), a directory import skips its secrets,
 * and a bad `.awc.json` is E_CONFIG.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, cleanupMounts, errorOf } from './helpers/cli.js';

/** Every file's bytes under `dir`, concatenated (packs, catalog). */
function allBytes(dir: string): Buffer {
  const parts: Buffer[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) parts.push(readFileSync(join(e.parentPath, e.name)));
  }
  return Buffer.concat(parts);
}

const marker = (what: string): string => `${what}-${randomBytes(24).toString('base64url')}`;

function put(root: string, rel: string, data: string): void {
  mkdirSync(dirname(join(root, rel)), { recursive: true });
  writeFileSync(join(root, rel), data);
}

describe('capture classes and the secret filter', () => {
  let work: string;
  let home: string;
  let env: NodeJS.ProcessEnv;
  let base: string;

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'awc-secrets-'));
    home = join(work, 'home');
    env = { AWC_OBJECT_STORE: `file:${join(work, 'objects')}`, AWC_CATALOG: `sqlite:${join(work, 'catalog', 'awc.db')}` };
    const src = join(work, 'src');
    put(src, 'README.md', 'tracked\n');
    put(src, '.gitignore', 'node_modules/\ntmp/\n');
    put(src, '.awc.json', JSON.stringify({ allowSecrets: ['config/dev.pem'] }));
    put(src, '.env', marker('IMPORTED') + '\n');
    put(src, '.env.example', 'KEY=\n');
    const r = awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env);
    // a directory import skips its secrets (and keeps the template)
    assert.deepEqual(
      r.secrets.map((s: { path: string }) => s.path),
      ['.env'],
    );
    base = r.id;
  });
  after(() => {
    cleanupMounts(home, work, env);
    rmSync(work, { recursive: true, force: true });
  });

  for (const driver of ['overlay', 'copy'] as const) {
    it(`${driver}: a checkpoint stores only the opted-in secret, lists the others, keeps node_modules, drops tmp; rm keeps the secrets`, () => {
      const denv = { ...env, AWC_MOUNT_DRIVER: driver };
      const ws = awcOk(home, ['fork', base, '--name', `ws-${driver}`], denv).workspaces[0].id as string;
      const mnt = join(work, `mnt-${driver}`);
      awcOk(home, ['mount', ws, mnt], denv);
      const secrets: Record<string, string> = {
        '.env': marker('ENV'),
        '.env.local': marker('ENVLOCAL'),
        id_rsa: marker('KEY'),
        'credentials.json': marker('CRED'),
        'sub/.npmrc': `//registry.npmjs.org/:_authToken=${marker('NPM')}\n`,
      };
      for (const [p, v] of Object.entries(secrets)) put(mnt, p, v);
      const optedIn = marker('OPTED');
      put(mnt, 'config/dev.pem', optedIn);
      put(mnt, 'node_modules/x/index.js', 'module.exports = 1;\n');
      put(mnt, 'node_modules/x/test/fixture.pem', 'public test fixture\n');
      put(mnt, 'tmp/y', marker('SCRATCH'));
      put(mnt, 'README.md', 'tracked, changed\n');
      put(mnt, 'plain.npmrc/.npmrc', 'registry=https://example.org/\n');

      const cp = awcOk(home, ['checkpoint', ws], denv);
      assert.equal(cp.changed, true);
      assert.deepEqual(cp.secrets.map((s: { path: string }) => s.path).sort(), Object.keys(secrets).sort());
      assert.deepEqual(
        cp.dropped.map((d: { path: string; files: number }) => [d.path, d.files]),
        [['tmp/', 1]],
      );
      assert.deepEqual(cp.classes.reconstructible.files, 2);
      assert.equal(cp.classes.secret.files, 5);
      assert.equal(cp.classes.scratch.files, 1);

      // the snapshot's tree: the opted-in secret and node_modules, no other secret, no tmp
      const out = join(work, `out-${driver}`);
      awcOk(home, ['export', cp.id, '--dir', out], denv);
      assert.equal(readFileSync(join(out, 'config/dev.pem'), 'utf8'), optedIn);
      assert.ok(existsSync(join(out, 'node_modules/x/test/fixture.pem')));
      assert.ok(existsSync(join(out, 'plain.npmrc/.npmrc')), 'an .npmrc without a token is no secret');
      for (const p of [...Object.keys(secrets), 'tmp']) assert.ok(!existsSync(join(out, p)), `${p} must not be in the snapshot`);
      // ... and their bytes are in no object of the store and not in the catalog (the opted-in one is: the grep works)
      const stored = Buffer.concat([allBytes(join(work, 'objects')), allBytes(join(work, 'catalog'))]).toString('latin1');
      assert.ok(stored.includes(optedIn));
      for (const [p, v] of Object.entries(secrets)) assert.ok(!stored.includes(v.trim().split('=').pop()!), `${p} reached the store`);
      // the mount still shows them
      for (const [p, v] of Object.entries(secrets)) assert.equal(readFileSync(join(mnt, p), 'utf8'), v);

      // a bad project file refuses the checkpoint with E_CONFIG
      writeFileSync(join(mnt, '.awc.json'), '{"allowSecret": []}');
      const bad = awc(home, ['checkpoint', ws], denv);
      assert.equal(errorOf(bad).code, 'E_CONFIG');
      assert.match(errorOf(bad).message, /unknown key "allowSecret"/);
      writeFileSync(join(mnt, '.awc.json'), JSON.stringify({ allowSecrets: ['config/dev.pem'] }));

      // removing the workspace loses none of them: kept (0600), restorable
      const rm = awcOk(home, ['rm', ws, '--force'], denv);
      assert.deepEqual(rm.kept.map((k: { path: string }) => k.path).sort(), Object.keys(secrets).sort());
      for (const k of rm.kept) assert.equal(statSync(k.keptAt).mode & 0o777, 0o600);
      const back = join(work, `back-${driver}`);
      mkdirSync(back);
      awcOk(home, ['kept', 'restore', ws, back], denv);
      for (const [p, v] of Object.entries(secrets)) assert.equal(readFileSync(join(back, p), 'utf8'), v);
      assert.equal(errorOf(awc(home, ['kept', 'restore', ws, back], denv)).code, 'E_TARGET_EXISTS');
    });
  }
});
