import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  ftruncateSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { awc, awcOk, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { assertSameTree, readFullTree } from '../../helpers/tree-compare.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { findDataExtents } from '../../../src/host/sys/seek-data.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { Digest } from '../../../src/core/digest.js';
import { mapRange, recordedExtents, seekExtents, sparseDigest, type Extent } from '../../../src/core/sparse.js';
import { decodeTree, encodeTree, type FileEntry, type TreeObject } from '../../../src/core/tree.js';
import { sha256 } from '../../../src/core/digest.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/**
 * Sparse files (issue 12 item 10): a 200 GiB file with one 4 KiB block of data, a file of
 * several extents with holes at its start and end, and a file that is all hole import, mount
 * (both drivers), checkpoint and export in time and space proportional to their data: the
 * holes are recorded (tree v3, src/core/sparse.ts) and kept (export --dir leaves them
 * unallocated, export --tar writes GNU sparse members). That nothing reads the holes is shown
 * by what is allocated and stored, never by timing.
 */

const GiB = 1024 ** 3;
const MiB = 1024 * 1024;
const BIG_SIZE = 200 * GiB;
const BIG_AT = 100 * GiB + 12 * 4096; // the data block's offset
const BLOCK = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7 + 3) & 0xff));
/** The sparse files of the fixture: compared by their data maps, never read whole. */
const SPARSE = new Set(['big', 'multi', 'allhole', 'dir/also-big']);
const MTIME_NS = 1_700_000_000_123_456_789n;

/** Writes `data` at `offset` of `p` (first creating it with `size` bytes, all hole, when `size` is given). */
function pwrite(p: string, offset: number, data: Buffer, size?: number): void {
  const fd = openSync(p, size === undefined ? 'r+' : 'w');
  try {
    if (size !== undefined) ftruncateSync(fd, size);
    if (data.length > 0) writeSync(fd, data, 0, data.length, offset);
  } finally {
    closeSync(fd);
  }
}

function makeFixture(root: string): void {
  mkdirSync(join(root, 'dir'), { recursive: true });
  pwrite(join(root, 'big'), BIG_AT, BLOCK, BIG_SIZE);
  xattr.setAttributeSync(join(root, 'big'), 'user.note', Buffer.from('sparse'));
  execFileSync('chmod', ['0640', join(root, 'big')]);
  // several extents: a hole at the start, two data runs, a hole at the end
  pwrite(join(root, 'multi'), 8 * MiB, Buffer.alloc(100 * 1024, 'a'), 64 * MiB);
  pwrite(join(root, 'multi'), 30 * MiB, Buffer.alloc(200 * 1024, 'b'));
  pwrite(join(root, 'allhole'), 0, Buffer.alloc(0), 16 * MiB);
  pwrite(join(root, 'dir/also-big'), 3 * GiB, Buffer.from('tail data\n'), 3 * GiB + 10);
  writeFileSync(join(root, 'dense.txt'), 'an ordinary file\n');
  for (const rel of SPARSE)
    execFileSync('touch', ['-d', `@${MTIME_NS / 1_000_000_000n}.${String(MTIME_NS % 1_000_000_000n).padStart(9, '0')}`, join(root, rel)]);
}

/** What a sparse file is, without reading its holes: attributes, data extents (holes of 1 MiB and more) and bytes allocated. */
function sparseInfo(p: string): { attrs: Record<string, unknown>; extents: Extent[]; allocated: number } {
  const st = lstatSync(p, { bigint: true });
  const fd = openSync(p, 'r');
  try {
    // st_blocks after the open: overlayfs guesses a metacopy file's blocks from its size until its data is looked up
    const fst = fstatSync(fd, { bigint: true });
    const extents = findDataExtents(fd, fst) ?? (fst.size > 0n ? [[0, Number(fst.size)] as Extent] : []);
    const names = xattr
      .listAttributesSync(p)
      .filter((n) => !n.startsWith('trusted.overlay.'))
      .sort();
    const xattrs = Object.fromEntries(names.map((n) => [n, xattr.getAttributeSync(p, n).toString('base64')]));
    return {
      attrs: {
        mode: Number(st.mode),
        uid: Number(st.uid),
        gid: Number(st.gid),
        size: st.size.toString(),
        mtimeNs: st.mtimeNs.toString(),
        xattrs,
      },
      extents,
      allocated: Number(fst.blocks) * 512,
    };
  } finally {
    closeSync(fd);
  }
}

