import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, constants, linkSync, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { awc, awcOk, cleanupMounts } from '../../helpers/cli.js';
import { assertSameDirs, assertSameTree, readFullTree } from '../../helpers/tree-compare.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { O_PATH } from '../../../src/core/dir-fd.js';
import { fsPath, nameToBytes } from '../../../src/core/raw-name.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { Digest } from '../../../src/core/digest.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * Names as raw bytes, end to end (issue 12 item 1): a Linux file name is any byte string
 * without `/` and NUL, and AWC keeps every one byte for byte (src/core/raw-name.ts: bytes
 * that are not UTF-8 travel as escaped lone surrogates, `\udcXX`). Names that are not UTF-8,
 * NFC and NFD forms side by side, newlines, 255-byte components, raw symlink targets, a
 * raw-named directory, hardlink and fifo go through import (dir and GNU tar), both mount
 * drivers, checkpoint, export (dir and tar), diff and patch. Trees of UTF-8 names stay v1.
 */

/** A name or path string whose `\udcXX` characters are the raw byte XX. */
const raw = (s: string): string | Buffer => fsPath(s);

/** The tricky names of the fixture (slash paths from its root); every one is its own file. */
const NAMES = {
  invalid: 'inv-\udcff\udcfe',
  fffd: '\ufffd\ufffd', // what a lossy decode of `invalid`'s bytes would have merged it with
  nfc: 'caf\u00e9',
  nfd: 'cafe\u0301',
  lead: '\nlead',
  trail: 'trail\n',
  mid: 'mid\ndle',
  long: 'L'.repeat(254) + '\udcff', // 255 bytes
  longUtf8: '\u00e9'.repeat(127) + 'x', // 255 bytes
  child: 'dir-\udce9/child-\udcff.txt',
  deep: 'dir-\udce9/sub\udc80/deep',
} as const;

function makeFixture(root: string): void {
  mkdirSync(root);
  mkdirSync(raw(join(root, 'dir-\udce9')));
  mkdirSync(raw(join(root, 'dir-\udce9/sub\udc80')));
  for (const [k, rel] of Object.entries(NAMES)) writeFileSync(raw(join(root, rel)), `${k}\n`);
  writeFileSync(join(root, 'plain.txt'), 'plain\n');
  symlinkSync(raw('dir-\udce9/child-\udcff.txt'), raw(join(root, 'link-\udcfe')));
  symlinkSync(raw('\udc80nowhere'), raw(join(root, 'dangling-\udcff')));
  linkSync(raw(join(root, NAMES.invalid)), raw(join(root, 'hard-\udcff')));
  execFileSync('mkfifo', [join(root, 'fifo-tmp')]);
  renameSync(join(root, 'fifo-tmp'), raw(join(root, 'fifo-\udcfe')));
  const fd = openSync(raw(join(root, NAMES.child)), O_PATH | constants.O_NOFOLLOW);
  try {
    xattr.setAttributeSync(`/proc/self/fd/${fd}`, 'user.note', Buffer.from('on a raw-named file'));
  } finally {
    closeSync(fd);
  }
}

/** The tree format version of the snapshot's root directory. */
async function rootTreeVersion(home: string, id: string): Promise<number> {
  const svc = await Awc.open({ home, mountDriver: 'copy' });
  try {
    const reader = svc.reader();
    const root = await reader.readRoot((await svc.getSnapshot(id)).root as Digest);
    return (await reader.readTree(root.tree)).v;
  } finally {
    await svc.close();
  }
}

