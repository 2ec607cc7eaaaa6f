import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { awc, awcOk, cleanupMounts } from '../helpers/cli.js';
import { touchNs } from '../helpers/fidelity-fixture.js';
import { assertSameTree, readFullTree } from '../helpers/tree-compare.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * Issue 12 items 3, 4, 5, 9, 14 and 15 inside a mounted workspace, on both drivers: whiteouts
 * and opaque directories (nested, and a file deleted and recreated), `rm -rf pkg && mkdir -p
 * pkg/sub`, renames of directories and files (also after chmod), an emptied directory, empty
 * files, nanosecond mtimes, a retargeted symlink and a same-size rewrite with the old mtime.
 * Each checkpoint is exported and compared in full with what the mount shows.
 */

const T0 = 1_600_000_000_000_000_000n;

function lower(root: string): void {
  const w = (rel: string, data: string): void => {
    mkdirSync(join(root, rel, '..'), { recursive: true });
    writeFileSync(join(root, rel), data);
  };
  w('pkg/sub/stale', 'stale\n');
  w('pkg/top', 'top\n');
  w('gone/old-a', 'a\n');
  w('gone/deeper/old-b', 'b\n');
  w('nest/keep', 'keep\n');
  w('nest/inner/old', 'old\n');
  w('nest/inner/further/old2', 'old2\n');
  w('file-re', 'the old bytes\n');
  w('.wh.userdata', 'a file named like a whiteout\n');
  w('looks-opaque/child', 'child of a dir with user.overlay.opaque\n');
  xattr.setAttributeSync(join(root, 'looks-opaque'), 'user.overlay.opaque', 'y');
  w('mv-dir/one', 'one\n');
  w('mv-dir/sub/two', 'two\n');
  w('from/moved/three', 'three\n');
  mkdirSync(join(root, 'to'));
  w('f-rename', 'renamed file\n');
  w('f-chmod', 'chmodded then renamed\n');
  mkdirSync(join(root, 'g'));
  w('to-empty/only', 'only\n');
  chmodSync(join(root, 'to-empty'), 0o751);
  w('same-size', 'AAAA\n');
  symlinkSync('old1', join(root, 'ln-re'));
  let ns = T0;
  const stampAll = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (lstatSync(p).isDirectory()) stampAll(p);
      touchNs(p, (ns += 1_000_000_001n));
    }
  };
  stampAll(root);
}

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`fidelity in a workspace (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-fidelity-ws-${driver}-`));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const mnt = join(work, 'mnt');
    const env = { AWC_MOUNT_DRIVER: driver };
    let snap: { id: string; root: string };
    let ws: string;
    let n = 0; // checkpoints so far
    let lastId = '';

    /** Checkpoints, exports the checkpoint (dir and tar) and compares both with the mount in full. */
    const checkpointEqualsMount = (what: string): { id: string; root: string; out: string; prev: string } => {
      const shown = readFullTree(mnt);
      const cp = awcOk(home, ['checkpoint', ws], env);
      const out = join(work, `out-${++n}`);
      awcOk(home, ['export', cp.id, '--dir', out, '--keep-privileges'], env);
      assertSameTree(readFullTree(out), shown, `${what}: export --dir of the checkpoint equals the mount`);
      const tar = join(work, `cp-${n}.tar`);
      awcOk(home, ['export', cp.id, '--tar', tar], env);
      assert.equal(awcOk(home, ['snapshot', 'import', tar], env).root, cp.root, `${what}: export --tar keeps the root digest`);
      const prev = lastId;
      lastId = cp.id;
      return { ...cp, out, prev };
    };

    before(() => {
      mkdirSync(src);
      lower(src);
      snap = awcOk(home, ['snapshot', 'import', src], env);
      ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      lastId = snap.id;
      awcOk(home, ['mount', ws, mnt], env);
    });
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('deleted and recreated directories keep only their new children; user.overlay.* and .wh. names are data', () => {
      // item 4
      execFileSync('sh', ['-c', 'rm -rf pkg && mkdir -p pkg/sub && echo new > pkg/sub/fresh'], { cwd: mnt });
      // item 3: a directory recreated with other children, nested, and a file recreated with new bytes
      rmSync(join(mnt, 'gone'), { recursive: true });
      mkdirSync(join(mnt, 'gone/deeper'), { recursive: true });
      writeFileSync(join(mnt, 'gone/deeper/new-b'), 'new b\n');
      rmSync(join(mnt, 'nest/inner'), { recursive: true });
      mkdirSync(join(mnt, 'nest/inner/further'), { recursive: true });
      writeFileSync(join(mnt, 'nest/inner/further/new2'), 'new2\n');
      rmSync(join(mnt, 'file-re'));
      writeFileSync(join(mnt, 'file-re'), 'new bytes\n');
      writeFileSync(join(mnt, 'looks-opaque/added'), 'added\n');
      writeFileSync(join(mnt, '.wh.made-here'), 'made in the workspace\n');
      xattr.setAttributeSync(join(mnt, '.wh.made-here'), 'user.overlay.redirect', '/pkg');
      const cp = checkpointEqualsMount('whiteouts and opaque directories');
      const names = (rel: string): string[] => readdirSync(join(cp.out, rel)).sort();
      assert.deepEqual(names('pkg'), ['sub']);
      assert.deepEqual(names('pkg/sub'), ['fresh']);
      assert.deepEqual(names('gone'), ['deeper']);
      assert.deepEqual(names('gone/deeper'), ['new-b']);
      assert.deepEqual(names('nest'), ['inner', 'keep']);
      assert.deepEqual(names('nest/inner/further'), ['new2']);
      assert.equal(readFileSync(join(cp.out, 'file-re'), 'utf8'), 'new bytes\n');
      assert.deepEqual(names('looks-opaque'), ['added', 'child']);
      assert.equal(xattr.getAttributeSync(join(cp.out, 'looks-opaque'), 'user.overlay.opaque').toString(), 'y');
      assert.equal(xattr.getAttributeSync(join(cp.out, '.wh.made-here'), 'user.overlay.redirect').toString(), '/pkg');
      assert.equal(readFileSync(join(cp.out, '.wh.userdata'), 'utf8'), 'a file named like a whiteout\n');
    });

    test('renames keep bytes and modes under the new names', () => {
      const before = readFullTree(mnt);
      renameSync(join(mnt, 'mv-dir'), join(mnt, 'mv-dir-renamed'));
      renameSync(join(mnt, 'from/moved'), join(mnt, 'to/moved'));
      renameSync(join(mnt, 'f-rename'), join(mnt, 'f-renamed'));
      chmodSync(join(mnt, 'f-chmod'), 0o700);
      renameSync(join(mnt, 'f-chmod'), join(mnt, 'g/f-chmodded'));
      mkdirSync(join(mnt, 'newdir'));
      writeFileSync(join(mnt, 'newdir/a'), 'new a\n');
      writeFileSync(join(mnt, 'newdir/b'), 'new b\n');
      renameSync(join(mnt, 'newdir'), join(mnt, 'newdir-final'));
      const cp = checkpointEqualsMount('renames');
      const t = readFullTree(cp.out);
      const same = (from: string, to: string): void => {
        const a = before.nodes.get(from)!;
        const b = t.nodes.get(to)!;
        assert.equal(b.sha256, a.sha256, `${to} has the bytes of ${from}`);
        assert.equal(b.type, a.type);
        assert.equal(b.mode, to === 'g/f-chmodded' ? 0o700 : a.mode, `${to} mode`);
      };
      for (const [a, b] of [
        ['mv-dir', 'mv-dir-renamed'],
        ['mv-dir/one', 'mv-dir-renamed/one'],
        ['mv-dir/sub/two', 'mv-dir-renamed/sub/two'],
        ['from/moved/three', 'to/moved/three'],
        ['f-rename', 'f-renamed'],
        ['f-chmod', 'g/f-chmodded'],
      ] as const)
        same(a, b);
      for (const gone of ['mv-dir', 'from/moved', 'f-rename', 'f-chmod', 'newdir']) assert.equal(t.nodes.get(gone), undefined, gone);
      assert.equal(readFileSync(join(cp.out, 'newdir-final/a'), 'utf8'), 'new a\n');
      // awc diff reports each move as a rename (item 5)
      const d = awcOk(home, ['diff', cp.prev, cp.id], env);
      const renamed = d.changes
        .filter((c: { status: string }) => c.status === 'renamed')
        .map((c: { from: string; path: string }) => [c.from, c.path]);
      assert.deepEqual(renamed, [
        ['f-rename', 'f-renamed'],
        ['f-chmod', 'g/f-chmodded'],
        ['mv-dir', 'mv-dir-renamed'],
        ['mv-dir/one', 'mv-dir-renamed/one'],
        ['mv-dir/sub', 'mv-dir-renamed/sub'],
        ['mv-dir/sub/two', 'mv-dir-renamed/sub/two'],
        ['from/moved', 'to/moved'],
        ['from/moved/three', 'to/moved/three'],
      ]);
      const patch = awc(home, ['diff', cp.prev, cp.id, '--patch'], env, { json: false }).stdout;
      assert.ok(patch.includes('diff --git a/f-chmod b/g/f-chmodded\nold mode 100644\nnew mode 100755\nsimilarity index 100%\n'), patch);
      assert.ok(patch.includes('similarity index 100%\nrename from mv-dir/sub/two\nrename to mv-dir-renamed/sub/two\n'), patch);
    });

    test('an emptied directory is kept with its mode and mtime; empty files keep their own inodes; ns mtimes everywhere', () => {
      rmSync(join(mnt, 'to-empty/only'));
      touchNs(join(mnt, 'to-empty'), T0 + 42_424_242_424n);
      writeFileSync(join(mnt, 'empty-1'), '');
      writeFileSync(join(mnt, 'empty-2'), '');
      mkdirSync(join(mnt, 'timed'));
      writeFileSync(join(mnt, 'timed/f'), 'f\n');
      symlinkSync('f', join(mnt, 'timed/l'));
      touchNs(join(mnt, 'timed/f'), T0 + 1n);
      touchNs(join(mnt, 'timed/l'), T0 + 2n);
      touchNs(join(mnt, 'timed'), T0 + 3n);
      touchNs(join(mnt, 'empty-1'), T0 + 4n);
      const cp = checkpointEqualsMount('empty directories and files');
      const t = readFullTree(cp.out);
      assert.deepEqual(t.nodes.get('to-empty'), {
        type: 'dir',
        mode: 0o751,
        uid: 0,
        gid: 0,
        mtimeNs: (T0 + 42_424_242_424n).toString(),
        xattrs: {},
      });
      assert.deepEqual(readdirSync(join(cp.out, 'to-empty')), []);
      assert.notEqual(lstatSync(join(cp.out, 'empty-1')).ino, lstatSync(join(cp.out, 'empty-2')).ino);
      assert.equal(lstatSync(join(cp.out, 'empty-1')).nlink, 1);
      assert.deepEqual(
        ['timed/f', 'timed/l', 'timed', 'empty-1'].map((p) => t.nodes.get(p)!.mtimeNs),
        [T0 + 1n, T0 + 2n, T0 + 3n, T0 + 4n].map(String),
      );
    });

    test('a retargeted symlink and a same-size rewrite with the old mtime are both in the checkpoint', () => {
      // first make both part of the workspace's own changes (the overlay's upper, the copy's stat cache)
      writeFileSync(join(mnt, 'same-size'), 'BBBB\n');
      checkpointEqualsMount('same-size, first write');
      for (const [p, change] of [
        ['same-size', () => writeFileSync(join(mnt, 'same-size'), 'CCCC\n')],
        ['ln-re', () => (rmSync(join(mnt, 'ln-re')), symlinkSync('new1', join(mnt, 'ln-re')))],
      ] as const) {
        const old = lstatSync(join(mnt, p), { bigint: true }).mtimeNs;
        change();
        touchNs(join(mnt, p), old);
        assert.equal(lstatSync(join(mnt, p), { bigint: true }).mtimeNs, old);
      }
      const cp = checkpointEqualsMount('same-size rewrite and retarget with old mtimes');
      assert.equal(readFileSync(join(cp.out, 'same-size'), 'utf8'), 'CCCC\n');
      assert.equal(lstatSync(join(cp.out, 'ln-re')).isSymbolicLink(), true);
      assert.equal(execFileSync('readlink', [join(cp.out, 'ln-re')], { encoding: 'utf8' }), 'new1\n');
      awcOk(home, ['unmount', ws], env);
    });
  });
}
