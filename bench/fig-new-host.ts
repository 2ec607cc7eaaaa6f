import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Awc } from '../src/service/workspace/awc.js';
import { DaemonClient } from '../src/daemon/supervisor/client.js';
import { shareLayerImage } from '../src/drivers/overlay/shared-image.js';
import { layerGitSource } from '../src/drivers/overlay/layer-git-index.js';
import { layerImageSupport } from '../src/drivers/overlay/layer-image-mount.js';
import { fmtRatio, stopDaemon, unmountAll, type Figure, type TreeCtx } from './common.js';
import { forkMountRead } from './fig-fork.js';
import { fmtBytes, fmtMs, lazyUnmountUnder, now, setAside } from './util.js';

/**
 * The first mount of a snapshot on a host that never saw it (issue 26), with and without a
 * shared layer image (src/drivers/overlay/shared-image.ts; docs/explanation/layer-images.md).
 * This host's layer of the snapshot is packed into an image and shared (`image-share`: the
 * once-per-snapshot cost, reported), then two fresh homes join the same catalog and object store
 * as new hosts: one with `layerImages: on` mounts the image (`new-host-mount`), one with
 * `layerImages: off` builds the layer directory (the baseline, as every host did before). Each
 * new host's daemon is started before the clock starts; the time is fork + mount + one read of
 * the probe file, in process through that host's daemon, as `first-mount` is measured.
 */
export async function figNewHostMount(ctx: TreeCtx, log: (s: string) => void): Promise<Figure[]> {
  const support = layerImageSupport();
  if (!support.build || !support.mount) {
    log(`  new-host figures skipped: ${support.why}`);
    return [];
  }
  const snap = await ctx.awc.getSnapshot(ctx.snapshotId);
  // the import may have shared it already (layerImages on): drop that record, so the share is timed
  await ctx.awc.catalog.deleteLayerImage(ctx.awc.namespace, snap.root);
  const t0 = now();
  const shared = await shareLayerImage(
    { catalog: ctx.awc.catalog, store: ctx.awc.store, host: ctx.awc.config.host },
    ctx.awc.namespace,
    snap.root,
    ctx.awc.reader(),
    layerGitSource(ctx.awc.reader(), ctx.awc.store),
  );
  const rec = shared.record;
  const shareMs = now() - t0;
  log(`  image shared in ${fmtMs(shareMs)}: image ${fmtBytes(rec.imageBytes)}, content index ${fmtBytes(rec.indexBytes)} (lz4)`);
  const withImage = await newHostMount(ctx, 'on');
  log(`  new host, shared image: ${fmtMs(withImage)}`);
  const building = await newHostMount(ctx, 'off');
  log(`  new host, layer built: ${fmtMs(building)}`);
  const files = ctx.stats.files;
  const per100k = files >= 100_000 ? ` (${fmtMs((withImage * 100_000) / files)} per 100k files)` : '';
  return [
    {
      id: 'image-share',
      tree: ctx.label,
      name: 'share the layer image of a snapshot (once per snapshot, by the first host)',
      awc: shareMs,
      unit: 'ms',
      baseline: null,
      baselines: {},
      awcText: `${fmtMs(shareMs)}; image ${fmtBytes(rec.imageBytes)}, content index ${fmtBytes(rec.indexBytes)}`,
      baselineText: '—',
      ratio: null,
      ratioText: '—',
      target: '— (reported; in the background of the first host)',
      met: null,
      notes: [
        'The image written from the snapshot trees by our own EROFS writer (no layer directory, no mkfs.erofs), lz4 of the image and of the content index, two uploads to the local store, one catalog record. An import with layerImages on pays this before it returns.',
      ],
    },
    {
      id: 'new-host-mount',
      tree: ctx.label,
      name: 'first fork + mount on a host that never saw the snapshot (shared image)',
      awc: withImage,
      unit: 'ms',
      baseline: building,
      baselines: { 'layer built on the new host': building },
      awcText: `${fmtMs(withImage)}${per100k}`,
      baselineText: `layer built on the new host ${fmtMs(building)}`,
      ratio: withImage / building,
      ratioText: fmtRatio(withImage / building),
      target: '≤ 1 s up to 200k files',
      met: files <= 200_000 ? withImage <= 1000 : null,
      notes: [
        `A fresh home on the same catalog and store, its daemon started first (not timed); fork + mount + read of ${ctx.probe}: the image and content index fetched from the local store, checked and mounted.`,
      ],
    },
  ];
}

/** A new host (a fresh home on this tree's catalog and store, `layerImages` as given): its first mount of the snapshot, in ms. */
async function newHostMount(ctx: TreeCtx, layerImages: 'on' | 'off'): Promise<number> {
  const home = join(ctx.scratch, `new-host-${layerImages}`);
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const c = ctx.awc.config;
  const config = {
    catalog: c.catalog,
    objectStore: c.objectStore,
    host: `bench-new-host-${layerImages}`,
    mountDriver: 'overlay',
    layerImages,
  };
  writeFileSync(join(home, 'config.json'), JSON.stringify(config), { mode: 0o600 });
  const awc = await Awc.open({ home }, { daemon: (cfg) => new DaemonClient(cfg) });
  try {
    await new DaemonClient(awc.config).start();
    return await forkMountRead(ctx, join(ctx.scratch, `nh-${layerImages}`), awc);
  } finally {
    await unmountAll(awc);
    await stopDaemon(awc);
    lazyUnmountUnder(home);
    lazyUnmountUnder(join(ctx.scratch, `nh-${layerImages}`));
    await awc.close();
    setAside(home, ctx.trash);
  }
}
