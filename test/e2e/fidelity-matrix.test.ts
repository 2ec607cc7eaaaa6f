import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { lstatSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts } from '../helpers/cli.js';
import { makeFidelityFixture } from '../helpers/fidelity-fixture.js';
import { assertSameTree, readFullTree, type FullTree } from '../helpers/tree-compare.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';

/**
 * The fidelity matrix of issue 12 (items 6, 7, 8, 9, 12, 13, 14): one fixture with every kind
 * of entry, mode, owner, xattr namespace and nanosecond mtime, captured by `import dir`,
 * `import tar` (AWC's own tar and GNU tar's), and checkpoints of the overlay and the copy
 * driver, then restored by `export --dir` and `export --tar`; each result is compared with
 * the source in full (tree-compare.ts: type, mode, owner, size, content, target, rdev,
 * mtimeNs, every xattr, inode groups).
 */

const BIG = 100_000_000;

/** The source as a snapshot must hold it: the socket is skipped, a hardlinked symlink becomes two symlinks. */
function expectedOf(src: string, fixture: { skipped: string[]; symlinkLinks: string[][] }): FullTree {
  const t = readFullTree(src, { skip: (r) => fixture.skipped.includes(r) });
  const drop = new Set(fixture.symlinkLinks.map((g) => g.join('\0')));
  return { nodes: t.nodes, links: t.links.filter((g) => !drop.has(g.join('\0'))) };
}

function assertBigLinked(root: string, what: string): void {
  const a = lstatSync(join(root, 'hard/big'));
  assert.equal(a.nlink, 3, `${what}: nlink of hard/big`);
  assert.equal(lstatSync(join(root, 'hard/big-2')).ino, a.ino, `${what}: hard/big-2 is the same inode`);
  assert.equal(lstatSync(join(root, 'hard/sub/big-3')).ino, a.ino, `${what}: hard/sub/big-3 is the same inode`);
  assert.equal(a.size, BIG);
}