describe('names as raw bytes', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-raw-names-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  let snap: { id: string; root: string };
  before(() => {
    makeFixture(src);
    snap = awcOk(home, ['snapshot', 'import', src], env);
  });
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('import of a directory and export --dir keep every name, target, link and xattr byte for byte', async () => {
    const before = readFullTree(src);
    for (const rel of Object.values(NAMES)) assert.ok(before.nodes.has(rel), `the fixture holds ${JSON.stringify(rel)}`);
    assert.equal(before.nodes.get(NAMES.child)?.xattrs['user.note'], Buffer.from('on a raw-named file').toString('base64'));
    const out = join(work, 'out-dir');
    awcOk(home, ['export', snap.id, '--dir', out], env);
    assertSameDirs(out, src, 'export --dir equals the source');
    assert.equal(await rootTreeVersion(home, snap.id), 2, 'a tree with raw names is v2');
  });

  test('a tree of UTF-8 names only stays v1, with the digest it had before raw names (NFC and NFD kept apart)', async () => {
    const u = join(work, 'utf8-only');
    mkdirSync(u);
    writeFileSync(join(u, NAMES.nfc), 'nfc\n');
    writeFileSync(join(u, NAMES.nfd), 'nfd\n');
    writeFileSync(join(u, NAMES.mid), 'newline\n');
    const s = awcOk(home, ['snapshot', 'import', u], env);
    assert.equal(await rootTreeVersion(home, s.id), 1);
    const out = join(work, 'out-utf8');
    awcOk(home, ['export', s.id, '--dir', out], env);
    assertSameDirs(out, u, 'two names that normalise alike stay two files');
  });

  test('GNU tar (pax) archives import with their raw names; export --tar extracts with GNU tar byte for byte', () => {
    const gnu = join(work, 'gnu.tar');
    execFileSync('tar', ['--format=pax', '--xattrs', '--xattrs-include=*', '-C', src, '-cf', gnu, '.']);
    const fromTar = awcOk(home, ['snapshot', 'import', gnu], env);
    const out = join(work, 'out-gnu');
    awcOk(home, ['export', fromTar.id, '--dir', out], env);
    assertSameDirs(out, src, 'a GNU tar archive of the source imports as the source');

    const mine = join(work, 'mine.tar');
    awcOk(home, ['export', snap.id, '--tar', mine], env);
    const x = join(work, 'out-tar-x');
    mkdirSync(x);
    execFileSync('tar', ['--xattrs', '--xattrs-include=*', '-C', x, '-xpf', mine]);
    assertSameDirs(x, src, 'GNU tar extracts export --tar as the source');
    assert.equal(awcOk(home, ['snapshot', 'import', mine], env).root, snap.root, 'export --tar imports back to the same root');
  });
});

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`raw names in a workspace (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-raw-ws-${driver}-`));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const mnt = join(work, 'mnt');
    const env = { AWC_MOUNT_DRIVER: driver };
    let snap: { id: string };
    let ws: string;
    before(() => {
      makeFixture(src);
      snap = awcOk(home, ['snapshot', 'import', src], env);
      ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      awcOk(home, ['mount', ws, mnt], env);
    });
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('the mount shows the raw names; names made, renamed and deleted there are checkpointed byte for byte', () => {
      // the mount point's own mtime is the mount's, not the snapshot's
      const ignoreRoot = (rel: string) => (rel === '.' ? (['mtimeNs'] as const) : []);
      assertSameTree(readFullTree(mnt), readFullTree(src), 'the mount shows the snapshot', (rel) => [...ignoreRoot(rel)]);
      writeFileSync(raw(join(mnt, 'new-\udc81')), 'made in the workspace\n');
      mkdirSync(raw(join(mnt, 'newdir-\udcfa')));
      writeFileSync(raw(join(mnt, 'newdir-\udcfa/inner\n\udcfb')), 'inner\n');
      renameSync(raw(join(mnt, NAMES.nfd)), raw(join(mnt, 'renamed-\udcc0')));
      rmSync(raw(join(mnt, NAMES.invalid))); // a whiteout of a raw name (overlay); its hardlink stays
      rmSync(raw(join(mnt, 'dir-\udce9/sub\udc80')), { recursive: true });
      writeFileSync(raw(join(mnt, NAMES.child)), 'rewritten\n');
      symlinkSync(raw('new-\udc81'), raw(join(mnt, 'ln-\udc82')));
      const shown = readFullTree(mnt);
      assert.ok(shown.nodes.has('newdir-\udcfa/inner\n\udcfb') && !shown.nodes.has(NAMES.invalid));
      const cp = awcOk(home, ['checkpoint', ws], env);
      const out = join(work, 'out-cp');
      awcOk(home, ['export', cp.id, '--dir', out], env);
      assertSameTree(readFullTree(out), shown, 'export --dir of the checkpoint equals the mount', (rel) => [...ignoreRoot(rel)]);

      // diff --json: paths are strings whose escapes are the raw bytes; the text form quotes them reversibly
      const changes = awcOk(home, ['diff', snap.id, cp.id], env).changes as { path: string; status: string }[];
      const byPath = new Map(changes.map((c) => [c.path, c.status]));
      assert.equal(byPath.get('new-\udc81'), 'added');
      assert.equal(byPath.get(NAMES.invalid), 'deleted');
      assert.equal(byPath.get(NAMES.child), 'modified');
      const text = awc(home, ['diff', snap.id, cp.id], env, { json: false }).stdout;
      const line = text.split('\n').find((l) => l.includes('\\udc81') && l.startsWith('A'));
      assert.ok(line, text);
      assert.deepEqual(nameToBytes(JSON.parse(line.slice(3)) as string), Buffer.from('new-\x81', 'latin1'));

      // the git patch names them as git does (octal) and git applies it to the base
      const patch = awc(home, ['diff', snap.id, cp.id, '--patch', '--binary'], env, { json: false });
      assert.equal(patch.code, 0, patch.stderr);
      assert.ok(patch.stdout.includes('"b/new-\\201"'), patch.stdout.slice(0, 2000));
      const base = join(work, 'base-git');
      awcOk(home, ['export', snap.id, '--dir', base], env);
      execFileSync('git', ['init', '-q', base]);
      const applied = spawnSync('git', ['apply', '--binary', '-'], { cwd: base, input: patch.stdout, encoding: 'utf8' });
      assert.equal(applied.status, 0, applied.stderr);
      const gitPatched = readFullTree(base, { skip: (rel) => rel === '.git', noXattrs: true });
      for (const rel of ['new-\udc81', 'newdir-\udcfa/inner\n\udcfb', 'renamed-\udcc0', 'ln-\udc82', NAMES.child])
        assert.equal(
          gitPatched.nodes.get(rel)?.sha256 ?? gitPatched.nodes.get(rel)?.target,
          shown.nodes.get(rel)?.sha256 ?? shown.nodes.get(rel)?.target,
          rel,
        );
      assert.ok(!gitPatched.nodes.has(NAMES.invalid), 'the deleted raw name is gone after git apply');
    });

    test('git in and out: a repository with raw names imports byte for byte; a raw name made in the workspace exports to a branch', () => {
      const repo = join(work, 'repo');
      mkdirSync(repo);
      const git = (...args: string[]) => execFileSync('git', ['-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args]);
      git('init', '-q', '-b', 'main');
      writeFileSync(raw(join(repo, 'tracked-\udce9.txt')), 'tracked\n');
      writeFileSync(raw(join(repo, 'gone-\udcfe')), 'to delete\n');
      git('add', '-A');
      git('commit', '-q', '-m', 'raw names');
      const base = awcOk(home, ['snapshot', 'import', '--git', repo, '--name', 'git-raw'], env);
      const gws = awcOk(home, ['fork', base.id], env).workspaces[0].id;
      const gmnt = join(work, 'mnt-git');
      awcOk(home, ['mount', gws, gmnt], env);
      assert.equal(readFullTree(gmnt).nodes.get('tracked-\udce9.txt')?.size, '8');
      writeFileSync(raw(join(gmnt, 'made-\udc99')), 'made\n');
      rmSync(raw(join(gmnt, 'gone-\udcfe')));
      awcOk(home, ['checkpoint', gws], env);
      awcOk(home, ['export', gws, '--git', repo, '--branch', 'awc/raw'], env);
      const listed = new Map(
        execFileSync('git', ['-C', repo, 'ls-tree', '-r', '-z', 'awc/raw'])
          .toString('latin1')
          .split('\0')
          .filter(Boolean)
          .map((rec) => [rec.slice(rec.indexOf('\t') + 1), rec.split(' ')[2]!.split('\t')[0]!] as const),
      );
      assert.deepEqual([...listed.keys()].sort(), ['made-\x99', 'tracked-\xe9.txt'], 'the branch holds the names as their bytes');
      assert.equal(execFileSync('git', ['-C', repo, 'cat-file', '-p', listed.get('made-\x99')!]).toString(), 'made\n');
      awcOk(home, ['unmount', gws, '--discard'], env);
    });

    test('a discard keeps a secret beside a raw name; raw names under an ignored scratch directory are still dropped', () => {
      writeFileSync(raw(join(mnt, 'also-\udcf0')), 'unsaved\n');
      writeFileSync(join(mnt, '.env'), 'TOKEN=1\n');
      const d = awcOk(home, ['unmount', ws, '--discard'], env) as { kept?: { path: string }[] };
      assert.deepEqual(
        d.kept?.map((k) => k.path),
        ['.env'],
      );
      awcOk(home, ['mount', ws, mnt], env);
      writeFileSync(join(mnt, '.gitignore'), 'tmp/\n');
      mkdirSync(join(mnt, 'tmp'));
      writeFileSync(raw(join(mnt, 'tmp/scratch-\udcff')), 'scratch');
      const cp = awcOk(home, ['checkpoint', ws], env) as { changed: boolean; dropped: { path: string }[] };
      assert.equal(cp.changed, true);
      assert.deepEqual(
        cp.dropped.map((x) => x.path),
        ['tmp/'],
      );
    });
  });
}
