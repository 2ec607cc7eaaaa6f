/**
 * The EROFS writer (src/drivers/overlay/erofs/) against the real kernel: the layer of a
 * snapshot written as an image from its entries (no layer directory, no mkfs.erofs), mounted
 * file-backed, and compared path by path with the layer directory buildLayer makes of the same
 * snapshot (type, mode, owner, ns mtime, size, nlink, rdev, symlink target, every xattr
 * including trusted.overlay.*, directory listings, hardlink groups); then used as the metadata
 * lower of an overlay over a content directory, reading files through their redirects.
 * The snapshot is an in-memory TreeSource (as layer-builder.test.ts), holding what mkfs.erofs
 * 1.5 cannot take too: a 255-byte name and an mtime in the second before 1970. Needs root and
 * Linux 6.12 or later (file-backed EROFS); skipped otherwise.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Digest } from '../../../src/core/digest.js';
import type { Entry, RootObject, TreeObject } from '../../../src/core/tree.js';
import { shortContentName } from '../../../src/core/content-name.js';
import { nameFromBytes } from '../../../src/core/raw-name.js';
import { buildLayer } from '../../../src/drivers/overlay/layer-builder.js';
import { buildLayerImage } from '../../../src/drivers/overlay/layer-image.js';
import { layerImageSupport, mountErofsFile } from '../../../src/drivers/overlay/layer-image-mount.js';
import { mountOverlay } from '../../../src/drivers/overlay/overlay-mount.js';
import { erofsImage, writeErofsImage, type ErofsEntry } from '../../../src/drivers/overlay/erofs/writer.js';
import { layerImageEntries, writeLayerImage } from '../../../src/drivers/overlay/erofs/layer-entries.js';
import { xxh32 } from '../../../src/drivers/overlay/erofs/format.js';
import { unmount } from '../../../src/host/mount/mount-commands.js';
import type { TreeSource } from '../../../src/store/content/tree-source.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { makeFidelityFixture } from '../../helpers/fidelity-fixture.js';

const support = layerImageSupport();
const skip =
  process.getuid?.() !== 0 ? 'needs root (trusted.* xattrs, mount)' : !support.mount ? `no file-backed EROFS here: ${support.why}` : false;

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');
const T0 = 1_700_000_000_123_456_789n;
const base = { mode: 0o644, uid: 0, gid: 0, mtimeNs: T0.toString() };
/** glibc's makedev. */
const makedev = (ma: number, mi: number): number => ((ma & 0xfff) << 8) | (mi & 0xff) | ((mi & ~0xff) << 12) | ((ma & ~0xfff) * 2 ** 32);
/** A POSIX ACL xattr value (user::rw-, user:1000:r--, group::r--, mask::r--, other::---). */
const ACL = Buffer.from(
  ['02000000', '01000600ffffffff', '02000400e8030000', '04000400ffffffff', '10000400ffffffff', '20000000ffffffff'].join(''),
  'hex',
);

/** An in-memory snapshot: nested tree objects by digest, and the content of each file that has one. */
class Snapshot implements TreeSource {
  trees = new Map<string, TreeObject>();
  contents = new Map<string, Buffer>();
  root!: RootObject;
  rootDigest = '' as Digest;
  dir(entries: Entry[]): Digest {
    const tree: TreeObject = { v: 2, entries: entries.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name))) };
    const d = `sha256:${sha(JSON.stringify(tree))}` as Digest;
    this.trees.set(d, tree);
    return d;
  }
  file(name: string, content: Buffer | number, extra: Partial<Entry> = {}): Entry {
    const size = typeof content === 'number' ? content : content.length;
    const hex = typeof content === 'number' ? sha(`no content ${name} ${size}`) : sha(content);
    if (typeof content !== 'number') this.contents.set(hex, content);
    const digest = `sha256:${hex}` as Digest;
    return { type: 'file', name, size, digest, chunks: size ? [{ digest, size }] : [], ...base, ...extra } as Entry;
  }
  setRoot(tree: Digest): void {
    this.root = {
      v: 1,
      type: 'root',
      chunker: 'test',
      tree,
      ...base,
      mode: 0o755,
      xattrs: { 'user.root': Buffer.from('r').toString('base64') },
    };
    this.rootDigest = `sha256:${sha(JSON.stringify(this.root))}` as Digest;
  }
  readTree = async (d: Digest): Promise<TreeObject> => this.trees.get(d)!;
  readRoot = async (): Promise<RootObject> => this.root;
}

