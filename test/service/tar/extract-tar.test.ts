import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  closeSync,
  existsSync,
  openSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { Readable } from 'node:stream';
import { execFileSync } from 'node:child_process';
import tarStream from 'tar-stream';
import type * as Xattr from 'fs-xattr';
import { AwcError } from '../../../src/core/errors.js';
import { extractTarToDir } from '../../../src/service/tar/extract-tar-dir.js';
import { LEFT_OUT_CLEARED, LEFT_OUT_USER_XATTRS } from '../../../src/service/tar/extract-tar.js';
import { RawPax } from '../../../src/service/tar/pax-raw.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * The in-process extractor of an ordinary user's `export --dir` (src/service/tar/extract-tar.ts,
 * issue 12 item 2): what each member becomes (GNU tar's rules as an ordinary user), and a
 * hostile stream: every way out of the directory is refused with E_PATH_TRAVERSAL, nothing
 * is written outside, and the temporary directory is removed.
 */

type Member = { header: Partial<tarStream.Header> & { name: string; pax?: Record<string, string> }; body?: string };

/** A tar stream of `members` (tar-stream's packer; pax records through `header.pax`). */
function tarOf(members: Member[]): Readable {
  const pack = tarStream.pack();
  for (const m of members) pack.entry(m.header, m.body ?? '');
  pack.finalize();
  return pack as unknown as Readable;
}

const DIR = { type: 'directory' as const, mode: 0o755 };

/** The AwcError code `p` rejects with. */
async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof AwcError, String(err));
    return err.code;
  }
  return 'none';
}