/** SHA-256 of the bytes of `p` in `ranges` (the rest of both files compared is hole). */
function hashRanges(p: string, ranges: readonly Extent[]): string {
  const h = createHash('sha256');
  const fd = openSync(p, 'r');
  const buf = Buffer.alloc(4 * MiB);
  try {
    for (const [o, l] of ranges) {
      assert.ok(l <= 64 * MiB, `${p}: a data range of ${l} bytes (its holes were filled)`);
      for (let at = 0; at < l;) {
        const n = readSync(fd, buf, 0, Math.min(buf.length, l - at), o + at);
        assert.ok(n > 0, `${p}: short read at ${o + at}`);
        h.update(buf.subarray(0, n));
        at += n;
      }
    }
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

/** The union of two sorted extent lists, merged. */
function union(a: readonly Extent[], b: readonly Extent[]): Extent[] {
  const all = [...a, ...b].sort((x, y) => x[0] - y[0]);
  const out: Extent[] = [];
  for (const [o, l] of all) {
    const last = out[out.length - 1];
    if (last && o <= last[0] + last[1]) last[1] = Math.max(last[1], o + l - last[0]);
    else out.push([o, l]);
  }
  return out;
}

/**
 * Asserts `actual` equals `expected`: the dense part with readFullTree; each sparse file by its
 * attributes, its bytes over the data of either (elsewhere both are holes, so zeros), and its
 * allocation (not more than the expected one's, give or take 2 MiB: the holes stayed holes).
 */
function assertSameSparseTree(actual: string, expected: string, message: string, sparse: Iterable<string>, ignoreRootTime = false): void {
  const list = [...sparse];
  const skip = (rel: string) => list.includes(rel);
  const ignore = (rel: string) => (ignoreRootTime && rel === '.' ? (['mtimeNs'] as const) : []);
  assertSameTree(readFullTree(actual, { skip }), readFullTree(expected, { skip }), message, (rel) => [...ignore(rel)]);
  for (const rel of list) {
    const a = sparseInfo(join(actual, rel));
    const e = sparseInfo(join(expected, rel));
    assert.deepEqual(a.attrs, e.attrs, `${message}: ${rel}`);
    const both = union(a.extents, e.extents);
    assert.equal(hashRanges(join(actual, rel), both), hashRanges(join(expected, rel), both), `${message}: the bytes of ${rel}`);
    assert.ok(a.allocated <= e.allocated + 2 * MiB, `${message}: ${rel} allocates ${a.allocated} bytes (the source ${e.allocated})`);
  }
}

/** Reads `length` bytes at `offset` of `p`. */
function readAt(p: string, offset: number, length: number): Buffer {
  const fd = openSync(p, 'r');
  try {
    const b = Buffer.alloc(length);
    assert.equal(readSync(fd, b, 0, length, offset), length);
    return b;
  } finally {
    closeSync(fd);
  }
}

/** Bytes under `dir` (apparent sizes of its files): what the store holds. */
function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true }))
    if (e.isFile()) n += statSync(join(e.parentPath, e.name)).size;
  return n;
}

/** The root tree object of a snapshot. */
async function rootTree(home: string, id: string): Promise<TreeObject> {
  const svc = await Awc.open({ home, mountDriver: 'copy' });
  try {
    const reader = svc.reader();
    const root = await reader.readRoot((await svc.getSnapshot(id)).root as Digest);
    return await reader.readTree(root.tree);
  } finally {
    await svc.close();
  }
}

