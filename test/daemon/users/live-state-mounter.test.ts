import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { awcOk } from '../../helpers/cli.js';
import { daemonWithUsers, type DaemonUsers } from '../../helpers/daemon-users.js';
import { usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

/** What only the mounter wrote (in a 0600 file of the workspace): never in another user's output. */
const SECRET = 'alice-live-secret-7f3a';

/**
 * Issue 24 item 2: a workspace's live, uncheckpointed state belongs to the user who mounted it.
 * Through the root daemon, another allowed user's diff (either side, with or without --patch),
 * show and export of it are E_PERMISSION and their usage withholds its host measures; its
 * mounter (an ordinary user, or root with either driver) and root still read it.
 */
describe('live state belongs to its mounter (issue 24 item 2)', { skip: usersAndOverlaySkip() }, () => {
  let d: DaemonUsers;
  let work: string;
  let home: string;
  let alice: TestUser;
  let bob: TestUser;
  const dirOf = (u: TestUser, name: string): string => d.dirOf(u, name);
  const as = (who: TestUser, args: string[]) => d.as(who, args);
  const ok = (who: TestUser, args: string[]) => {
    const r = as(who, args);
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };

  /** Bob's reads of `ws` (mounted by someone else): each is E_PERMISSION, and the secret shows nowhere. */
  const bobIsRefused = (ws: string, tag: string): void => {
    const reads: string[][] = [
      ['diff', 'base', ws, '--patch'],
      ['diff', ws, 'base', '--patch'],
      ['diff', 'base', ws],
      ['diff', ws],
      ['diff', ws, '--patch'],
      ['show', ws],
      ['export', ws, '--tar', join(dirOf(bob, 'out'), `${tag}.tar`)],
      ['export', ws, '--dir', join(dirOf(bob, 'out'), tag)],
    ];
    for (const args of reads) {
      const r = as(bob, args);
      assert.equal(r.err?.code, 'E_PERMISSION', `${tag}: ${args.join(' ')}: ${r.stderr}`);
      assert.ok(!r.stdout.includes(SECRET) && !r.stderr.includes(SECRET), `${tag}: ${args.join(' ')} showed the content`);
    }
    assert.equal(existsSync(join(dirOf(bob, 'out'), `${tag}.tar`)), false);
    assert.equal(existsSync(join(dirOf(bob, 'out'), tag)), false);
    const usage = ok(bob, ['usage']);
    const row = usage.workspaces.find((w: { id: string; name: string }) => w.name === ws);
    assert.deepEqual(
      { withheld: row.withheld, upperBytes: row.upperBytes, copyBytes: row.copyBytes, hostBytes: row.hostBytes },
      { withheld: true, upperBytes: 0, copyBytes: 0, hostBytes: 0 },
      `${tag}: usage`,
    );
  };

  before(() => {
    d = daemonWithUsers({ prefix: 'awc-mounter-' });
    ({ work, home } = d);
    [alice, bob] = d.users as [TestUser, TestUser];
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'readme.txt'), 'shared\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    d.dirOf(alice, 'mnt', true);
    d.dirOf(bob, 'out', true);
  });

  after(async () => {
    await d?.close();
  });

  test("an ordinary user's mount (overlay): another user is refused every read of it, mounted and after an unmount that kept its changes", () => {
    ok(alice, ['fork', 'base', '--name', 'w-alice']);
    ok(alice, ['mount', 'w-alice', dirOf(alice, 'mnt')]);
    const sh = alice.run('sh', ['-c', `umask 077 && printf '${SECRET}' > "$0/private.txt"`, dirOf(alice, 'mnt')]);
    assert.equal(sh.status, 0, sh.stderr);
    assert.equal(bob.run('cat', [join(dirOf(alice, 'mnt'), 'private.txt')]).status, 1, 'Bob cannot cat it');
    bobIsRefused('w-alice', 'alice-mounted');
    // the mounter reads it, and root does
    assert.match(ok(alice, ['diff', 'base', 'w-alice', '--patch']).patch, new RegExp(SECRET));
    assert.match(awcOk(home, ['diff', 'w-alice', '--patch']).patch, new RegExp(SECRET));
    assert.ok(ok(alice, ['usage']).workspaces.find((w: { name: string }) => w.name === 'w-alice').upperBytes > 0);
    // unmounted with its changes kept on this host: still Alice's
    const u = ok(alice, ['unmount', 'w-alice']);
    assert.equal(u.pending, true);
    bobIsRefused('w-alice', 'alice-pending');
    ok(alice, ['unmount', 'w-alice', '--discard']);
    // no state on this host: the head is the namespace's
    assert.equal(ok(bob, ['show', 'w-alice']).mountState, 'unmounted');
    assert.deepEqual(ok(bob, ['diff', 'w-alice']).changes, []);
  });

  for (const driver of ['overlay', 'copy'] as const) {
    test(`root's mount (${driver} driver): an ordinary user is refused every read of it`, () => {
      const ws = `w-root-${driver}`;
      const mnt = join(work, `root-mnt-${driver}`);
      mkdirSync(mnt);
      awcOk(home, ['fork', 'base', '--name', ws]);
      assert.equal(awcOk(home, ['mount', ws, mnt], { AWC_MOUNT_DRIVER: driver }).driver, driver);
      writeFileSync(join(mnt, 'private.txt'), SECRET, { mode: 0o600 });
      bobIsRefused(ws, `root-${driver}`);
      assert.match(awcOk(home, ['diff', 'base', ws, '--patch'], { AWC_MOUNT_DRIVER: driver }).patch, new RegExp(SECRET));
      awcOk(home, ['unmount', ws, '--discard'], { AWC_MOUNT_DRIVER: driver });
    });
  }
});
