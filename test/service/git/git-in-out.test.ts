/**
 * Git in and out (issue 10 item 5) with real git, one home. In: `awc snapshot import --git`:
 * a fork of the snapshot, mounted, is a working clone at the revision (`git status` clean,
 * `git log` right), the origin and commit are labels, and a missing repository or revision
 * is a clear error. Out: `awc export --git --branch` and `awc checkpoint --git-branch`: the
 * commit, its tree, modes and parent verified with git itself, the user's checkout untouched.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { awc, awcOk, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

const ENV = { AWC_MOUNT_DRIVER: 'copy' };

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=Test', '-c', 'user.email=t@example.org', ...args], { cwd, encoding: 'utf8' }).trim();
}

let tmp: string;
let home: string;
before(async () => {
  tmp = await makeTempDir('awc-git-');
  home = join(tmp, 'home');
});
after(async () => {
  cleanupMounts(home, tmp, ENV);
  await removeTempDir(tmp);
});

describe('awc snapshot import --git', () => {
  let repo: string;
  let first: string;
  let second: string;

  before(() => {
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

  it(
    'issue 24 item 9: root imports a repository another user owns (a checkout and a bare one), as the code marks it safe: no "dubious ownership"',
    { skip: process.getuid?.() !== 0 ? 'needs root (chown)' : false },
    () => {
      const theirs = join(tmp, 'theirs');
      execFileSync('cp', ['-a', repo, theirs]);
      const bare = join(tmp, 'theirs-bare.git');
      execFileSync('git', ['clone', '-q', '--bare', repo, bare]);
      for (const r of [theirs, bare]) execFileSync('chown', ['-R', '54321:54321', r]);
      for (const r of [theirs, bare]) {
        const res = awc(home, ['snapshot', 'import', '--git', r], ENV);
        assert.equal(res.code, 0, `${r}: ${res.stderr}`);
        assert.doesNotMatch(res.stderr, /dubious ownership/);
        assert.deepEqual(res.json.git, { origin: r, commit: second, branch: 'main' });
      }
    },
  );

  it(
    "issue 24 review: root never follows another user's alternates, commondir, gitdir or a symlinked objects directory out of their repository",
    { skip: process.getuid?.() !== 0 ? 'needs root (chown)' : false },
    () => {
      // root's private repository: a file the other user cannot read
      const vault = join(tmp, 'vault');
      mkdirSync(vault, { mode: 0o700 });
      const secretRepo = join(vault, 'repo');
      mkdirSync(secretRepo);
      git(secretRepo, 'init', '-q', '-b', 'main');
      writeFileSync(join(secretRepo, 'secret.txt'), 'ROOT-ONLY-SECRET\n');
      git(secretRepo, 'add', '.');
      git(secretRepo, 'commit', '-q', '-m', 'secret');
      const theirs = (name: string): string => join(tmp, `their-${name}`);
      // alternates naming root's objects: the user's repository has no objects of its own
      git(tmp, 'clone', '-q', '--shared', secretRepo, theirs('alt'));
      // a linked worktree whose .git file (gitdir, then commondir) names root's repository
      git(secretRepo, 'worktree', 'add', '-q', theirs('wt'));
      // objects a symbolic link to root's
      git(tmp, 'clone', '-q', '--no-hardlinks', secretRepo, theirs('link'));
      rmSync(join(theirs('link'), '.git', 'objects'), { recursive: true });
      symlinkSync(join(secretRepo, '.git', 'objects'), join(theirs('link'), '.git', 'objects'));
      // alternates one step removed: a relative alternate inside the repository whose own alternates leave it
      git(tmp, 'clone', '-q', '--bare', '--no-hardlinks', repo, theirs('chain'));
      git(tmp, 'clone', '-q', '--bare', '--shared', secretRepo, join(theirs('chain'), 'vendor', 'inner.git'));
      writeFileSync(join(theirs('chain'), 'objects', 'info', 'alternates'), '../vendor/inner.git/objects\n');
      for (const name of ['alt', 'wt', 'link', 'chain']) execFileSync('chown', ['-R', '54321:54321', theirs(name)]);
      const cases: [string, string][] = [
        [theirs('alt'), 'alternate'],
        [theirs('wt'), 'git directory'],
        [theirs('link'), 'objects'],
        [theirs('chain'), 'alternate'],
      ];
      for (const [r, what] of cases) {
        const res = awc(home, ['snapshot', 'import', '--git', r, '--name', `their-${what}`], ENV);
        assert.notEqual(res.code, 0, `${r}: imported`);
        const err = errorOf(res) as ReturnType<typeof errorOf> & { details: { path: string } };
        assert.equal(err.code, 'E_PERMISSION', `${r}: ${res.stderr}`);
        assert.ok(err.message.includes(what), `${r}: ${err.message}`);
        assert.ok(err.details.path.startsWith(vault), `${r}: names the path outside`);
        assert.match(err.hint ?? '', /owner/);
      }
      const names = awcOk(home, ['snapshot', 'ls'], ENV).snapshots.map((x: { name: string | null }) => x.name);
      assert.ok(!names.some((n: string | null) => n?.startsWith('their-')), 'nothing imported');
      // the same repositories of root's own: git follows them, as it would for root
      execFileSync('chown', ['-R', '0:0', theirs('alt')]);
      const own = awcOk(home, ['snapshot', 'import', '--git', theirs('alt'), '--name', 'own-alt'], ENV);
      assert.equal(own.git.branch, 'main');
    },
  );

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

describe('awc export --git --branch, awc checkpoint --git-branch', () => {
  const OV = { AWC_MOUNT_DRIVER: 'overlay' };
  let src: string;
  let base: string;
  let gitlink: string;
  let ws: string;
  let mnt: string;
  /** The user's checkout as git sees it: HEAD, the index file's bytes, the status, a working-tree file. */
  const userState = () => [
    git(src, 'rev-parse', 'HEAD'),
    git(src, 'symbolic-ref', 'HEAD'),
    readFileSync(join(src, '.git', 'index')).toString('base64'),
    git(src, '--no-optional-locks', 'status', '--porcelain', '--untracked-files=all'),
    readFileSync(join(src, 'a.txt'), 'utf8'),
  ];
  const exportGit = (args: string[], env: NodeJS.ProcessEnv = {}) => awc(home, ['export', ws, '--git', src, ...args], { ...OV, ...env });

  before(() => {
    src = join(tmp, 'src');
    mkdirSync(join(src, 'sub'), { recursive: true });
    git(src, 'init', '-q', '-b', 'main');
    git(src, 'config', 'user.name', 'Repo User');
    git(src, 'config', 'user.email', 'repo@example.org');
    writeFileSync(join(src, 'a.txt'), 'one\n');
    writeFileSync(join(src, 'del.txt'), 'gone soon\n');
    writeFileSync(join(src, 'script.sh'), '#!/bin/sh\necho hi\n');
    writeFileSync(join(src, '.gitignore'), '*.log\nbuild/\n');
    writeFileSync(join(src, 'tracked.log'), 'tracked although ignored\n');
    writeFileSync(join(src, 'sub', 'keep.txt'), 'keep\n');
    git(src, 'add', '-f', '.');
    git(src, 'commit', '-q', '-m', 'first');
    gitlink = git(src, 'rev-parse', 'HEAD');
    git(src, 'update-index', '--add', '--cacheinfo', `160000,${gitlink},mod`); // a submodule, never initialised
    git(src, 'commit', '-q', '-m', 'second');
    base = git(src, 'rev-parse', 'HEAD');
    // the user's checkout has work of its own: an unstaged edit and a staged new file
    writeFileSync(join(src, 'a.txt'), 'the user edits this\n');
    writeFileSync(join(src, 'staged.txt'), 'staged\n');
    git(src, 'add', 'staged.txt');
    git(src, 'status', '--porcelain'); // settles the index's stat data
    awcOk(home, ['snapshot', 'import', '--git', src, '--name', 'gx-base'], OV);
    ws = awcOk(home, ['fork', 'gx-base', '--name', 'gx'], OV).workspaces[0].id;
    mnt = join(tmp, 'gx');
    awcOk(home, ['mount', ws, mnt], OV);
  });

  it('writes the head as one commit on the base: tracked changes only, modes, parent, message, author; the checkout untouched', () => {
    const before = userState();
    writeFileSync(join(mnt, 'a.txt'), 'two\n');
    writeFileSync(join(mnt, 'new.txt'), 'new\n');
    rmSync(join(mnt, 'del.txt'));
    chmodSync(join(mnt, 'script.sh'), 0o755);
    symlinkSync('a.txt', join(mnt, 'link'));
    writeFileSync(join(mnt, 'tracked.log'), 'changed\n'); // ignored but tracked: exported
    writeFileSync(join(mnt, 'out.log'), 'ignored\n');
    mkdirSync(join(mnt, 'build'));
    writeFileSync(join(mnt, 'build', 'x.js'), 'ignored dir\n');
    writeFileSync(join(mnt, '.git', 'awc-junk'), 'under .git\n');
    writeFileSync(join(mnt, '.env'), 'TOKEN=never-leaves\n'); // the checkpoint leaves it out
    mkdirSync(join(mnt, 'dist'));
    writeFileSync(join(mnt, 'dist', 'tls.key'), 'stored (dist/ is reconstructible), never exported\n');
    mkdirSync(join(mnt, 'mod'), { recursive: true });
    writeFileSync(join(mnt, 'mod', 'x.txt'), 'inside the submodule\n');
    const cp = awcOk(home, ['checkpoint', ws], OV);
    assert.deepEqual(
      cp.secrets.map((s: { path: string }) => s.path),
      ['.env'],
    );
    const g = awcOk(home, ['export', ws, '--git', src, '--branch', 'awc/feat', '-m', 'agent work'], OV);
    assert.equal(g.created, true);
    assert.equal(g.parent, base);
    assert.equal(g.previous, null);
    assert.equal(g.snapshot, cp.id);
    assert.deepEqual(g.leftOut, [
      { path: 'dist/tls.key', reason: 'secret' },
      { path: 'mod/x.txt', reason: 'submodule' },
    ]);
    assert.equal(g.ignored, 2); // out.log, build/x.js
    assert.ok(g.gitDir >= 1);
    git(src, 'fsck', '--strict', '--no-progress');
    assert.equal(git(src, 'rev-parse', 'awc/feat'), g.commit);
    assert.equal(git(src, 'rev-parse', 'awc/feat^'), base);
    assert.equal(git(src, 'rev-list', '--count', `${base}..awc/feat`), '1');
    assert.equal(
      git(src, 'log', '-1', '--format=%an <%ae>|%cn <%ce>|%B', 'awc/feat'),
      'Repo User <repo@example.org>|Repo User <repo@example.org>|agent work',
    );
    assert.equal(
      git(src, 'diff', '--name-status', '--no-renames', base, 'awc/feat'),
      ['D\tdel.txt', 'M\ta.txt', 'A\tlink', 'A\tnew.txt', 'M\tscript.sh', 'M\ttracked.log']
        .sort((a, b) => (a.slice(2) < b.slice(2) ? -1 : 1))
        .join('\n'),
    );
    assert.deepEqual(
      git(src, 'ls-tree', 'awc/feat', '--', 'link', 'mod', 'script.sh')
        .split('\n')
        .map((l) => l.split(/\s+/).slice(0, 3).join(' ')),
      [
        '120000 blob ' + git(src, 'rev-parse', 'awc/feat:link'),
        `160000 commit ${gitlink}`,
        '100755 blob ' + git(src, 'rev-parse', 'awc/feat:script.sh'),
      ],
    );
    assert.equal(git(src, 'cat-file', 'blob', 'awc/feat:link'), 'a.txt');
    assert.equal(git(src, 'cat-file', 'blob', 'awc/feat:a.txt'), 'two');
    assert.deepEqual(userState(), before);
  });

  it('an existing branch: refused unless its tip is the base or --force; a checked-out branch: always refused', () => {
    const tip = git(src, 'rev-parse', 'awc/feat');
    const again = exportGit(['--branch', 'awc/feat']);
    assert.equal(again.code, 4);
    assert.equal(errorOf(again).code, 'E_GIT_BRANCH_EXISTS');
    assert.match(errorOf(again).hint, /--force/);
    assert.equal(git(src, 'rev-parse', 'awc/feat'), tip);
    const forced = awcOk(home, ['export', ws, '--git', src, '--branch', 'awc/feat', '--force'], OV);
    assert.equal(forced.previous, tip);
    assert.equal(git(src, 'rev-parse', 'awc/feat^'), base);
    assert.match(
      git(src, 'log', '-1', '--format=%B', 'awc/feat'),
      new RegExp(`^AWC: workspace gx at snapshot sn_[^\\n]*\\n\\nAWC-Snapshot: sn_\\w+\\nAWC-Workspace: ${ws}$`),
    );
    git(src, 'branch', 'at-base', base);
    const ff = awcOk(home, ['export', ws, '--git', src, '--branch', 'at-base'], OV);
    assert.equal(ff.previous, base);
    assert.equal(git(src, 'rev-parse', 'at-base^'), base);
    const main = exportGit(['--branch', 'main', '--force']);
    assert.equal(errorOf(main).code, 'E_GIT_BRANCH_CHECKED_OUT');
    assert.equal(git(src, 'rev-parse', 'main'), base);
  });

  it("checkpoint --git-branch: checkpoint and export in one step, into the recorded origin; AWC's identity where git has none", () => {
    writeFileSync(join(mnt, 'a.txt'), 'three\n');
    const r = awcOk(home, ['checkpoint', ws, '--git-branch', 'awc/step', '-m', 'step'], OV);
    assert.equal(r.checkpoint.changed, true);
    assert.equal(r.git.snapshot, r.checkpoint.id);
    assert.equal(awcOk(home, ['show', ws], OV).headSnapshotId, r.checkpoint.id);
    assert.equal(r.git.repo, src);
    assert.equal(git(src, 'rev-parse', 'awc/step^'), base);
    assert.equal(git(src, 'cat-file', 'blob', 'awc/step:a.txt'), 'three');
    assert.equal(git(src, 'log', '-1', '--format=%s', 'awc/step'), 'step');
    // a bare repository, and no user.name/user.email anywhere git looks: AWC's defaults
    const bare = join(tmp, 'bare.git');
    execFileSync('git', ['clone', '-q', '--bare', src, bare]);
    const empty = join(tmp, 'nobody');
    mkdirSync(empty);
    const b = awc(home, ['export', ws, '--git', bare, '--branch', 'out'], { ...OV, HOME: empty, XDG_CONFIG_HOME: empty });
    assert.equal(b.code, 0, b.stderr);
    git(bare, 'fsck', '--strict', '--no-progress');
    assert.equal(git(bare, 'log', '-1', '--format=%an <%ae>|%cn <%ce>', 'out'), 'AWC <awc@localhost>|AWC <awc@localhost>');
    assert.equal(git(bare, 'rev-parse', 'out^'), base);
  });

  it('errors: no repository, not a repository, no base commit, a bad branch name; checkpoint --git-branch checks first', () => {
    const nope = awc(home, ['export', ws, '--git', join(tmp, 'nope'), '--branch', 'x'], OV);
    assert.equal(nope.code, 3);
    assert.equal(errorOf(nope).code, 'E_GIT_NOT_A_REPO');
    assert.equal(errorOf(awc(home, ['export', ws, '--git', join(tmp, 'nobody'), '--branch', 'x'], OV)).code, 'E_GIT_NOT_A_REPO');
    const bad = exportGit(['--branch', 'a..b']);
    assert.equal(errorOf(bad).code, 'E_USAGE');
    // a snapshot of a plain directory has no base commit; a workspace forked from it neither
    const plain = join(tmp, 'plain');
    mkdirSync(plain);
    writeFileSync(join(plain, 'f.txt'), 'f\n');
    awcOk(home, ['snapshot', 'import', plain, '--name', 'plain'], OV);
    const noBase = awc(home, ['export', 'plain', '--git', src, '--branch', 'y'], OV);
    assert.equal(noBase.code, 2);
    assert.equal(errorOf(noBase).code, 'E_GIT_NO_BASE');
    assert.match(errorOf(noBase).hint, /awc\.git\.commit=/);
    // checkpoint --git-branch checks the repository before it checkpoints
    const head = awcOk(home, ['show', ws], OV).headSnapshotId;
    writeFileSync(join(mnt, 'a.txt'), 'four\n');
    const cpNoRepo = awc(home, ['checkpoint', ws, '--git-branch', 'y', '--git', join(tmp, 'nope')], OV);
    assert.equal(errorOf(cpNoRepo).code, 'E_GIT_NOT_A_REPO');
    assert.equal(awcOk(home, ['show', ws], OV).headSnapshotId, head);
    assert.equal(git(src, 'branch', '--list', 'y'), '');
  });
});
