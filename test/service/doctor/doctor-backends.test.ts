import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk } from '../../helpers/cli.js';

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  code?: string;
  hint?: string;
}

/** `awc doctor` checks both backends: reachable, schema version, writable, with a code and hint when not; and creates nothing. */
describe('awc doctor: catalog and object store', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-doctor-backends-'));
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  const mounts: string[] = [];
  after(() => {
    for (const m of mounts.reverse()) spawnSync('umount', ['-l', m]);
    rmSync(work, { recursive: true, force: true });
  });
  const checks = (home: string, extra: NodeJS.ProcessEnv = {}): Record<string, Check> => {
    const r = awc(home, ['doctor'], { ...env, ...extra });
    assert.equal(r.code, 0, r.stderr);
    return Object.fromEntries((r.json.checks as Check[]).map((c) => [c.name, c]));
  };

  test('a home not created yet: both backends "not created yet", and doctor creates nothing', () => {
    const home = join(work, 'none');
    const c = checks(home);
    assert.equal(c.catalog.ok, false);
    assert.match(c.catalog.detail, /not created yet/);
    assert.equal(c['object store'].ok, false);
    assert.match(c['object store'].detail, /not created yet/);
    assert.equal(existsSync(home), false);
  });

  test('a working home: the catalog answers with its schema, the object store takes a probe and keeps nothing of it', () => {
    const home = join(work, 'good');
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    awcOk(home, ['snapshot', 'import', src], env);
    const before = readdirSync(join(home, 'objects'), { recursive: true }).sort();
    const c = checks(home);
    assert.equal(c.catalog.ok, true, c.catalog.detail);
    assert.match(c.catalog.detail, /reachable, schema \d{4}_\w+ \(the latest\)/);
    assert.equal(c['object store'].ok, true, c['object store'].detail);
    assert.deepEqual(readdirSync(join(home, 'objects'), { recursive: true }).sort(), before, 'no probe object left');
  });

  test('a catalog that is not a database, a read-only object store: failing checks with their codes and hints', () => {
    const home = join(work, 'bad');
    mkdirSync(home, { mode: 0o700 });
    const junk = join(work, 'junk.sqlite');
    writeFileSync(junk, 'this is not a database'.repeat(200));
    const ro = join(work, 'ro-objects');
    mkdirSync(ro);
    assert.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', ro]).status, 0);
    mounts.push(ro);
    const c = checks(home, { AWC_CATALOG: `sqlite:${junk}`, AWC_OBJECT_STORE: `file:${ro}` });
    assert.equal(c.catalog.ok, false);
    assert.equal(c.catalog.code, 'E_INTEGRITY', c.catalog.detail);
    assert.ok((c.catalog.hint ?? '').length > 0);
    assert.equal(c['object store'].ok, false);
    assert.equal(c['object store'].code, 'E_READ_ONLY', c['object store'].detail);
    assert.ok((c['object store'].hint ?? '').length > 0);
  });
});