describe('export --dir from a tar stream, in process', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-extract-tar-'));
  after(() => rmSync(work, { recursive: true, force: true }));

  test('members become what GNU tar makes of them as an ordinary user (umask, setuid cleared, times, links, fifos, user xattrs)', async () => {
    const out = join(work, 'ok');
    const res = await extractTarToDir(
      async () =>
        tarOf([
          { header: { name: './', ...DIR, mode: 0o750, pax: { mtime: '1650000000.123456789' } } },
          { header: { name: './ro/', ...DIR, mode: 0o555, pax: { mtime: '1650000001.000000001' } } },
          { header: { name: './ro/inner', type: 'file', mode: 0o666, pax: { mtime: '1650000002.5' } }, body: 'inner\n' },
          { header: { name: './sgid/', ...DIR, mode: 0o2775 } },
          {
            header: {
              name: './suid',
              type: 'file',
              mode: 0o4755,
              pax: { mtime: '1650000003.000000007', 'SCHILY.xattr.user.k': 'v', 'SCHILY.xattr.trusted.t': 'x' },
            },
            body: 'suid\n',
          },
          { header: { name: './hard', type: 'link', linkname: './suid' } },
          { header: { name: './sticky', type: 'file', mode: 0o1777 }, body: '' },
          { header: { name: './link', type: 'symlink', linkname: '../anywhere', pax: { mtime: '1650000004.000000009' } } },
          { header: { name: './fifo', type: 'fifo', mode: 0o666 } },
        ]),
      out,
      { umask: 0o022 },
    );
    assert.deepEqual(res.leftOut, [{ path: 'suid', reason: LEFT_OUT_CLEARED }]);
    const mode = (p: string) => lstatSync(join(out, p)).mode & 0o7777;
    assert.equal(mode('.'), 0o750);
    assert.equal(mode('ro'), 0o555, "a directory's mode is set after its contents");
    assert.equal(mode('ro/inner'), 0o644, 'the umask applies');
    assert.equal(mode('sgid'), 0o2755, 'the setgid bit of a directory stays');
    assert.equal(mode('suid'), 0o755, 'the setuid bit is cleared');
    assert.equal(mode('sticky'), 0o1755);
    assert.equal(mode('fifo'), 0o644);
    assert.ok(lstatSync(join(out, 'fifo')).isFIFO());
    assert.equal(readFileSync(join(out, 'ro/inner'), 'utf8'), 'inner\n');
    assert.equal(statSync(join(out, 'hard')).ino, statSync(join(out, 'suid')).ino);
    assert.equal(readlinkSync(join(out, 'link')), '../anywhere', 'the target is kept verbatim');
    const ns = (p: string) => lstatSync(join(out, p), { bigint: true }).mtimeNs;
    assert.equal(ns('.'), 1_650_000_000_123_456_789n);
    assert.equal(ns('ro'), 1_650_000_001_000_000_001n);
    assert.equal(ns('ro/inner'), 1_650_000_002_500_000_000n);
    assert.equal(ns('suid'), 1_650_000_003_000_000_007n);
    assert.equal(ns('link'), 1_650_000_004_000_000_009n);
    assert.deepEqual(xattr.getAttributeSync(join(out, 'suid'), 'user.k'), Buffer.from('v'));
    assert.throws(() => xattr.getAttributeSync(join(out, 'suid'), 'trusted.t'), 'only user.* xattrs are set');
    assert.deepEqual(readdirSync(work), ['ok'], 'no temporary directory is left');

    const kept = await extractTarToDir(
      async () => tarOf([{ header: { name: './s', type: 'file', mode: 0o6755 }, body: '' }]),
      join(work, 'kept'),
      {
        keepPrivileges: true,
        umask: 0o022,
      },
    );
    assert.deepEqual(kept.leftOut, []);
    assert.equal(lstatSync(join(work, 'kept', 's')).mode & 0o7777, 0o6755, '--keep-privileges keeps them');
    rmSync(join(work, 'kept'), { recursive: true });
  });

  test('raw-byte names and link targets and binary xattr values come out byte for byte (raw pax records)', async () => {
    const pack = tarStream.pack();
    const raw = RawPax.hook(pack);
    assert.ok(raw);
    const name = Buffer.from([0x66, 0xff, 0x2e]); // "f\xff." (not UTF-8)
    const h1 = { name: './f', type: 'file' as const, mode: 0o644, size: 3, pax: {} };
    raw.attach(h1, [
      { key: 'path', value: Buffer.concat([Buffer.from('./'), name]) },
      { key: 'SCHILY.xattr.user.bin', value: Buffer.from([0, 0xff, 1]) },
    ]);
    pack.entry(h1, 'raw');
    const h2 = { name: './l', type: 'symlink' as const, linkname: './t', pax: {} };
    raw.attach(h2, [{ key: 'linkpath', value: name }]);
    pack.entry(h2);
    const h3 = { name: './h', type: 'link' as const, linkname: './f', pax: {} };
    raw.attach(h3, [{ key: 'linkpath', value: Buffer.concat([Buffer.from('./'), name]) }]);
    pack.entry(h3);
    pack.finalize();
    const out = join(work, 'raw');
    await extractTarToDir(async () => pack as unknown as Readable, out, { umask: 0o022 });
    const names = readdirSync(out, { encoding: 'buffer' })
      .map((b) => b.toString('hex'))
      .sort();
    assert.deepEqual(names, [name.toString('hex'), Buffer.from('h').toString('hex'), Buffer.from('l').toString('hex')].sort());
    const f = Buffer.concat([Buffer.from(`${out}/`), name]);
    assert.equal(readFileSync(f, 'utf8'), 'raw');
    const fd = openSync(f, 'r'); // fs-xattr takes a string path: the file by its descriptor
    try {
      assert.deepEqual(xattr.getAttributeSync(`/proc/self/fd/${fd}`, 'user.bin'), Buffer.from([0, 0xff, 1]));
    } finally {
      closeSync(fd);
    }
    assert.deepEqual(readlinkSync(join(out, 'l'), { encoding: 'buffer' }), name);
    assert.equal(statSync(join(out, 'h')).ino, statSync(f).ino);
    rmSync(out, { recursive: true });
  });

  test(
    'on a file system without user xattrs (ramfs) they are listed in leftOut, as GNU tar (which set none) succeeded there',
    { skip: process.getuid?.() === 0 ? false : 'needs root to mount ramfs' },
    async () => {
      const ram = join(work, 'ram');
      mkdirSync(ram);
      execFileSync('mount', ['-t', 'ramfs', 'ramfs', ram]);
      try {
        const res = await extractTarToDir(
          async () =>
            tarOf([
              { header: { name: './', ...DIR, pax: { 'SCHILY.xattr.user.top': 'v' } } },
              {
                header: { name: './f', type: 'file', mode: 0o644, pax: { 'SCHILY.xattr.user.k': 'v', 'SCHILY.xattr.trusted.t': 'x' } },
                body: 'f\n',
              },
              { header: { name: './g', type: 'file', mode: 0o644 }, body: 'g\n' },
            ]),
          join(ram, 'out'),
          { umask: 0o022 },
        );
        assert.deepEqual(res.leftOut, [
          { path: '', reason: LEFT_OUT_USER_XATTRS },
          { path: 'f', reason: LEFT_OUT_USER_XATTRS },
        ]);
        assert.equal(readFileSync(join(ram, 'out', 'f'), 'utf8'), 'f\n');
      } finally {
        execFileSync('umount', [ram]);
        rmSync(ram, { recursive: true });
      }
    },
  );

  test('device nodes (E_PERMISSION), GNU sparse 0.x members (E_UNSUPPORTED) and bad sparse maps (E_FORMAT) are refused; nothing is left', async () => {
    const dev = tarOf([{ header: { name: './null', type: 'character-device', mode: 0o666, devmajor: 1, devminor: 3 } }]);
    assert.equal(await codeOf(extractTarToDir(async () => dev, join(work, 'dev'))), 'E_PERMISSION');
    const old = tarOf([{ header: { name: './s', type: 'file', pax: { 'GNU.sparse.major': '0', 'GNU.sparse.minor': '1' } }, body: 'x' }]);
    assert.equal(await codeOf(extractTarToDir(async () => old, join(work, 'sparse'))), 'E_UNSUPPORTED');
    const sparse1 = { 'GNU.sparse.major': '1', 'GNU.sparse.minor': '0', 'GNU.sparse.name': './s', 'GNU.sparse.realsize': '10' };
    const badMap = tarOf([{ header: { name: './GNUSparseFile.0/s', type: 'file', pax: sparse1 }, body: '1\n8\n9\n'.padEnd(512, '\0') }]);
    assert.equal(await codeOf(extractTarToDir(async () => badMap, join(work, 'sparse'))), 'E_FORMAT', 'a range past the size');
    assert.deepEqual(readdirSync(work), ['ok']);
  });

  test('a GNU sparse 1.0 member (GNU tar --sparse) comes out under its real name, its data in place and its holes unallocated', async () => {
    const src = join(work, 'sparse-src');
    mkdirSync(src);
    const f = join(src, 'big.img');
    // 4 KiB of data just before 1 GiB, holes elsewhere, 3 GiB in all
    execFileSync('truncate', ['-s', '0', f]);
    execFileSync('dd', ['if=/dev/urandom', `of=${f}`, 'bs=4096', 'count=1', 'seek=262143', 'conv=notrunc', 'status=none']);
    execFileSync('truncate', ['-s', String(3 * 1024 ** 3), f]);
    const archive = join(work, 'sparse.tar');
    execFileSync('tar', ['--format=posix', '--sparse', '-C', src, '-cf', archive, '.']);
    const out = join(work, 'sparse-out');
    const { createReadStream } = await import('node:fs');
    await extractTarToDir(async () => createReadStream(archive), out);
    assert.deepEqual(readdirSync(out), ['big.img'], 'the real name, not GNUSparseFile.0');
    const st = statSync(join(out, 'big.img'));
    assert.equal(st.size, 3 * 1024 ** 3);
    assert.ok(st.blocks * 512 <= 64 * 1024, `holes left unallocated: ${st.blocks * 512} bytes allocated`);
    const want = Buffer.alloc(8192);
    const got = Buffer.alloc(8192);
    const a = openSync(f, 'r');
    const b = openSync(join(out, 'big.img'), 'r');
    for (const at of [0, 1024 ** 3 - 4096, 2 * 1024 ** 3]) {
      readSync(a, want, 0, 8192, at);
      readSync(b, got, 0, 8192, at);
      assert.ok(got.equals(want), `bytes at ${at}`);
    }
    closeSync(a);
    closeSync(b);
    rmSync(out, { recursive: true });
    rmSync(src, { recursive: true });
    rmSync(archive);
  });

  describe('a hostile stream', () => {
    const box = join(work, 'box'); // the export's parent: a `..` of the temporary directory lands here
    const outside = join(work, 'outside'); // a symlink member points here
    const cases: [string, Member[]][] = [
      ['a member ../x', [{ header: { name: '../x', type: 'file' }, body: 'escaped' }]],
      ['a member ./a/../../x', [{ header: { name: './a/', ...DIR } }, { header: { name: './a/../../x', type: 'file' }, body: 'escaped' }]],
      ['an absolute member', [{ header: { name: join(outside, 'x'), type: 'file' }, body: 'escaped' }]],
      [
        'a member under a symlink member',
        [{ header: { name: './l', type: 'symlink', linkname: outside } }, { header: { name: './l/x', type: 'file' }, body: 'escaped' }],
      ],
      [
        'a directory member under a symlink member',
        [{ header: { name: './l', type: 'symlink', linkname: outside } }, { header: { name: './l/x/', ...DIR } }],
      ],
      [
        'a file member over a symlink member',
        [
          { header: { name: './l', type: 'symlink', linkname: join(outside, 'x') } },
          { header: { name: './l', type: 'file' }, body: 'escaped' },
        ],
      ],
      ['a hardlink to ../', [{ header: { name: './h', type: 'link', linkname: '../secret' } }]],
      ['a hardlink to an absolute name', [{ header: { name: './h', type: 'link', linkname: join(box, 'secret') } }]],
      [
        'a hardlink through a symlink member',
        [{ header: { name: './l', type: 'symlink', linkname: box } }, { header: { name: './h', type: 'link', linkname: './l/secret' } }],
      ],
      ['a symlink named ../x', [{ header: { name: '../x', type: 'symlink', linkname: '/etc' } }]],
    ];
    for (const [what, members] of cases) {
      test(`${what}: E_PATH_TRAVERSAL, nothing written outside, no temporary directory left`, async () => {
        mkdirSync(box, { recursive: true });
        mkdirSync(outside, { recursive: true });
        writeFileSync(join(box, 'secret'), 'secret\n');
        assert.equal(await codeOf(extractTarToDir(async () => tarOf(members), join(box, 'out'))), 'E_PATH_TRAVERSAL');
        assert.deepEqual(readdirSync(box), ['secret'], 'no target, no temporary directory, no x beside them');
        assert.deepEqual(readdirSync(outside), []);
        assert.equal(statSync(join(box, 'secret')).nlink, 1, 'the secret got no new name');
        assert.equal(existsSync(join(work, 'x')), false);
      });
    }
  });
});