function makeSnapshot(): Snapshot {
  const s = new Snapshot();
  const b64 = (v: string | Buffer): string => Buffer.from(v).toString('base64');
  const big = Array.from({ length: 700 }, (_, i) =>
    s.file(`entry-with-a-longish-name-${String(i).padStart(4, '0')}`, i % 3 === 0 ? 0 : 100 + i),
  );
  const latin1 = nameFromBytes(Buffer.from('latin1-\xe9', 'latin1'));
  const odd = [
    s.file('x'.repeat(255), Buffer.from('a 255-byte name\n')),
    s.file('old', Buffer.from('before 1970\n'), { mtimeNs: '-86400000000123' }),
    s.file('just-before-1970', Buffer.from('-0.5 s\n'), { mtimeNs: '-500000000' }),
    s.file(latin1, Buffer.from('not UTF-8\n')),
    s.file('-dash', Buffer.from('sorts before .\n')),
    s.file('ids', Buffer.from('large owner ids\n'), { uid: 4_000_000_000, gid: 3_000_000_000, mode: 0o4755 }),
    s.file('empty', Buffer.alloc(0), { mode: 0o600 }),
  ];
  const links = [
    s.file('a', Buffer.from('one inode, three names\n'), { uid: 1000, gid: 1000 }),
    { type: 'hardlink', name: 'b', target: 'links/a' } as Entry,
    { type: 'dir', name: 'sub', tree: s.dir([{ type: 'hardlink', name: 'c', target: 'links/a' } as Entry]), ...base, mode: 0o750 } as Entry,
  ];
  const dev = [
    { type: 'chardev', name: 'null', rdev: makedev(1, 3), ...base, mode: 0o666 },
    { type: 'blockdev', name: 'loop0', rdev: makedev(7, 0), ...base, mode: 0o660, gid: 6 },
    { type: 'chardev', name: 'big-numbers', rdev: makedev(300, 70_000), ...base },
    { type: 'fifo', name: 'fifo', rdev: 0, ...base, mode: 0o600 },
  ] as Entry[];
  const sym = [
    { type: 'symlink', name: 'short', target: '../hello.txt', ...base, mode: 0o777 },
    { type: 'symlink', name: 'long', target: 'seg/'.repeat(1000), ...base, mode: 0o777 },
    { type: 'symlink', name: 'dangling', target: '/nowhere', ...base, mode: 0o777, mtimeNs: '1' },
  ] as Entry[];
  const xattrs = [
    s.file('acl', Buffer.from('acl\n'), { mode: 0o640, xattrs: { 'system.posix_acl_access': b64(ACL) } }),
    s.file('many', Buffer.from('many\n'), {
      xattrs: { 'user.empty': '', 'user.big': b64(Buffer.alloc(3000, 7)), 'trusted.other': b64('v'), 'user.shared': b64('same') },
    }),
    s.file('shared', Buffer.from('shared\n'), { xattrs: { 'user.shared': b64('same') } }),
  ];
  const dirOf = (name: string, entries: Entry[], extra: Partial<Entry> = {}): Entry =>
    ({ type: 'dir', name, tree: s.dir(entries), ...base, mode: 0o755, ...extra }) as Entry;
  s.setRoot(
    s.dir([
      s.file('hello.txt', Buffer.from('hello\n'), { xattrs: { 'user.note': b64('hi') } }),
      s.file('data.bin', randomBytes(100_000), { mode: 0o755, uid: 1000, gid: 1000, mtimeNs: '1600000000000000001' }),
      s.file('huge-sparse', 5 * 2 ** 30 + 123),
      dirOf('big', big, { uid: 70_000 }),
      dirOf('odd', odd, { mtimeNs: '1700000000000000007' }),
      dirOf('links', links),
      dirOf('dev', dev),
      dirOf('sym', sym),
      dirOf('xattrs', xattrs, { xattrs: { 'user.dir': b64('d'), 'system.posix_acl_default': b64(ACL) } }),
      dirOf('empty-dir', [], { mode: 0o1777 }),
    ]),
  );
  return s;
}