describe('fidelity matrix: import dir, import tar, export dir and tar', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-fidelity-matrix-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  let fixture: ReturnType<typeof makeFidelityFixture>;
  let expected: FullTree;
  let snap: { id: string; root: string };

  before(() => {
    mkdirSync(src);
    fixture = makeFidelityFixture(src, { bigSize: BIG });
    expected = expectedOf(src, fixture);
  });
  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('import dir: the socket is skipped with a warning, the hardlinked symlink is copied with one, the 100 MB file is stored once', () => {
    const r = awc(home, ['snapshot', 'import', src]);
    assert.equal(r.code, 0, r.stderr);
    snap = r.json;
    assert.deepEqual(r.json.skipped, [{ path: 'special/sock', reason: 'socket' }]);
    assert.match(r.stderr, /special\/sock: sockets cannot be recorded/);
    assert.match(r.stderr, /links\/cycle-a-again: a hardlinked symlink is recorded as an independent symlink/);
    assert.equal(r.json.files, 17, 'each inode once: the three names of hard/big count once');
    const usage = awcOk(home, ['usage']);
    assert.ok(usage.stored.bytes > BIG && usage.stored.bytes < BIG + 2_000_000, `stored ${usage.stored.bytes} bytes`);
  });

  test('export --dir --keep-privileges equals the source in full', () => {
    const out = join(work, 'out-dir');
    awcOk(home, ['export', snap.id, '--dir', out, '--keep-privileges']);
    assertSameTree(readFullTree(out), expected, 'export --dir');
    assertBigLinked(out, 'export --dir');
    // capture never followed a link: the cycle and the self-loop are links, the targets verbatim
    assert.ok(lstatSync(join(out, 'links/self')).isSymbolicLink());
  });

  test('export --dir without --keep-privileges leaves out setuid/setgid bits, file capabilities and devices, and says so', () => {
    const out = join(work, 'out-plain');
    const r = awcOk(home, ['export', snap.id, '--dir', out]);
    const reasons = new Map<string, string[]>();
    for (const l of r.leftOut) reasons.set(l.path, [...(reasons.get(l.path) ?? []), l.reason]);
    assert.deepEqual([...reasons.keys()].sort(), [
      'owners/setgid',
      'owners/setuid',
      'special/block',
      'special/null-like',
      'xattrs/cap-exe',
    ]);
    assert.match(reasons.get('xattrs/cap-exe')![0]!, /security\.capability/);
    const t = readFullTree(out);
    assert.equal(t.nodes.get('owners/setuid')!.mode, 0o755);
    assert.equal(t.nodes.get('xattrs/cap-exe')!.xattrs['security.capability'], undefined);
    assert.equal(t.nodes.get('special/block'), undefined);
    // everything else is as in the source
    assert.deepEqual(t.nodes.get('xattrs/acl'), expected.nodes.get('xattrs/acl'));
  });

  test('export --dir --overwrite over an existing tree, twice, replaces files, links and directories at the link paths', () => {
    const out = join(work, 'out-over');
    awcOk(home, ['export', snap.id, '--dir', out, '--keep-privileges']);
    // put other things at the link paths: a directory, a file, a link pointing out
    rmSync(join(out, 'links/up'));
    mkdirSync(join(out, 'links/up'));
    rmSync(join(out, 'links/absolute'));
    execFileSync('sh', ['-c', `echo other > ${join(out, 'links/absolute')}`]);
    rmSync(join(out, 'modes/m600'));
    execFileSync('ln', ['-s', '/etc/shadow', join(out, 'modes/m600')]);
    for (let i = 0; i < 2; i++) {
      awcOk(home, ['export', snap.id, '--dir', out, '--overwrite', '--keep-privileges']);
      assertSameTree(readFullTree(out), expected, `export --dir --overwrite, round ${i + 1}`);
    }
  });

  test('export --tar, then import tar: the same root digest; GNU tar extracts it as the source', () => {
    const tar = join(work, 'snap.tar');
    awcOk(home, ['export', snap.id, '--tar', tar]);
    assert.equal(awcOk(home, ['snapshot', 'import', tar]).root, snap.root);
    const x = join(work, 'gnu-x');
    mkdirSync(x);
    // ACLs travel as their system.posix_acl_* xattrs, which GNU tar applies with --xattrs (--acls would reset them: no SCHILY.acl records)
    execFileSync('tar', ['--xattrs', '--xattrs-include=*', '--same-owner', '-xpf', tar, '-C', x]);
    // binary xattr values (capabilities, ACLs, user.binary) are raw SCHILY.xattr records, which GNU tar restores
    assertSameTree(readFullTree(x), expected, 'GNU tar -x of export --tar');
    assertBigLinked(x, 'GNU tar -x');
  });

  test("import tar of GNU tar's pax archive (SCHILY.xattr records for every namespace) keeps everything", () => {
    const tar = join(work, 'gnu.tar');
    execFileSync('tar', ['--xattrs', '--xattrs-include=*', '--format=pax', '-cf', tar, '-C', src, '.'], { stdio: 'ignore' });
    const imported = awcOk(home, ['snapshot', 'import', tar]);
    const out = join(work, 'out-gnu');
    awcOk(home, ['export', imported.id, '--dir', out, '--keep-privileges']);
    assertSameTree(readFullTree(out), expected, 'GNU tar → import tar → export --dir');
    assertBigLinked(out, 'GNU tar → import tar → export --dir');
  });
});

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`fidelity matrix (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-fidelity-matrix-${driver}-`));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const ref = join(work, 'ref');
    const mnt = join(work, 'mnt');
    const env = { AWC_MOUNT_DRIVER: driver };
    let fixture: ReturnType<typeof makeFidelityFixture>;
    let expected: FullTree;
    let snap: { id: string; root: string };
    let ws: string;

    before(() => {
      mkdirSync(src);
      fixture = makeFidelityFixture(src, { bigSize: BIG });
      expected = expectedOf(src, fixture);
      snap = awcOk(home, ['snapshot', 'import', src], env);
      ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
    });
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('the mounted workspace shows the snapshot in full (xattrs of every namespace, one inode for the three names)', () => {
      awcOk(home, ['mount', ws, mnt], env);
      const shown = readFullTree(mnt);
      assertSameTree(shown, expected, `${driver} mount view`);
      assertBigLinked(mnt, `${driver} mount`);
      const opts = execFileSync('findmnt', ['-n', '-o', 'OPTIONS', mnt], { encoding: 'utf8' });
      assert.match(opts, /nosuid/);
      assert.match(opts, /nodev/);
    });

    test('a checkpoint of an unchanged workspace is the snapshot itself', () => {
      const cp = awcOk(home, ['checkpoint', ws], env);
      assert.equal(cp.root ?? snap.root, snap.root);
    });

    test('everything made inside the workspace is captured by the checkpoint and restored by both exports', () => {
      const made = makeFidelityFixture(join(mnt, 'new'), { bigSize: 3_000_000 });
      mkdirSync(ref);
      makeFidelityFixture(join(ref, 'new'), { bigSize: 3_000_000 });
      const r = awc(home, ['checkpoint', ws], env);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.json.skipped, [{ path: 'new/special/sock', reason: 'socket' }]);
      const out = join(work, 'out-cp');
      awcOk(home, ['export', r.json.id, '--dir', out, '--keep-privileges'], env);
      const newExpected = expectedOf(join(ref, 'new'), made);
      assertSameTree(readFullTree(join(out, 'new')), newExpected, `${driver} checkpoint of new entries → export --dir`);
      assertSameTree(
        readFullTree(out, { skip: (p) => p === 'new' }),
        readFullTree(mnt, { skip: (p) => p === 'new' || p === 'new/special/sock' }),
        'the rest as the mount shows it',
      );
      const tar = join(work, 'cp.tar');
      awcOk(home, ['export', r.json.id, '--tar', tar], env);
      assert.equal(awcOk(home, ['snapshot', 'import', tar], env).root, r.json.root);
      awcOk(home, ['unmount', ws], env);
    });
  });
}
