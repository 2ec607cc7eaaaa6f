import { test, describe, after } from 'node:test';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts, errorOf, killDaemon } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { isMounted } from '../../../src/host/mount/mount-table.js';

/**
 * docs/explanation/design.md#durability: upper directories survive a daemon crash or restart on the same host, and the
 * daemon remounts them when it comes back; `daemon stop` unmounts cleanly and keeps them.
 */
describe(
  'host daemon crash, stop and restart (overlay driver)',
  { skip: detectDriver('auto').driver === 'overlay' ? false : 'overlay is not possible on this host' },
  () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-restart-'));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const mnt = join(work, 'mnt');
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('a killed daemon (and its supervisor) comes back with the workspace remounted and its private changes intact', () => {
      mkdirSync(src);
      writeFileSync(join(src, 'base.txt'), 'base\n');
      awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
      const ws = awcOk(home, ['fork', 'base', '--name', 'w']).workspaces[0].id;
      awcOk(home, ['mount', ws, mnt]);
      writeFileSync(join(mnt, 'uncheckpointed.txt'), 'private change\n');
      assert.equal(awcOk(home, ['daemon', 'status']).running, true);
      // the whole daemon: a daemon killed alone is started again by its supervisor (daemon-lifecycle.test.ts)
      const status = killDaemon(home);
      assert.equal(awcOk(home, ['daemon', 'status']).running, false);
      const started = awcOk(home, ['daemon', 'start']);
      assert.notEqual(started.pid, status.pid);
      assert.ok(isMounted(mnt), 'the workspace is mounted again');
      assert.equal(readFileSync(join(mnt, 'uncheckpointed.txt'), 'utf8'), 'private change\n');
      assert.equal(readFileSync(join(mnt, 'base.txt'), 'utf8'), 'base\n');
      const cp = awcOk(home, ['checkpoint', ws]);
      assert.equal(cp.changed, true);
      const d = awcOk(home, ['diff', 'base', cp.id]);
      assert.deepEqual(
        d.changes.map((c: { path: string; status: string }) => [c.path, c.status]),
        [['uncheckpointed.txt', 'added']],
      );
    });

    test('daemon stop unmounts; uncheckpointed changes are kept and the next mount resumes them', async () => {
      const ws = awcOk(home, ['show', 'w']).id;
      writeFileSync(join(mnt, 'later.txt'), 'after the checkpoint\n');
      // a shell inside the mount: stop refuses and keeps serving it
      const inside = spawn('sleep', ['30'], { cwd: mnt, stdio: 'ignore' });
      try {
        const busy = awc(home, ['daemon', 'stop']);
        assert.equal(errorOf(busy).code, 'E_TARGET_BUSY');
        assert.ok(isMounted(mnt));
        assert.equal(awcOk(home, ['daemon', 'status']).running, true);
        assert.equal(readFileSync(join(mnt, 'later.txt'), 'utf8'), 'after the checkpoint\n');
      } finally {
        inside.kill('SIGKILL');
        await once(inside, 'exit');
      }
      awcOk(home, ['daemon', 'stop']);
      assert.ok(!isMounted(mnt));
      assert.equal(awcOk(home, ['show', ws]).mountState, 'unmounted');
      const m = awcOk(home, ['mount', ws, mnt]);
      assert.equal(m.resumed, true);
      assert.equal(readFileSync(join(mnt, 'later.txt'), 'utf8'), 'after the checkpoint\n');
      const u = awcOk(home, ['unmount', ws]);
      assert.equal(u.pending, true);
      // --discard drops them; a later mount starts from the head
      const r = awc(home, ['unmount', ws, '--discard']);
      assert.equal(r.code, 0, r.stderr);
      const m2 = awcOk(home, ['mount', ws, mnt]);
      assert.equal(m2.resumed, false);
      assert.throws(() => readFileSync(join(mnt, 'later.txt')));
      assert.equal(readFileSync(join(mnt, 'uncheckpointed.txt'), 'utf8'), 'private change\n');
      awcOk(home, ['unmount', ws]);
      assert.equal(errorOf(awc(home, ['unmount', ws])).code, 'E_NOT_MOUNTED');
    });
  },
);