/** What a lower shows of one path (lstat, a symlink's target, a directory's listing; xattrs: {@link allXattrs}). */
function describePath(p: string | Buffer): Record<string, unknown> {
  const st = lstatSync(p, { bigint: true });
  const type = st.isDirectory()
    ? 'dir'
    : st.isFile()
      ? 'file'
      : st.isSymbolicLink()
        ? 'symlink'
        : st.isFIFO()
          ? 'fifo'
          : st.isCharacterDevice()
            ? 'chardev'
            : 'blockdev';
  const d: Record<string, unknown> = {
    type,
    mode: (st.mode & 0o177777n).toString(8),
    uid: st.uid,
    gid: st.gid,
    mtimeNs: st.mtimeNs,
    nlink: st.nlink,
  };
  if (type !== 'dir') d.size = st.size;
  if (type === 'chardev' || type === 'blockdev') d.rdev = st.rdev;
  if (type === 'symlink') d.target = readlinkSync(p, { encoding: 'buffer' }).toString();
  if (type === 'dir')
    d.list = readdirSync(p, { encoding: 'buffer' })
      .map((n) => n.toString('hex'))
      .sort();
  return d;
}

/** Every path below `root` (raw names as hex) → its description, and the groups of paths sharing an inode. */
function describeTree(root: string): { paths: Record<string, unknown>; links: string[][] } {
  const paths: Record<string, unknown> = {};
  const inodes = new Map<bigint, string[]>();
  const walk = (dir: Buffer, rel: string): void => {
    for (const raw of readdirSync(dir, { encoding: 'buffer' })) {
      const p = Buffer.concat([dir, Buffer.from('/'), raw]);
      const r = `${rel}/${nameFromBytes(raw)}`;
      const d = describePath(p);
      paths[r] = d;
      if (d.type !== 'dir' && (d.nlink as bigint) > 1n) {
        const ino = lstatSync(p, { bigint: true }).ino;
        inodes.set(ino, [...(inodes.get(ino) ?? []), r]);
      }
      if (d.type === 'dir') walk(p, r);
    }
  };
  paths['.'] = describePath(root);
  walk(Buffer.from(root), '');
  return { paths, links: [...inodes.values()].map((g) => g.sort()).sort() };
}

/**
 * Every xattr of every path below `root`, all namespaces (`trusted.overlay.*` included), as
 * `getfattr -R -h -d -m - -e hex` prints them (raw names escaped), one block per path, sorted.
 */
function allXattrs(root: string): string[] {
  const out = execFileSync('getfattr', ['-R', '-h', '-d', '-m', '-', '-e', 'hex', '.'], { cwd: root, encoding: 'utf8' });
  return out
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b !== '')
    .map((b) => {
      const [file, ...attrs] = b.split('\n');
      return [file, ...attrs.sort()].join('\n');
    })
    .sort();
}

/** The xattr names of `p` (getfattr, all namespaces). */
function xattrNames(p: string): string[] {
  return execFileSync('getfattr', ['-h', '-d', '-m', '-', '--absolute-names', p], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes('='))
    .map((l) => l.slice(0, l.indexOf('=')));
}

