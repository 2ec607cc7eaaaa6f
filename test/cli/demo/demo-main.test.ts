import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { CLI } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

/** The README's first quick-start command runs `awc demo main`: it must keep working (it once broke unnoticed). */
test(
  'awc demo main runs the main job end to end',
  { skip: detectDriver('auto').driver === 'overlay' ? false : 'overlay is not possible on this host' },
  () => {
    const r = spawnSync(process.execPath, [CLI, '--json', 'demo', 'main'], { encoding: 'utf8', timeout: 300_000 });
    assert.equal(r.status, 0, r.stderr);
    const log = JSON.parse(r.stdout);
    try {
      assert.equal(log.driver, 'overlay');
      assert.equal(log.workspaces.length, 2);
      assert.equal(log.checkpoint.changed, true);
      assert.ok(log.changes > 0);
    } finally {
      rmSync(dirname(log.home), { recursive: true, force: true });
    }
  },
);
