/**
 * Layer images (src/drivers/overlay/layer-image.ts, layer-image-mount.ts) against the real
 * kernel: the layer of an imported snapshot (the fidelity fixture plus a sparse file, odd
 * names and a pre-1970 mtime) built by a real daemon, packed with mkfs.erofs, mounted
 * file-backed, and used as the metadata lower of an overlay over the daemon's content FUSE
 * mount, side by side with the same overlay over the layer directory. Needs root, /dev/fuse,
 * mkfs.erofs and Linux 6.12 or later; skipped otherwise. The FUSE server runs in the daemon's
 * process, so synchronous reads here are safe.
 */
import assert from 'node:assert/strict';
import {
  appendFileSync,
  chmodSync,
  closeSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { digestHex, type Digest } from '../../../src/core/digest.js';
import { buildLayerImage } from '../../../src/drivers/overlay/layer-image.js';
import { layerImageSupport, mountErofsFile, mountLayerImage, unmountLayerImage } from '../../../src/drivers/overlay/layer-image-mount.js';
import { mountOverlay } from '../../../src/drivers/overlay/overlay-mount.js';
import { unmount } from '../../../src/host/mount/mount-commands.js';
import { mountsAt } from '../../../src/host/mount/mount-table.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { makeFidelityFixture, noise, touchNs } from '../../helpers/fidelity-fixture.js';
import { assertSameTree, readFullTree, type FullNode } from '../../helpers/tree-compare.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

const support = layerImageSupport();
const skip =
  process.getuid?.() !== 0 || !existsSync('/dev/fuse')
    ? 'needs root and /dev/fuse'
    : !support.mkfs || !support.mount
      ? `no layer images here: ${support.why}`
      : detectDriver('auto').driver !== 'overlay'
        ? 'overlay is not possible on this host'
        : false;

/** The fixture of issue 12 plus what a layer image must also keep: a sparse file, odd names, a pre-1970 mtime, a long name. */
function makeSource(src: string): void {
  makeFidelityFixture(src, { bigSize: 3_000_000 });
  mkdirSync(join(src, 'odd'));
  const sparse = join(src, 'odd', 'sparse');
  const fd = openSync(sparse, 'w');
  writeSync(fd, noise(5000, 'head'), 0, 5000, 0);
  writeSync(fd, noise(3000, 'tail'), 0, 3000, 40_000_000);
  closeSync(fd);
  writeFileSync(join(src, 'odd', 'new\nline'), 'a newline in the name\n');
  writeFileSync(Buffer.from(`${src}/odd/latin1-\xe9`, 'latin1'), 'a name that is not UTF-8\n');
  writeFileSync(join(src, 'odd', 'x'.repeat(254)), 'a 254-byte name (mkfs.erofs 1.5 cannot take 255)\n');
  writeFileSync(join(src, 'odd', 'old'), 'before 1970\n');
  touchNs(join(src, 'odd', 'old'), -86_400_000_000_123n);
  touchNs(join(src, 'odd'), 1_700_000_000_000_000_007n);
}

/** `trusted.overlay.{opaque,redirect,metacopy}` of every path of an upper, and its whiteouts: what a checkpoint reads (upper-merge.ts). */
function overlayMarks(upper: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string, rel: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const r = rel === '' ? name : `${rel}/${name}`;
      const st = lstatSync(p);
      const marks: string[] = [];
      if (st.isCharacterDevice() && st.rdev === 0) marks.push('whiteout');
      if (!st.isSymbolicLink())
        for (const n of xattr.listAttributesSync(p).sort())
          if (n === 'trusted.overlay.metacopy') marks.push('metacopy');
          else if (n === 'trusted.overlay.opaque' || n === 'trusted.overlay.redirect')
            marks.push(`${n}=${xattr.getAttributeSync(p, n).toString()}`);
      out[r] = marks.join(' ');
      if (st.isDirectory()) walk(p, r);
    }
  };
  walk(upper, '');
  return out;
}

/** Changes that leave every kind of entry a checkpoint reads in the upper. */
function change(m: string): void {
  chmodSync(join(m, 'modes/m600'), 0o640); // metadata-only copy-up
  appendFileSync(join(m, 'xattrs/user'), 'appended\n'); // full copy-up (xattrs kept)
  renameSync(join(m, 'links/deep'), join(m, 'links/deep-moved')); // directory redirect, relative
  renameSync(join(m, 'hard/sub'), join(m, 'moved-sub')); // directory redirect, absolute
  renameSync(join(m, 'owners/plain'), join(m, 'owners/plain-2')); // metacopy + redirect, whiteout
  rmSync(join(m, 'modes/m000')); // whiteout
  rmSync(join(m, 'owners/sticky'), { recursive: true });
  mkdirSync(join(m, 'owners/sticky')); // opaque directory
  writeFileSync(join(m, 'owners/sticky/new'), 'new\n');
  chmodSync(join(m, 'odd/sparse'), 0o600);
}

/** A merged directory shows its upper's mtime: the overlays' roots (uppers made at different times) differ in it. */
const upperRoot = (rel: string): (keyof FullNode)[] => (rel === '.' ? ['mtimeNs'] : []);

