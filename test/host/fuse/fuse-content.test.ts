/**
 * Content FUSE server against the real kernel: /dev/fuse, util-linux mount, overlayfs with a
 * data-only lower layer. Needs root and /dev/fuse; skipped otherwise.
 *
 * Nothing here reads through a mount with a synchronous fs call: the FUSE server runs on this
 * very event loop, so a blocking stat/read of the mount would deadlock. Reads go through
 * fs/promises (libuv thread pool) or child processes. Every test unmounts in `finally`, with
 * `umount -l` as the last resort, so one failed run cannot break the next.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, closeSync, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { after, describe, it } from 'node:test';
import { getAttributeSync, listAttributesSync, setAttributeSync } from 'fs-xattr';
import { ContentFuse, type ContentSource } from '../../../src/host/fuse/content-fuse.js';
import { abortFuseConnection, connectionMayBeAt } from '../../../src/host/fuse/fusectl.js';
import { shortContentName } from '../../../src/core/content-name.js';
import { ContentIndex } from '../../../src/store/content/content-index.js';
import { mountsAt, readMountInfo } from '../../../src/host/mount/mount-table.js';
import { runCommand } from '../../../src/host/mount/mount-commands.js';
import { canCreateUsers, createTestUser } from '../../helpers/unprivileged.js';

const canRun = process.getuid?.() === 0 && existsSync('/dev/fuse');
const skip = canRun ? false : 'needs root and /dev/fuse';

function hexOf(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** In-memory source: some objects answered synchronously, others through a Promise (a "miss"). */
class MemSource implements ContentSource {
  readonly objects = new Map<string, Buffer>();
  readonly asyncHex = new Set<string>();
  readonly neverHex = new Set<string>();
  reads = 0;
  lookups = 0;
  maxLength = 0;
  /** Adds bytes under a chosen name (for crafted digests). */
  put(hex: string, data: Buffer): void {
    this.objects.set(hex, data);
  }
  add(data: Buffer, mode: 'sync' | 'async' | 'never' = 'sync'): string {
    const hex = hexOf(data);
    this.objects.set(hex, data);
    if (mode === 'async') this.asyncHex.add(hex);
    if (mode === 'never') this.neverHex.add(hex);
    return hex;
  }
  lookup(hex: string): { size: number } | undefined {
    this.lookups++;
    const b = this.objects.get(hex);
    return b ? { size: b.length } : undefined;
  }
  read(hex: string, offset: number, length: number): Buffer | Promise<Buffer> {
    this.reads++;
    this.maxLength = Math.max(this.maxLength, length);
    const b = this.objects.get(hex);
    if (!b) throw new Error(`no object ${hex}`);
    const slice = b.subarray(offset, Math.min(b.length, offset + length));
    if (this.neverHex.has(hex)) return new Promise<Buffer>(() => undefined);
    if (this.asyncHex.has(hex)) return new Promise((resolve) => setTimeout(() => resolve(slice), 5));
    return slice;
  }
}

const roots: string[] = [];
function tempRoot(): string {
  const d = mkdtempSync(join(tmpdir(), 'awc-fuse-test-'));
  roots.push(d);
  return d;
}

/** Last-resort cleanup: lazily unmount anything still mounted under our temp roots. */
async function forceUnmountUnder(root: string): Promise<void> {
  const victims = readMountInfo()
    .map((m) => m.mountPoint)
    .filter((mp) => mp === root || mp.startsWith(root + '/'))
    .reverse();
  for (const mp of victims) await runCommand('umount', ['-l', mp]);
}

after(async () => {
  for (const r of roots) {
    await forceUnmountUnder(r);
    rmSync(r, { recursive: true, force: true });
  }
});

/** Polls `cond` for up to 2 s (events from the workers arrive asynchronously). */
async function waitFor(cond: () => boolean): Promise<boolean> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > 2000) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

function pathOf(mnt: string, hex: string): string {
  return join(mnt, hex.slice(0, 2), hex);
}

/** Runs a shell command in a child process (for reads that may block on the FUSE server). */
function sh(cmd: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    let out = '';
    const c = spawn('sh', ['-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (out += d));
    c.on('close', (code) => resolve({ code, out }));
  });
}

