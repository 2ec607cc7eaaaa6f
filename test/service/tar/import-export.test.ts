import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { getAttributeSync, setAttributeSync } from 'fs-xattr';
import tarStream from 'tar-stream';
import type { Digest } from '../../../src/core/digest.js';
import { AwcError } from '../../../src/core/errors.js';
import type { Entry } from '../../../src/core/tree.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { walkTree } from '../../../src/store/content/tree-source.js';
import { exportDir } from '../../../src/host/tree/export-dir.js';
import { exportTar, nsToPaxTime } from '../../../src/service/tar/export-tar.js';
import { importDir, type ImportWarning } from '../../../src/host/tree/import-dir.js';
import { importTar, paxTimeToNs } from '../../../src/service/tar/import-tar.js';

const isRoot = process.getuid?.() === 0;

/** Deterministic pseudo-random bytes. */
function prng(seed: string, size: number): Buffer {
  const out = Buffer.alloc(size);
  let block = createHash('sha256').update(seed).digest();
  for (let off = 0; off < size; off += block.length) {
    block.copy(out, off);
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

function touch(path: string, sec: number, ns: number): void {
  execFileSync('touch', ['-h', '-d', `@${sec}.${String(ns).padStart(9, '0')}`, path]);
}

/** Builds the fixture tree under `dir` (which must not exist) with exact ns mtimes. */
function buildFixture(dir: string): void {
  mkdirSync(dir);
  const p = (...parts: string[]): string => join(dir, ...parts);
  writeFileSync(p('empty.txt'), '');
  writeFileSync(p('hello.txt'), 'hello\n');
  writeFileSync(p('run.sh'), '#!/bin/sh\necho hi\n');
  chmodSync(p('run.sh'), 0o755);
  writeFileSync(p('suid'), 'setuid\n');
  chmodSync(p('suid'), 0o4755);
  writeFileSync(p('sticky-setgid'), 'g\n');
  chmodSync(p('sticky-setgid'), 0o2640);
  writeFileSync(p('big.bin'), prng('big', 1_300_000)); // several chunks
  writeFileSync(p('mid.bin'), prng('mid', 310 * 1024));
  writeFileSync(p('holes.bin'), Buffer.concat([prng('h1', 70_000), Buffer.alloc(600_000), prng('h2', 5000), Buffer.alloc(300_000)]));
  writeFileSync(p('ünïcode-名前.txt'), 'utf8 name\n');
  writeFileSync(p(`long-${'x'.repeat(120)}.txt`), 'long name\n');
  symlinkSync('hello.txt', p('link-rel'));
  symlinkSync('/etc/hostname', p('link-abs'));
  symlinkSync('nowhere/missing', p('link-dangling'));
  mkdirSync(p('hard'));
  writeFileSync(p('hard', 'one.txt'), 'hardlinked\n');
  linkSync(p('hard', 'one.txt'), p('hard', 'two.txt')); // same dir
  mkdirSync(p('z'));
  linkSync(p('hard', 'one.txt'), p('z', 'three.txt')); // across dirs
  writeFileSync(p('z', 'orig.bin'), 'first created, last in tree order\n');
  mkdirSync(p('a'));
  linkSync(p('z', 'orig.bin'), p('a', 'later.bin')); // canonical first name is a/later.bin
  mkdirSync(p('emptydir'));
  mkdirSync(p('n1', 'n2', 'n3'), { recursive: true });
  writeFileSync(p('n1', 'n2', 'n3', 'deep.txt'), 'deep\n');
  execFileSync('mkfifo', [p('pipe')]);
  setAttributeSync(p('hello.txt'), 'user.test', 'hello-xattr');
  setAttributeSync(p('n1'), 'user.dir', 'on a directory');
  setAttributeSync(p('mid.bin'), 'user.binary', Buffer.from([0xff, 0x00, 0x80, 0x41]));
  if (isRoot) {
    chownSync(p('hello.txt'), 1234, 5678);
    chownSync(p('n1'), 4321, 8765);
    execFileSync('chown', ['-h', '77:78', p('link-abs')]);
    mkdirSync(p('devs'));
    execFileSync('mknod', [p('devs', 'null'), 'c', '1', '3']);
    execFileSync('mknod', [p('devs', 'blk'), 'b', '300', '70000']); // major and minor beyond 8 bits
  }
  // exact ns mtimes, children before their directories, the root last
  let i = 0;
  const stamp = (path: string): void => {
    i++;
    touch(path, 1_700_000_000 + i * 37, (123_456_789 + i * 7_654_321) % 1_000_000_000);
  };
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const full = join(d, name);
      if (statSync(full, { throwIfNoEntry: false })?.isDirectory() && !isSymlink(full)) walk(full);
      stamp(full);
    }
  };
  walk(dir);
  stamp(dir);
}

