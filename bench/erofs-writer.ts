/**
 * The EROFS writer (src/drivers/overlay/erofs/) at the size of issue 26's tree: a synthetic
 * layer of N placeholders (default 108k, in directories of 12, with ns mtimes, a few owners,
 * metacopy and a short redirect each) written as an image from its entries, timed; no tree is
 * built. With `--mkfs`, the same entries are also made as a layer directory and packed with
 * mkfs.erofs (the options buildLayerImage uses), timed, and both images are mounted and
 * compared (`find -printf` of every stat field, and `getfattr` of every xattr).
 *
 *   node dist/bench/erofs-writer.js [--files N] [--mkfs] [--dir D]
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';
import { shortContentRedirect } from '../src/core/content-name.js';
import { writeErofsImage, type ErofsEntry } from '../src/drivers/overlay/erofs/writer.js';
import { LAYER_IMAGE_EPOCH, mkfsArgs } from '../src/drivers/overlay/layer-image.js';
import { futimesNs } from '../src/host/sys/utimens.js';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : (process.argv[i + 1] ?? '');
}

/** N placeholders in directories of 12 (two levels), parents first. */
function syntheticEntries(files: number): ErofsEntry[] {
  const t = 1_700_000_000_000_000_000n;
  const out: ErofsEntry[] = [{ path: '', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtimeNs: t }];
  const dirs = Math.ceil(files / 12);
  const top = Math.ceil(Math.sqrt(dirs));
  for (let i = 0; i < top; i++) out.push({ path: `pkg-${i}`, type: 'dir', mode: 0o755, uid: 0, gid: 0, mtimeNs: t + BigInt(i) });
  for (let n = 0; n < files; n++) {
    const d = Math.floor(n / 12);
    const dir = `pkg-${d % top}/module-${Math.floor(d / top)}`;
    if (n % 12 === 0) out.push({ path: dir, type: 'dir', mode: 0o755, uid: 0, gid: 0, mtimeNs: t + BigInt(d) * 1_000_003n });
    const hex = createHash('sha256').update(`content ${n}`).digest('hex');
    out.push({
      path: `${dir}/file-${n % 12}.js`,
      type: 'file',
      mode: n % 7 === 0 ? 0o755 : 0o644,
      uid: n % 5 === 0 ? 1000 : 0,
      gid: n % 5 === 0 ? 1000 : 0,
      mtimeNs: t + BigInt(n) * 987_654_321n,
      size: 200 + ((n * 7919) % 5800),
      xattrs: [
        ['trusted.overlay.metacopy', Buffer.alloc(0)],
        ['trusted.overlay.redirect', Buffer.from(shortContentRedirect(hex))],
      ],
    });
  }
  return out;
}

/** Makes `entries` (directories and placeholders only) as a layer directory under `root`. */
function makeLayerDir(root: string, entries: ErofsEntry[]): void {
  const dirTimes: [string, bigint][] = [];
  for (const e of entries) {
    const p = join(root, e.path.toString());
    if (e.type === 'dir') {
      if (e.path !== '') fs.mkdirSync(p);
      fs.chmodSync(p, e.mode);
      dirTimes.push([p, e.mtimeNs]);
      continue;
    }
    const fd = fs.openSync(p, 'wx', 0o600);
    fs.ftruncateSync(fd, e.size ?? 0);
    fs.fchownSync(fd, e.uid, e.gid);
    fs.fchmodSync(fd, e.mode);
    for (const [k, v] of e.xattrs ?? []) xattr.setAttributeSync(p, k, v);
    futimesNs(fd, e.mtimeNs.toString());
    fs.closeSync(fd);
  }
  for (const [p, ns] of dirTimes.reverse()) {
    const fd = fs.openSync(p, 'r');
    futimesNs(fd, ns.toString());
    fs.closeSync(fd);
  }
}

/** Every stat field and xattr of a mounted image, as text (order-independent). */
function dump(mnt: string): string {
  const find = execFileSync('find', ['.', '-printf', '%p %y %m %U %G %s %n %T@ %l\\n'], { cwd: mnt, maxBuffer: 1 << 30 }).toString();
  const fattr = execFileSync('getfattr', ['-R', '-h', '-d', '-m', '-', '-e', 'hex', '.'], { cwd: mnt, maxBuffer: 1 << 30 }).toString();
  // a directory's size depends on how its dirents are laid out: left out
  const lines = find.split('\n').map((l) =>
    l
      .split(' ')
      .map((f, i, a) => (i === 5 && a[1] === 'd' ? '-' : f))
      .join(' '),
  );
  return [...lines.sort(), ...fattr.split('\n\n').sort()].join('\n');
}

async function main(): Promise<void> {
  const files = Number(arg('--files') ?? 108_000);
  const work = arg('--dir') ?? fs.mkdtempSync(join(tmpdir(), 'awc-bench-erofs-'));
  const entries = syntheticEntries(files);
  const rss0 = process.memoryUsage().rss;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const stats = await writeErofsImage(entries, join(work, 'ours.erofs'));
  const cpu = process.cpuUsage(cpu0);
  const ms = performance.now() - t0;
  const rss = process.memoryUsage().rss;
  const cpuMs = { userMs: Math.round(cpu.user / 1000), sysMs: Math.round(cpu.system / 1000) };
  const mem = { rssBeforeMB: Math.round(rss0 / 2 ** 20), rssAfterMB: Math.round(rss / 2 ** 20) };
  console.log(JSON.stringify({ entries: entries.length, writerMs: Math.round(ms), ...cpuMs, ...stats, ...mem, load: loadavg()[0] }));
  if (!process.argv.includes('--mkfs')) {
    if (!arg('--dir')) fs.rmSync(work, { recursive: true, force: true });
    return;
  }
  const layer = join(work, 'layer');
  fs.mkdirSync(layer);
  let t = performance.now();
  makeLayerDir(layer, entries);
  const layerMs = performance.now() - t;
  t = performance.now();
  execFileSync('mkfs.erofs', mkfsArgs(join(work, 'mkfs.erofs'), layer), { env: { ...process.env, SOURCE_DATE_EPOCH: LAYER_IMAGE_EPOCH } });
  const mkfsMs = performance.now() - t;
  const mkfsBytes = fs.statSync(join(work, 'mkfs.erofs')).size;
  const mounts = ['ours', 'mkfs'].map((n) => join(work, `mnt-${n}`));
  const texts: string[] = [];
  for (const [i, n] of ['ours', 'mkfs'].entries()) {
    fs.mkdirSync(mounts[i]!);
    execFileSync('mount', ['-t', 'erofs', '-o', 'ro', join(work, `${n}.erofs`), mounts[i]!]);
    try {
      texts.push(dump(mounts[i]!));
    } finally {
      execFileSync('umount', [mounts[i]!]);
    }
  }
  console.log(
    JSON.stringify({ layerDirMs: Math.round(layerMs), mkfsMs: Math.round(mkfsMs), mkfsBytes, sameContent: texts[0] === texts[1] }),
  );
  if (!arg('--dir')) fs.rmSync(work, { recursive: true, force: true });
}

await main();