describe('sparse files: the format', () => {
  const chunk = { digest: sha256(BLOCK), size: 4096 };
  const file = (extents?: Extent[], size = BIG_SIZE): FileEntry => ({
    type: 'file',
    name: 'f',
    mode: 0o644,
    uid: 0,
    gid: 0,
    mtimeNs: '1',
    size,
    digest: sparseDigest(size, extents ?? [], [chunk]),
    chunks: [chunk],
    ...(extents ? { extents } : {}),
  });

  test('a tree with extents is v3 and decodes back; trees without keep v1 and their digest', () => {
    const t = encodeTree([file([[BIG_AT, 4096]])]);
    const back = decodeTree(t.bytes);
    assert.equal(back.v, 3);
    assert.deepEqual(back.entries[0], file([[BIG_AT, 4096]]));
    const dense = encodeTree([{ ...file(undefined, 4096), digest: chunk.digest }]);
    assert.equal(decodeTree(dense.bytes).v, 1);
    assert.ok(!dense.bytes.toString().includes('extents'));
  });

  test('malformed extents, extents in v1, and a v3 tree without a sparse file are E_FORMAT', () => {
    const bad =
      (extents: Extent[], size = BIG_SIZE) =>
      () =>
        encodeTree([file(extents, size)]);
    assert.throws(bad([[BIG_AT, 2048]]), { code: 'E_FORMAT' }, 'chunks and extents disagree');
    assert.throws(bad([[10, 4096]]), { code: 'E_FORMAT' }, 'a leading hole under 1 MiB');
    assert.throws(bad([[0, 4096]], 4096 + 100), { code: 'E_FORMAT' }, 'a trailing hole under 1 MiB');
    assert.throws(bad([[BIG_AT, 4096]], BIG_AT), { code: 'E_FORMAT' }, 'past the size');
    const v3 = JSON.parse(encodeTree([file([[BIG_AT, 4096]])]).bytes.toString()) as TreeObject;
    assert.throws(() => decodeTree(Buffer.from(JSON.stringify({ ...v3, v: 1 }))), { code: 'E_FORMAT' });
    assert.throws(() => decodeTree(Buffer.from(JSON.stringify({ v: 3, entries: [] }))), { code: 'E_FORMAT' });
  });

  test('a sparse digest is no dense file digest, not even of the bytes it describes', () => {
    const d = sparseDigest(BIG_SIZE, [[BIG_AT, 4096]], [chunk]);
    const desc = `awc sparse file v1\n${JSON.stringify({ size: BIG_SIZE, extents: [[BIG_AT, 4096]], chunks: [chunk] })}`;
    assert.notEqual(d, sha256(desc));
    assert.notEqual(d, sparseDigest(BIG_SIZE, [[BIG_AT + 4096, 4096]], [chunk]), 'the extents are part of the name');
  });

  test('recorded form, range mapping and SEEK_DATA/SEEK_HOLE over extents', () => {
    assert.equal(
      recordedExtents(2.5 * MiB, [
        [0, 10],
        [900 * 1024, 10],
        [1800 * 1024, 10],
      ]),
      undefined,
      'holes under 1 MiB: dense',
    );
    assert.deepEqual(
      recordedExtents(10 * MiB, [
        [100, 10],
        [5 * MiB, 10],
      ]),
      [
        [0, 110],
        [5 * MiB, 10],
      ],
    );
    assert.deepEqual(recordedExtents(4 * MiB, []), []);
    const ext: Extent[] = [
      [2 * MiB, 100],
      [5 * MiB, 100],
    ];
    assert.deepEqual(mapRange(ext, 2 * MiB - 10, 2 * MiB + 110), [
      { offset: 2 * MiB - 10, length: 10, dataOffset: -1 },
      { offset: 2 * MiB, length: 100, dataOffset: 0 },
      { offset: 2 * MiB + 100, length: 10, dataOffset: -1 },
    ]);
    assert.deepEqual(mapRange(ext, 5 * MiB + 50, 5 * MiB + 60), [{ offset: 5 * MiB + 50, length: 10, dataOffset: 150 }]);
    assert.equal(seekExtents(ext, 8 * MiB, 0, true), 2 * MiB);
    assert.equal(seekExtents(ext, 8 * MiB, 2 * MiB + 5, false), 2 * MiB + 100);
    assert.equal(seekExtents(ext, 8 * MiB, 3 * MiB, true), 5 * MiB);
    assert.equal(seekExtents(ext, 8 * MiB, 6 * MiB, true), -1);
    assert.equal(seekExtents(ext, 8 * MiB, 6 * MiB, false), 6 * MiB);
  });
});

