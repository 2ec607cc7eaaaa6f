import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import { unmount } from '../../host/mount/mount-commands.js';
import type { HostDaemonPort } from '../port/host-daemon-port.js';
import { mountPathOf } from '../port/mount-path.js';
import type {
  DoctorCheck,
  DriverContext,
  MountDriver,
  MountOptions,
  MountResult,
  MountUse,
  ScanOptions,
  ScanResult,
  UnmountOptions,
  UnmountResult,
} from '../port/mount-driver.js';
import { removeHostState, workspaceDirs, type WorkspaceHostState } from '../port/workspace-state.js';
import { buildLayer, readLayerLinks } from './layer-builder.js';
import { contentsLookup, type ContentLookup } from '../../store/content/content-index.js';
import { overlayChecks } from './overlay-checks.js';
import { mergeUpper } from './upper-merge.js';
import { readUpperCache, writeUpperCache } from './upper-stat-cache.js';
import { describeUse, NOT_IN_USE } from '../port/mount-use.js';
import { overlayUpper, upperInUse } from './upper-use.js';
import { mountsAt } from '../../host/mount/mount-table.js';

/**
 * The overlay mount driver, service side: mounts and unmounts go to the host daemon (it
 * owns the content FUSE server the overlays read from; see OverlayHost), through the
 * {@link HostDaemonPort} it is given. Scans run here: the workspace's private upper is
 * merged into its layer's tree by overlayfs's rules (mergeUpper, never through the merged
 * view), with the upper stat cache. An unmount keeps uncheckpointed changes in the upper
 * (the next mount resumes them) unless discarded.
 */
export class OverlayMountDriver implements MountDriver {
  readonly name = 'overlay' as const;

  constructor(
    private readonly ctx: DriverContext,
    private readonly daemon: HostDaemonPort,
  ) {}

  doctor(): DoctorCheck[] {
    return overlayChecks();
  }

  /** Mounts through the host daemon (started on demand), which takes the lease and resumes a kept upper. @throws what HostDaemonPort.mount throws */
  mount(ws: WorkspaceRow, target: string, _pending: WorkspaceHostState | undefined, opts: MountOptions = {}): Promise<MountResult> {
    return this.daemon.mount({ namespace: this.ctx.config.namespace, workspace: ws.id, target, steal: opts.steal, asUser: opts.asUser });
  }

  /** An overlay recorded as mounted is the daemon's to remount (it does so when it starts): nothing to resume here. */
  async resume(): Promise<undefined> {
    return undefined;
  }

  /**
   * Unmounts through the daemon; with no daemon (it died, and with it the mount's content)
   * the mount is detached here and its record cleared. The upper stays when it holds
   * uncheckpointed changes (`pending`) unless `discard`; after a lazy detach (`force`) that
   * processes keep alive, the upper stays in every case and `holders` names them.
   * @throws E_TARGET_BUSY (busy, without force), E_NOT_MOUNTED, E_STILL_MOUNTED (discard while a detached mount lives on)
   */
  async unmount(ws: WorkspaceRow, state: WorkspaceHostState | undefined, opts: UnmountOptions): Promise<UnmountResult> {
    const { ctx } = this;
    const path = mountPathOf(ws);
    await this.daemon.unmount({ namespace: ctx.config.namespace, workspace: ws.id, force: opts.force }).catch(async (err: unknown) => {
      // daemon gone: the mount is dead anyway; detach it and clear the record
      if (err instanceof AwcError && err.code === 'E_DAEMON_UNAVAILABLE') {
        await unmount(path, true);
        await ctx.catalog.setMount(ws.id, null);
        return;
      }
      throw err;
    });
    if (!state) return { workspace: ws.id, path, pending: false };
    if (opts.force) {
      // a lazy detach: processes may still write into the upper through the old mount
      const use = await this.inUse(state);
      if (use.inUse) {
        if (opts.discard)
          throw new AwcError(
            'E_STILL_MOUNTED',
            `workspace ${ws.id} was detached from ${path}, but its changes are not discarded: the old mount is still alive (${describeUse(use)})`,
            { hint: `Run \`awc unmount ${ws.id} --discard\` again once those processes have exited.`, details: { holders: use.holders } },
          );
        return { workspace: ws.id, path, pending: true, holders: use.holders };
      }
    }
    const pending = opts.discard ? false : await opts.changed();
    if (!pending) {
      await removeHostState(ctx.paths.workspaces, ws.id);
      // nothing private is left here: the lease goes (kept changes keep it: no other host may start over)
      await ctx.catalog.releaseLease(ws.id, ctx.config.host);
    }
    return { workspace: ws.id, path, pending };
  }

