/**
 * Issue 26, the first mount of a snapshot on a host that never saw it: layer images shared
 * through the object store (src/drivers/overlay/shared-image.ts, written from the snapshot's
 * trees by src/drivers/overlay/erofs/; docs/explanation/layer-images.md). Hosts (homes) A, B and C
 * share one SQLite catalog file and one directory store, as the fleet shares PostgreSQL and a
 * bucket; D has a catalog and a store of its own. A shares images (`layerImages: on`): its import
 * builds, uploads and records the image before it returns, and its own first mount mounts that
 * image; a snapshot imported without one (on B) gets one in the background once A builds its
 * layer, and so does A's checkpoint. D, importing the same tree elsewhere, gets the same image
 * bytes. B mounts the image instead of building (the tree it shows is the source's, its
 * checkpoint reads back on A, and it mounts the image again after the image was unmounted, as
 * after a reboot); C, whose copy of the image is corrupt, builds the layer itself and says why,
 * and its workspace reads exactly as one over the image.
 */
import { strict as assert } from 'node:assert';
import {
  closeSync,
  existsSync,
  fstatSync,
  ftruncateSync,
  linkSync,
  openSync,
  renameSync,
  writeSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, cleanupMounts, readTreeInfo } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { imageHosts } from '../../helpers/two-hosts.js';
import { fsTypeAt } from '../../helpers/mount-info.js';
import { metricSum } from '../../helpers/metrics.js';
import { layerImageSupport } from '../../../src/drivers/overlay/layer-image-mount.js';
import { imageObjectDigest, imageObjectKey } from '../../../src/store/content/image-object.js';
import { digestHex, sha256 } from '../../../src/core/digest.js';
import { findDataExtents } from '../../../src/host/sys/seek-data.js';
import type { Extent } from '../../../src/core/sparse.js';

const support = layerImageSupport();
const root = process.getuid?.() === 0;
const skip = !root ? 'needs root' : !support.mount ? `layer images unsupported here: ${support.why}` : false;

/** The data extents of the file at `path` (SEEK_DATA/SEEK_HOLE), undefined when dense. */
function dataExtents(path: string): Extent[] | undefined {
  const fd = openSync(path, 'r');
  try {
    return findDataExtents(fd, fstatSync(fd, { bigint: true }));
  } finally {
    closeSync(fd);
  }
}

