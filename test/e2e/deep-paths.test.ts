import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  rmSync,
  closeSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { awc, awcOk, cleanupMounts, CLI } from '../helpers/cli.js';
import { createTestUser, usersAndOverlaySkip, type TestUser } from '../helpers/unprivileged.js';
import { assertSameTree, readFullTree, type FullTree } from '../helpers/tree-compare.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';
import { DirFd } from '../../src/core/dir-fd.js';
import { fsPath, nameFromBytes } from '../../src/core/raw-name.js';
import { removeTreeSync } from '../../src/core/remove-tree.js';
import { utimesNsAt } from '../../src/host/sys/utimens.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * Paths longer than PATH_MAX (issue 12 item 2): a tree 30 directories of 200-byte names deep
 * (over 6000 bytes) with a file, a symlink, a hardlink pair, an empty directory, a raw
 * (non-UTF-8) name, xattrs and nanosecond mtimes at the bottom goes through import (dir and
 * GNU tar), both mount drivers (read, write and create at depth), checkpoint, export --dir
 * and --tar, diff, kept files, usage, unmount, rm and gc --local. Every comparison reads the
 * trees through directory descriptors (test/helpers/tree-compare.ts).
 */

const LEVELS = 30;
/** The 200-byte name of level `i` (1-based). */
const level = (i: number): string => `d${String(i).padStart(2, '0')}-`.padEnd(200, 'x');
const DEEP = Array.from({ length: LEVELS }, (_, i) => level(i + 1)).join('/');
const T0 = 1_650_000_000_123_456_789n;

/** Opens `rel` (a slash path, any length) below `root` one component at a time. Close it. */
function openDeep(root: string, rel: string): DirFd {
  const r = DirFd.openRoot(root);
  assert.ok(r, `${root} exists`);
  try {
    return r.dir.openRel(rel);
  } finally {
    r.dir.close();
  }
}

/** Writes the fixture below `root` through descriptors; stamps every mtime on the way back up. */
function makeDeepTree(root: string): void {
  mkdirSync(root);
  const top = DirFd.openRoot(root)!.dir;
  const chain: DirFd[] = [top];
  for (let i = 1; i <= LEVELS; i++) chain.push(chain[i - 1]!.mkdirOpen(level(i), 0o755));
  const bottom = chain[LEVELS]!;
  writeFileSync(bottom.path('file'), 'bytes at the bottom\n');
  writeFileSync(bottom.path('other'), 'x'.repeat(70_000)); // more than one chunk's worth of small-file limit
  symlinkSync('file', bottom.path('link'));
  symlinkSync(`../${level(LEVELS)}/file`, bottom.path('link-up'));
  linkSync(bottom.path('file'), bottom.path('hard'));
  mkdirSync(bottom.path('empty'), 0o710);
  writeFileSync(bottom.path('raw-\udcff'), 'a raw name at depth\n');
  bottom.withObject('file', (p) => xattr.setAttributeSync(p, 'user.deep', Buffer.from('at the bottom')));
  bottom.withObject('empty', (p) => xattr.setAttributeSync(p, 'user.dir', Buffer.from([0, 1, 2, 255])));
  let ns = T0;
  for (const name of ['file', 'other', 'link', 'link-up', 'empty', 'raw-\udcff'])
    utimesNsAt(bottom.fd, name, (ns += 1_000_000_007n).toString());
  for (let i = LEVELS; i >= 1; i--) {
    chain[i]!.close();
    utimesNsAt(chain[i - 1]!.fd, level(i), (ns += 999_999_999n).toString());
  }
  top.close();
}

/** Runs a shell script that first `cd`s into the deep directory below `root` step by step. */
function shAtDepth(root: string, script: string): string {
  const cds = Array.from({ length: LEVELS }, (_, i) => `cd -P ${level(i + 1)}`).join(' && ');
  return execFileSync('bash', ['-ec', `cd -P "$1" && ${cds} && ${script}`, 'sh', root], { encoding: 'utf8' });
}