  /**
   * Merges the upper into the layer's tree (mergeUpper) with the upper stat cache;
   * `committed` saves the cache the merge saw (every digest in it is committed then).
   */
  async scan(state: WorkspaceHostState, writer: ContentWriter, opts: ScanOptions = {}): Promise<ScanResult> {
    const { ctx } = this;
    const dirs = workspaceDirs(ctx.paths.workspaces, state.workspaceId);
    const layer = await this.layerLinks(state);
    const r = await mergeUpper({
      src: ctx.reader(writer.sessionBlob.bind(writer)),
      base: state.layerRoot,
      upper: dirs.upper,
      writer,
      hardlinks: layer.hardlinks,
      contents: layer.contents,
      statCache: await readUpperCache(dirs.dir),
      allowChanging: opts.allowChanging ?? false,
      filter: opts.filter,
    });
    return {
      root: r.root,
      filesRead: r.filesRead,
      skipped: r.skipped,
      changing: r.changing,
      committed: () => writeUpperCache(dirs.dir, r.statCache),
    };
  }

  /**
   * The hardlink groups and (on demand) contents of the workspace's layer, without reading
   * the layer's whole meta (readLayerLinks); a layer that is missing or older is built or
   * read whole (buildLayer). An ordinary user's workspace has its own layer tree, with the
   * same metadata.
   */
  private async layerLinks(
    state: WorkspaceHostState,
  ): Promise<{ hardlinks: Record<string, string[]>; contents: () => Promise<ContentLookup> }> {
    const { ctx } = this;
    const layersDir = state.owner ? join(ctx.paths.userLayers, String(state.owner.uid)) : ctx.paths.layers;
    const links = await readLayerLinks(state.layerRoot, layersDir);
    if (links) return links;
    const layer = await buildLayer(ctx.reader(), state.layerRoot, layersDir, state.owner ? { owner: state.owner } : {});
    return { hardlinks: layer.meta.hardlinks, contents: async () => contentsLookup(layer.meta.contents) };
  }

  /** Whether an earlier overlay (detached, or in another mount namespace) still uses the upper (see upper-use.ts). */
  async inUse(state: WorkspaceHostState): Promise<MountUse> {
    const dirs = workspaceDirs(this.ctx.paths.workspaces, state.workspaceId);
    if (!existsSync(dirs.upper)) return NOT_IN_USE;
    return upperInUse(dirs.upper, dirs.dir, state.mount ? [state.mount.id] : []);
  }

  materialised(): undefined {
    return undefined;
  }

  /** Detaches an overlay left at the target on this workspace's upper (lazily), then removes the upper and the host state. @throws E_STILL_MOUNTED */
  async dropStale(state: WorkspaceHostState): Promise<void> {
    const dirs = workspaceDirs(this.ctx.paths.workspaces, state.workspaceId);
    const here = mountsAt(state.target, 'overlay').at(-1);
    if (here && overlayUpper(here) === dirs.upper) await unmount(state.target, true);
    const use = await this.inUse(state);
    if (use.inUse)
      throw new AwcError(
        'E_STILL_MOUNTED',
        `workspace ${state.workspaceId}: an earlier mount still uses its stale changes (${describeUse(use)})`,
        {
          details: { holders: use.holders },
        },
      );
    await removeHostState(this.ctx.paths.workspaces, state.workspaceId);
  }
}