/** A small tree with what a layer must keep: directories, modes, a symlink, a hardlink, an empty file, xattrs, a sparse file. */
function makeSource(dir: string): void {
  mkdirSync(join(dir, 'src', 'deep'), { recursive: true });
  for (let i = 0; i < 40; i++) writeFileSync(join(dir, 'src', `f${i}.txt`), `file ${i}\n`.repeat(1 + i * 7));
  writeFileSync(join(dir, 'src', 'deep', 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
  writeFileSync(join(dir, 'empty'), '');
  symlinkSync('src/f1.txt', join(dir, 'link'));
  linkSync(join(dir, 'src', 'f2.txt'), join(dir, 'hard'));
  for (const [p, v] of [
    ['src/f7.txt', 'a file'],
    ['src/deep', 'a directory'],
    ['empty', 'an empty file'],
  ])
    assert.equal(spawnSync('setfattr', ['-n', 'user.awc.note', '-v', v!, join(dir, p!)]).status, 0);
  // a sparse file: 4 KiB of data at 1 MiB in a 3 MiB hole
  const fd = openSync(join(dir, 'sparse.bin'), 'w');
  writeSync(fd, Buffer.alloc(4096, 7), 0, 4096, 1 << 20);
  ftruncateSync(fd, 3 << 20);
  closeSync(fd);
}

/**
 * Every entry below `dir` as the kernel shows it: path, type, mode, owner, size (not for
 * directories: theirs depends on the file system's layout), mtime in ns, link count, symlink
 * target, every xattr (hex), and a regular file's data extents. Inode numbers and ctimes are
 * left out (an image's are its own).
 */
function describeTree(dir: string): string[] {
  const find = spawnSync('find', [dir, '-mindepth', '1', '-printf', '%P\\t%y\\t%m\\t%U:%G\\t%s\\t%T@\\t%n\\t%l\\n'], { encoding: 'utf8' });
  assert.equal(find.status, 0, find.stderr);
  return find.stdout
    .trim()
    .split('\n')
    .sort()
    .map((line) => {
      const [rel, type, mode, owner, size, mtime, nlink, target] = line.split('\t');
      const p = join(dir, rel!);
      const xattrs =
        type === 'l' ? '' : spawnSync('getfattr', ['-h', '-d', '-m', '-', '-e', 'hex', '--absolute-names', p], { encoding: 'utf8' }).stdout;
      const attrs = xattrs
        .split('\n')
        .filter((l) => l.includes('='))
        .sort()
        .join(',');
      const extents = type === 'f' ? JSON.stringify(dataExtents(p) ?? 'dense') : '';
      return [rel, type, mode, owner, type === 'd' ? '-' : size, mtime, nlink, target, attrs, extents].join(' | ');
    });
}

describe('layer images shared between hosts', { skip }, () => {
  let work = '';
  let src = '';
  const homes: Record<string, string> = {};
  const env: Record<string, NodeJS.ProcessEnv> = {};
  let layerHex = '';
  /** The base snapshot's image object, as its import reported it. */
  let baseImage: { digest: string; bytes: number; index: string; indexBytes: number; built: boolean } | undefined;

  before(async () => {
    work = await makeTempDir('awc-shared-image-');
    src = join(work, 'src');
    makeSource(src);
    mkdirSync(join(work, 'src2', 'x'), { recursive: true });
    writeFileSync(join(work, 'src2', 'x', 'y.txt'), 'another snapshot\n');
    // A and D share (on any catalog); B and C use what is shared and share nothing (auto, on SQLite); E uses no images (off)
    const hosts = imageHosts(work, ['a', 'b', 'c', 'd', 'e'], 'd', (h) => (h === 'a' || h === 'd' ? 'on' : h === 'e' ? 'off' : 'auto'));
    Object.assign(homes, hosts.homes);
    Object.assign(env, hosts.env);
  });
  after(async () => {
    for (const h of Object.keys(homes)) cleanupMounts(homes[h]!, work, env[h]);
    if (work) await removeTempDir(work);
  });

  type Host = 'a' | 'b' | 'c' | 'd' | 'e';
  const home = (h: Host): string => homes[h]!;
  const run = (h: Host, args: string[]): any => awcOk(home(h), args, env[h]);
  const metrics = (h: Host): Record<string, unknown> => run(h, ['metrics']).metrics as Record<string, unknown>;
  const imageKeys = (): string[] => {
    const dir = join(work, 'shared', 'objects', 'images');
    return existsSync(dir) ? readdirSync(dir).flatMap((aa) => readdirSync(join(dir, aa)).map((hex) => `images/${aa}/${hex}`)) : [];
  };
  const waitFor = async (what: string, ok: () => boolean): Promise<void> => {
    const deadline = Date.now() + 60_000;
    while (!ok() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    assert.ok(ok(), what);
  };

  it('an import builds, uploads and records the image before it returns, and the importing host mounts that image', () => {
    const snap = run('a', ['snapshot', 'import', src, '--name', 'base']);
    layerHex = digestHex(snap.root);
    baseImage = snap.image;
    assert.ok(baseImage, `the import reports its image: ${JSON.stringify(snap.imageSkipped)}`);
    assert.equal(baseImage.built, true);
    assert.equal(snap.imageSkipped, undefined);
    const keys = imageKeys();
    assert.deepEqual(
      keys.sort(),
      [imageObjectKey(baseImage.digest as any), imageObjectKey(baseImage.index as any)].sort(),
      'an image and a content index',
    );
    for (const k of keys)
      assert.equal(sha256(readFileSync(join(work, 'shared', 'objects', k))), imageObjectDigest(k), `${k} is named by its digest`);
    assert.equal(statSync(join(work, 'shared', 'objects', imageObjectKey(baseImage.digest as any))).size, baseImage.bytes);
    // no layer directory was built, and no mkfs.erofs ran: the import host's first mount is the image's too
    const ws = run('a', ['fork', 'base', '--name', 'wa']).workspaces[0].id;
    run('a', ['mount', ws, join(work, 'mnt-a')]);
    assert.equal(fsTypeAt(join(home('a'), 'host', 'layers', layerHex, 'tree')), 'erofs', "host A's layer is the shared image");
    assert.equal(metricSum(metrics('a'), 'awc_layer_images_total', { outcome: 'mounted' }), 1);
    assert.deepEqual(readTreeInfo(join(work, 'mnt-a')), readTreeInfo(src), 'the workspace shows the source');
  });

  it('the same tree gives the same image bytes on another catalog and store; an import that shares nothing says why', () => {
    const d = run('d', ['snapshot', 'import', src]);
    assert.equal(d.root, `sha256:${layerHex}`);
    assert.deepEqual(
      { digest: d.image.digest, bytes: d.image.bytes, index: d.image.index, indexBytes: d.image.indexBytes },
      { digest: baseImage!.digest, bytes: baseImage!.bytes, index: baseImage!.index, indexBytes: baseImage!.indexBytes },
    );
    const again = run('a', ['snapshot', 'import', src]);
    assert.equal(again.image.digest, baseImage!.digest);
    assert.equal(again.image.built, false, 'the catalog had the image of this root: nothing built');
    const b = run('b', ['snapshot', 'import', join(work, 'src2'), '--name', 'other']);
    assert.equal(b.image, null);
    assert.equal(b.imageSkipped.reason, 'not-shared', JSON.stringify(b.imageSkipped));
    assert.equal(imageKeys().length, 2);
  });

  it('a host that builds the layer of a snapshot without an image builds it as an image and shares one in the background', async () => {
    const ws = run('a', ['fork', 'other', '--name', 'wa2']).workspaces[0].id;
    const mnt = join(work, 'mnt-a2');
    run('a', ['mount', ws, mnt]);
    const other = digestHex(run('a', ['snapshot', 'ls']).snapshots.find((s: { name: string }) => s.name === 'other').root);
    assert.equal(fsTypeAt(join(home('a'), 'host', 'layers', other, 'tree')), 'erofs', 'host A built the layer as an image');
    assert.equal(metricSum(metrics('a'), 'awc_layer_images_total', { outcome: 'built' }), 1);
    await waitFor('the image was shared', () => metricSum(metrics('a'), 'awc_layer_images_total', { outcome: 'published' }) === 1);
    assert.equal(imageKeys().length, 4);
  });

  it('a checkpoint returns first; its image follows in the background, and another host mounts it', async () => {
    const mnt = join(work, 'mnt-a');
    writeFileSync(join(mnt, 'src', 'f9.txt'), 'checkpointed on host A\n');
    const cp = run('a', ['checkpoint', 'wa']);
    assert.equal(cp.changed, true);
    await waitFor(
      'the checkpoint image was shared',
      () => metricSum(metrics('a'), 'awc_layer_images_total', { outcome: 'published' }) === 2,
    );
    assert.equal(imageKeys().length, 6);
    const ws = run('c', ['fork', cp.id, '--name', 'wc-cp']).workspaces[0].id;
    const at = join(work, 'mnt-c-cp');
    run('c', ['mount', ws, at]);
    assert.equal(fsTypeAt(join(home('c'), 'host', 'layers', digestHex(cp.root), 'tree')), 'erofs', "host C mounts the checkpoint's image");
    assert.deepEqual(readTreeInfo(at), readTreeInfo(mnt), "host C shows host A's checkpoint");
    run('c', ['unmount', ws]);
  });

  it('host B mounts the shared image instead of building the layer, shows the source, and its checkpoint reads back on A', () => {
    const ws = run('b', ['fork', 'base', '--name', 'wb']).workspaces[0].id;
    const mnt = join(work, 'mnt-b');
    run('b', ['mount', ws, mnt]);
    const base = join(home('b'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(base, 'tree')), 'erofs', "host B's layer is the image, mounted");
    assert.equal(statSync(join(base, 'image.erofs')).mode & 0o777, 0o600);
    assert.equal(metricSum(metrics('b'), 'awc_layer_images_total', { outcome: 'mounted' }), 1);
    assert.deepEqual(readTreeInfo(mnt), readTreeInfo(src), 'the workspace shows the source');
    assert.equal(statSync(join(mnt, 'hard')).ino, statSync(join(mnt, 'src', 'f2.txt')).ino, 'hardlinks stay linked');
    const src1 = dataExtents(join(src, 'sparse.bin'));
    assert.ok(src1 && src1.length === 1, `the source file is sparse here: ${JSON.stringify(src1)}`);
    assert.deepEqual(dataExtents(join(mnt, 'sparse.bin')), src1, 'the sparse file keeps its holes through the lazily read index');
    writeFileSync(join(mnt, 'src', 'f3.txt'), 'changed on host B\n');

    // as after a reboot: the workspace and the image unmounted, the layer directory left
    run('b', ['unmount', ws]);
    run('b', ['daemon', 'stop']);
    assert.equal(fsTypeAt(join(base, 'tree')), undefined, 'the daemon unmounts its layer images when it stops');
    run('b', ['mount', ws, mnt]);
    assert.equal(fsTypeAt(join(base, 'tree')), 'erofs', 'the image is mounted again');
    assert.equal(readFileSync(join(mnt, 'src', 'f3.txt'), 'utf8'), 'changed on host B\n', 'the upper kept its change');
    assert.equal(readFileSync(join(mnt, 'src', 'f4.txt'), 'utf8'), readFileSync(join(src, 'src', 'f4.txt'), 'utf8'));

    writeFileSync(join(mnt, 'new.txt'), 'new on host B\n');
    // a metadata-only copy moved away from its base path: the checkpoint finds its content in the image's content index
    renameSync(join(mnt, 'src', 'f5.txt'), join(mnt, 'moved.txt'));
    assert.ok(existsSync(join(home('b'), 'host', 'layers', layerHex, 'index.bin')), 'the layer keeps the binary content index');
    assert.equal(existsSync(join(home('b'), 'host', 'layers', layerHex, 'meta.json')), false, 'and no parsed copy of it');
    const cp = run('b', ['checkpoint', ws]);
    const out = join(work, 'export-a');
    run('a', ['export', cp.id, '--dir', out]);
    assert.deepEqual(readTreeInfo(out), readTreeInfo(mnt), "host A exports host B's checkpoint as B's workspace shows it");
  });

  it('host C, whose copy of the image is corrupt, builds the layer itself, counts the fallback, and reads exactly as over the image and over a layer directory', () => {
    // the base image: one byte flipped in place
    const image = join(work, 'shared', 'objects', imageObjectKey(baseImage!.digest as any));
    const bytes = readFileSync(image);
    bytes[bytes.length >> 1]! ^= 0xff;
    writeFileSync(image, bytes);

    const ws = run('c', ['fork', 'base', '--name', 'wc']).workspaces[0].id;
    const mnt = join(work, 'mnt-c');
    run('c', ['mount', ws, mnt]);
    const base = join(home('c'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(base, 'tree')), 'erofs', 'an image, built here');
    assert.equal(metricSum(metrics('c'), 'awc_layer_images_total', { outcome: 'fallback', reason: 'E_INTEGRITY' }), 1);
    assert.equal(metricSum(metrics('c'), 'awc_layer_images_total', { outcome: 'built' }), 1);
    assert.deepEqual(readTreeInfo(mnt), readTreeInfo(src), 'the workspace shows the source all the same');

    // a host that uses no images (E, layerImages off) builds a layer directory
    const we = run('e', ['fork', 'base', '--name', 'we']).workspaces[0].id;
    const overDir = join(work, 'mnt-e');
    run('e', ['mount', we, overDir]);
    const eBase = join(home('e'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(eBase, 'tree')), undefined, 'a layer directory, built on E');
    assert.equal(existsSync(join(eBase, 'image.json')), false);

    // a fresh workspace of the same snapshot over host B's image reads exactly as this one over C's image built here, and E's over its layer directory
    const wb2 = run('b', ['fork', 'base', '--name', 'wb2']).workspaces[0].id;
    const overImage = join(work, 'mnt-b2');
    run('b', ['mount', wb2, overImage]);
    assert.equal(fsTypeAt(join(home('b'), 'host', 'layers', layerHex, 'tree')), 'erofs');
    const a = describeTree(overImage);
    const c = describeTree(mnt);
    const e = describeTree(overDir);
    assert.ok(
      a.some((l) => l.startsWith('src/f7.txt') && l.includes('user.awc.note=0x')),
      `xattrs are compared: ${a.join('\n')}`,
    );
    assert.ok(
      a.some((l) => l.startsWith('sparse.bin') && l.includes('1048576')),
      'sparse extents are compared',
    );
    assert.deepEqual(a, c, 'metadata, xattrs, sizes and sparse extents over the shared image equal those over an image built here');
    assert.deepEqual(a, e, 'and those over a layer directory');
    assert.deepEqual(readTreeInfo(overImage), readTreeInfo(mnt), 'and the contents');
    assert.deepEqual(readTreeInfo(overDir), readTreeInfo(mnt), 'as over the layer directory');
    run('b', ['unmount', wb2]);
    run('e', ['unmount', we]);
  });

  it('gc removes the records and objects once no snapshot has their root, and not before', () => {
    const gc = ['gc', '--retention', '0s', '--grace', '0s'];
    const kept = run('a', gc);
    assert.deepEqual(kept.layerImages, { records: 0, objects: 0 }, 'the roots are live: nothing to remove');
    assert.equal(imageKeys().length, 6);
    for (const [h, w] of [
      ['a', 'wa'],
      ['a', 'wa2'],
      ['b', 'wb'],
      ['b', 'wb2'],
      ['c', 'wc'],
      ['c', 'wc-cp'],
      ['e', 'we'],
    ] as const)
      run(h, ['rm', w, '--force']);
    for (const s of run('a', ['snapshot', 'ls']).snapshots as { id: string }[]) run('a', ['rm', s.id, '--force']);
    const dry = run('a', [...gc, '--dry-run']);
    assert.deepEqual(dry.layerImages, { records: 3, objects: 6 });
    assert.equal(imageKeys().length, 6, 'a dry run removes nothing');
    const done = run('a', gc);
    assert.deepEqual(done.layerImages, { records: 3, objects: 6 });
    assert.deepEqual(imageKeys(), [], 'the images and their content indexes are gone');
    assert.deepEqual(run('a', gc).layerImages, { records: 0, objects: 0 }, 'and the records: the next gc finds nothing');

    // host B's sweep drops its image-backed layer of the removed root: the image unmounted, the directory gone
    const base = join(home('b'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(base, 'tree')), 'erofs');
    const sweep = run('b', ['gc', '--local']);
    assert.ok(
      sweep.layers.dropped.some((d: { root: string }) => d.root === `sha256:${layerHex}`),
      JSON.stringify(sweep.layers),
    );
    assert.equal(fsTypeAt(join(base, 'tree')), undefined, 'the image is unmounted');
    assert.equal(existsSync(base), false, 'the layer directory is gone');
  });
});

describe("an import's layer image", { skip: !support.mount ? `layer images unsupported here: ${support.why}` : false }, () => {
  let work = '';
  before(async () => {
    work = await makeTempDir('awc-import-image-');
  });
  after(async () => {
    if (work) await removeTempDir(work);
  });
  const envOf = (name: string): NodeJS.ProcessEnv => ({
    AWC_CATALOG: `sqlite:${join(work, name, 'catalog.sqlite')}`,
    AWC_OBJECT_STORE: `file:${join(work, name, 'objects')}`,
    AWC_LAYER_IMAGES: 'on',
  });

  it('does not fail the import when it cannot be shared: image null, the reason and its code, a warning, a metric', () => {
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    const env = envOf('broken');
    mkdirSync(join(work, 'broken', 'objects'), { recursive: true, mode: 0o700 });
    // the store cannot take an image object: `images` is a file where its directory should be
    writeFileSync(join(work, 'broken', 'objects', 'images'), 'not a directory');
    // a running daemon counts it (the import reports it, best effort)
    if (root) awcOk(join(work, 'home-broken'), ['daemon', 'start'], env);
    const r = awc(join(work, 'home-broken'), ['snapshot', 'import', src, '--name', 's'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.image, null);
    assert.equal(r.json.imageSkipped.reason, 'failed');
    assert.match(r.json.imageSkipped.code, /^E_/);
    assert.match(r.stderr, /layer image was not shared/);
    const snaps = awcOk(join(work, 'home-broken'), ['snapshot', 'ls'], env).snapshots;
    assert.deepEqual(
      snaps.map((x: { id: string }) => x.id),
      [r.json.id],
      'the snapshot is imported',
    );
    if (root) {
      const m = awcOk(join(work, 'home-broken'), ['metrics'], env).metrics as Record<string, unknown>;
      assert.equal(metricSum(m, 'awc_layer_images_total', { outcome: 'failed', reason: r.json.imageSkipped.code }), 1);
      awcOk(join(work, 'home-broken'), ['daemon', 'stop'], env);
    }
  });
});

describe('shared image objects', () => {
  it('are named images/<aa>/<hex> by the digest of their bytes; other keys name none', () => {
    const d = sha256('x');
    const key = imageObjectKey(d);
    assert.match(key, /^images\/[0-9a-f]{2}\/[0-9a-f]{64}$/);
    assert.equal(imageObjectDigest(key), d);
    assert.equal(imageObjectDigest(`images/zz/${digestHex(d)}`), undefined);
    assert.equal(imageObjectDigest(`packs/${digestHex(d).slice(0, 2)}/${digestHex(d)}`), undefined);
  });
});
