import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { awc, awcOk, CLI } from '../../helpers/cli.js';
import { daemonWithUsers, type DaemonUsers } from '../../helpers/daemon-users.js';
import { usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

/** The names of the workspaces of an `awc status --json`, sorted. */
const names = (s: { workspaces: { name: string }[] }): string[] => s.workspaces.map((w) => w.name).sort();

/**
 * Issue 29: `awc status` of an ordinary user of the root daemon shows only their own
 * workspaces (the mounter rule: those whose live state on this host is theirs, and those with
 * none here), counts the others in `hidden`, and leaves out the host's read-path figures
 * (administrative, as `awc metrics`); root's status shows every workspace with its owner.
 */
describe('awc status for an ordinary user (issue 29)', { skip: usersAndOverlaySkip() }, () => {
  let d: DaemonUsers;
  let alice: TestUser;
  let bob: TestUser;

  before(() => {
    d = daemonWithUsers({ prefix: 'awc-user-status-' });
    [alice, bob] = d.users as [TestUser, TestUser];
    const src = join(d.work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'readme.txt'), 'shared\n');
    awcOk(d.home, ['snapshot', 'import', src, '--name', 'base']);
    d.ok(alice, ['fork', 'base', '--name', 'w-alice']);
    d.ok(alice, ['mount', 'w-alice', d.dirOf(alice, 'mnt', true)]);
    const w = alice.run('sh', ['-c', 'head -c 262144 /dev/zero > "$0/data.bin"', d.dirOf(alice, 'mnt')]);
    assert.equal(w.status, 0, w.stderr);
    d.ok(bob, ['fork', 'base', '--name', 'w-bob']);
    d.ok(bob, ['mount', 'w-bob', d.dirOf(bob, 'mnt', true)]);
    awcOk(d.home, ['fork', 'base', '--name', 'w-root']);
    mkdirSync(join(d.work, 'root-mnt'));
    awcOk(d.home, ['mount', 'w-root', join(d.work, 'root-mnt')]);
    awcOk(d.home, ['fork', 'base', '--name', 'w-idle']);
  });

  after(async () => {
    await d?.close();
  });

  test("a user sees their own workspaces and the unmounted ones, never another's live one; no read-path figures", () => {
    const s = d.ok(alice, ['status']);
    assert.deepEqual(s.viewer, { uid: alice.uid, through: 'daemon' });
    assert.deepEqual(names(s), ['w-alice', 'w-idle']);
    assert.equal(s.hidden, 2, 'w-bob and w-root are left out');
    assert.equal(s.host.daemon.running, true);
    assert.equal(s.host.daemon.pid, awcOk(d.home, ['daemon', 'status']).pid);
    assert.equal(s.host.figures, null);
    const mine = s.workspaces.find((w: { name: string }) => w.name === 'w-alice');
    assert.deepEqual(mine.owner, { uid: alice.uid, user: alice.name, scopes: [], session: null, tool: null });
    assert.equal(mine.mountPath, d.dirOf(alice, 'mnt'));
    assert.ok(mine.upperBytes >= 262144, `upper ${mine.upperBytes}`);
    assert.equal(mine.lease.here, 'held');
    const idle = s.workspaces.find((w: { name: string }) => w.name === 'w-idle');
    assert.deepEqual([idle.state, idle.upperBytes, idle.idleMs, idle.owner.uid], ['unmounted', null, null, null]);
    assert.deepEqual(names(d.ok(bob, ['status'])), ['w-bob', 'w-idle']);
    // the fleet view reads the home's catalog itself: not through the daemon
    const fleet = d.as(alice, ['status', '--fleet']);
    assert.equal(fleet.status, 2, fleet.stderr);
    assert.equal(fleet.err?.code, 'E_USAGE');
    assert.match(fleet.err!.message, /the catalog across hosts/);
  });

  test('the text says how many were left out', () => {
    const text = alice.run(process.execPath, [CLI, '--home', d.home, 'status'], { HOME: d.work });
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /^read path: not shown here \(the host daemon counts every user; an administrator runs `awc metrics`\)$/m);
    assert.match(text.stdout, /^ws_\S+\s+w-alice\s+mounted \(overlay\)\s+\S+/m);
    assert.doesNotMatch(text.stdout, /w-bob|w-root/);
    assert.match(text.stdout, /\n2 workspace\(s\) mounted or made by other users are not shown\.\n$/);
  });

  test('root sees every workspace with its owner, and the read path', () => {
    const s = awcOk(d.home, ['status']);
    assert.deepEqual(names(s), ['w-alice', 'w-bob', 'w-idle', 'w-root']);
    assert.equal(s.hidden, 0);
    const owner = (n: string) => s.workspaces.find((w: { name: string }) => w.name === n).owner;
    assert.deepEqual([owner('w-alice').uid, owner('w-alice').user], [alice.uid, alice.name]);
    assert.deepEqual([owner('w-bob').uid, owner('w-bob').user], [bob.uid, bob.name]);
    assert.deepEqual([owner('w-root').uid, owner('w-root').user], [0, 'root']);
    assert.notEqual(s.host.figures, null);
    assert.equal(s.host.figures.mountedWorkspaces, 3);
    assert.equal(awc(d.home, ['status']).code, 0);
  });
});