describe('sparse files: import and export', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-sparse-'));
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

  test('import of a directory records the holes: tree v3 with extents, the store holds only the data', async () => {
    const t = await rootTree(home, snap.id);
    assert.equal(t.v, 3, 'a tree with a sparse file is v3');
    const big = t.entries.find((e) => e.name === 'big');
    assert.ok(big && big.type === 'file');
    assert.equal(big.size, BIG_SIZE);
    assert.deepEqual(big.extents, [[BIG_AT - (BIG_AT % 4096), 4096]]);
    const all = t.entries.find((e) => e.name === 'allhole');
    assert.ok(all?.type === 'file' && all.size === 16 * MiB);
    assert.deepEqual(all.extents, []);
    assert.deepEqual(all.chunks, []);
    const multi = t.entries.find((e) => e.name === 'multi');
    assert.ok(multi?.type === 'file');
    assert.equal(multi.extents?.length, 2);
    const dense = t.entries.find((e) => e.name === 'dense.txt');
    assert.ok(dense?.type === 'file' && dense.extents === undefined);
    assert.ok(bytesUnder(join(home, 'objects')) < 4 * MiB, `the store holds ${bytesUnder(join(home, 'objects'))} bytes`);
  });

  test('a tree without a sparse file stays v1 (a file with holes under 1 MiB is dense)', async () => {
    const d = join(work, 'dense-only');
    mkdirSync(d);
    pwrite(join(d, 'small-holes'), 3 * MiB - 10, Buffer.from('end'), 3 * MiB);
    for (const at of [0, 900 * 1024, 1800 * 1024, 2700 * 1024]) pwrite(join(d, 'small-holes'), at, Buffer.from('data'));
    const s = awcOk(home, ['snapshot', 'import', d], env);
    const t = await rootTree(home, s.id);
    assert.equal(t.v, 1);
    const out = join(work, 'out-dense');
    awcOk(home, ['export', s.id, '--dir', out], env);
    assert.deepEqual(readAt(join(out, 'small-holes'), 3 * MiB - 10, 3), Buffer.from('end'));
    assert.ok(statSync(join(out, 'small-holes')).blocks * 512 < MiB, 'holes under 1 MiB of a dense file stay holes');
    // 2 MiB of zeros written as data: dense, and export --dir writes them (not a 2 MiB hole), so re-importing gives the same root
    const z = join(work, 'dense-zeros');
    mkdirSync(z);
    writeFileSync(join(z, 'zeros-inside'), Buffer.concat([Buffer.from('head'), Buffer.alloc(2 * MiB), Buffer.from('tail')]));
    const sz = awcOk(home, ['snapshot', 'import', z], env);
    assert.equal((await rootTree(home, sz.id)).v, 1);
    const outZ = join(work, 'out-dense-zeros');
    awcOk(home, ['export', sz.id, '--dir', outZ], env);
    assert.equal(awcOk(home, ['snapshot', 'import', outZ], env).root, sz.root, 'export --dir then import gives the same root');
  });

  test('export --dir writes only the data: holes unallocated, bytes at the data offset, sizes exact', () => {
    const out = join(work, 'out-dir');
    awcOk(home, ['export', snap.id, '--dir', out], env);
    assertSameSparseTree(out, src, 'export --dir equals the source', SPARSE);
    const st = statSync(join(out, 'big'));
    assert.equal(st.size, BIG_SIZE);
    assert.ok(st.blocks * 512 <= 64 * 1024, `big allocates ${st.blocks * 512} bytes`);
    assert.deepEqual(readAt(join(out, 'big'), BIG_AT, 4096), BLOCK);
    assert.deepEqual(readAt(join(out, 'big'), 50 * GiB, 4096), Buffer.alloc(4096));
    assert.equal(statSync(join(out, 'allhole')).blocks, 0);
    assert.equal(awcOk(home, ['snapshot', 'import', out], env).root, snap.root, 'export --dir then import gives the same root');
  });

  test('GNU tar --sparse (posix) archives import with their holes, to the root the directory gave', () => {
    const gnu = join(work, 'gnu.tar');
    execFileSync('tar', ['--format=posix', '--sparse', '--xattrs', '--xattrs-include=*', '-C', src, '-cf', gnu, '.']);
    assert.ok(statSync(gnu).size < 4 * MiB, `GNU tar wrote ${statSync(gnu).size} bytes`);
    const fromTar = awcOk(home, ['snapshot', 'import', gnu], env);
    assert.equal(fromTar.root, snap.root, 'the same tree, extents and digests as the import of the directory');
    const out = join(work, 'out-gnu');
    awcOk(home, ['export', fromTar.id, '--dir', out], env);
    assertSameSparseTree(out, src, 'a GNU sparse archive of the source imports as the source', SPARSE);
  });

  test('export --tar writes GNU sparse 1.0 members: small, GNU tar extracts them byte for byte with the holes, and they import back', () => {
    const mine = join(work, 'mine.tar');
    awcOk(home, ['export', snap.id, '--tar', mine], env);
    assert.ok(statSync(mine).size < 4 * MiB, `export --tar wrote ${statSync(mine).size} bytes`);
    const x = join(work, 'out-tar-x');
    mkdirSync(x);
    execFileSync('tar', ['--xattrs', '--xattrs-include=*', '-C', x, '-xpf', mine]);
    assertSameSparseTree(x, src, 'GNU tar extracts export --tar as the source', SPARSE);
    assert.ok(statSync(join(x, 'big')).blocks * 512 <= 64 * 1024, 'GNU tar left the holes unallocated');
    assert.equal(awcOk(home, ['snapshot', 'import', mine], env).root, snap.root, 'export --tar imports back to the same root');
  });

  test('diff --patch of a sparse file gives its bytes, holes as zeros: git applies it', () => {
    const a = join(work, 'patch-a');
    mkdirSync(a);
    writeFileSync(join(a, 'dense.txt'), 'base\n');
    const sa = awcOk(home, ['snapshot', 'import', a], env);
    pwrite(join(a, 'small-sparse'), 3 * MiB, Buffer.from('after the hole\n'), 3 * MiB + 15);
    const sb = awcOk(home, ['snapshot', 'import', a], env);
    const patch = awc(home, ['diff', sa.id, sb.id, '--patch', '--binary'], env, { json: false });
    assert.equal(patch.code, 0, patch.stderr);
    const base = join(work, 'patch-base');
    awcOk(home, ['export', sa.id, '--dir', base], env);
    execFileSync('git', ['init', '-q', base]);
    execFileSync('git', ['apply', '--binary', '-'], { cwd: base, input: patch.stdout });
    const want = Buffer.alloc(3 * MiB + 15);
    want.write('after the hole\n', 3 * MiB);
    assert.ok(readFileSync(join(base, 'small-sparse')).equals(want));
  });

  test('GNU sparse formats 0.x are refused (E_UNSUPPORTED), not imported with wrong bytes', () => {
    const old = join(work, 'old-sparse.tar');
    execFileSync('tar', ['--format=posix', '--sparse', '--sparse-version=0.1', '-C', src, '-cf', old, 'multi']);
    const r = awc(home, ['snapshot', 'import', old], env);
    assert.notEqual(r.code, 0);
    assert.equal(errorOf(r).code, 'E_UNSUPPORTED');
  });
});