function isSymlink(path: string): boolean {
  try {
    return execFileSync('stat', ['-c', '%F', path]).toString().includes('symbolic');
  } catch {
    return false;
  }
}

interface Env {
  store: FsObjectStore;
  index: MemoryBlobIndex;
  reader: ContentReader;
  writer(): ContentWriter;
  commit(w: ContentWriter): Promise<void>;
  entries(root: Digest): Promise<Map<string, Entry>>;
}

function makeEnv(dir: string): Env {
  const store = new FsObjectStore(join(dir, 'store'));
  const index = new MemoryBlobIndex();
  const reader = new ContentReader({ store, index });
  return {
    store,
    index,
    reader,
    writer: () => new ContentWriter({ store, index, packBytes: 1 << 20 }),
    commit: async (w) => index.addPacks(await w.flush()),
    entries: async (root) => {
      const m = new Map<string, Entry>();
      for await (const { path, entry } of walkTree(reader, root)) m.set(path, entry);
      return m;
    },
  };
}

/**
 * Asserts that two snapshots have the same paths and entries (root attributes included),
 * after `norm` (applied to both sides); directories' tree digests are not compared.
 */
async function assertSameEntries(env: Env, a: Digest, b: Digest, norm: (path: string, e: Entry) => Entry = (_, e) => e): Promise<void> {
  const ea = await env.entries(a);
  const eb = await env.entries(b);
  assert.deepEqual([...eb.keys()], [...ea.keys()]);
  const strip = (path: string, e: Entry): Entry => {
    const n = norm(path, e);
    return n.type === 'dir' ? { ...n, tree: 'sha256:' as Digest } : n;
  };
  for (const [path, x] of ea) assert.deepEqual(strip(path, eb.get(path)!), strip(path, x), path);
  const ra = await env.reader.readRoot(a);
  const rb = await env.reader.readRoot(b);
  assert.deepEqual(strip('', { ...rb, type: 'dir', name: '.' }), strip('', { ...ra, type: 'dir', name: '.' }), 'root attributes');
}

async function rejectsWith(p: Promise<unknown>, code: string): Promise<AwcError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof AwcError, `expected AwcError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected ${code}, but it resolved`);
}

/** Builds a tar with tar-stream from (header, body) pairs. */
async function makeTar(path: string, items: { header: Partial<tarStream.Header> & { name: string }; body?: string }[]): Promise<void> {
  const pack = tarStream.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(c as Buffer);
  })();
  for (const it of items) {
    await new Promise<void>((res, rej) => {
      if (it.body !== undefined) pack.entry(it.header, it.body, (e) => (e ? rej(e) : res()));
      else pack.entry(it.header, (e) => (e ? rej(e) : res()));
    });
  }
  pack.finalize();
  await done;
  writeFileSync(path, Buffer.concat(chunks));
}

