/**
 * Mounts a dead host daemon left behind: overlays whose upper directory is under this home's
 * workspaces, the layer images mounted under its layer directories (an image-backed layer's
 * `tree`; mounted again when a layer is next used), and this home's content FUSE mount
 * (disconnected once no process holds its /dev/fuse descriptor). Read from /proc/self/mountinfo only (a stat of a dead or hung FUSE
 * mount could block).
 */
import { readMountInfo, type MountInfo } from '../../host/mount/mount-table.js';
import { runCommand } from '../../host/mount/mount-commands.js';
import { overlayUpper } from './upper-use.js';
import type { AwcPaths } from '../../config/config.js';

/** A mount left behind: an overlay of a workspace of this home, a layer image, or the home's content FUSE. */
export interface Leftover {
  kind: 'overlay' | 'layer' | 'content';
  /** Mount point. */
  path: string;
  /** Overlays: the upper directory (under `<home>/host/workspaces/`). */
  upper?: string;
}

/** A leftover after {@link cleanLeftovers}: `lazy` when it was busy and only detached (processes still hold it). */
export interface CleanedMount extends Leftover {
  lazy: boolean;
  /** Set when even a lazy unmount failed (the mount is still there). */
  error?: string;
}

const utf8 = (s: string) => Buffer.from(s, 'latin1').toString('utf8');

/** The mounts of this home in this mount namespace: overlays on its workspaces' uppers, then its layer images, then its content FUSE. */
export function findLeftovers(paths: AwcPaths, mountinfo: MountInfo[] = readMountInfo()): Leftover[] {
  const overlays: Leftover[] = [];
  const layers: Leftover[] = [];
  const content: Leftover[] = [];
  const prefix = paths.workspaces + '/';
  const layerDirs = [paths.layers + '/', paths.userLayers + '/'];
  for (const m of mountinfo) {
    const upper = overlayUpper(m);
    const path = utf8(m.mountPoint);
    if (upper !== undefined && upper.startsWith(prefix)) overlays.push({ kind: 'overlay', path, upper });
    else if (m.fsType === 'erofs' && layerDirs.some((d) => path.startsWith(d))) layers.push({ kind: 'layer', path });
    else if (m.fsType === 'fuse.awc' && path === paths.content) content.push({ kind: 'content', path });
  }
  // deepest first, so that a mount inside another one goes first; overlays before the layers and the content they read from
  overlays.sort((a, b) => b.path.length - a.path.length);
  return [...overlays, ...layers, ...content];
}

/**
 * Unmounts each leftover: a plain unmount, or a lazy one when it is busy (`lazy: true`: the
 * processes inside keep their files; the workspace cannot be mounted again until they exit).
 * Never throws; failures are reported in `error`.
 */
export async function cleanLeftovers(list: Leftover[]): Promise<CleanedMount[]> {
  const out: CleanedMount[] = [];
  for (const l of list) {
    const r = await runCommand('umount', [l.path]);
    if (r.code === 0) {
      out.push({ ...l, lazy: false });
      continue;
    }
    const r2 = await runCommand('umount', ['-l', l.path]);
    out.push(r2.code === 0 ? { ...l, lazy: true } : { ...l, lazy: false, error: (r2.stderr || r.stderr).trim() });
  }
  return out;
}
