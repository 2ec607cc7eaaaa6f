/**
 * Issue 26, the first mount on a host that never saw the snapshot: layer images shared through
 * the object store (src/drivers/overlay/shared-image.ts; docs/explanation/layer-images.md). Three
 * hosts (homes) share one SQLite catalog file and one directory store, as the fleet shares
 * PostgreSQL and a bucket. Host A builds the layer at its first mount and shares its image; host
 * B mounts that image instead of building (the tree it shows is the source's, its checkpoint
 * reads back on A, and it mounts the image again after the image was unmounted, as after a
 * reboot); host C, whose copy of the image is corrupt, builds the layer itself and says why.
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
import { awcOk, cleanupMounts, readTreeInfo } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { layerImageSupport } from '../../../src/drivers/overlay/layer-image-mount.js';
import { imageObjectDigest, imageObjectKey } from '../../../src/store/content/image-object.js';
import { digestHex, sha256 } from '../../../src/core/digest.js';
import { findDataExtents } from '../../../src/host/sys/seek-data.js';
import type { Extent } from '../../../src/core/sparse.js';

const support = layerImageSupport();
const root = process.getuid?.() === 0;
const skip = !root ? 'needs root' : !support.build || !support.mount ? `layer images unsupported here: ${support.why}` : false;

/** The sum of the samples of `name` in `awc metrics --json` whose labels include `labels`. */
function sample(metrics: Record<string, unknown>, name: string, labels: Record<string, string> = {}): number {
  const v = metrics[name];
  if (!Array.isArray(v)) return 0;
  return v
    .filter((s: { labels: Record<string, string> }) => Object.entries(labels).every(([k, x]) => String(s.labels[k]) === x))
    .reduce((a: number, s: { value: number }) => a + s.value, 0);
}

/** The file system type mounted at `path`, or undefined. */
function fsTypeAt(path: string): string | undefined {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f[4] === path) return f[f.indexOf('-') + 1];
  }
  return undefined;
}

/** The data extents of the file at `path` (SEEK_DATA/SEEK_HOLE), undefined when dense. */
function dataExtents(path: string): Extent[] | undefined {
  const fd = openSync(path, 'r');
  try {
    return findDataExtents(fd, fstatSync(fd, { bigint: true }));
  } finally {
    closeSync(fd);
  }
}