describe('layer images', { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-layer-image-'));
  const home = join(work, 'home');
  const d = (rel: string): string => join(work, rel);
  let layerTree = '';
  let content = '';
  let image = '';
  let digest: Digest;

  before(async () => {
    makeSource(d('src'));
    const snap = awcOk(home, ['snapshot', 'import', d('src')], { AWC_MOUNT_DRIVER: 'overlay' }) as { id: string; root: Digest };
    const ws = (awcOk(home, ['fork', snap.id]) as { workspaces: { id: string }[] }).workspaces[0]!.id;
    awcOk(home, ['mount', ws, d('ws')], { AWC_MOUNT_DRIVER: 'overlay' });
    layerTree = join(home, 'host', 'layers', digestHex(snap.root), 'tree');
    content = join(home, 'host', 'content');
    assert.ok(existsSync(layerTree), 'the daemon built the layer');
    mkdirSync(d('img'));
    image = d('img/layer.erofs');
    ({ digest } = await buildLayerImage(layerTree, image));
  });
  after(async () => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('the same snapshot gives the same bytes: its layer packed twice, and built again by another home (fresh inodes)', async () => {
    const again = await buildLayerImage(layerTree, d('img/again.erofs'));
    assert.equal(again.digest, digest);
    assert.equal(again.bytes, lstatSync(d('img/again.erofs')).size);
    assert.equal(lstatSync(d('img/again.erofs')).mode & 0o777, 0o600);
    const home2 = d('home2');
    const snap = awcOk(home2, ['snapshot', 'import', d('src')]) as { id: string; root: Digest };
    const ws = (awcOk(home2, ['fork', snap.id]) as { workspaces: { id: string }[] }).workspaces[0]!.id;
    awcOk(home2, ['mount', ws, d('ws2')]);
    const tree2 = join(home2, 'host', 'layers', digestHex(snap.root), 'tree');
    assert.equal((await buildLayerImage(tree2, d('img/home2.erofs'))).digest, digest, "another home's layer of the same snapshot");
    cleanupMounts(home2, d('ws2'));
    assert.deepEqual(
      readdirSync(d('img')).filter((n) => n.includes('.tmp-')),
      [],
      'no temporary file left',
    );
  });

  it('an overlay over the mounted image reads exactly as the overlay over the layer directory (and as the workspace)', async () => {
    await mountLayerImage(image, mk('lower-img'), digest);
    const [m] = mountsAt(d('lower-img'));
    assert.equal(m?.fsType, 'erofs');
    assert.equal(m?.source, image, 'file-backed: the image itself is the source, no loop device');
    const opts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .find((f) => f[4] === d('lower-img'))?.[5];
    assert.deepEqual(
      opts?.split(',').filter((o) => ['ro', 'nosuid', 'nodev'].includes(o)),
      ['ro', 'nosuid', 'nodev'],
    );
    await overlayOn(d('lower-img'), 'ov-img');
    await overlayOn(layerTree, 'ov-dir');
    const viaDir = readFullTree(d('ov-dir'));
    assertSameTree(readFullTree(d('ov-img')), viaDir, 'image overlay vs directory overlay', upperRoot);
    assertSameTree(readFullTree(d('ws')), viaDir, 'the workspace shows the same', upperRoot);
    assert.equal(viaDir.nodes.get('odd/old')?.mtimeNs, '-86400000000123');
    assert.equal(viaDir.nodes.get('odd/sparse')?.size, '40003000');
  });

  it('copy-ups leave the same marks in the upper over either lower, and an upper made over one lower reads the same over the other', async () => {
    const t0 = BigInt(Date.now() - 1000) * 1_000_000n;
    change(d('ov-img'));
    change(d('ov-dir'));
    /** The two overlays were changed at different times: the times of what changed differ. */
    const changedNow = (rel: string, n: FullNode): (keyof FullNode)[] => (BigInt(n.mtimeNs) >= t0 ? ['mtimeNs'] : upperRoot(rel));
    assertSameTree(readFullTree(d('ov-img')), readFullTree(d('ov-dir')), 'after the same changes', changedNow);
    assert.deepEqual(overlayMarks(d('ov-img.upper')), overlayMarks(d('ov-dir.upper')));
    const marks = overlayMarks(d('ov-dir.upper'));
    assert.equal(marks['modes/m600'], 'metacopy');
    assert.equal(marks['xattrs/user'], '');
    assert.equal(marks['links/deep-moved'], 'trusted.overlay.redirect=deep');
    assert.equal(marks['moved-sub'], 'trusted.overlay.redirect=/hard/sub');
    assert.equal(marks['modes/m000'], 'whiteout');
    assert.equal(marks['owners/sticky'], 'trusted.overlay.opaque=y');
    // a workspace whose upper was made over the directory, mounted again over the image (and the reverse)
    const [madeOverDir, madeOverImg] = [readFullTree(d('ov-dir')), readFullTree(d('ov-img'))];
    await unmount(d('ov-img'));
    await unmount(d('ov-dir'));
    await overlayOn(d('lower-img'), 'swap-img', d('ov-dir.upper'));
    await overlayOn(layerTree, 'swap-dir', d('ov-img.upper'));
    assertSameTree(readFullTree(d('swap-img')), madeOverDir, 'directory-made upper over the image', upperRoot);
    assertSameTree(readFullTree(d('swap-dir')), madeOverImg, 'image-made upper over the directory', upperRoot);
    await unmount(d('swap-img'));
    await unmount(d('swap-dir'));
    await unmountLayerImage(d('lower-img'));
    assert.equal(mountsAt(d('lower-img')).length, 0);
  });

  it('a tampered or truncated image is refused before it is mounted', async () => {
    const bad = d('img/tampered.erofs');
    cpSync(image, bad);
    const fd = openSync(bad, 'r+');
    writeSync(fd, Buffer.from([readFileSync(bad)[2000]! ^ 1]), 0, 1, 2000);
    closeSync(fd);
    await assert.rejects(mountLayerImage(bad, mk('tampered'), digest), { code: 'E_INTEGRITY' });
    await assert.rejects(mountLayerImage(image, d('ws'), digest), { code: 'E_TARGET_BUSY' }, 'never over a mount point');
    assert.equal(mountsAt(d('tampered')).length, 0);
    writeFileSync(bad, readFileSync(image).subarray(0, 8192));
    await assert.rejects(mountLayerImage(bad, d('tampered'), digest), { code: 'E_INTEGRITY' });
    assert.equal(mountsAt(d('tampered')).length, 0);
    // what the kernel says of a file that is not EROFS (had its digest been recorded)
    assert.throws(() => mountErofsFile(join(layerTree, '..', 'meta.json'), d('tampered')), { code: 'E_MOUNT_FAILED' });
  });

  it('a tree mkfs.erofs 1.5 would not copy exactly is refused, and nothing is left', async () => {
    mkdirSync(d('lf/sub'), { recursive: true });
    writeFileSync(d('lf/sub/lost+found-notes'), 'mkfs.erofs 1.5 drops every name starting with lost+found\n');
    await assert.rejects(buildLayerImage(d('lf'), d('img/lf.erofs')), (e: { code?: string; details?: { path?: string } }) => {
      assert.equal(e.code, 'E_UNSUPPORTED');
      assert.equal(e.details?.path, 'sub/lost+found-notes');
      return true;
    });
    rmSync(d('lf/sub/lost+found-notes'));
    writeFileSync(d(`lf/sub/${'n'.repeat(255)}`), 'mkfs.erofs 1.5 cuts it to 254 bytes and fails\n');
    await assert.rejects(buildLayerImage(d('lf'), d('img/lf.erofs')), { code: 'E_UNSUPPORTED' });
    rmSync(d(`lf/sub/${'n'.repeat(255)}`));
    writeFileSync(d('lf/sub/f'), 'x');
    touchNs(d('lf/sub/f'), -1_500_000_000n);
    await assert.rejects(buildLayerImage(d('lf'), d('img/lf.erofs')), { code: 'E_UNSUPPORTED' });
    assert.equal(existsSync(d('img/lf.erofs')), false);
  });

  it('a build cancelled by its signal kills mkfs.erofs and leaves nothing (E_CANCELLED, not E_INTERNAL)', async () => {
    // the real mkfs.erofs, cancelled before it starts
    await assert.rejects(buildLayerImage(layerTree, d('img/cancel.erofs'), { signal: AbortSignal.abort() }), { code: 'E_CANCELLED' });
    // fault injection: an mkfs that never ends, cancelled while it runs
    const slow = d('img/slow-mkfs');
    writeFileSync(slow, `#!/bin/sh\necho $$ > ${d('img/slow.pid')}\nexec sleep 60\n`, { mode: 0o755 });
    const ac = new AbortController();
    const t0 = Date.now();
    const build = buildLayerImage(layerTree, d('img/cancel.erofs'), { mkfs: slow, signal: ac.signal });
    while (!existsSync(d('img/slow.pid')) && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
    ac.abort();
    await assert.rejects(build, { code: 'E_CANCELLED' });
    assert.ok(Date.now() - t0 < 10_000, 'it returned once cancelled, not when mkfs would have ended');
    const pid = Number(readFileSync(d('img/slow.pid'), 'utf8'));
    assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, 'mkfs was killed');
    assert.deepEqual(
      readdirSync(d('img')).filter((n) => n.startsWith('cancel')),
      [],
      'no image and no temporary file',
    );
  });

  /** Creates `work/<name>` and returns it. */
  function mk(name: string): string {
    mkdirSync(d(name), { recursive: true });
    return d(name);
  }

  /** Mounts an overlay of `lower` over the daemon's content mount at `work/<name>` (upper `<name>.upper` unless given). */
  async function overlayOn(lower: string, name: string, upper = mk(`${name}.upper`)): Promise<void> {
    await mountOverlay({ layer: lower, content, upper, work: mk(`${name}.work`), target: mk(name) });
  }
});
