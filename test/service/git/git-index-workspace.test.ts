/**
 * Issue 11 part 1 (docs/explanation/git.md#the-workspaces-index), overlay driver, real git,
 * one home: a fresh workspace of a repository snapshot shows an index whose stat data
 * matches the mount, so the first `git status` is clean without reading one tracked file's
 * content (counted at the content FUSE server); a change made after the mount, even of the
 * same size within the same mtime second, is still reported; and the rewritten index never
 * leaves the host: a checkpoint or an export of the untouched workspace holds the snapshot's
 * own `.git/index` bytes.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, lstatSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { awc, awcOk, cleanupMounts } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { readAll } from '../../helpers/metrics.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

const ENV = { AWC_MOUNT_DRIVER: 'overlay' };
const FILES = 40;

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=Test', '-c', 'user.email=t@example.org', ...args], { cwd, encoding: 'utf8' }).trim();
}

/** Content FUSE READs so far (the daemon's awc_fuse_operations_total{op="read"}). */
function fuseReads(home: string): number {
  const m = awcOk(home, ['metrics']).metrics as Record<string, unknown>;
  const v = m.awc_fuse_operations_total;
  if (!Array.isArray(v)) return 0;
  return v.filter((s: { labels: { op: string } }) => s.labels.op === 'read').reduce((a: number, s: { value: number }) => a + s.value, 0);
}

const overlay = detectDriver('auto').driver === 'overlay';

