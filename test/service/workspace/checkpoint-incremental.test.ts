import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

/** A checkpoint reads only the files that changed since the last one, not every file changed since the fork. */
for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`incremental checkpoints (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-incr-${driver}-`));
    const home = join(work, 'home');
    const env = { AWC_MOUNT_DRIVER: driver };
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('second and third checkpoints read one file each', () => {
      const src = join(work, 'src');
      mkdirSync(src);
      writeFileSync(join(src, 'seed.txt'), 'seed\n');
      const snap = awcOk(home, ['snapshot', 'import', src], env);
      const ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      const mnt = join(work, 'mnt');
      awcOk(home, ['mount', ws, mnt], env);
      for (let i = 0; i < 20; i++) writeFileSync(join(mnt, `f${i}.txt`), `file ${i}\n`);
      const first = awcOk(home, ['checkpoint', ws], env);
      assert.equal(first.filesRead, 20);
      writeFileSync(join(mnt, 'one-more.txt'), 'new\n');
      const second = awcOk(home, ['checkpoint', ws], env);
      assert.equal(second.changed, true);
      assert.equal(second.filesRead, 1);
      appendFileSync(join(mnt, 'f3.txt'), 'edited\n');
      const third = awcOk(home, ['checkpoint', ws], env);
      assert.equal(third.filesRead, 1);
      const d = awcOk(home, ['diff', second.id, third.id], env);
      assert.deepEqual(
        d.changes.map((c: { path: string; status: string }) => [c.path, c.status]),
        [['f3.txt', 'modified']],
      );
      const out = join(work, 'out');
      awcOk(home, ['export', third.id, '--dir', out, '--keep-privileges'], env);
      awcOk(home, ['unmount', ws], env);
    });
  });
}