for (const driver of ['overlay', 'copy'] as const) {
  const possible = driver === 'copy' || detectDriver('auto').driver === 'overlay';
  describe(`sparse files in a workspace (${driver} driver)`, { skip: possible ? false : 'overlay is not possible on this host' }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-sparse-ws-${driver}-`));
    const home = join(work, 'home');
    const src = join(work, 'src');
    const mnt = join(work, 'mnt');
    const env = { AWC_MOUNT_DRIVER: driver };
    let ws: string;
    before(() => {
      makeFixture(src);
      const snap = awcOk(home, ['snapshot', 'import', src], env);
      ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
      awcOk(home, ['mount', ws, mnt], env);
    });
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('the mount reads the data block and the holes right, and shows the holes (SEEK_DATA, st_blocks)', () => {
      assert.equal(statSync(join(mnt, 'big')).size, BIG_SIZE);
      assert.deepEqual(readAt(join(mnt, 'big'), BIG_AT, 4096), BLOCK);
      assert.deepEqual(readAt(join(mnt, 'big'), BIG_AT - 100, 200), Buffer.concat([Buffer.alloc(100), BLOCK.subarray(0, 100)]));
      assert.deepEqual(readAt(join(mnt, 'big'), 7 * GiB, 1 * MiB), Buffer.alloc(MiB));
      assert.deepEqual(readAt(join(mnt, 'multi'), 30 * MiB - 2, 4), Buffer.from('\0\0bb'));
      assert.deepEqual(readAt(join(mnt, 'allhole'), 5 * MiB, 4096), Buffer.alloc(4096));
      assertSameSparseTree(mnt, src, 'the mount shows the snapshot', SPARSE, true);
      // SEEK_DATA / SEEK_HOLE through the mount (overlay: the content FUSE server's LSEEK) find the data block
      const fd = openSync(join(mnt, 'big'), 'r');
      try {
        assert.deepEqual(findDataExtents(fd, fstatSync(fd, { bigint: true })), [[BIG_AT, 4096]]);
      } finally {
        closeSync(fd);
      }
    });

    test('a 1-byte write in the 200 GiB file copies up only its data; a sparse file made there is checkpointed with its holes', () => {
      pwrite(join(mnt, 'big'), 4096, Buffer.from('Z'));
      if (driver === 'overlay') {
        const upper = join(home, 'host', 'workspaces', ws, 'upper', 'big');
        assert.ok(existsSync(upper), 'the write copied the file up');
        const st = statSync(upper);
        assert.equal(st.size, BIG_SIZE);
        assert.ok(st.blocks * 512 <= 16 * MiB, `the upper's copy allocates ${st.blocks * 512} bytes: the copy-up skipped the holes`);
      }
      assert.ok(statSync(join(mnt, 'big')).blocks * 512 <= 16 * MiB);
      pwrite(join(mnt, 'made'), 40 * GiB, Buffer.from('made in the workspace\n'), 50 * GiB);
      const cp = awcOk(home, ['checkpoint', ws], env);
      const out = join(work, 'out-cp');
      awcOk(home, ['export', cp.id, '--dir', out], env);
      assertSameSparseTree(out, mnt, 'export --dir of the checkpoint equals the mount', [...SPARSE, 'made'], true);
      assert.deepEqual(readAt(join(out, 'big'), 4096, 1), Buffer.from('Z'));
      assert.deepEqual(readAt(join(out, 'big'), BIG_AT, 4096), BLOCK);
      assert.ok(statSync(join(out, 'made')).blocks * 512 <= 64 * 1024);
      // a second checkpoint reuses what the first stored (the stat cache keeps the extents)
      const again = awcOk(home, ['checkpoint', ws], env);
      const out2 = join(work, 'out-cp2');
      awcOk(home, ['export', again.id, '--dir', out2], env);
      assertSameSparseTree(out2, out, 'a second checkpoint exports the same', [...SPARSE, 'made']);
    });
  });
}