describe('EROFS writer', { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-erofs-writer-'));
  const d = (rel: string): string => join(work, rel);
  const mounted: string[] = [];
  const snap = makeSnapshot();
  let entries: ErofsEntry[] = [];
  let layerDir = '';
  let layer: Awaited<ReturnType<typeof buildLayer>>;

  before(async () => {
    layer = await buildLayer(snap, snap.rootDigest, d('layers'));
    layerDir = layer.dir;
    entries = await layerImageEntries(snap, snap.rootDigest);
    await writeErofsImage(entries, d('layer.erofs'));
    mkdirSync(d('content'));
    for (const [hex, bytes] of snap.contents) writeFileSync(d(`content/${shortContentName(hex)}`), bytes);
  });
  after(async () => {
    for (const m of mounted.reverse()) await unmount(m).catch(() => undefined);
    rmSync(work, { recursive: true, force: true });
  });

  it('the same entries give the same bytes, and erofs-utils finds the image sound', async () => {
    const again = await layerImageEntries(snap, snap.rootDigest);
    await writeErofsImage(again, d('again.erofs'));
    const bytes = readFileSync(d('layer.erofs'));
    assert.ok(bytes.equals(readFileSync(d('again.erofs'))));
    assert.ok(bytes.equals(erofsImage(entries)));
    assert.equal(lstatSync(d('layer.erofs')).mode & 0o777, 0o600);
    assert.deepEqual(
      readdirSync(work).filter((n) => n.includes('.tmp-')),
      [],
    );
    if (existsSync('/usr/bin/fsck.erofs') || existsSync('/usr/sbin/fsck.erofs'))
      execFileSync('fsck.erofs', [d('layer.erofs')], { stdio: 'pipe' });
  });

  it("writeLayerImage writes the same image from the trees, its digest, and the content index source buildLayer's meta has", async () => {
    const r = await writeLayerImage(snap, snap.rootDigest, d('direct.erofs'));
    const bytes = readFileSync(d('direct.erofs'));
    assert.ok(bytes.equals(readFileSync(d('layer.erofs'))));
    assert.equal(r.digest, `sha256:${sha(bytes)}`);
    assert.equal(r.bytes, bytes.length);
    const { root, files, dirs, contents, hardlinks } = layer.meta;
    assert.deepEqual(r.meta, { root, files, dirs, contents, hardlinks });
    assert.deepEqual(r.meta.hardlinks, { 'links/a': ['links/b', 'links/sub/c'] });
  });

  it('mounted, the image shows exactly what the layer directory holds', () => {
    mkdirSync(d('img'));
    mountErofsFile(d('layer.erofs'), d('img'));
    mounted.push(d('img'));
    const img = describeTree(d('img'));
    const dir = describeTree(layerDir);
    assert.deepEqual(img, dir);
    const xattrs = allXattrs(d('img'));
    assert.deepEqual(xattrs, allXattrs(layerDir));
    // what the fixture is for: present in both, and as meant
    const big = img.paths['/big'] as { list: string[]; uid: bigint };
    assert.equal(big.list.length, 700, 'a directory of many blocks of dirents');
    assert.equal(big.uid, 70_000n);
    assert.deepEqual(img.links, [['/links/a', '/links/b', '/links/sub/c']]);
    assert.equal((img.paths['/links/a'] as { nlink: bigint }).nlink, 3n);
    assert.equal((img.paths['/huge-sparse'] as { size: bigint }).size, 5n * 2n ** 30n + 123n);
    assert.equal((img.paths['/odd/old'] as { mtimeNs: bigint }).mtimeNs, -86_400_000_000_123n);
    assert.equal((img.paths['/odd/just-before-1970'] as { mtimeNs: bigint }).mtimeNs, -500_000_000n);
    assert.ok(img.paths[`/odd/${'x'.repeat(255)}`]);
    assert.equal((img.paths['/sym/long'] as { target: string }).target.length, 4000);
    const hello = xattrs.find((b) => b.startsWith('# file: hello.txt\n'))!.split('\n');
    assert.ok(hello.includes('trusted.overlay.metacopy=0x'));
    assert.ok(hello.some((l) => l.startsWith('trusted.overlay.redirect=0x2f')));
    assert.ok(hello.includes(`user.note=0x${Buffer.from('hi').toString('hex')}`));
    assert.ok(xattrs.some((b) => b.includes('system.posix_acl_default=0x02000000')));
    // readdir gives the names sorted by bytes (EROFS looks names up by binary search)
    const listed = readdirSync(d('img/odd'), { encoding: 'buffer' });
    assert.deepEqual(listed, [...listed].sort(Buffer.compare));
  });

  it('an overlay with the mounted image as its metadata lower reads every file through its redirect', async () => {
    for (const n of ['ov', 'ov.upper', 'ov.work']) mkdirSync(d(n));
    await mountOverlay({ layer: d('img'), content: d('content'), upper: d('ov.upper'), work: d('ov.work'), target: d('ov') });
    mounted.push(d('ov'));
    let read = 0;
    for (const e of entries) {
      if (e.type !== 'file' || !e.size || e.size > 1_000_000) continue;
      const redirect = new Map(e.xattrs as [string, Buffer][]).get('trusted.overlay.redirect')!.toString();
      const expected = [...snap.contents.entries()].find(([hex]) => `/${shortContentName(hex)}` === redirect)?.[1];
      if (!expected) continue;
      assert.ok(readFileSync(Buffer.concat([Buffer.from(d('ov/')), Buffer.from(e.path)])).equals(expected), e.path.toString());
      read++;
    }
    assert.ok(read >= 10, `read ${read} files through the overlay`);
    assert.equal(readFileSync(d('ov/links/sub/c'), 'utf8'), 'one inode, three names\n');
    assert.equal(lstatSync(d('ov/data.bin'), { bigint: true }).mtimeNs, 1_600_000_000_000_000_001n);
    // copy-ups: a chmod copies the metadata only, a write copies the data up from the content lower
    chmodSync(d('ov/hello.txt'), 0o600);
    assert.equal(readFileSync(d('ov/hello.txt'), 'utf8'), 'hello\n');
    assert.equal(xattrNames(d('ov.upper/hello.txt')).includes('trusted.overlay.metacopy'), true);
    appendFileSync(d('ov/odd/old'), 'appended\n');
    assert.equal(readFileSync(d('ov/odd/old'), 'utf8'), 'before 1970\nappended\n');
    assert.equal(xattrNames(d('ov.upper/odd/old')).includes('trusted.overlay.metacopy'), false);
  });

  it('holds a data file whose bytes are made once the layout is known, from the stat the kernel then reports', () => {
    const e = (path: string, extra: Partial<ErofsEntry>): ErofsEntry => ({
      path,
      type: 'file',
      mode: 0o644,
      uid: 0,
      gid: 0,
      mtimeNs: T0,
      ...extra,
    });
    const probes = ['a/p', 'a/q', 'h', 's', 'a', 'none'];
    let given: Buffer | undefined;
    const data = (statOf: Parameters<NonNullable<ErofsEntry['data']>>[0]): Buffer => {
      const json = JSON.stringify(
        probes.map((p) => statOf(p) ?? null),
        (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v),
      );
      given = Buffer.alloc(10_000, 0x20);
      given.write(json);
      return given;
    };
    const meta: [string, Buffer][] = [
      ['trusted.overlay.metacopy', Buffer.alloc(0)],
      ['trusted.overlay.redirect', Buffer.from('/x')],
    ];
    const entries: ErofsEntry[] = [
      e('', { type: 'dir', mode: 0o755 }),
      e('a', { type: 'dir', mode: 0o755 }),
      e('a/p', { size: 5000, xattrs: meta }),
      e('a/q', { size: 7, uid: 70_000, gid: 5, mtimeNs: 1_600_000_000_000_000_001n, xattrs: meta }),
      e('data', { size: 10_000, mode: 0o600, mtimeNs: T0 + 1n, data, xattrs: [['user.note', Buffer.from('kept')]] }),
      e('h', { type: 'hardlink', target: 'a/q' }),
      e('s', { type: 'symlink', target: 'a/p' }),
      e('z', { size: 0, data: () => Buffer.alloc(0) }),
    ];
    const img = erofsImage(entries);
    assert.ok(img.equals(erofsImage(entries)), 'the same entries give the same bytes');
    writeFileSync(d('data.erofs'), img);
    if (existsSync('/usr/bin/fsck.erofs') || existsSync('/usr/sbin/fsck.erofs'))
      execFileSync('fsck.erofs', ['--extract', d('data.erofs')], { stdio: 'pipe' });
    mkdirSync(d('data-img'));
    mountErofsFile(d('data.erofs'), d('data-img'));
    mounted.push(d('data-img'));
    assert.ok(readFileSync(d('data-img/data')).equals(given!), 'the kernel reads the bytes the image was given');
    assert.equal(readFileSync(d('data-img/z')).length, 0);
    assert.equal(lstatSync(d('data-img/data')).mode & 0o7777, 0o600);
    assert.deepEqual(xattrNames(d('data-img/data')), ['user.note'], 'a data file is no placeholder');
    const stats = JSON.parse(given!.toString().trim()) as ({
      nid: number;
      mtimeSec: string;
      mtimeNsec: number;
      uid: number;
      gid: number;
      size: number;
    } | null)[];
    assert.equal(stats[5], null, 'a path not in the image has no stat');
    for (const [i, p] of probes.slice(0, 5).entries()) {
      const st = lstatSync(d(`data-img/${p}`), { bigint: true });
      const s = stats[i]!;
      const mtimeNs = BigInt(s.mtimeSec) * 1_000_000_000n + BigInt(s.mtimeNsec);
      assert.equal(st.ino, BigInt(s.nid), `${p}: st_ino is the node id`);
      assert.deepEqual([st.mtimeNs, st.ctimeNs, st.uid, st.gid], [mtimeNs, mtimeNs, BigInt(s.uid), BigInt(s.gid)], p);
      if (p !== 'a') assert.equal(st.size, BigInt(s.size), p);
    }
    assert.equal(stats[1]!.nid, stats[2]!.nid, 'a hardlink has its file’s inode');
    const wrong: ErofsEntry[] = [entries[0]!, e('d', { size: 3, data: () => Buffer.from('four') })];
    assert.throws(() => erofsImage(wrong), { code: 'E_FORMAT' });
  });

  it('refuses entries that are not a tree, names over 255 bytes and xattrs EROFS cannot hold', () => {
    const root: ErofsEntry = { path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtimeNs: 0n };
    const f = (path: string, extra: Partial<ErofsEntry> = {}): ErofsEntry => ({
      path,
      type: 'file',
      mode: 0o644,
      uid: 0,
      gid: 0,
      mtimeNs: 0n,
      ...extra,
    });
    assert.throws(() => erofsImage([f('a')]), { code: 'E_FORMAT' });
    assert.throws(() => erofsImage([root, f('a/b')]), { code: 'E_FORMAT' });
    assert.throws(() => erofsImage([root, f('a'), f('a')]), { code: 'E_FORMAT' });
    assert.throws(() => erofsImage([root, { ...f('h'), type: 'hardlink', target: 'nothing' }]), { code: 'E_FORMAT' });
    assert.throws(() => erofsImage([root, f('n'.repeat(256))]), { code: 'E_UNSUPPORTED' });
    assert.throws(() => erofsImage([root, f('x', { xattrs: [['system.other', Buffer.alloc(1)]] })]), { code: 'E_UNSUPPORTED' });
  });

  it('hashes xattr names as the kernel does (xxh32 reference values)', () => {
    assert.equal(xxh32(Buffer.alloc(0), 0), 0x02cc5d05);
    assert.equal(xxh32(Buffer.from('abc'), 0), 0x32d153ff);
    assert.equal(xxh32(Buffer.from('Nobody inspects the spammish repetition'), 0), 0xe2293b2f);
  });
});