/** A small tree with what a layer must keep: directories, modes, a symlink, a hardlink, an empty file. */
function makeSource(dir: string): void {
  mkdirSync(join(dir, 'src', 'deep'), { recursive: true });
  for (let i = 0; i < 40; i++) writeFileSync(join(dir, 'src', `f${i}.txt`), `file ${i}\n`.repeat(1 + i * 7));
  writeFileSync(join(dir, 'src', 'deep', 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
  writeFileSync(join(dir, 'empty'), '');
  symlinkSync('src/f1.txt', join(dir, 'link'));
  linkSync(join(dir, 'src', 'f2.txt'), join(dir, 'hard'));
  // a sparse file: 4 KiB of data at 1 MiB in a 3 MiB hole
  const fd = openSync(join(dir, 'sparse.bin'), 'w');
  writeSync(fd, Buffer.alloc(4096, 7), 0, 4096, 1 << 20);
  ftruncateSync(fd, 3 << 20);
  closeSync(fd);
}

describe('layer images shared between hosts', { skip }, () => {
  let work = '';
  let src = '';
  const homes: string[] = [];
  const env: Record<string, NodeJS.ProcessEnv> = {};
  let layerHex = '';

  before(async () => {
    work = await makeTempDir('awc-shared-image-');
    src = join(work, 'src');
    makeSource(src);
    const shared = join(work, 'shared');
    mkdirSync(shared, { mode: 0o700 });
    for (const h of ['a', 'b', 'c']) {
      const home = join(work, `host-${h}`);
      homes.push(home);
      env[h] = {
        AWC_CATALOG: `sqlite:${join(shared, 'catalog.sqlite')}`,
        AWC_OBJECT_STORE: `file:${join(shared, 'objects')}`,
        AWC_MOUNT_DRIVER: 'overlay',
        AWC_HOST: `host-${h}`,
        // A shares (on any catalog); B and C use what is shared and share nothing (auto, on SQLite)
        AWC_LAYER_IMAGES: h === 'a' ? 'on' : 'auto',
      };
    }
  });
  after(async () => {
    for (const [i, home] of homes.entries()) cleanupMounts(home, work, env['abc'[i]!]);
    if (work) await removeTempDir(work);
  });

  const home = (h: 'a' | 'b' | 'c'): string => homes['abc'.indexOf(h)]!;
  const run = (h: 'a' | 'b' | 'c', args: string[]): any => awcOk(home(h), args, env[h]);
  const metrics = (h: 'a' | 'b' | 'c'): Record<string, unknown> => run(h, ['metrics']).metrics as Record<string, unknown>;

  it('host A builds the layer at its first mount and shares its image and content index', async () => {
    const snap = run('a', ['snapshot', 'import', src, '--name', 'base']);
    layerHex = digestHex(snap.root);
    const ws = run('a', ['fork', 'base', '--name', 'wa']).workspaces[0].id;
    run('a', ['mount', ws, join(work, 'mnt-a')]);
    const tree = join(home('a'), 'host', 'layers', layerHex, 'tree');
    assert.equal(fsTypeAt(tree), undefined, 'host A built a layer directory');
    const deadline = Date.now() + 60_000;
    while (sample(metrics('a'), 'awc_layer_images_total', { outcome: 'published' }) < 1 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 250));
    assert.equal(sample(metrics('a'), 'awc_layer_images_total', { outcome: 'published' }), 1, 'the image was shared');
    const objects = join(work, 'shared', 'objects', 'images');
    const keys = readdirSync(objects).flatMap((aa) => readdirSync(join(objects, aa)).map((hex) => `images/${aa}/${hex}`));
    assert.equal(keys.length, 2, 'an image and a content index');
    for (const k of keys)
      assert.equal(sha256(readFileSync(join(work, 'shared', 'objects', k))), imageObjectDigest(k), `${k} is named by its digest`);
  });

  it('host B mounts the shared image instead of building the layer, shows the source, and its checkpoint reads back on A', () => {
    const ws = run('b', ['fork', 'base', '--name', 'wb']).workspaces[0].id;
    const mnt = join(work, 'mnt-b');
    run('b', ['mount', ws, mnt]);
    const base = join(home('b'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(base, 'tree')), 'erofs', "host B's layer is the image, mounted");
    assert.equal(statSync(join(base, 'image.erofs')).mode & 0o777, 0o600);
    assert.equal(sample(metrics('b'), 'awc_layer_images_total', { outcome: 'mounted' }), 1);
    assert.deepEqual(readTreeInfo(mnt), readTreeInfo(src), 'the workspace shows the source');
    assert.equal(statSync(join(mnt, 'hard')).ino, statSync(join(mnt, 'src', 'f2.txt')).ino, 'hardlinks stay linked');
    const src1 = dataExtents(join(src, 'sparse.bin'));
    assert.ok(src1 && src1.length === 1, `the source file is sparse here: ${JSON.stringify(src1)}`);
    assert.deepEqual(dataExtents(join(mnt, 'sparse.bin')), src1, 'the sparse file keeps its holes through the lazily read index');
    writeFileSync(join(mnt, 'src', 'f3.txt'), 'changed on host B\n');

    // as after a reboot: the workspace and the image unmounted, the layer directory left
    run('b', ['unmount', ws]);
    run('b', ['daemon', 'stop']);
    assert.equal(spawnSync('umount', [join(base, 'tree')]).status, 0);
    assert.equal(fsTypeAt(join(base, 'tree')), undefined);
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

  it('host C, whose copy of the image is corrupt, builds the layer itself and counts the fallback', () => {
    const objects = join(work, 'shared', 'objects');
    // the larger object is the image: one byte flipped in place
    const keys = readdirSync(join(objects, 'images')).flatMap((aa) =>
      readdirSync(join(objects, 'images', aa)).map((hex) => join(objects, 'images', aa, hex)),
    );
    const image = keys.sort((x, y) => statSync(y).size - statSync(x).size)[0]!;
    const bytes = readFileSync(image);
    bytes[bytes.length >> 1]! ^= 0xff;
    writeFileSync(image, bytes);

    const ws = run('c', ['fork', 'base', '--name', 'wc']).workspaces[0].id;
    const mnt = join(work, 'mnt-c');
    run('c', ['mount', ws, mnt]);
    const base = join(home('c'), 'host', 'layers', layerHex);
    assert.equal(fsTypeAt(join(base, 'tree')), undefined, 'a layer directory, built here');
    assert.equal(existsSync(join(base, 'image.json')), false);
    assert.equal(sample(metrics('c'), 'awc_layer_images_total', { outcome: 'fallback', reason: 'E_INTEGRITY' }), 1);
    assert.deepEqual(readTreeInfo(mnt), readTreeInfo(src), 'the workspace shows the source all the same');
  });

  it('gc removes the record and both objects once no snapshot has the root, and not before', () => {
    const keys = (): string[] => {
      const dir = join(work, 'shared', 'objects', 'images');
      return existsSync(dir) ? readdirSync(dir).flatMap((aa) => readdirSync(join(dir, aa))) : [];
    };
    const gc = ['gc', '--retention', '0s', '--grace', '0s'];
    const kept = run('a', gc);
    assert.deepEqual(kept.layerImages, { records: 0, objects: 0 }, 'the root is live: nothing to remove');
    assert.equal(keys().length, 2);
    for (const h of ['a', 'b', 'c'] as const) run(h, ['rm', `w${h}`, '--force']);
    run('a', ['rm', 'base', '--force']);
    const dry = run('a', [...gc, '--dry-run']);
    assert.deepEqual(dry.layerImages, { records: 1, objects: 2 });
    assert.equal(keys().length, 2, 'a dry run removes nothing');
    const done = run('a', gc);
    assert.deepEqual(done.layerImages, { records: 1, objects: 2 });
    assert.deepEqual(keys(), [], 'the image and its content index are gone');
    assert.deepEqual(run('a', gc).layerImages, { records: 0, objects: 0 }, 'and the record: the next gc finds nothing');

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
