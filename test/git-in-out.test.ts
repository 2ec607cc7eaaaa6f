/**
 * `awc snapshot import --git` (issue 10 item 5) with real git: a fork of the snapshot, mounted,
 * is a working clone at the revision (`git status` clean, `git log` right), the origin and
 * commit are labels, and a missing repository or revision is a clear error.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { awc, awcOk, cleanupMounts, errorOf } from './helpers/cli.js';
import { makeTempDir, removeTempDir } from './helpers/temp-dir.js';

const ENV = { AWC_MOUNT_DRIVER: 'copy' };

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=Test', '-c', 'user.email=t@example.org', ...args], { cwd, encoding: 'utf8' }).trim();
}

describe('awc snapshot import --git', () => {
  let tmp: string;
  let home: string;
  let repo: string;
  let first: string;
  let second: string;

  before(async () => {
    tmp = await makeTempDir('awc-git-');
    home = join(tmp, 'home');
    repo = join(tmp, 'repo');
    mkdirSync(repo);
    git(repo, 'init', '-q', '-b', 'main');
    writeFileSync(join(repo, 'a.txt'), 'one\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', 'first');
    first = git(repo, 'rev-parse', 'HEAD');
    writeFileSync(join(repo, 'a.txt'), 'two\n');
    writeFileSync(join(repo, 'b.txt'), 'bee\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', 'second');
    second = git(repo, 'rev-parse', 'HEAD');
  });
  after(async () => {
    cleanupMounts(home, tmp, ENV);
    await removeTempDir(tmp);
  });

  it('imports HEAD and a revision with their .git; a mounted fork is a clean working clone there', () => {
    const head = awcOk(home, ['snapshot', 'import', '--git', repo, '--name', 'head'], ENV);
    assert.deepEqual(head.git, { origin: repo, commit: second, branch: 'main' });
    assert.equal(head.labels['awc.git.commit'], second);
    assert.equal(head.labels['awc.git.origin'], repo);
    const old = awcOk(home, ['snapshot', 'import', '--git', repo, '--rev', first, '--name', 'old'], ENV);
    assert.equal(old.git.commit, first);
    for (const [snap, commit, content] of [
      ['head', second, 'two\n'],
      ['old', first, 'one\n'],
    ] as const) {
      const ws = awcOk(home, ['fork', snap], ENV).workspaces[0];
      const dir = join(tmp, `m-${snap}`);
      awcOk(home, ['mount', ws.id, dir], ENV);
      assert.equal(git(dir, 'rev-parse', 'HEAD'), commit);
      assert.equal(git(dir, 'status', '--porcelain', '--untracked-files=all'), '');
      assert.equal(execFileSync('cat', [join(dir, 'a.txt')], { encoding: 'utf8' }), content);
      assert.equal(git(dir, 'log', '--format=%s', '-1'), snap === 'head' ? 'second' : 'first');
      awcOk(home, ['unmount', ws.id, '--discard'], ENV);
    }
    // the source repository is untouched
    assert.equal(git(repo, 'status', '--porcelain'), '');
  });

  it('a missing repository, a bad revision, a source with --git: clear errors', () => {
    const missing = awc(home, ['snapshot', 'import', '--git', join(tmp, 'nope')], ENV);
    assert.equal(missing.code, 3);
    assert.equal(errorOf(missing).code, 'E_GIT_NOT_A_REPO');
    const notRepo = awc(home, ['snapshot', 'import', '--git', tmp], ENV);
    assert.equal(errorOf(notRepo).code, 'E_GIT_NOT_A_REPO');
    const bad = awc(home, ['snapshot', 'import', '--git', repo, '--rev', 'no-such-branch'], ENV);
    assert.equal(bad.code, 3);
    assert.equal(errorOf(bad).code, 'E_GIT_BAD_REV');
    assert.match(errorOf(bad).hint, /--rev/);
    assert.doesNotMatch(bad.stderr, /\n\s+at /); // no stack
    const both = awc(home, ['snapshot', 'import', repo, '--git', repo], ENV);
    assert.equal(errorOf(both).code, 'E_USAGE');
  });
});