async function withFuse(
  src: ContentSource,
  fn: (mnt: string, fuse: ContentFuse, root: string) => Promise<void>,
  opts: { readers?: number; spinUs?: number; errors?: Error[]; arenaBytes?: number } = {},
): Promise<void> {
  const root = tempRoot();
  const mnt = join(root, 'content');
  mkdirSync(mnt);
  const fuse = new ContentFuse({ mountpoint: mnt, source: src, readers: opts.readers, spinUs: opts.spinUs, arenaBytes: opts.arenaBytes });
  const errors: Error[] = opts.errors ?? [];
  fuse.on('error', (e: Error) => errors.push(e));
  await fuse.mount();
  try {
    await fn(mnt, fuse, root);
  } finally {
    await fuse.unmount();
    await forceUnmountUnder(root);
  }
  assert.equal(mountsAt(mnt).length, 0, 'FUSE mount left behind');
  if (!opts.errors) assert.deepEqual(errors, []);
}

describe('content FUSE', { skip, timeout: 120_000 }, () => {
  it('serves stat, whole and ranged reads, ENOENT, large files and concurrent reads', async () => {
    const src = new MemSource();
    const small = Buffer.from('hello, content-addressed world\n');
    const hSmall = src.add(small, 'sync');
    const asyncData = randomBytes(300_000);
    const hAsync = src.add(asyncData, 'async');
    const big = randomBytes(5 * 1024 * 1024 + 123);
    const hBig = src.add(big, 'sync');
    const bigAsync = randomBytes(3 * 1024 * 1024 + 7);
    const hBigAsync = src.add(bigAsync, 'async');
    const empty = Buffer.alloc(0);
    const hEmpty = src.add(empty, 'sync');
    const many = Array.from({ length: 64 }, (_, i) => randomBytes(1000 + i * 97));
    const hMany = many.map((b, i) => src.add(b, i % 2 ? 'async' : 'sync'));

    await withFuse(src, async (mnt, fuse) => {
      assert.ok(fuse.connectionId !== undefined && fuse.connectionId > 0);
      assert.match(fuse.protocolVersion ?? '', /^7\.\d+$/);
      assert.ok(existsSync(`/sys/fs/fuse/connections/${fuse.connectionId}`));
      const info = mountsAt(mnt, 'fuse.awc');
      assert.equal(info.length, 1);
      assert.equal(info[0]!.minor, fuse.connectionId);

      // root lists the 256 fan-out directories
      const top = await fsp.readdir(mnt);
      assert.equal(top.length, 256);
      assert.equal(top[0], '00');
      assert.equal(top[255], 'ff');
      const rootSt = await fsp.stat(mnt);
      assert.ok(rootSt.isDirectory());

      // stat
      const st = await fsp.stat(pathOf(mnt, hSmall));
      assert.ok(st.isFile());
      assert.equal(st.size, small.length);
      assert.equal(st.mode & 0o777, 0o400, 'root-only: users read contents through a workspace');
      const st2 = await fsp.stat(pathOf(mnt, hSmall));
      assert.equal(st2.ino, st.ino, 'stable node id');
      assert.equal((await fsp.stat(pathOf(mnt, hBig))).size, big.length);
      assert.equal((await fsp.stat(pathOf(mnt, hEmpty))).size, 0);

      // whole reads, sync and async sources
      assert.deepEqual(await fsp.readFile(pathOf(mnt, hSmall)), small);
      assert.deepEqual(await fsp.readFile(pathOf(mnt, hAsync)), asyncData);
      assert.deepEqual(await fsp.readFile(pathOf(mnt, hEmpty)), empty);

      // ranged reads
      const fh = await fsp.open(pathOf(mnt, hAsync), 'r');
      try {
        const buf = Buffer.alloc(10_000);
        const { bytesRead } = await fh.read(buf, 0, 10_000, 123_457);
        assert.equal(bytesRead, 10_000);
        assert.deepEqual(buf, asyncData.subarray(123_457, 133_457));
        const tail = await fh.read(Buffer.alloc(500), 0, 500, asyncData.length - 100);
        assert.equal(tail.bytesRead, 100, 'clamped at EOF');
        const past = await fh.read(Buffer.alloc(10), 0, 10, asyncData.length + 5);
        assert.equal(past.bytesRead, 0);
      } finally {
        await fh.close();
      }

      // large files, sync and async; readahead raised to 1 MiB so sequential READs are 1 MiB
      assert.equal(readFileSync(`/sys/class/bdi/0:${fuse.connectionId}/read_ahead_kb`, 'utf8').trim(), '1024');
      assert.ok((await fsp.readFile(pathOf(mnt, hBig))).equals(big));
      assert.equal(src.maxLength, 1024 * 1024, 'max_pages 256 → 1 MiB READ requests');
      assert.ok((await fsp.readFile(pathOf(mnt, hBigAsync))).equals(bigAsync));
      const fh2 = await fsp.open(pathOf(mnt, hBig), 'r');
      try {
        const off = 3 * 1024 * 1024 + 17;
        const buf = Buffer.alloc(1024 * 1024 + 5);
        const { bytesRead } = await fh2.read(buf, 0, buf.length, off);
        assert.equal(bytesRead, buf.length);
        assert.ok(buf.equals(big.subarray(off, off + buf.length)));
      } finally {
        await fh2.close();
      }
      // the same bytes through a child process (no page cache sharing with our reads)
      const r = await sh(`tail -c 1000 ${pathOf(mnt, hBig)} | sha256sum`);
      assert.equal(r.out.split(' ')[0], hexOf(big.subarray(big.length - 1000)));

      // ENOENT for unknown digests, malformed names and a digest filed under the wrong fan-out dir
      const unknown = 'ab' + '0'.repeat(62);
      await assert.rejects(fsp.stat(pathOf(mnt, unknown)), { code: 'ENOENT' });
      await assert.rejects(fsp.stat(join(mnt, 'ab', 'not-a-digest')), { code: 'ENOENT' });
      await assert.rejects(fsp.stat(join(mnt, 'zz')), { code: 'ENOENT' });
      const wrongDir = hSmall.slice(0, 2) === '00' ? '01' : '00';
      await assert.rejects(fsp.stat(join(mnt, wrongDir, hSmall)), { code: 'ENOENT' });
      // read-only
      await assert.rejects(fsp.writeFile(pathOf(mnt, hSmall), 'x'), { code: 'EROFS' });

      // concurrent reads across many files, twice each, mixing sync and async sources
      const results = await Promise.all(hMany.concat(hMany).map((h) => fsp.readFile(pathOf(mnt, h))));
      results.forEach((b, i) => assert.ok(b.equals(many[i % many.length]!), `file ${i}`));
      // concurrent ranged reads of one big file
      const ranges = Array.from({ length: 16 }, (_, i) => ({ off: i * 300_001, len: 65_536 + i }));
      const fh3 = await fsp.open(pathOf(mnt, hBigAsync), 'r');
      try {
        const got = await Promise.all(
          ranges.map(async ({ off, len }) => {
            const b = Buffer.alloc(len);
            const { bytesRead } = await fh3.read(b, 0, len, off);
            return b.subarray(0, bytesRead);
          }),
        );
        got.forEach((b, i) => assert.ok(b.equals(bigAsync.subarray(ranges[i]!.off, ranges[i]!.off + ranges[i]!.len))));
      } finally {
        await fh3.close();
      }

      // OPEN/FLUSH answered ENOSYS once, then the kernel stops sending them; the page cache is kept
      const ops = fuse.stats.ops;
      assert.equal(ops.init, 1);
      assert.ok((ops.open ?? 0) <= 1, `open sent ${ops.open} times`);
      assert.ok((ops.flush ?? 0) <= 1, `flush sent ${ops.flush} times`);
      const readsBefore = src.reads;
      assert.deepEqual(await fsp.readFile(pathOf(mnt, hSmall)), small);
      assert.equal(src.reads, readsBefore, 'second read served from the page cache');
    });
  });

  it(
    'serves no byte to other users, even where they can reach the mount point (root-only modes, default_permissions)',
    { skip: canCreateUsers() ? false : 'needs useradd and setpriv' },
    async () => {
      const src = new MemSource();
      const hex = src.add(Buffer.from('tenant data\n'), 'sync');
      const user = createTestUser();
      try {
        await withFuse(src, async (mnt, _fuse, root) => {
          chmodSync(root, 0o755); // in AWC the mount point sits in a 0700 directory; here anyone reaches it
          assert.equal((await sh(`cat ${pathOf(mnt, hex)}`)).out, 'tenant data\n', 'root reads it');
          const asUser = (cmd: string): Promise<{ code: number | null; out: string }> =>
            sh(`setpriv --reuid ${user.uid} --regid ${user.gid} --clear-groups -- sh -c '${cmd}'`);
          const r = await asUser(`cat ${pathOf(mnt, hex)}`);
          assert.notEqual(r.code, 0);
          assert.match(r.out, /Permission denied/);
          const l = await asUser(`ls ${mnt}`);
          assert.notEqual(l.code, 0);
          assert.match(l.out, /Permission denied/);
        });
      } finally {
        user.remove();
      }
    },
  );

  it('a connection id that another mount now uses is never aborted (ids are minor numbers the kernel reuses)', async () => {
    const src = new MemSource();
    const data = Buffer.from('still served\n');
    const h = src.add(data, 'sync');
    await withFuse(src, async (mnt, fuse) => {
      const id = fuse.connectionId!;
      assert.equal(connectionMayBeAt(id, mnt), true, 'the mount at its own mount point');
      // another home's server that recorded this id for a mount point now gone (or elsewhere)
      assert.equal(connectionMayBeAt(id, join(mnt, '..', 'gone')), false);
      assert.equal(abortFuseConnection(id, join(mnt, '..', 'gone')), false);
      assert.ok(existsSync(`/sys/fs/fuse/connections/${id}`), 'the connection lives');
      assert.deepEqual(await fsp.readFile(pathOf(mnt, h)), data, 'and still serves');
    });
  });

  it('works as an overlayfs data-only lower layer behind metacopy placeholders', async () => {
    const src = new MemSource();
    const contents: Record<string, Buffer> = {
      'read.txt': Buffer.from('read me through the overlay\n'.repeat(100)),
      'write.txt': randomBytes(200_000),
      'chmod.txt': Buffer.from('chmod me\n'),
      'mv.txt': Buffer.from('move me within the directory\n'),
      'mvx.txt': Buffer.from('move me across directories\n'),
      'miss.txt': randomBytes(70_000),
    };
    const hexes: Record<string, string> = {};
    for (const [name, data] of Object.entries(contents)) hexes[name] = src.add(data, name === 'miss.txt' ? 'async' : 'sync');

    await withFuse(
      src,
      async (mnt, _fuse, root) => {
        const layer = join(root, 'layer');
        const upper = join(root, 'upper');
        const work = join(root, 'work');
        const target = join(root, 'target');
        for (const d of [layer, join(layer, 'd'), join(layer, 'd2'), upper, work, target]) mkdirSync(d, { recursive: true });
        for (const [name, data] of Object.entries(contents)) {
          const p = join(layer, 'd', name);
          closeSync(openSync(p, 'w', 0o644));
          truncateSync(p, data.length);
          const h = hexes[name]!;
          setAttributeSync(p, 'trusted.overlay.metacopy', Buffer.alloc(0));
          setAttributeSync(p, 'trusted.overlay.redirect', `/${h.slice(0, 2)}/${h}`);
        }
        const opts = `lowerdir=${layer}::${mnt},upperdir=${upper},workdir=${work},metacopy=on,redirect_dir=on`;
        const m = await runCommand('mount', ['-t', 'overlay', 'overlay', '-o', opts, target]);
        assert.equal(m.code, 0, `overlay mount failed: ${m.stderr}`);
        try {
          // reads and sizes through the overlay
          const T = (n: string): string => join(target, 'd', n);
          assert.equal((await fsp.stat(T('read.txt'))).size, contents['read.txt']!.length);
          assert.ok((await fsp.readFile(T('read.txt'))).equals(contents['read.txt']!));
          assert.ok((await fsp.readFile(T('miss.txt'))).equals(contents['miss.txt']!));
          const r = await sh(`sha256sum ${T('write.txt')}`);
          assert.equal(r.out.split(' ')[0], hexes['write.txt']);

          // write → copy-up of the full data into the upper
          await fsp.appendFile(T('write.txt'), 'appended');
          const expected = Buffer.concat([contents['write.txt']!, Buffer.from('appended')]);
          const up = join(upper, 'd', 'write.txt');
          assert.ok(readFileSync(up).equals(expected), 'upper holds the full data');
          assert.ok(!listAttributesSync(up).includes('trusted.overlay.metacopy'));
          assert.ok(!listAttributesSync(up).includes('trusted.overlay.redirect'));
          assert.ok((await fsp.readFile(T('write.txt'))).equals(expected));

          // chmod → metadata-only copy-up: metacopy, no redirect (data found through the lower path)
          await fsp.chmod(T('chmod.txt'), 0o600);
          const upChmod = join(upper, 'd', 'chmod.txt');
          assert.equal(lstatSync(upChmod).mode & 0o777, 0o600);
          assert.ok(listAttributesSync(upChmod).includes('trusted.overlay.metacopy'));
          assert.ok(!listAttributesSync(upChmod).includes('trusted.overlay.redirect'));
          assert.ok((await fsp.readFile(T('chmod.txt'))).equals(contents['chmod.txt']!));

          // mv within a directory → metacopy + relative redirect to the old name, whiteout at the old name
          await fsp.rename(T('mv.txt'), T('mv2.txt'));
          const upMv = join(upper, 'd', 'mv2.txt');
          assert.equal(getAttributeSync(upMv, 'trusted.overlay.redirect').toString(), 'mv.txt');
          assert.ok(listAttributesSync(upMv).includes('trusted.overlay.metacopy'));
          const wh = lstatSync(join(upper, 'd', 'mv.txt'));
          assert.ok(wh.isCharacterDevice() && wh.rdev === 0, 'whiteout');
          assert.ok((await fsp.readFile(T('mv2.txt'))).equals(contents['mv.txt']!));

          // mv across directories → metacopy + absolute redirect to the old path (in the layer, not the content)
          await fsp.rename(T('mvx.txt'), join(target, 'd2', 'mvx.txt'));
          const upMvx = join(upper, 'd2', 'mvx.txt');
          assert.equal(getAttributeSync(upMvx, 'trusted.overlay.redirect').toString(), '/d/mvx.txt');
          assert.ok((await fsp.readFile(join(target, 'd2', 'mvx.txt'))).equals(contents['mvx.txt']!));
        } finally {
          const u = await runCommand('umount', [target]);
          if (u.code !== 0) await runCommand('umount', ['-l', target]);
        }
        assert.equal(mountsAt(target).length, 0);
      },
      { readers: 1, spinUs: 100 },
    );
  });

  it('announced content: short names in the root, LOOKUPs answered by the reader workers, a grown table picked up, an ambiguous short name refused', async () => {
    const src = new MemSource();
    const files = Array.from({ length: 40 }, (_, i) => randomBytes(500 + i * 331));
    const hexes = files.map((b) => src.add(b, 'sync'));
    // two crafted digests sharing a short name (equal first 138 bits) and nothing else's
    const prefix = hexOf(Buffer.from('a prefix nobody else has')).slice(0, 34);
    const amb1 = `${prefix}00${'aa'.repeat(14)}`;
    const amb2 = `${prefix}01${'bb'.repeat(14)}`;
    src.put(amb1, Buffer.from('one'));
    src.put(amb2, Buffer.from('two'));
    assert.equal(shortContentName(amb1), shortContentName(amb2));
    // a crafted digest that collides with file 0's short name, announced after the kernel cached that name
    const h0 = hexes[0]!;
    const twin = `${h0.slice(0, 34)}${(parseInt(h0.slice(34, 36), 16) ^ 0x3f).toString(16).padStart(2, '0')}${'cc'.repeat(14)}`;
    assert.notEqual(twin, h0);
    assert.equal(shortContentName(twin), shortContentName(h0));
    src.put(twin, randomBytes(files[0]!.length));
    const errors: Error[] = [];

    await withFuse(
      src,
      async (mnt, fuse, root) => {
        // grow the shared table while the workers run (4096 slots at start): they must pick up the new buffer
        fuse.announce(Array.from({ length: 6000 }, (_, i) => [hexOf(Buffer.from(`filler ${i}`)), 1] as const));
        fuse.announce(hexes.map((h, i) => [h, files[i]!.length] as const));
        assert.equal(fuse.contentCount, 6000 + files.length);

        const layer = join(root, 'layer');
        const upper = join(root, 'upper');
        const work = join(root, 'work');
        const target = join(root, 'target');
        for (const d of [layer, upper, work, target]) mkdirSync(d, { recursive: true });
        const placeholder = (name: string, size: number, redirect: string): void => {
          const p = join(layer, name);
          closeSync(openSync(p, 'w', 0o644));
          truncateSync(p, size);
          setAttributeSync(p, 'trusted.overlay.metacopy', Buffer.alloc(0));
          setAttributeSync(p, 'trusted.overlay.redirect', redirect);
        };
        files.forEach((b, i) => placeholder(`f${i}`, b.length, `/${shortContentName(hexes[i]!)}`));
        placeholder('ambiguous', 3, `/${shortContentName(amb1)}`);
        placeholder('collide', files[0]!.length, `/${shortContentName(h0)}`);
        const opts = `lowerdir=${layer}::${mnt},upperdir=${upper},workdir=${work},metacopy=on,redirect_dir=on`;
        const m = await runCommand('mount', ['-t', 'overlay', 'overlay', '-o', opts, target]);
        assert.equal(m.code, 0, `overlay mount failed: ${m.stderr}`);
        try {
          const before = fuse.workerOps.lookup;
          for (let i = 0; i < files.length; i++) {
            assert.ok((await fsp.readFile(join(target, `f${i}`))).equals(files[i]!), `f${i}`);
          }
          assert.ok(fuse.workerOps.lookup - before >= files.length, `worker lookups ${fuse.workerOps.lookup - before}`);
          assert.equal(src.lookups, 0, 'announced names never reach the source');
          assert.equal(fuse.stats.ops.lookup, fuse.workerOps.lookup, 'no content LOOKUP went to the main thread');
          // the same object by its long name: same node, answered by a worker too (after the main
          // thread resolved the directory); the short name's entry is cached since the overlay looked it up
          const w0 = fuse.workerOps.lookup;
          const long = await fsp.stat(pathOf(mnt, hexes[3]!));
          const short = await fsp.stat(join(mnt, shortContentName(hexes[3]!)));
          assert.equal(long.ino, short.ino);
          assert.equal(long.size, files[3]!.length);
          assert.equal(fuse.workerOps.lookup - w0, 1);
          // an unknown short name is ENOENT; an ambiguous one is EIO (never one of the two)
          await assert.rejects(fsp.stat(join(mnt, shortContentName(hexOf(Buffer.from('nobody'))))), { code: 'ENOENT' });
          fuse.announce([
            [amb1, 3],
            [amb2, 3],
          ]);
          await assert.rejects(fsp.readFile(join(target, 'ambiguous')), { code: 'EIO' });
          // a layer built now must not give the twin file 0's short name
          assert.equal(fuse.shortNameFree(h0), true);
          assert.equal(fuse.shortNameFree(twin), false);
          assert.equal(fuse.shortNameFree(hexOf(Buffer.from('fresh'))), true);
          // file 0's short name is in the kernel's dentry cache (f0 was read): announcing its twin
          // invalidates it, so a new open through that name gets EIO, never file 0's bytes
          fuse.announce([[twin, files[0]!.length]]);
          await assert.rejects(fsp.readFile(join(target, 'collide')), { code: 'EIO' });
        } finally {
          const u = await runCommand('umount', [target]);
          if (u.code !== 0) await runCommand('umount', ['-l', target]);
        }
      },
      { readers: 2, errors },
    );
    assert.ok(errors.length >= 1 && errors.every((e) => /matches two content objects/.test(e.message)), errors.map(String).join('\n'));
  });

  it('lazily indexed content: a short name resolved from a content index at its first LOOKUP, then by the workers; collisions with announced objects refused either way', async () => {
    const src = new MemSource();
    const files = Array.from({ length: 30 }, (_, i) => randomBytes(300 + i * 97));
    const hexes = files.map((b) => src.add(b, 'sync'));
    const twinOf = (h: string, tail: string): string =>
      `${h.slice(0, 34)}${(parseInt(h.slice(34, 36), 16) ^ 0x3f).toString(16).padStart(2, '0')}${tail.repeat(14)}`;
    // in the index: the files, two digests that share a short name, and the twin of an object announced before
    const announcedFirst = src.add(randomBytes(77));
    const prefix = hexOf(Buffer.from('an index prefix')).slice(0, 34);
    const amb = [`${prefix}00${'aa'.repeat(14)}`, `${prefix}01${'bb'.repeat(14)}`];
    const twinBefore = twinOf(announcedFirst, 'dd');
    const indexed = [...hexes, ...amb, twinBefore];
    for (const h of [...amb, twinBefore]) src.put(h, Buffer.from('x'));
    const contents = Object.fromEntries(indexed.map((h) => [h, [src.objects.get(h)!.length, []] as [number, []]]));
    const index = ContentIndex.parse(
      ContentIndex.encode({ root: `sha256:${'0'.repeat(64)}`, files: 1, dirs: 0, contents, hardlinks: {} }),
      `sha256:${'0'.repeat(64)}`,
    );
    let added = false; // the index is added to the source after the first object was announced
    const lazy = Object.assign(src, {
      withShortName: (short: string) =>
        (added ? index.withShortName(short) : []).map((hex) => ({ hex, size: src.objects.get(hex)!.length })),
    });
    const errors: Error[] = [];
    await withFuse(
      lazy,
      async (mnt, fuse, root) => {
        fuse.announce([[announcedFirst, 77]]);
        added = true;
        const layer = join(root, 'layer');
        const [upper, work, target] = ['upper', 'work', 'target'].map((d) => join(root, d));
        for (const d of [layer, upper!, work!, target!]) mkdirSync(d, { recursive: true });
        const placeholder = (name: string, size: number, hex: string): void => {
          const p = join(layer, name);
          closeSync(openSync(p, 'w', 0o644));
          truncateSync(p, size);
          setAttributeSync(p, 'trusted.overlay.metacopy', Buffer.alloc(0));
          setAttributeSync(p, 'trusted.overlay.redirect', `/${shortContentName(hex)}`);
        };
        files.forEach((b, i) => placeholder(`f${i}`, b.length, hexes[i]!));
        placeholder('ambiguous', 1, amb[0]!);
        placeholder('before', 77, announcedFirst);
        placeholder('after', files[5]!.length, hexes[5]!);
        const opts = `lowerdir=${layer}::${mnt},upperdir=${upper},workdir=${work},metacopy=on,redirect_dir=on`;
        const m = await runCommand('mount', ['-t', 'overlay', 'overlay', '-o', opts, target!]);
        assert.equal(m.code, 0, `overlay mount failed: ${m.stderr}`);
        try {
          assert.equal(fuse.contentCount, 1, 'nothing of the index is announced at mount');
          for (let i = 0; i < 5; i++) assert.ok((await fsp.readFile(join(target!, `f${i}`))).equals(files[i]!), `f${i}`);
          assert.equal(fuse.contentCount, 6, 'each object read was added at its first LOOKUP, and only those');
          const w0 = fuse.workerOps.lookup;
          const long = await fsp.stat(pathOf(mnt, hexes[2]!));
          assert.equal(fuse.workerOps.lookup - w0, 1, 'a later LOOKUP (its long name) is answered by a worker from the table');
          assert.equal((await fsp.stat(join(mnt, shortContentName(hexes[2]!)))).ino, long.ino, 'one node');
          assert.equal(long.size, files[2]!.length);
          await assert.rejects(fsp.readFile(join(target!, 'ambiguous')), { code: 'EIO' });
          assert.equal(fuse.shortNameFree(twinOf(hexes[7]!, 'ee')), false, 'a short name the index holds is not free for another object');
          assert.equal(fuse.shortNameFree(hexes[7]!), true);
          // announced before the index came: the check after the index was added makes the name ambiguous
          await fuse.guardShortNames(index.sizes());
          await assert.rejects(fsp.readFile(join(target!, 'before')), { code: 'EIO' });
          // announced after: announce finds the index's object with the same short name
          fuse.announce([[twinOf(hexes[5]!, 'ff'), files[5]!.length]]);
          await assert.rejects(fsp.readFile(join(target!, 'after')), { code: 'EIO' });
        } finally {
          const u = await runCommand('umount', [target!]);
          if (u.code !== 0) await runCommand('umount', ['-l', target!]);
        }
      },
      { readers: 2, errors },
    );
    assert.ok(errors.length >= 3 && errors.every((e) => /matches two content objects/.test(e.message)), errors.map(String).join('\n'));
  });

  it('offered content: READs answered by the workers from the arena and reported; overwritten or unoffered content read through the main thread', async () => {
    const src = new MemSource();
    // 16 KiB each: the 256 KiB ring holds exactly 16 of them
    const files = Array.from({ length: 24 }, () => randomBytes(16 * 1024));
    const hexes = files.map((b) => src.add(b, 'sync'));
    const big = randomBytes(300_000); // over a quarter of the arena: never offered
    const hBig = src.add(big, 'sync');
    await withFuse(
      src,
      async (mnt, fuse) => {
        const served: string[] = [];
        fuse.on('served', (hex: string) => served.push(hex));
        fuse.announce([...hexes.map((h, i) => [h, files[i]!.length] as const), [hBig, big.length] as const]);
        // files 0-19 offered: 16-19 overwrite 0-3 in the ring; 20-23 never offered
        for (let i = 0; i < 20; i++) assert.ok(fuse.offer(hexes[i]!, files[i]!), `offer ${i}`);
        assert.equal(fuse.offer(hexes[5]!, files[5]!), false, 'already there');
        assert.equal(fuse.offer(hBig, big), false, 'too big');
        assert.equal(fuse.offer(hexes[0]!, Buffer.alloc(10)), false, 'wrong size');
        assert.equal(fuse.offer(hexOf(Buffer.from('unknown')), Buffer.from('unknown')), false, 'not announced');

        const reads0 = src.reads;
        const w0 = fuse.workerOps.read;
        for (let i = 0; i < files.length; i++) {
          assert.ok((await fsp.readFile(join(mnt, shortContentName(hexes[i]!)))).equals(files[i]!), `file ${i}`);
        }
        // one READ per 16 KiB file: 16 answered by the workers, 8 (overwritten or never offered) by the main thread
        assert.equal(fuse.workerOps.read - w0, 16);
        assert.equal(src.reads - reads0, 8);
        const reads1 = src.reads;
        assert.ok((await fsp.readFile(join(mnt, shortContentName(hBig)))).equals(big));
        assert.ok(src.reads > reads1, 'the big file went to the main thread');
        assert.equal(fuse.workerOps.read - w0, 16);
        assert.ok(await waitFor(() => served.length === 16), `${served.length} served reports`);
        assert.deepEqual(served.slice().sort(), hexes.slice(4, 20).sort(), 'exactly the arena answers are reported');
      },
      { readers: 2, arenaBytes: 256 * 1024 },
    );
  });

  it('unmount returns while a reader is blocked on a never-resolving read', async () => {
    const src = new MemSource();
    const hNever = src.add(randomBytes(10_000), 'never');
    let mnt = '';
    await withFuse(src, async (m, fuse) => {
      mnt = m;
      const reader = sh(`cat ${pathOf(m, hNever)} > /dev/null`);
      // wait until the READ is pending in the server
      const t0 = Date.now();
      while ((fuse.stats.ops.read ?? 0) === 0 && Date.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 10));
      assert.ok((fuse.stats.ops.read ?? 0) > 0, 'the reader reached the server');
      const u0 = Date.now();
      await fuse.unmount();
      assert.ok(Date.now() - u0 < 5_000, 'unmount was quick');
      await fuse.unmount(); // safe twice
      const res = await reader;
      assert.notEqual(res.code, 0, 'the blocked reader failed instead of hanging');
      assert.equal(fuse.connectionId !== undefined && existsSync(`/sys/fs/fuse/connections/${fuse.connectionId}`), false);
    });
    assert.equal(mountsAt(mnt).length, 0);
    assert.ok(!readFileSync('/proc/self/mountinfo', 'latin1').includes(mnt));
  });

  it('refuses a second mount on the same mount point, handles unmount during mount and failed mounts', async () => {
    const src = new MemSource();
    await withFuse(src, async (mnt) => {
      const second = new ContentFuse({ mountpoint: mnt, source: src });
      await assert.rejects(second.mount(), { code: 'E_TARGET_BUSY' });
      await second.unmount();
    });
    // unmount() while mount() is still running waits for it, then tears down
    const mnt2 = join(tempRoot(), 'content');
    mkdirSync(mnt2);
    const racing = new ContentFuse({ mountpoint: mnt2, source: src });
    const mounting = racing.mount();
    await racing.unmount();
    await mounting;
    assert.equal(mountsAt(mnt2).length, 0);
    await racing.unmount();

    const bad = new ContentFuse({ mountpoint: join(tempRoot(), 'missing'), source: src });
    await assert.rejects(bad.mount(), { code: 'E_MOUNT_FAILED' });
    await bad.unmount();
  });
});