describe('a fresh workspace of a repository: git trusts its index', { skip: overlay ? false : 'overlay is not possible here' }, () => {
  let tmp: string;
  let home: string;
  let repo: string;
  let index: Buffer;

  before(async () => {
    tmp = await makeTempDir('awc-gitidx-');
    home = join(tmp, 'home');
    repo = join(tmp, 'repo');
    mkdirSync(join(repo, 'src', 'deep'), { recursive: true });
    git(repo, 'init', '-q', '-b', 'main');
    for (let i = 0; i < FILES; i++) writeFileSync(join(repo, i % 2 ? 'src' : 'src/deep', `f${i}.txt`), `file ${i}\n`.repeat(100 + i));
    writeFileSync(join(repo, 'run.sh'), '#!/bin/sh\necho hi\n');
    chmodSync(join(repo, 'run.sh'), 0o755);
    symlinkSync('src/f1.txt', join(repo, 'link'));
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', 'first');
    git(repo, 'status', '--porcelain'); // settles the index's stat data, as a user's checkout has it
    index = readFileSync(join(repo, '.git', 'index'));
    awcOk(home, ['snapshot', 'import', repo, '--name', 'base'], ENV);
  });
  after(async () => {
    cleanupMounts(home, tmp, ENV);
    await removeTempDir(tmp);
  });

  it('the first git status is clean and reads no tracked file; the index there differs only in stat data', () => {
    const ws = awcOk(home, ['fork', 'base'], ENV).workspaces[0].id;
    const mnt = join(tmp, 'm1');
    awcOk(home, ['mount', ws, mnt], ENV);
    readAll(join(mnt, '.git'));
    const shown = readFileSync(join(mnt, '.git', 'index'));
    assert.notDeepEqual(shown, index, 'the workspace shows the rewritten index');
    assert.equal(shown.length, index.length, 'same entries, same extensions (none here)');
    const reads = fuseReads(home);
    assert.equal(git(mnt, 'status', '--porcelain', '--untracked-files=all'), '');
    assert.equal(fuseReads(home) - reads, 0, 'git read no content through the FUSE server');
    // git found nothing to refresh: it did not write the index (no copy-up), it is still the layer's
    assert.deepEqual(readFileSync(join(mnt, '.git', 'index')), shown);
    // the bytes differ only in the stat data of entries (40 bytes each) and the trailing hash
    const ls = git(mnt, 'ls-files', '--stage');
    assert.equal(ls, git(repo, 'ls-files', '--stage'));
    // the stat data of an entry is what the mount shows for it (git ls-files --debug prints it)
    const debug = git(mnt, 'ls-files', '--debug', 'src/f1.txt');
    const st = lstatSync(join(mnt, 'src', 'f1.txt'), { bigint: true });
    assert.match(debug, new RegExp(`ino: ${st.ino & 0xffffffffn}\\b`));
    assert.match(debug, new RegExp(`mtime: ${st.mtimeNs / 1_000_000_000n}:${st.mtimeNs % 1_000_000_000n}\\b`));
    assert.match(debug, new RegExp(`ctime: ${st.ctimeNs / 1_000_000_000n}:${st.ctimeNs % 1_000_000_000n}\\b`));

    // a checkpoint of the workspace (one new file: a new snapshot) and an export hold the snapshot's own index bytes
    writeFileSync(join(mnt, 'notes.txt'), 'work\n');
    const cp = awcOk(home, ['checkpoint', ws], ENV);
    assert.equal(cp.changed, true);
    for (const [ref, dir] of [
      [cp.id, 'export1'],
      [ws, 'export2'],
    ]) {
      const out = join(tmp, dir);
      awcOk(home, ['export', ref, '--dir', out], ENV);
      assert.deepEqual(readFileSync(join(out, '.git', 'index')), index, `the export of ${ref} holds the snapshot's index`);
      assert.equal(readFileSync(join(out, 'notes.txt'), 'utf8'), 'work\n');
    }
    awcOk(home, ['unmount', ws, '--discard'], ENV);
  });

  it('a change after the mount, same size and same mtime second, is still reported', () => {
    const ws = awcOk(home, ['fork', 'base'], ENV).workspaces[0].id;
    const mnt = join(tmp, 'm2');
    awcOk(home, ['mount', ws, mnt], ENV);
    const p = join(mnt, 'src', 'f1.txt');
    const st = lstatSync(p, { bigint: true });
    const old = readFileSync(p);
    const changed = Buffer.from(old);
    changed[0] = changed[0] === 0x41 ? 0x42 : 0x41;
    writeFileSync(p, changed);
    // the same mtime to the nanosecond as before: only ctime and inode tell
    const ns = st.mtimeNs.toString();
    execFileSync('touch', ['-m', '-d', `@${ns.slice(0, -9)}.${ns.slice(-9)}`, p]);
    assert.equal(lstatSync(p, { bigint: true }).mtimeNs, st.mtimeNs);
    assert.equal(lstatSync(p).size, Number(st.size));
    assert.equal(git(mnt, 'status', '--porcelain'), 'M src/f1.txt');
    const r = awc(home, ['unmount', ws, '--discard'], ENV);
    assert.equal(r.code, 0, r.stderr);
  });

  it('a proof record that does not parse counts as none: the mount works, the workspace shows the snapshot index', () => {
    writeFileSync(join(repo, 'untracked-here.txt'), 'a new root\n');
    const snap = awcOk(home, ['snapshot', 'import', repo, '--name', 'badproof'], ENV);
    const hex = String(snap.root).slice('sha256:'.length);
    const record = join(home, 'objects', 'gitproof', hex.slice(0, 2), hex);
    assert.equal(JSON.parse(readFileSync(record, 'utf8')).v, 1, 'the import stored its proof');
    writeFileSync(record, 'not json');
    const ws = awcOk(home, ['fork', 'badproof'], ENV).workspaces[0].id;
    const mnt = join(tmp, 'm4');
    awcOk(home, ['mount', ws, mnt], ENV);
    assert.deepEqual(readFileSync(join(mnt, '.git', 'index')), index);
    assert.equal(git(mnt, 'status', '--porcelain'), '?? untracked-here.txt');
    awcOk(home, ['unmount', ws, '--discard'], ENV);
    rmSync(join(repo, 'untracked-here.txt'));
  });

  it('an import of a checkout with unstaged work: the edited file is not proven, git still reports it', () => {
    // the user's edit: same size, and the mtime the index records, so only the content differs
    const p = join(repo, 'src', 'f3.txt');
    const st = lstatSync(p, { bigint: true });
    const old = readFileSync(p);
    writeFileSync(p, Buffer.from(old.toString('latin1').replace('file 3', 'FILE 3'), 'latin1'));
    const ns = st.mtimeNs.toString();
    execFileSync('touch', ['-m', '-d', `@${ns.slice(0, -9)}.${ns.slice(-9)}`, p]);
    awcOk(home, ['snapshot', 'import', repo, '--name', 'dirty'], ENV);
    writeFileSync(p, old);
    const ws = awcOk(home, ['fork', 'dirty'], ENV).workspaces[0].id;
    const mnt = join(tmp, 'm3');
    awcOk(home, ['mount', ws, mnt], ENV);
    assert.equal(git(mnt, 'status', '--porcelain'), 'M src/f3.txt');
    awcOk(home, ['unmount', ws, '--discard'], ENV);
  });
});