describe('paths longer than PATH_MAX', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-deep-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  let snap: { id: string; root: string };
  let source: FullTree;
  before(() => {
    makeDeepTree(src);
    source = readFullTree(src);
    snap = awcOk(home, ['snapshot', 'import', src], env);
  });
  after(() => {
    cleanupMounts(home, work);
    removeTreeSync(work);
  });

  test('the fixture is deeper than PATH_MAX, and the full-tree reader sees all of it', () => {
    assert.ok(Buffer.byteLength(`${src}/${DEEP}/raw-\udcff`) > 6000);
    const bottom = `${DEEP}/`;
    for (const n of ['file', 'other', 'link', 'link-up', 'hard', 'empty', 'raw-\udcff']) assert.ok(source.nodes.has(bottom + n), n);
    assert.deepEqual(source.links, [[`${bottom}file`, `${bottom}hard`]]);
    assert.equal(source.nodes.get(`${bottom}file`)?.xattrs['user.deep'], Buffer.from('at the bottom').toString('base64'));
    assert.equal(source.nodes.get(`${bottom}empty`)?.mode, 0o710);
    assert.equal(source.nodes.get(`${bottom}file`)?.mtimeNs, (T0 + 1_000_000_007n).toString());
  });

  test('import of a directory, export --dir and export --tar keep everything at depth', () => {
    const out = join(work, 'out-dir');
    awcOk(home, ['export', snap.id, '--dir', out, '--keep-privileges'], env);
    assertSameTree(readFullTree(out), source, 'export --dir equals the source');
    // --overwrite replaces a deep tree (the old one is removed through descriptors)
    awcOk(home, ['export', snap.id, '--dir', out, '--keep-privileges', '--overwrite'], env);
    assertSameTree(readFullTree(out), source, 'export --dir --overwrite equals the source');
    const tar = join(work, 'mine.tar');
    awcOk(home, ['export', snap.id, '--tar', tar], env);
    assert.equal(awcOk(home, ['snapshot', 'import', tar], env).root, snap.root, 'export --tar imports back to the same root');
  });

  test('a GNU tar (pax) archive of the deep tree imports as the source', () => {
    const gnu = join(work, 'gnu.tar');
    execFileSync('tar', ['--format=posix', '--xattrs', '--xattrs-include=*', '-C', src, '-cf', gnu, '.']);
    const fromTar = awcOk(home, ['snapshot', 'import', gnu], env);
    assert.equal(fromTar.root, snap.root, 'the same root digest as the import of the directory');
  });

  test('removeTree removes a tree deeper than PATH_MAX with raw names in it, and a raw-named directory through DirFd', () => {
    const t = join(work, 'to-remove');
    makeDeepTree(t);
    const d = openDeep(t, DEEP);
    try {
      mkdirSync(d.path('sub-\udcfe'));
      writeFileSync(d.path('sub-\udcfe/inner-\udcfd'), 'raw\n');
    } finally {
      d.close();
    }
    assert.throws(
      () => rmSync(t, { recursive: true }),
      (err: { code?: string }) => err.code === 'ENAMETOOLONG',
      'fs.rm alone cannot',
    );
    removeTreeSync(t);
    assert.equal(existsSync(t), false);
    // a raw-named directory holding a raw-named file, shallow (DirFd.removeTree used to decode names as UTF-8)
    const r = join(work, 'raw-dir');
    mkdirSync(r);
    mkdirSync(fsPath(join(r, 'd-\udcff')));
    writeFileSync(fsPath(join(r, 'd-\udcff/f-\udcfe')), 'x');
    const top = DirFd.openRoot(r)!.dir;
    try {
      top.removeTree('d-\udcff');
      assert.deepEqual(top.list(), []);
    } finally {
      top.close();
    }
  });

  test('diff names paths at depth', () => {
    const other = join(work, 'src2');
    makeDeepTree(other);
    const d = openDeep(other, DEEP);
    try {
      writeFileSync(d.path('added'), 'new\n');
    } finally {
      d.close();
    }
    const s2 = awcOk(home, ['snapshot', 'import', other], env);
    const changes = awcOk(home, ['diff', snap.id, s2.id], env).changes as { path: string; status: string }[];
    assert.ok(
      changes.some((c) => c.path === `${DEEP}/added` && c.status === 'added'),
      JSON.stringify(changes).slice(0, 500),
    );
    const patch = awc(home, ['diff', snap.id, s2.id, '--patch'], env, { json: false });
    assert.equal(patch.code, 0, patch.stderr);
    assert.ok(patch.stdout.includes(`b/${DEEP}/added`));
  });
});

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(
    `paths longer than PATH_MAX in a workspace (${driver} driver)`,
    { skip: possible ? false : 'overlay is not possible on this host' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-deep-ws-${driver}-`));
      const home = join(work, 'home');
      const src = join(work, 'src');
      const mnt = join(work, 'mnt');
      const env = { AWC_MOUNT_DRIVER: driver };
      let snap: { id: string; root: string };
      let ws: string;
      const ignoreRoot = (rel: string) => (rel === '.' ? (['mtimeNs'] as const) : []);
      before(() => {
        makeDeepTree(src);
        snap = awcOk(home, ['snapshot', 'import', src], env);
        ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
        awcOk(home, ['mount', ws, mnt], env);
      });
      after(() => {
        cleanupMounts(home, work);
        removeTreeSync(work);
      });

      test('the mount shows the deep tree; reads, writes and creations at depth are checkpointed and exported', () => {
        assertSameTree(readFullTree(mnt), readFullTree(src), 'the mount shows the snapshot', (rel) => [...ignoreRoot(rel)]);
        assert.equal(shAtDepth(mnt, 'cat file'), 'bytes at the bottom\n');
        shAtDepth(
          mnt,
          [
            'echo appended >> file',
            'echo created > created',
            'mkdir -p newdir/inner && echo inner > newdir/inner/f',
            'ln -s created newlink',
            'rm other',
            'chmod 700 empty',
            'mv link-up link-moved',
            'head -c 300000 /dev/urandom > big',
          ].join(' && '),
        );
        const d = openDeep(mnt, DEEP);
        try {
          d.withObject('created', (p) => xattr.setAttributeSync(p, 'user.made', Buffer.from('in the mount')));
          // the copy driver keeps the pair one inode; overlayfs (without index=on) copies up only the name written to
          const hard = driver === 'copy' ? 'bytes at the bottom\nappended\n' : 'bytes at the bottom\n';
          assert.equal(readFileSync(d.path('hard'), 'utf8'), hard, 'the hardlink reads at depth');
        } finally {
          d.close();
        }
        const shown = readFullTree(mnt);
        assert.ok(shown.nodes.has(`${DEEP}/newdir/inner/f`) && !shown.nodes.has(`${DEEP}/other`));
        const live = awcOk(home, ['diff', ws], env).changes as { path: string; status: string }[];
        assert.ok(
          live.some((c) => c.path === `${DEEP}/created` && c.status === 'added'),
          'the live diff of the mount names paths at depth',
        );
        const cp = awcOk(home, ['checkpoint', ws], env);
        const out = join(work, 'out-cp');
        awcOk(home, ['export', cp.id, '--dir', out, '--keep-privileges'], env);
        assertSameTree(readFullTree(out), shown, 'export --dir of the checkpoint equals the mount', (rel) => [...ignoreRoot(rel)]);
        const tar = join(work, 'cp.tar');
        awcOk(home, ['export', cp.id, '--tar', tar], env);
        assert.equal(awcOk(home, ['snapshot', 'import', tar], env).root, cp.root, 'export --tar keeps the root digest');
        const changes = awcOk(home, ['diff', snap.id, cp.id], env).changes as { path: string; status: string }[];
        const byPath = new Map(changes.map((c) => [c.path, c.status]));
        assert.equal(byPath.get(`${DEEP}/created`), 'added');
        assert.equal(byPath.get(`${DEEP}/other`), 'deleted');
        assert.equal(byPath.get(`${DEEP}/file`), 'modified');
        // usage measures the host state at depth: the workspace holds at least the big file made there
        const u = awcOk(home, ['usage'], env) as { workspaces: { id: string; hostBytes: number }[] };
        const row = u.workspaces.find((w) => w.id === ws);
        assert.ok(row && row.hostBytes >= 300_000, JSON.stringify(row));
      });

      test('a discard keeps a secret at depth and restores it; unmount, rm, kept rm and gc --local clean every deep tree', () => {
        shAtDepth(mnt, 'echo TOKEN=1 > .env && echo unsaved > scratch');
        const r = awcOk(home, ['unmount', ws, '--discard'], env) as { kept?: { path: string }[] };
        assert.deepEqual(
          r.kept?.map((k) => k.path),
          [`${DEEP}/.env`],
        );
        const restored = join(work, 'restored');
        mkdirSync(restored);
        awcOk(home, ['kept', 'restore', ws, restored], env);
        const d = openDeep(restored, DEEP);
        try {
          assert.equal(readFileSync(d.path('.env'), 'utf8'), 'TOKEN=1\n', 'the kept secret is restored at its depth');
        } finally {
          d.close();
        }
        awcOk(home, ['mount', ws, mnt], env);
        shAtDepth(mnt, 'echo again > again');
        awcOk(home, ['rm', ws, '--force'], env);
        for (const s of awcOk(home, ['snapshot', 'ls'], env).snapshots as { id: string }[]) awcOk(home, ['rm', s.id, '--force'], env);
        awcOk(home, ['kept', 'rm', ws], env);
        awcOk(home, ['gc', '--local'], env);
        // nothing deep is left in the home: the store holds packs and trees, no names
        const left: string[] = [];
        const walk = (dir: DirFd): void => {
          for (const raw of dir.list()) {
            const name = nameFromBytes(raw);
            if (name === level(1)) left.push(dir.childRel(name));
            const f = dir.open(name, undefined);
            if (f?.type === 'dir') {
              try {
                walk(f.dir);
              } finally {
                f.dir.close();
              }
            } else if (f?.type === 'file') closeSync(f.fd);
          }
        };
        const h = DirFd.openRoot(home)!.dir;
        try {
          walk(h);
        } finally {
          h.close();
        }
        assert.deepEqual(left, [], 'no deep tree is left in the home');
      });
    },
  );
}

describe('paths longer than PATH_MAX for an ordinary user of the root daemon', { skip: usersAndOverlaySkip() }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-deep-user-'));
  const home = join(work, 'home');
  let u: TestUser;
  const mine = (name: string): string => join(work, `user-${name}`);
  const as = (args: string[]) => {
    const r = u.run(process.execPath, [CLI, '--home', home, '--json', ...args], { HOME: work });
    const err = r.status === 0 ? undefined : (JSON.parse(r.stderr.trim().split('\n').pop()!) as { code: string; hint: string });
    return { status: r.status, json: r.status === 0 ? JSON.parse(r.stdout) : undefined, err, stderr: r.stderr };
  };
  const ok = (args: string[]): any => {
    const r = as(args);
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr.slice(0, 2000)}`);
    return r.json;
  };
  /** Runs `script` as the user after `cd`ing into the deep directory below `root` step by step. */
  const userAtDepth = (root: string, script: string): string => {
    const cds = Array.from({ length: LEVELS }, (_, i) => `cd -P ${level(i + 1)}`).join(' && ');
    const r = u.run('bash', ['-ec', `cd -P "$1" && ${cds} && ${script}`, 'sh', root]);
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  before(() => {
    chmodSync(work, 0o755);
    u = createTestUser();
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: u.name, namespaces: ['default'] }] }));
    awcOk(home, ['daemon', 'start']);
    for (const d of ['src', 'mnt', 'out']) {
      mkdirSync(mine(d));
      chownSync(mine(d), u.uid, u.gid);
    }
    const mk = Array.from({ length: LEVELS }, (_, i) => `mkdir ${level(i + 1)} && cd -P ${level(i + 1)}`).join(' && ');
    const r = u.run('bash', ['-ec', `cd -P "$1" && ${mk} && echo deep > file && ln -s file link && ln file hard`, 'sh', mine('src')]);
    assert.equal(r.status, 0, r.stderr);
  });
  after(() => {
    cleanupMounts(home, work);
    u?.remove();
    removeTreeSync(work);
  });

  test('import, mount (overlay, a layer built for the user), edit, checkpoint, export --tar and export --dir work at depth', () => {
    const snap = ok(['snapshot', 'import', mine('src'), '--name', 'deep']);
    assert.equal(snap.files, 1, 'one regular file (its second name and the symlink are other entries)');
    const id = ok(['fork', 'deep', '--name', 'w']).workspaces[0].id;
    assert.equal(ok(['mount', id, mine('mnt')]).driver, 'overlay');
    assert.equal(userAtDepth(mine('mnt'), 'cat file && stat -c %u hard'), `deep\n${u.uid}\n`);
    userAtDepth(mine('mnt'), 'echo made by the user > new');
    const cp = ok(['checkpoint', id]);
    assert.equal(cp.changed, true);
    const tar = join(mine('out'), 'w.tar');
    ok(['export', id, '--tar', tar]);
    assert.equal(awcOk(home, ['snapshot', 'import', tar]).root, cp.root, 'the user-written archive holds the deep tree');
    // extracted in-process through descriptors (src/service/tar/extract-tar.ts), not by GNU tar
    ok(['export', id, '--dir', join(mine('out'), 'w')]);
    assertSameTree(
      readFullTree(join(mine('out'), 'w')),
      readFullTree(mine('mnt')),
      'export --dir of the checkpoint equals the mount',
      (rel) => (rel === '.' ? ['mtimeNs'] : []),
    );
    assert.equal(userAtDepth(join(mine('out'), 'w'), 'cat file && cat new && stat -c %u hard'), `deep\nmade by the user\n${u.uid}\n`);
    assert.deepEqual(readdirSync(mine('out')).sort(), ['w', 'w.tar'], 'only the export and the archive are there');
    ok(['unmount', id]);
    ok(['rm', id]);
  });
});
