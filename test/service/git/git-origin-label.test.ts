/**
 * Security review of issue 24 item 1: the `awc.git.origin` label chooses the repository
 * `checkpoint --git-branch` writes in when no `--git` is given, and git runs there with that
 * repository's configuration. With a real root daemon and a real second user (Bob): Bob cannot
 * set or remove reserved `awc.` labels through the daemon, and a recorded origin that is not the
 * caller's own repository is refused (E_PERMISSION) before git runs in it, so a command Bob
 * planted there (a partial clone's `uploadpack`) never runs as root.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { asUserArgv, createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

describe("awc.git.origin is AWC's: a user cannot set it, a foreign origin is never written in", { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let bob: TestUser;
  let bobRepo: string;
  let marker: string;

  /** The built CLI as Bob (`--home`, `--json`). */
  const asBob = (args: string[]) => {
    const r = spawnSync('setpriv', asUserArgv(bob, [process.execPath, CLI, '--home', home, '--json', ...args]), {
      cwd: work,
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: join(work, 'bobhome') },
      timeout: 120_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const bobSh = (script: string, ...args: string[]): string => bob.sh(script, { HOME: join(work, 'bobhome') }, ...args);
  const bobDir = (name: string): string => bob.dir(join(work, name));

  before(async () => {
    work = realpathSync(await makeTempDir('awc-origin-label-'));
    chmodSync(work, 0o755);
    bob = createTestUser();
    home = join(work, 'home');
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: bob.name, namespaces: ['default'] }] }));
    awcOk(home, ['daemon', 'start']);
    bobDir('bobhome');
    marker = join(work, 'marker');
  });

  after(async () => {
    cleanupMounts(home, work);
    bob?.remove();
    await removeTempDir(work);
  });

  it('Bob cannot set or remove awc.git.origin (or another reserved awc. label) on a snapshot or workspace through the daemon', () => {
    const src = join(work, 'rootsrc');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    const snap = awcOk(home, ['snapshot', 'import', src, '--name', 'shared', '--label', 'awc.git.origin=/srv/real']).id;
    const ws = awcOk(home, ['fork', 'shared', '--name', 'shared-ws']).workspaces[0].id;
    for (const [ref, change] of [
      [snap, 'awc.git.origin=/tmp/evil'],
      [ws, 'awc.git.origin=/tmp/evil'],
      [snap, 'awc.git.origin-'],
      [snap, 'awc.path=/tmp/evil'],
      [ws, 'awc.claude.uid=0'],
    ] as const) {
      const r = asBob(['label', ref, change]);
      assert.equal(r.code, 6, `label ${ref} ${change}: ${r.stdout} ${r.stderr}`);
      const e = errorOf(r as never);
      assert.equal(e.code, 'E_PERMISSION');
      assert.match(e.message, /reserved for AWC/);
      assert.match(e.hint, /docs\/reference\/labels\.md/);
    }
    assert.equal(awcOk(home, ['show', snap]).labels['awc.git.origin'], '/srv/real');
    assert.equal(awcOk(home, ['show', ws]).labels['awc.git.origin'], undefined);
    // labels of the user's own keys, and awc.git.commit (E_GIT_NO_BASE's hint), still work
    const r = asBob(['label', snap, 'team=b', 'awc.git.commit=0123456789abcdef0123456789abcdef01234567']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(awcOk(home, ['show', snap]).labels.team, 'b');
  });

  it('checkpoint --git-branch without --git refuses an origin owned by another user: E_PERMISSION, and the command Bob planted there never runs as root', () => {
    // Bob's repository, imported by Bob through the daemon (its origin label is legitimately his path)
    bobRepo = bobDir('bobrepo');
    bobSh(
      'cd "$1" && git init -q -b main && echo r > r.txt && git add . && git -c user.name=B -c user.email=b@example.com commit -qm init',
      bobRepo,
    );
    const imp = asBob(['snapshot', 'import', '--git', bobRepo, '--name', 'bob-base']);
    assert.equal(imp.code, 0, imp.stderr);
    const base = JSON.parse(imp.stdout);
    assert.equal(base.labels['awc.git.origin'], bobRepo);
    const commit = base.labels['awc.git.commit'] as string;
    // then Bob turns it into a partial clone whose base commit is missing: git would fetch it by
    // running remote.origin.uploadpack, a script of Bob's that leaves a marker
    const planted = join(bobRepo, 'planted.sh');
    writeFileSync(planted, `#!/bin/sh\nid -u > ${marker}\nexit 1\n`, { mode: 0o755 });
    chownSync(planted, bob.uid, bob.gid);
    bobSh(
      'cd "$1" && git config core.repositoryformatversion 1 && git config extensions.partialClone origin && git config remote.origin.url "file://$1/nowhere" && git config remote.origin.promisor true && git config remote.origin.uploadpack "$2" && git config core.fsmonitor "$2" && git config core.hooksPath "$1/hooks"',
      bobRepo,
      planted,
    );
    rmSync(join(bobRepo, '.git', 'objects', commit.slice(0, 2), commit.slice(2)));
    assert.ok(readdirSync(join(bobRepo, '.git', 'objects')).length > 0);

    // root forks Bob's snapshot, works in it and checkpoints to "its" origin
    const ws = awcOk(home, ['fork', 'bob-base', '--name', 'root-on-bob']).workspaces[0].id;
    const mnt = join(work, 'root-on-bob');
    awcOk(home, ['mount', ws, mnt]);
    writeFileSync(join(mnt, 'new.txt'), 'root work\n');
    const r = awc(home, ['checkpoint', ws, '--git-branch', 'b']);
    assert.equal(r.code, 6, `${r.stdout} ${r.stderr}`);
    const e = errorOf(r);
    assert.equal(e.code, 'E_PERMISSION');
    assert.match(e.message, /not your repository/);
    assert.match(e.hint, /--git <repo>/);
    assert.equal(existsSync(marker), false, 'a command of the origin repository ran');
    // refused before the checkpoint: the workspace's work is still uncheckpointed, and no branch was written
    assert.equal(awcOk(home, ['show', ws]).headSnapshotId, base.id);
    assert.equal(bobSh('git -C "$1" for-each-ref refs/heads/b', bobRepo), '');
  });
});
