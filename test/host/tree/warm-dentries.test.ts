/**
 * `awc mount --warm` (src/host/tree/warm-dentries.ts, src/service/git/warm-workspace.ts, issue 11 part 1):
 * after the mount, every path of the workspace is looked up once, through directory
 * descriptors, following no symlink, and git's status runs where the root is a repository,
 * changing nothing. Real overlay driver (and the copy driver, where it is a plain
 * walk), real CLI. The speed it buys is a figure of `npm run bench:git`, not a test.
 */
import { strict as assert } from 'node:assert';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { execFileSync, spawnSync } from 'node:child_process';
import { awc, awcOk, cleanupMounts } from '../../helpers/cli.js';
import { warmDentries } from '../../../src/host/tree/warm-dentries.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

const overlay = detectDriver('auto').driver === 'overlay';

/** Every path under `dir` (not `dir` itself), as `find` counts them without following links. */
function findCount(dir: string): number {
  const r = spawnSync('find', [dir, '-mindepth', '1', '-printf', 'x'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.length;
}

describe('awc mount --warm', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-warm-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const outside = join(work, 'outside');
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });
  // 3 levels of 6 directories of 5 files, a raw-byte name, an empty dir, and links out of the tree
  mkdirSync(src);
  for (let a = 0; a < 6; a++)
    for (let b = 0; b < 6; b++) {
      const d = join(src, `a${a}`, `b${b}`);
      mkdirSync(d, { recursive: true });
      for (let f = 0; f < 5; f++) writeFileSync(join(d, `f${f}.txt`), `${a}${b}${f}\n`);
    }
  writeFileSync(Buffer.concat([Buffer.from(`${src}/`), Buffer.from([0x66, 0xff, 0x0a])]) as unknown as string, 'raw\n');
  mkdirSync(join(src, 'empty'));
  mkdirSync(outside);
  for (let i = 0; i < 50; i++) writeFileSync(join(outside, `o${i}`), 'o');
  symlinkSync(outside, join(src, 'link-out'));
  symlinkSync('.', join(src, 'loop'));
  // a repository at the root: --warm runs git's status there too
  const git = (...a: string[]) => execFileSync('git', ['-C', src, '-c', 'user.name=t', '-c', 'user.email=t@t', ...a], { stdio: 'ignore' });
  git('init', '-q');
  git('add', 'a0');
  git('commit', '-qm', 'base');
  const total = findCount(src);
  awcOk(home, ['snapshot', 'import', src, '--name', 'base']);

  for (const driver of overlay ? ['overlay', 'copy'] : ['copy']) {
    it(`${driver}: looks up every path once, enters no link, changes nothing`, () => {
      const ws = awcOk(home, ['fork', 'base']).workspaces[0].id;
      const mnt = join(work, `mnt-${driver}`);
      const r = awcOk(home, ['mount', ws, mnt, '--warm'], { AWC_MOUNT_DRIVER: driver });
      assert.equal(r.driver, driver);
      assert.equal(r.warmed.entries, total, 'every path, once; the 50 files behind link-out and the loop are not walked');
      const gitDirs = Number(execFileSync('sh', ['-c', `find ${src}/.git -type d | wc -l`], { encoding: 'utf8' }));
      assert.equal(r.warmed.directories, 1 + 6 + 36 + 1 + gitDirs, 'the root, a*, a*/b*, empty and .git');
      assert.equal(r.warmed.git, true, "git's status ran at the root");
      if (driver === 'overlay')
        assert.deepEqual(
          readdirSync(join(home, 'host', 'workspaces', ws, 'upper')),
          [],
          'the walk and the status wrote nothing into the upper',
        );
      assert.equal(findCount(mnt), total);
      const cp = awcOk(home, ['checkpoint', ws]);
      assert.equal(cp.changed, false, `the walk changed nothing: ${JSON.stringify(cp)}`);
      const text = awc(home, ['mount', ws, mnt, '--warm'], { AWC_MOUNT_DRIVER: driver }, { json: false });
      assert.notEqual(text.code, 0, 'mounting it again is refused (already mounted)');
      awcOk(home, ['unmount', ws]);
    });
  }

  it("a repository whose own configuration defines a filter: --warm's status runs with AWC's configuration, never the snapshot's clean command", () => {
    const evil = join(work, 'evil');
    const marker = join(work, 'filter-ran');
    mkdirSync(evil);
    const g = (...a: string[]) => execFileSync('git', ['-C', evil, '-c', 'user.name=t', '-c', 'user.email=t@t', ...a], { stdio: 'ignore' });
    g('init', '-q');
    writeFileSync(join(evil, '.gitattributes'), '*.txt filter=evil\n');
    writeFileSync(join(evil, 'a.txt'), 'one\n');
    g('add', '-A');
    g('commit', '-qm', 'base');
    // through an include, as a hostile snapshot would hide it
    writeFileSync(join(evil, '.git', 'filters'), `[filter "evil"]\n\tclean = tee ${marker}\n`);
    g('config', 'include.path', 'filters');
    writeFileSync(join(evil, 'a.txt'), 'two\n'); // changed after the commit: a status must read it, through the filter
    execFileSync('git', ['-C', evil, 'status', '--porcelain'], { stdio: 'ignore' });
    assert.ok(existsSync(marker), 'the test is real: a plain git status there runs the filter');
    rmSync(marker);
    awcOk(home, ['snapshot', 'import', evil, '--name', 'evil']);
    const ws = awcOk(home, ['fork', 'evil']).workspaces[0].id;
    const r = awcOk(home, ['mount', ws, join(work, 'mnt-evil'), '--warm']);
    // git reads AWC's configuration, not the snapshot's (src/service/git/git-sandbox.ts): the status runs, the filter is unknown to it
    assert.equal(r.warmed.git, true);
    assert.ok(r.warmed.entries > 0, 'the walk still ran');
    assert.ok(!existsSync(marker), "the snapshot's filter command did not run");
    awcOk(home, ['unmount', ws, '--discard']);
  });

  it('a root that is gone or is a symlink is E_NOT_MOUNTED; it is never followed', async () => {
    await rejectsWith(warmDentries(join(work, 'nowhere')), 'E_NOT_MOUNTED');
    const l = join(work, 'root-link');
    symlinkSync(src, l);
    await rejectsWith(warmDentries(l), 'E_NOT_MOUNTED');
    assert.equal((await warmDentries(src)).entries, total);
  });
});
