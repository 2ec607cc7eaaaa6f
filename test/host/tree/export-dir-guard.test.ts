/**
 * Issue 7 items 8 and 2 (export --dir as an attacker would use it): --overwrite never deletes
 * the AWC home or another file system's files (a target that is, holds or is inside the home
 * is E_USAGE; a mount point at or below it is E_TARGET_BUSY; nothing is touched), the old
 * tree's removal never crosses a file-system boundary, no error shows /proc/self/fd paths,
 * and setuid/setgid bits and device nodes are left out (and listed) unless --keep-privileges.
 */
import { test, describe, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  readFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc as runAwc, awcOk, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { DirFd } from '../../../src/core/dir-fd.js';
import { AwcError } from '../../../src/core/errors.js';

/** Every path below `dir` with its type and size (what "nothing changed on disk" compares). */
function listing(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string, rel: string): void => {
    for (const n of readdirSync(d).sort()) {
      const st = lstatSync(join(d, n));
      out.push(`${rel}${n} ${st.isDirectory() ? 'dir' : st.size}`);
      if (st.isDirectory()) walk(join(d, n), `${rel}${n}/`);
    }
  };
  walk(dir, '');
  return out;
}

describe('export --dir --overwrite refuses the home and mounts, touching nothing', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-export-guard-'));
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  const base = join(work, 'base');
  const home = join(base, 'home');
  let snap: string;
  before(() => {
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    snap = awcOk(home, ['snapshot', 'import', src], env).id;
  });
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  for (const [what, target] of [
    ['the home', () => home],
    ['a parent of the home', () => base],
    ['<home>/objects', () => join(home, 'objects')],
    [
      'a symlink to the home',
      () => {
        const l = join(work, 'to-home');
        symlinkSync(home, l);
        return l;
      },
    ],
  ] as const) {
    test(`${what} → E_USAGE, nothing changed`, () => {
      const t = target();
      const before = listing(work);
      const r = runAwc(home, ['export', snap, '--dir', t, '--overwrite'], env);
      assert.equal(r.code, 2, r.stderr);
      const e = errorOf(r);
      assert.equal(e.code, 'E_USAGE');
      assert.match(e.message, /AWC home/);
      assert.match(e.hint, /outside the AWC data directory/);
      // the catalog may be rewritten in place by opening it; names and the objects must stay
      const strip = (l: string[]): string[] => l.map((x) => (x.includes('catalog') ? x.replace(/ \d+$/, '') : x));
      assert.deepEqual(strip(listing(work)), strip(before));
      awcOk(home, ['export', snap, '--dir', join(work, `ok-${what.replace(/\W/g, '')}`)], env); // the home still works
    });
  }

  test('a bind mount below the target → E_TARGET_BUSY; neither the target nor the mount source loses a file', () => {
    const source = join(work, 'bind-src');
    const target = join(work, 'bind-target');
    mkdirSync(source);
    writeFileSync(join(source, 'precious.txt'), 'do not delete\n');
    mkdirSync(join(target, 'sub', 'mnt'), { recursive: true });
    writeFileSync(join(target, 'keep.txt'), 'mine\n');
    execFileSync('mount', ['--bind', source, join(target, 'sub', 'mnt')]);
    try {
      const before = [listing(target), listing(source)];
      const r = runAwc(home, ['export', snap, '--dir', target, '--overwrite'], env);
      assert.equal(r.code, 4, r.stderr);
      const e = errorOf(r);
      assert.equal(e.code, 'E_TARGET_BUSY');
      assert.match(e.message, /mount point below it/);
      assert.deepEqual([listing(target), listing(source)], before);
      assert.deepEqual(
        readdirSync(work).filter((n) => n.startsWith('.awc-')),
        [],
        'nothing left beside the target',
      );
    } finally {
      spawnSync('umount', ['-l', join(target, 'sub', 'mnt')]);
    }
    assert.equal(readFileSync(join(source, 'precious.txt'), 'utf8'), 'do not delete\n');
  });

  test('a target that is a mount point → E_TARGET_BUSY (with and without --overwrite), no /proc/self/fd path shown', () => {
    const target = join(work, 'tmpfs');
    mkdirSync(target);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', target]);
    try {
      writeFileSync(join(target, 'on-tmpfs.txt'), 'x\n');
      for (const args of [['--overwrite'], []]) {
        if (args.length === 0) rmSync(join(target, 'on-tmpfs.txt'));
        const before = listing(target);
        const r = runAwc(home, ['export', snap, '--dir', target, ...args], env);
        assert.equal(r.code, 4, r.stderr);
        const e = errorOf(r);
        assert.equal(e.code, 'E_TARGET_BUSY', r.stderr);
        assert.doesNotMatch(r.stderr, /\/proc\/self\/fd/);
        assert.deepEqual(listing(target), before);
        assert.deepEqual(
          readdirSync(work).filter((n) => n.startsWith('.awc-')),
          [],
        );
      }
    } finally {
      spawnSync('umount', ['-l', target]);
    }
  });

  test("an error from writing names the user's path, never /proc/self/fd/N (a read-only parent)", () => {
    const ro = join(work, 'ro');
    mkdirSync(ro);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,ro', 'tmpfs', ro]);
    try {
      const r = runAwc(home, ['export', snap, '--dir', join(ro, 'out')], env);
      assert.notEqual(r.code, 0);
      assert.doesNotMatch(r.stderr, /\/proc\/self\/fd/);
      assert.match(errorOf(r).message, new RegExp(ro));
    } finally {
      spawnSync('umount', ['-l', ro]);
    }
  });

  test('--overwrite onto a regular file → E_TARGET_EXISTS whose hint says --overwrite replaces only a directory', () => {
    const file = join(work, 'a-file');
    writeFileSync(file, 'keep\n');
    const r = runAwc(home, ['export', snap, '--dir', file, '--overwrite'], env);
    assert.equal(r.code, 4, r.stderr);
    const e = errorOf(r);
    assert.equal(e.code, 'E_TARGET_EXISTS');
    assert.match(e.hint, /--overwrite replaces only a directory/);
    assert.equal(readFileSync(file, 'utf8'), 'keep\n');
  });

  test('a failure removing the old tree puts it back: the export is undone, nothing is left beside it', () => {
    const target = join(work, 'stuck');
    mkdirSync(target);
    writeFileSync(join(target, 'z-stuck'), 'immutable\n');
    execFileSync('chattr', ['+i', join(target, 'z-stuck')]);
    try {
      const r = runAwc(home, ['export', snap, '--dir', target, '--overwrite'], env);
      assert.equal(r.code, 6, r.stderr);
      const e = errorOf(r);
      assert.equal(e.code, 'E_PERMISSION', r.stderr);
      assert.match(e.message, /export was undone/);
      assert.doesNotMatch(r.stderr, /\/proc\/self\/fd/);
      assert.deepEqual(readdirSync(target), ['z-stuck'], 'the old tree is back, the new one is gone');
      assert.deepEqual(
        readdirSync(work).filter((n) => n.startsWith('.awc-')),
        [],
      );
    } finally {
      for (const d of [
        target,
        ...readdirSync(work)
          .filter((n) => n.startsWith('.awc-'))
          .map((n) => join(work, n)),
      ])
        spawnSync('chattr', ['-i', join(d, 'z-stuck')]);
    }
  });

  test('removing a tree with a dev never crosses into another file system', () => {
    const tree = join(work, 'rm-tree');
    mkdirSync(join(tree, 'a', 'mnt'), { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', join(tree, 'a', 'mnt')]);
    try {
      writeFileSync(join(tree, 'a', 'mnt', 'other-fs.txt'), 'x\n');
      const parent = DirFd.openRoot(work)!;
      try {
        assert.throws(
          () => parent.dir.removeTree('rm-tree', { dev: parent.st.dev }),
          (e: unknown) => e instanceof AwcError && e.code === 'E_TARGET_BUSY' && /a\/mnt/.test(e.message),
        );
      } finally {
        parent.dir.close();
      }
      assert.equal(readFileSync(join(tree, 'a', 'mnt', 'other-fs.txt'), 'utf8'), 'x\n');
    } finally {
      spawnSync('umount', ['-l', join(tree, 'a', 'mnt')]);
    }
  });
});

describe('export --dir leaves out setuid/setgid bits and device nodes unless --keep-privileges', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-export-priv-'));
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  const home = join(work, 'home');
  let snap: string;
  before(() => {
    const stage = join(work, 'stage');
    mkdirSync(stage);
    writeFileSync(join(stage, 'suid-root'), '#!/bin/sh\nid -u\n');
    chmodSync(join(stage, 'suid-root'), 0o4755);
    execFileSync('mknod', ['-m', '666', join(stage, 'null-dev'), 'c', '1', '3']);
    writeFileSync(join(stage, 'plain.txt'), 'plain\n');
    execFileSync('tar', ['-cf', join(work, 'evil.tar'), '-C', stage, '--numeric-owner', '--owner=0', '--group=0', '.']);
    snap = awcOk(home, ['snapshot', 'import', join(work, 'evil.tar')], env).id;
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  test('by default: no setuid bit, no device node, both in leftOut (JSON) and warned about (text)', () => {
    const out = join(work, 'out');
    const r = awcOk(home, ['export', snap, '--dir', out], env);
    assert.equal(statSync(join(out, 'suid-root')).mode & 0o7777, 0o755);
    assert.equal(lstatSync(join(out, 'null-dev'), { throwIfNoEntry: false }), undefined);
    assert.equal(readFileSync(join(out, 'plain.txt'), 'utf8'), 'plain\n');
    assert.deepEqual(r.leftOut.map((l: { path: string }) => l.path).sort(), ['null-dev', 'suid-root']);
    for (const l of r.leftOut) assert.match(l.reason, /not materialised/);
    const text = runAwc(home, ['export', snap, '--dir', join(work, 'out-text')], env, { json: false });
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stderr, /warning: null-dev: left out.*--keep-privileges/);
    assert.match(text.stderr, /warning: suid-root: left out.*--keep-privileges/);
  });

  test('with --keep-privileges: the setuid-root file and the 0666 char device 1,3 are there; a tar keeps them too', () => {
    const out = join(work, 'out-keep');
    const r = awcOk(home, ['export', snap, '--dir', out, '--keep-privileges'], env);
    assert.deepEqual(r.leftOut, []);
    const st = statSync(join(out, 'suid-root'));
    assert.equal(st.mode & 0o7777, 0o4755);
    assert.equal(st.uid, 0);
    const dev = lstatSync(join(out, 'null-dev'));
    assert.ok(dev.isCharacterDevice());
    assert.equal(dev.mode & 0o7777, 0o666);
    assert.equal(dev.rdev, (1 << 8) | 3);
    const tar = join(work, 'out.tar');
    const t = awcOk(home, ['export', snap, '--tar', tar], env);
    assert.equal(t.leftOut, undefined);
    const listed = execFileSync('tar', ['-tvf', tar], { encoding: 'utf8' });
    assert.match(listed, /^-rwsr-xr-x .*suid-root$/m);
    assert.match(listed, /^crw-rw-rw- .*null-dev$/m);
  });
});
