/**
 * mount(2) through koffi on a pool thread (src/host/mount/mount-syscall.ts), which the overlay driver
 * calls instead of spawning mount(8): a mount it makes is there with the flags asked for; a
 * failing one resolves false (the driver then runs mount(8) for its message) and never throws.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { mountsAt } from '../../../src/host/mount/mount-table.js';
import { MS_NODEV, MS_NOSUID, mountSyscall } from '../../../src/host/mount/mount-syscall.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

describe('mountSyscall', { skip: process.getuid?.() !== 0 ? 'needs root' : false }, () => {
  it('mounts with the flags asked for, and answers false (never throws) when mount(2) fails', async (t) => {
    const dir = await tempDirFor(t, 'awc-mount-syscall-');
    const target = join(dir, 'm');
    mkdirSync(target);
    assert.equal(await mountSyscall('awc-test', target, 'tmpfs', MS_NOSUID | MS_NODEV, 'size=1m,mode=0700'), true);
    try {
      const m = mountsAt(target, 'tmpfs').at(-1);
      assert.ok(m, 'a tmpfs at the target');
      const line = spawnSync('findmnt', ['-n', '-o', 'OPTIONS', target], { encoding: 'utf8' }).stdout;
      assert.match(line, /nosuid/);
      assert.match(line, /nodev/);
    } finally {
      spawnSync('umount', [target]);
    }
    assert.equal(await mountSyscall('awc-test', join(dir, 'missing'), 'tmpfs', 0, ''), false);
    assert.equal(await mountSyscall('awc-test', target, 'no-such-filesystem-type', 0, ''), false);
  });
});