describe('import / export', () => {
  let tmp: string;
  let src: string;
  let env: Env;
  let original: Digest;

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'awc-ie-'));
    src = join(tmp, 'src');
    buildFixture(src);
    env = makeEnv(tmp);
    const w = env.writer();
    const res = await importDir(src, w);
    await env.commit(w);
    original = res.root;
  });

  after(() => {
    rmSync(tmp, { recursive: true, force: true });
  });

  it('pax time conversions are exact', () => {
    assert.equal(paxTimeToNs('1700000000.123456789'), '1700000000123456789');
    assert.equal(paxTimeToNs('1700000000.5'), '1700000000500000000');
    assert.equal(paxTimeToNs('1700000000'), '1700000000000000000');
    assert.equal(paxTimeToNs('-1.5'), '-1500000000');
    assert.equal(nsToPaxTime('1700000000000000001'), '1700000000.000000001');
    assert.equal(nsToPaxTime('-500000000'), '-0.500000000');
    for (const ns of ['0', '1', '-1', '999999999', '1700000000123456789', '-1500000000']) assert.equal(paxTimeToNs(nsToPaxTime(ns)), ns);
  });

  it('records every entry type with exact attributes', async () => {
    const e = await env.entries(original);
    const file = (p: string) => {
      const x = e.get(p);
      assert.ok(x && x.type === 'file', `${p} is a file`);
      return x;
    };
    assert.equal(file('empty.txt').size, 0);
    assert.equal(file('run.sh').mode, 0o755);
    assert.equal(file('suid').mode, 0o4755);
    assert.equal(file('sticky-setgid').mode, 0o2640);
    assert.ok(file('big.bin').chunks.length > 1, 'big.bin has several chunks');
    assert.ok(file('mid.bin').chunks.length >= 1);
    assert.equal(file('hello.txt').xattrs?.['user.test'], Buffer.from('hello-xattr').toString('base64'));
    assert.equal(file('mid.bin').xattrs?.['user.binary'], Buffer.from([0xff, 0x00, 0x80, 0x41]).toString('base64'));
    const n1 = e.get('n1');
    assert.ok(n1 && n1.type === 'dir');
    assert.equal(n1.xattrs?.['user.dir'], Buffer.from('on a directory').toString('base64'));
    if (isRoot) assert.deepEqual([n1.uid, n1.gid], [4321, 8765]);
    assert.deepEqual(e.get('link-rel'), { ...e.get('link-rel'), type: 'symlink', target: 'hello.txt' });
    assert.equal((e.get('link-abs') as { target: string }).target, '/etc/hostname');
    assert.equal((e.get('link-dangling') as { target: string }).target, 'nowhere/missing');
    assert.equal(file('hard/one.txt').size, 11);
    assert.deepEqual(e.get('hard/two.txt'), { type: 'hardlink', name: 'two.txt', target: 'hard/one.txt' });
    assert.deepEqual(e.get('z/three.txt'), { type: 'hardlink', name: 'three.txt', target: 'hard/one.txt' });
    assert.equal(file('a/later.bin').size, 34);
    assert.deepEqual(e.get('z/orig.bin'), { type: 'hardlink', name: 'orig.bin', target: 'a/later.bin' });
    assert.equal(e.get('emptydir')?.type, 'dir');
    assert.equal(file('n1/n2/n3/deep.txt').size, 5);
    assert.deepEqual(e.get('pipe'), { ...e.get('pipe'), type: 'fifo', rdev: 0 });
    assert.ok(e.has('ünïcode-名前.txt'));
    if (isRoot) {
      assert.equal(e.get('devs/null')?.type, 'chardev');
      assert.equal((e.get('devs/null') as { rdev: number }).rdev, lstatSync(join(src, 'devs/null')).rdev);
      assert.equal(e.get('devs/blk')?.type, 'blockdev');
      assert.equal((e.get('devs/blk') as { rdev: number }).rdev, lstatSync(join(src, 'devs/blk')).rdev);
    }
    // exact nanosecond mtimes, as set by touch and reported by lstat
    for (const [path, entry] of e) {
      if (entry.type === 'hardlink') continue;
      assert.equal(entry.mtimeNs, lstatSync(join(src, path), { bigint: true }).mtimeNs.toString(), path);
      assert.notEqual(entry.mtimeNs.slice(-3), '000', `${path} has a sub-microsecond part`);
    }
  });

  it('importDir twice gives the same digest, with any concurrency', async () => {
    const w = env.writer();
    assert.equal((await importDir(src, w, { concurrency: 1 })).root, original);
    const w2 = env.writer();
    const res = await importDir(src, w2, { concurrency: 32 });
    assert.equal(res.root, original);
    // each hardlinked inode once: 16 regular files minus 3 extra names
    assert.equal(res.fileCount, 16 - 3);
    assert.deepEqual(res.skipped, []);
  });

  it('importDir → exportTar → importTar gives the same root digest', async () => {
    const tarPath = join(tmp, 'out.tar');
    const counts = await exportTar(env.reader, original, tarPath);
    assert.equal(counts.files, 13);
    const w = env.writer();
    const res = await importTar(tarPath, w);
    await env.commit(w);
    assert.equal(res.root, original);
    assert.equal(res.fileCount, 13);
    // and again from a stream
    const w2 = env.writer();
    const { createReadStream } = await import('node:fs');
    assert.equal((await importTar(createReadStream(tarPath), w2)).root, original);
  });

  it('GNU tar lists and extracts the exported tar identically', async () => {
    const tarPath = join(tmp, 'gnu-check.tar');
    await exportTar(env.reader, original, tarPath);
    const listing = execFileSync('tar', ['-tvf', tarPath], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    for (const needle of [
      './hello.txt',
      './big.bin',
      './n1/n2/n3/deep.txt',
      'link-rel -> hello.txt',
      './z/orig.bin link to ./a/later.bin',
      'ünïcode-名前.txt',
      `long-${'x'.repeat(120)}.txt`,
    ]) {
      assert.ok(listing.includes(needle), `listing has ${needle}:\n${listing}`);
    }
    assert.match(listing, /^-rwsr-xr-x .* \.\/suid$/m);
    assert.match(listing, /^p.* \.\/pipe$/m);
    if (isRoot) assert.match(listing, /^b.* 300,70000 .* \.\/devs\/blk$/m);
    const out = join(tmp, 'gnu-out');
    mkdirSync(out);
    execFileSync('tar', ['-C', out, '-xpf', tarPath, '--xattrs', '--xattrs-include=user.*', '--numeric-owner'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    assert.deepEqual(readFileSync(join(out, 'big.bin')), readFileSync(join(src, 'big.bin')));
    assert.equal(getAttributeSync(join(out, 'hello.txt'), 'user.test').toString(), 'hello-xattr');
    // GNU tar restores everything, ns mtimes and xattr values that are not UTF-8 included
    // (raw SCHILY.xattr records, src/service/tar/pax-raw.ts)
    const w = env.writer();
    const res = await importDir(out, w);
    await env.commit(w);
    await assertSameEntries(env, original, res.root);
  });

  it('importTar reads a GNU tar pax archive of the same tree identically', async () => {
    const tarPath = join(tmp, 'made-by-gnu.tar');
    execFileSync('tar', [
      '--format=posix',
      '--xattrs',
      '--xattrs-include=user.*',
      '--sort=name',
      '--numeric-owner',
      '-C',
      src,
      '-cf',
      tarPath,
      '.',
    ]);
    const w = env.writer();
    const res = await importTar(tarPath, w);
    assert.equal(res.root, original);
  });

  it('exportDir then importDir equals the original (exact ns mtimes)', async () => {
    const out = join(tmp, 'export-exact');
    const res = await exportDir(env.reader, original, out);
    assert.equal(res.files, 13);
    assert.equal(res.mtimePrecision, 'ns', 'utimensat through koffi sets exact nanoseconds');
    const back = await importDir(out, env.writer());
    assert.equal(back.root, original);
    assert.ok(statSync(join(out, 'holes.bin')).blocks * 512 < 400_000, 'zero runs are written as holes');
    assert.deepEqual(readFileSync(join(out, 'holes.bin')), readFileSync(join(src, 'holes.bin')));
    assert.equal(statSync(join(out, 'hard', 'one.txt')).ino, statSync(join(out, 'z', 'three.txt')).ino);
  });

  it('exportDir with Node-only times: equal up to microseconds', async () => {
    const out = join(tmp, 'export-node');
    const res = await exportDir(env.reader, original, out, { mtimes: 'node' });
    assert.equal(res.mtimePrecision, 'us');
    const w = env.writer();
    const back = await importDir(out, w);
    await env.commit(w);
    const us = (ns: string): string => (BigInt(ns) / 1000n).toString();
    await assertSameEntries(env, original, back.root, (_, e) => (e.type === 'hardlink' ? e : { ...e, mtimeNs: us(e.mtimeNs) }));
  });

  it('exportDir refuses a non-empty target', async () => {
    const out = join(tmp, 'busy');
    mkdirSync(out);
    writeFileSync(join(out, 'x'), 'x');
    await rejectsWith(exportDir(env.reader, original, out), 'E_TARGET_EXISTS');
  });

  it('exportDir never writes through a symlink', async () => {
    const outside = join(tmp, 'outside');
    mkdirSync(outside);
    const w = env.writer();
    const f = await w.writeBuffer(Buffer.from('payload'));
    const attrs = { mode: 0o644, uid: 0, gid: 0, mtimeNs: '0' };
    const tree = await w.writeTree([
      { type: 'file', name: 'f', ...attrs, size: f.size, digest: f.digest, chunks: f.chunks },
      { type: 'symlink', name: 'esc', ...attrs, target: outside },
      { type: 'hardlink', name: 'zz', target: 'esc/f' },
    ]);
    const root = await w.writeRoot({ ...attrs, mode: 0o755, tree });
    await env.commit(w);
    await rejectsWith(exportDir(env.reader, root, join(tmp, 'evil-out')), 'E_PATH_TRAVERSAL');
    assert.deepEqual(readdirSync(outside), []);
  });

  it('importTar refuses path traversal and writes nothing outside', async () => {
    const dir = join(tmp, 'trav');
    mkdirSync(dir);
    const cases: [string, Parameters<typeof makeTar>[1]][] = [
      ['dotdot.tar', [{ header: { name: '../evil', type: 'file' }, body: 'x' }]],
      ['inner.tar', [{ header: { name: 'ok/../../evil', type: 'file' }, body: 'x' }]],
      ['abs.tar', [{ header: { name: '/abs', type: 'file' }, body: 'x' }]],
      ['link.tar', [{ header: { name: 'h', type: 'link', linkname: '../evil' } }]],
      [
        'under-symlink.tar',
        [{ header: { name: 'l', type: 'symlink', linkname: '/etc' } }, { header: { name: 'l/passwd', type: 'file' }, body: 'x' }],
      ],
    ];
    for (const [name, items] of cases) {
      const path = join(dir, name);
      await makeTar(path, items);
      await rejectsWith(importTar(path, env.writer()), 'E_PATH_TRAVERSAL');
    }
    assert.ok(!existsSync(join(tmp, 'evil')) && !existsSync('/abs'));
    // a truncated or corrupt archive is E_FORMAT
    const whole = readFileSync(join(tmp, 'out.tar'));
    writeFileSync(join(dir, 'truncated.tar'), whole.subarray(0, 1700));
    await rejectsWith(importTar(join(dir, 'truncated.tar'), env.writer()), 'E_FORMAT');
    writeFileSync(join(dir, 'garbage.tar'), Buffer.alloc(4096, 7));
    await rejectsWith(importTar(join(dir, 'garbage.tar'), env.writer()), 'E_FORMAT');
  });

  it('importTar refuses hardlinks to unknown targets and canonicalises hardlink order', async () => {
    const dir = join(tmp, 'links');
    mkdirSync(dir);
    await makeTar(join(dir, 'unknown.tar'), [{ header: { name: 'h', type: 'link', linkname: 'nope' } }]);
    await rejectsWith(importTar(join(dir, 'unknown.tar'), env.writer()), 'E_FORMAT');
    // data under z/orig first, link a/later after: the canonical file entry is a/later
    const mtime = new Date(1_600_000_000_000);
    await makeTar(join(dir, 'order.tar'), [
      { header: { name: './', type: 'directory', mode: 0o755, mtime } },
      { header: { name: './z/', type: 'directory', mode: 0o755, mtime } },
      { header: { name: './z/orig', type: 'file', mode: 0o600, mtime }, body: 'data' },
      { header: { name: './a/later', type: 'link', linkname: './z/orig', mode: 0o600, mtime } },
    ]);
    const w = env.writer();
    const res = await importTar(join(dir, 'order.tar'), w);
    await env.commit(w);
    const e = await env.entries(res.root);
    assert.equal(e.get('a/later')?.type, 'file');
    assert.deepEqual(e.get('z/orig'), { type: 'hardlink', name: 'orig', target: 'a/later' });
    const a = e.get('a');
    assert.ok(a?.type === 'dir' && a.mode === 0o755 && a.mtimeNs === '0' && a.uid === 0, 'implied parent has default attributes');
    assert.equal(res.fileCount, 1);
  });

  it('skips sockets with a warning', async () => {
    const dir = join(tmp, 'with-socket');
    mkdirSync(dir);
    writeFileSync(join(dir, 'f'), 'f');
    const server = createServer();
    await new Promise<void>((res) => server.listen(join(dir, 'sock'), res));
    try {
      const warnings: ImportWarning[] = [];
      const res = await importDir(dir, env.writer(), { onWarning: (w) => warnings.push(w) });
      assert.deepEqual(res.skipped, [{ path: 'sock', reason: 'socket' }]);
      assert.deepEqual(
        warnings.map((w) => [w.code, w.path]),
        [['W_SOCKET_SKIPPED', 'sock']],
      );
      assert.equal(res.fileCount, 1);
    } finally {
      await new Promise((res) => server.close(res));
    }
  });

  it('keeps names that are not UTF-8 byte for byte from a directory and from gnu, posix and ustar tars; refuses sources that are not directories', async () => {
    const dir = join(tmp, 'bad-name');
    mkdirSync(dir);
    writeFileSync(Buffer.concat([Buffer.from(dir + '/bad-'), Buffer.from([0xff, 0xfe])]), 'x');
    const imported = async (run: (w: ContentWriter) => Promise<{ root: Digest }>): Promise<Digest> => {
      const w = env.writer();
      const r = await run(w);
      await env.commit(w);
      return r.root;
    };
    const names = async (root: Digest) => [...(await env.entries(root)).keys()].filter((k) => k !== '');
    assert.deepEqual(await names(await imported((w) => importDir(dir, w))), ['bad-\udcff\udcfe'], 'the name held as its raw bytes');
    for (const format of ['gnu', 'posix', 'ustar']) {
      const tarPath = join(tmp, `bad-name-${format}.tar`);
      execFileSync('tar', [`--format=${format}`, '-C', dir, '-cf', tarPath, '.'], { stdio: 'ignore' });
      assert.deepEqual(await names(await imported((w) => importTar(tarPath, w))), ['bad-\udcff\udcfe'], `${format}: the same raw name`);
    }
    await rejectsWith(importDir(join(src, 'hello.txt'), env.writer()), 'E_SOURCE_NOT_FOUND');
    await rejectsWith(importDir(join(tmp, 'missing'), env.writer()), 'E_SOURCE_NOT_FOUND');
    await rejectsWith(importTar(join(tmp, 'missing.tar'), env.writer()), 'E_SOURCE_NOT_FOUND');
  });

  it('the reuse callback prevents re-reading unchanged files', async () => {
    const prev = await env.entries(original);
    const w = env.writer();
    let asked = 0;
    const res = await importDir(src, w, {
      reuse: (rel, st) => {
        asked++;
        const e = prev.get(rel);
        return e && e.type === 'file' && e.mtimeNs === st.mtimeNs.toString() ? e : undefined;
      },
    });
    assert.equal(res.root, original);
    assert.equal(w.stats.files, 0, 'no file was read');
    assert.equal(asked, 13);
    const w2 = env.writer();
    await importDir(src, w2, { reuse: () => undefined });
    assert.equal(w2.stats.files, 13);
  });

  it('reports progress', async () => {
    const seen: number[] = [];
    const res = await importDir(src, env.writer(), { onProgress: (p) => seen.push(p.files) });
    assert.equal(seen.length, res.fileCount);
    assert.equal(seen[seen.length - 1], res.fileCount);
  });
});
