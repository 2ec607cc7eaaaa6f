import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts, errorOf } from './helpers/cli.js';
import { detectDriver } from '../src/drivers/detect-driver.js';

/**
 * Tree format v1 holds UTF-8 names only: a name that is not valid UTF-8, made inside a
 * workspace, is refused at checkpoint with E_UNSUPPORTED_NAME naming the entry — never
 * decoded lossily (which dropped it, or merged it with a real name of U+FFFD characters).
 */
for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`names that are not UTF-8 (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-names-${driver}-`));
    const home = join(work, 'home');
    const env = { AWC_MOUNT_DRIVER: driver };
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('a checkpoint refuses the name (E_UNSUPPORTED_NAME, exit 7) and keeps the head', () => {
      const src = join(work, 'src');
      mkdirSync(src);
      writeFileSync(join(src, 'base.txt'), 'base\n');
      const snap = awcOk(home, ['snapshot', 'import', src], env);
      const ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      const mnt = join(work, 'mnt');
      awcOk(home, ['mount', ws, mnt], env);
      mkdirSync(join(mnt, 'sub'));
      writeFileSync(Buffer.from(join(mnt, 'sub') + '/\xff\xfe', 'latin1'), 'invalid-name');
      writeFileSync(join(mnt, 'sub', '\ufffd\ufffd'), 'valid-fffd');
      writeFileSync(join(mnt, 'sub', '.env'), 'TOKEN=1\n');
      const r = awc(home, ['checkpoint', ws], env);
      assert.equal(r.code, 7, r.stderr);
      const e = errorOf(r) as { code: string; message: string; details?: { path?: string; bytesHex?: string } };
      assert.equal(e.code, 'E_UNSUPPORTED_NAME');
      assert.match(e.message, /^sub\//, 'the message names the entry inside the workspace');
      assert.ok(!e.message.includes('/host/workspaces/'), 'never the host path of the upper');
      assert.equal(awcOk(home, ['show', ws], env).headSnapshotId, snap.id, 'the head did not move');
      // a discard is not blocked by the name; its keeping pass keeps the secret beside it and reports the name
      const d = awcOk(home, ['unmount', ws, '--discard'], env) as { kept?: { path: string }[]; unscanned?: string[] };
      assert.deepEqual(
        d.kept?.map((k) => k.path),
        ['sub/.env'],
      );
      assert.deepEqual(d.unscanned, ['sub/\xff\xfe']);

      // under a scratch directory (ignored and named by the preset: dropped, never stored) such a name does not refuse the
      // checkpoint; the new .gitignore is read for the class counts after the commit (before it, its chunk was not in the index)
      awcOk(home, ['mount', ws, mnt], env);
      writeFileSync(join(mnt, '.gitignore'), 'tmp/\n');
      mkdirSync(join(mnt, 'tmp'));
      writeFileSync(Buffer.from(join(mnt, 'tmp') + '/\xff', 'latin1'), 'scratch');
      writeFileSync(join(mnt, 'kept.txt'), 'kept\n');
      const cp = awcOk(home, ['checkpoint', ws], env) as { changed: boolean; dropped: { path: string }[] };
      assert.equal(cp.changed, true);
      assert.deepEqual(
        cp.dropped.map((x) => x.path),
        ['tmp/'],
      );
      awcOk(home, ['unmount', ws], env);
    });
  });
}
