import { run } from '../../host/mount-commands.js';

/**
 * Mounts one overlayfs: `lowerdir=LAYER::CONTENT` (CONTENT a data-only lower), private
 * upper and work dirs, `metacopy=on,redirect_dir=on`, and nodev,nosuid by default (docs/explanation/design.md#overlay-driver, #security).
 * @throws E_MOUNT_FAILED
 */
export async function mountOverlay(o: { layer: string; content: string; upper: string; work: string; target: string }): Promise<void> {
  const opts = `lowerdir=${o.layer}::${o.content},upperdir=${o.upper},workdir=${o.work},metacopy=on,redirect_dir=on`;
  await run('mount', ['-t', 'overlay', 'overlay', '-o', `nodev,nosuid,${opts}`, o.target], { what: `mount overlay at ${o.target}` });
}
