/**
 * A host daemon whose home is removed stops by itself (src/daemon/session/home-watch.ts): its
 * catalog and uppers were in the home, so it serves nothing anyone can reach, and left
 * running it would hold its socket and its memory for ever (test runs left such daemons).
 * Its supervisor exits with it, and its socket is gone.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { socketPathOf } from '../../../src/config/config.js';
import { awcOk } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('a daemon whose home is removed', { skip: process.getuid?.() === 0 ? false : 'needs root' }, () => {
  let work: string | undefined;
  after(async () => {
    if (work) await removeTempDir(work);
  });

  it('stops within seconds, with its supervisor, and leaves no socket', async () => {
    work = await makeTempDir('awc-home-gone-');
    const home = join(work, 'home');
    awcOk(home, ['snapshot', 'import', work, '--name', 'base']);
    awcOk(home, ['daemon', 'start']);
    const daemon = awcOk(home, ['daemon', 'status']).pid as number;
    const supervisor = Number(readFileSync(join(home, 'host', 'awcd-supervisor.pid'), 'utf8').trim());
    const socket = socketPathOf({ home, socket: undefined });
    assert.ok(alive(daemon) && alive(supervisor) && existsSync(socket), 'running');
    // as a test's cleanup does: the content mount detached (lazily), then the home removed
    spawnSync('umount', ['-l', join(home, 'host', 'content')]);
    // the daemon may still write a file in it while it is removed (ENOTEMPTY): retried, as a cleanup would
    rmSync(home, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
    const deadline = Date.now() + 30_000;
    while ((alive(daemon) || alive(supervisor)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    assert.equal(alive(daemon), false, 'the daemon stopped');
    assert.equal(alive(supervisor), false, 'its supervisor too');
    assert.equal(existsSync(socket), false, 'its socket is gone');
    assert.equal(existsSync(home), false, 'it did not make its home again');
  });
});
