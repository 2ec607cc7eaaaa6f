import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { CLI } from '../helpers/cli.js';
import { canCreateUsers, createTestUser, type TestUser } from '../helpers/unprivileged.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * The security rule for xattrs of every namespace (issue 12 items 8 and 13;
 * docs/explanation/security.md): an ordinary user's copy workspace and `export --dir`
 * materialise no file capabilities, and cannot set `trusted.*`; both are listed in
 * `leftOut`, and a checkpoint of the unchanged files keeps them as the snapshot has them.
 */
describe('xattrs that need privileges, as an ordinary user', { skip: canCreateUsers() ? false : 'needs root, useradd and setpriv' }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-fidelity-unpriv-'));
  const tar = join(work, 'snap.tar');
  let user: TestUser;
  const uhome = join(work, 'user-home');
  const run = (args: string[]): any => {
    const r = user.run(process.execPath, [CLI, '--home', join(uhome, 'awc'), '--json', ...args], { HOME: uhome });
    assert.equal(r.status, 0, `awc ${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };

  before(() => {
    chmodSync(work, 0o755);
    user = createTestUser();
    const stage = join(work, 'stage');
    mkdirSync(stage);
    copyFileSync('/bin/true', join(stage, 'cap-exe'));
    execFileSync('setcap', ['cap_net_raw+ep', join(stage, 'cap-exe')]);
    writeFileSync(join(stage, 'trusted-x'), 'trusted\n');
    xattr.setAttributeSync(join(stage, 'trusted-x'), 'trusted.awc-test', Buffer.from([0, 1, 2, 255]));
    xattr.setAttributeSync(join(stage, 'trusted-x'), 'user.kept', Buffer.from([0, 255]));
    execFileSync('tar', ['--xattrs', '--xattrs-include=*', '--format=pax', '-cf', tar, '-C', stage, '.']);
    chmodSync(tar, 0o644);
    mkdirSync(uhome);
    chownSync(uhome, user.uid, user.gid);
  });
  after(() => {
    for (const m of ['w', 'out']) execFileSync('sh', ['-c', `umount -l ${join(uhome, m)} 2>/dev/null || true`]);
    // a process of the user's own home (its daemon, its warm CLI) may still be writing there: stopped first, and retried on ENOTEMPTY
    user?.stopProcesses();
    rmSync(work, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    user?.remove();
  });

  test('a copy workspace leaves them out and says so; a checkpoint keeps them; export --dir does the same', () => {
    const snap = run(['snapshot', 'import', tar, '--name', 'base']);
    const id = run(['fork', 'base', '--name', 'w']).workspaces[0].id;
    const m = run(['mount', id, join(uhome, 'w')]);
    assert.equal(m.driver, 'copy');
    assert.deepEqual(m.leftOut.map((l: { path: string; reason: string }) => [l.path, l.reason]).sort(), [
      ['cap-exe', 'file capabilities (security.capability) not materialised (no nosuid mount)'],
      ['trusted-x', 'trusted.* and security.* xattrs not materialised (they need root)'],
    ]);
    // as root: nothing privileged is on the materialised files, the user's own xattr is
    assert.throws(() => xattr.getAttributeSync(join(uhome, 'w', 'cap-exe'), 'security.capability'));
    assert.throws(() => xattr.getAttributeSync(join(uhome, 'w', 'trusted-x'), 'trusted.awc-test'));
    assert.deepEqual(xattr.getAttributeSync(join(uhome, 'w', 'trusted-x'), 'user.kept'), Buffer.from([0, 255]));
    assert.deepEqual(run(['diff', id]).changes, [], 'what was left out is not a change');
    writeFileSync(join(uhome, 'w', 'new.txt'), 'x');
    const cp = run(['checkpoint', id]);
    assert.equal(cp.changed, true);
    // (files materialised by an ordinary user belong to it: the checkpoint records that owner, a metadata change)
    type Side = { uid: number; xattrs?: Record<string, string> };
    const meta = run(['diff', snap.id, cp.id, '--metadata']).changes as { path: string; status: string; old?: Side; new?: Side }[];
    for (const p of ['cap-exe', 'trusted-x']) {
      const c = meta.find((x) => x.path === p)!;
      assert.equal(c.status, 'metadata-changed', p);
      assert.equal(c.new!.uid, user.uid);
      assert.deepEqual(c.new!.xattrs, c.old!.xattrs, `${p}: the left-out xattrs are put back into the checkpoint`);
    }
    assert.ok(meta.find((x) => x.path === 'cap-exe')!.new!.xattrs!['security.capability']);
    assert.ok(meta.find((x) => x.path === 'trusted-x')!.new!.xattrs!['trusted.awc-test']);
    run(['unmount', id]);
    const e = run(['export', 'base', '--dir', join(uhome, 'out')]);
    assert.deepEqual(e.leftOut.map((l: { path: string }) => l.path).sort(), ['cap-exe', 'trusted-x']);
  });
});
