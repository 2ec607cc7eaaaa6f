import { test, describe, after } from 'node:test';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, cleanupMounts } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { readMountInfo } from '../../../src/host/mount/mount-table.js';
import { findHolders } from '../../../src/drivers/overlay/upper-use.js';

/**
 * The kernel reuses the id of a mount that is gone (the lowest free one), so the mount id a
 * workspace's state recorded can name another home's overlay by the time the workspace is
 * mounted again. A process holding a file in that unrelated mount must not make the workspace
 * count as still mounted (E_STILL_MOUNTED); a detached mount of the workspace itself still
 * does (daemon-lifecycle.test.ts). The reuse is made deterministic by giving the state the id
 * the kernel handed to the unrelated mount.
 */
const skip = detectDriver('auto').driver === 'overlay' ? false : 'overlay is not possible on this host';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a recorded mount id the kernel gave to another mount (overlay driver)', { skip, timeout: 240_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-mntid-'));
  const home = join(work, 'home');
  const holders: ChildProcess[] = [];
  after(() => {
    for (const h of holders) if (h.exitCode === null && h.signalCode === null) h.kill('SIGKILL');
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  const ok = (args: string[]): any => {
    const r = awc(home, args, {}, { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`awc ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
    return r.json;
  };
  const stateFile = (ws: string) => join(home, 'host', 'workspaces', ws, 'state.json');
  /** Makes the workspace's state name `id` as the mount id of its last overlay. */
  const recordId = (ws: string, id: number): void => {
    const s = JSON.parse(readFileSync(stateFile(ws), 'utf8'));
    assert.equal(typeof s.mount?.id, 'number', `the state records a mount id: ${JSON.stringify(s)}`);
    s.mount.id = id;
    writeFileSync(stateFile(ws), JSON.stringify(s), { mode: 0o600 });
  };

  /** An overlay outside the home (another home's, as far as this one knows) with a process holding a file in it. */
  const unrelated = async (other: string): Promise<{ mountId: number; holder: ChildProcess; upper: string; mnt: string }> => {
    const d = (n: string) => join(other, n);
    for (const n of ['lower', 'upper', 'work', 'mnt']) mkdirSync(d(n), { recursive: true });
    writeFileSync(join(d('lower'), 'held.txt'), 'held\n');
    const r = spawnSync('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${d('lower')},upperdir=${d('upper')},workdir=${d('work')}`,
      d('mnt'),
    ]);
    assert.equal(r.status, 0, `mount of the unrelated overlay: ${r.stderr}`);
    const m = readMountInfo().filter((x) => x.mountPoint === d('mnt') && x.fsType === 'overlay');
    assert.equal(m.length, 1);
    const holder = spawn('sh', ['-c', 'exec 3<held.txt; exec sleep 120'], { cwd: d('mnt'), stdio: 'ignore' });
    holders.push(holder);
    const deadline = Date.now() + 10_000;
    while (spawnSync('ls', [`/proc/${holder.pid}/fd/3`]).status !== 0) {
      assert.ok(Date.now() < deadline, 'the holder opens its file');
      await sleep(50);
    }
    return { mountId: m[0]!.mountId, holder, upper: d('upper'), mnt: d('mnt') };
  };

  test('a workspace is mounted again although its recorded mount id now names an unrelated overlay held open, attached or detached', async () => {
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'base.txt'), 'base\n');
    ok(['snapshot', 'import', src, '--name', 'base']);
    const ws = ok(['fork', 'base', '--name', 'reused']).workspaces[0].id;
    const mnt = join(work, 'mnt');
    ok(['mount', ws, mnt]);
    writeFileSync(join(mnt, 'mine.txt'), 'kept\n');
    // uncheckpointed changes: the state (with the overlay's mount id) stays for the next mount
    assert.equal(ok(['unmount', ws]).pending, true);
    const o = await unrelated(join(work, 'other'));

    // the unrelated overlay is mounted (it shows in mountinfo) and holds a file
    recordId(ws, o.mountId);
    const m1 = ok(['mount', ws, mnt]);
    assert.equal(m1.resumed, true);
    assert.equal(readFileSync(join(mnt, 'mine.txt'), 'utf8'), 'kept\n');
    assert.equal(ok(['unmount', ws]).pending, true);

    // the unrelated overlay detached and still held: its id shows in no mountinfo
    assert.equal(spawnSync('umount', ['-l', o.mnt]).status, 0);
    assert.ok(!readMountInfo().some((x) => x.mountId === o.mountId), 'the detached overlay is in no mountinfo');
    assert.equal(o.holder.exitCode, null, 'the holder keeps the detached overlay alive');
    recordId(ws, o.mountId);
    const m2 = ok(['mount', ws, mnt]);
    assert.equal(m2.resumed, true);
    assert.equal(readFileSync(join(mnt, 'mine.txt'), 'utf8'), 'kept\n');
    ok(['unmount', ws, '--discard']);
    o.holder.kill('SIGKILL');
  });

  test('findHolders leaves out a given mount id that mountinfo shows as a mount not on the upper', async () => {
    const o = await unrelated(join(work, 'other-2'));
    // the id names a mount on this upper: its holder is found
    assert.ok(findHolders(o.upper, [o.mountId]).some((h) => h.pid === o.holder.pid));
    // the same id for another upper: it names an unrelated mount now, nobody holds that upper
    assert.deepEqual(findHolders(join(work, 'no-such-upper'), [o.mountId]), []);
    o.holder.kill('SIGKILL');
    spawnSync('umount', ['-l', o.mnt]);
  });
});
