import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  appendFileSync,
  chmodSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awcOk, cleanupMounts, readTreeInfo } from '../helpers/cli.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';

/**
 * Fidelity of snapshot → mount → edit → checkpoint → export on a fixture with every kind
 * of entry the main job supports: what the workspace shows is what the checkpoint holds.
 */
function touchNs(p: string, ns: string): void {
  execFileSync('touch', ['-h', '-d', `@${ns.slice(0, -9)}.${ns.slice(-9)}`, p]);
}

function makeFixture(root: string): void {
  mkdirSync(join(root, 'dir', 'sub'), { recursive: true });
  mkdirSync(join(root, 'empty-dir'));
  mkdirSync(join(root, 'other'));
  mkdirSync(join(root, 'sticky'));
  chmodSync(join(root, 'sticky'), 0o1777);
  writeFileSync(join(root, 'regular.txt'), 'regular\n');
  writeFileSync(join(root, 'empty'), '');
  writeFileSync(join(root, 'exec.sh'), '#!/bin/sh\necho hi\n');
  chmodSync(join(root, 'exec.sh'), 0o755);
  writeFileSync(join(root, 'setuid'), 'suid\n');
  chmodSync(join(root, 'setuid'), 0o4755);
  writeFileSync(join(root, 'big.bin'), Buffer.alloc(700_000, 7));
  writeFileSync(join(root, 'dir', 'a.txt'), 'a\n');
  writeFileSync(join(root, 'dir', 'sub', 'b.txt'), 'b\n');
  writeFileSync(join(root, 'hl-first'), 'shared inode\n');
  linkSync(join(root, 'hl-first'), join(root, 'hl-second'));
  linkSync(join(root, 'hl-first'), join(root, 'other', 'hl-third'));
  symlinkSync('regular.txt', join(root, 'link-rel'));
  symlinkSync('/etc/hostname', join(root, 'link-abs'));
  symlinkSync('nowhere/at/all', join(root, 'link-dangling'));
  execFileSync('mkfifo', [join(root, 'fifo')]);
  execFileSync('setfattr', ['-n', 'user.note', '-v', 'kept', join(root, 'regular.txt')]);
  let ns = 1_700_000_000_123_456_789n;
  for (const p of [
    'regular.txt',
    'empty',
    'exec.sh',
    'setuid',
    'big.bin',
    'dir/a.txt',
    'dir/sub/b.txt',
    'hl-first',
    'link-rel',
    'link-abs',
    'fifo',
    'dir/sub',
    'dir',
    'empty-dir',
  ]) {
    touchNs(join(root, p), (ns += 1_000_000_007n).toString());
  }
}

function edit(root: string): void {
  appendFileSync(join(root, 'hl-first'), 'changed through the first name\n');
  chmodSync(join(root, 'setuid'), 0o755);
  renameSync(join(root, 'dir'), join(root, 'dir-renamed'));
  rmSync(join(root, 'empty-dir'), { recursive: true });
  mkdirSync(join(root, 'empty-dir'));
  writeFileSync(join(root, 'empty-dir', 'now-full'), 'x');
  renameSync(join(root, 'regular.txt'), join(root, 'other', 'regular-moved.txt'));
  rmSync(join(root, 'link-dangling'));
  symlinkSync('somewhere/else', join(root, 'link-dangling'));
  rmSync(join(root, 'fifo'));
}

function mtimes(root: string, paths: string[]): string[] {
  return paths.map((p) => lstatSync(join(root, p), { bigint: true }).mtimeNs.toString());
}

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`fidelity (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-fidelity-${driver}-`));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const mnt = join(work, 'mnt');
    const env = { AWC_MOUNT_DRIVER: driver };
    let snap: { id: string; root: string };

    before(() => {
      mkdirSync(src);
      makeFixture(src);
      snap = awcOk(home, ['snapshot', 'import', src], env);
    });
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('export equals the source: types, modes, links, xattrs and nanosecond mtimes', () => {
      const out = join(work, 'export-base');
      awcOk(home, ['export', snap.id, '--dir', out, '--keep-privileges'], env);
      assert.deepEqual(readTreeInfo(out), readTreeInfo(src));
      const timed = ['regular.txt', 'exec.sh', 'big.bin', 'dir/sub/b.txt', 'link-abs', 'dir', 'empty-dir'];
      assert.deepEqual(mtimes(out, timed), mtimes(src, timed));
      assert.equal(lstatSync(join(out, 'hl-second')).ino, lstatSync(join(out, 'hl-first')).ino);
      assert.equal(lstatSync(join(out, 'other', 'hl-third')).ino, lstatSync(join(out, 'hl-first')).ino);
      assert.equal(execFileSync('getfattr', ['--only-values', '-n', 'user.note', join(out, 'regular.txt')], { encoding: 'utf8' }), 'kept');
      assert.ok(lstatSync(join(out, 'fifo')).isFIFO());
    });

    test('the mounted workspace shows the tree; after edits the checkpoint holds exactly what it shows', () => {
      const ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      awcOk(home, ['mount', ws, mnt], env);
      assert.deepEqual(readTreeInfo(mnt), readTreeInfo(src));
      assert.equal(readFileSync(join(mnt, 'big.bin')).length, 700_000);
      edit(mnt);
      const shown = readTreeInfo(mnt);
      if (driver === 'overlay') {
        // overlayfs breaks the hardlink on copy-up: the other names keep the old content
        assert.equal(readFileSync(join(mnt, 'hl-second'), 'utf8'), 'shared inode\n');
      }
      const cp = awcOk(home, ['checkpoint', ws], env);
      assert.equal(cp.changed, true);
      const out = join(work, 'export-cp');
      awcOk(home, ['export', cp.id, '--dir', out, '--keep-privileges'], env);
      assert.deepEqual(readTreeInfo(out), shown);
      // untouched entries keep their exact nanosecond mtimes through the checkpoint
      const untouched = ['exec.sh', 'big.bin', 'link-abs'];
      assert.deepEqual(mtimes(out, untouched), mtimes(src, untouched));
      assert.equal(
        execFileSync('getfattr', ['--only-values', '-n', 'user.note', join(out, 'other', 'regular-moved.txt')], { encoding: 'utf8' }),
        'kept',
      );
      // tar round trip of the checkpoint keeps the root digest
      const tar = join(work, 'cp.tar');
      awcOk(home, ['export', cp.id, '--tar', tar], env);
      assert.equal(awcOk(home, ['snapshot', 'import', tar], env).root, cp.root);
      awcOk(home, ['unmount', ws], env);
    });
  });
}