describe('EROFS writer on the fidelity fixture, beside mkfs.erofs', { skip: skip || (!support.mkfs ? 'no mkfs.erofs' : false) }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-erofs-fidelity-'));
  const d = (rel: string): string => join(work, rel);
  const mounted: string[] = [];
  after(async () => {
    for (const m of mounted.reverse()) await unmount(m).catch(() => undefined);
    rmSync(work, { recursive: true, force: true });
  });

  it("the image from the entries reads as the layer directory and as mkfs.erofs's image of it", async () => {
    mkdirSync(d('src'));
    makeFidelityFixture(d('src'), { bigSize: 3_000_000 });
    const awc = await Awc.open({ home: d('home') });
    let layer: Awaited<ReturnType<typeof buildLayer>>;
    try {
      const { root } = await awc.importSnapshot(d('src'));
      layer = await buildLayer(awc.reader(), root, d('layers'));
      await writeLayerImage(awc.reader(), root, d('ours.erofs'));
    } finally {
      await awc.close();
    }
    await buildLayerImage(layer.dir, d('mkfs.erofs'));
    for (const n of ['ours', 'mkfs']) {
      mkdirSync(d(n));
      mountErofsFile(d(`${n}.erofs`), d(n));
      mounted.push(d(n));
    }
    const dir = describeTree(layer.dir);
    assert.deepEqual(describeTree(d('ours')), dir);
    assert.deepEqual(describeTree(d('mkfs')), dir);
    assert.deepEqual(allXattrs(d('ours')), allXattrs(layer.dir));
    assert.deepEqual(allXattrs(d('mkfs')), allXattrs(layer.dir));
    assert.ok(Object.keys(dir.paths).length > 30, 'the fixture has its entries');
    assert.ok(dir.links.length > 0, 'and a hardlink group');
  });
});
