import type { MountDriverChoice } from '../../config/config.js';
import type { DoctorCheck, MountDriverName } from '../port/mount-driver.js';
import { overlayChecks } from '../overlay/overlay-checks.js';

/** The mount driver this host will use and why. */
export interface DriverReport {
  driver: MountDriverName;
  reason: string;
  checks: DoctorCheck[];
}

/**
 * Decides the mount driver: overlay when every check of the overlay driver passes (root,
 * /dev/fuse, overlayfs and FUSE in the kernel, Linux ≥ 6.5: see overlayChecks). Otherwise,
 * or when `choice` is `copy`, the copy driver. `choice = overlay` on a host that cannot is
 * still reported as copy with the failing checks (the caller decides whether to refuse).
 */
export function detectDriver(choice: MountDriverChoice = 'auto'): DriverReport {
  const checks = overlayChecks();
  if (choice === 'copy')
    return { driver: 'copy', reason: 'the copy driver was chosen by configuration (mountDriver/AWC_MOUNT_DRIVER)', checks };
  const failed = checks.filter((c) => !c.ok);
  if (failed.length === 0)
    return {
      driver: 'overlay',
      reason:
        'root, /dev/fuse, FUSE, overlayfs and Linux >= 6.5 are present: overlayfs over a layer directory and a lazy FUSE content lower',
      checks,
    };
  return {
    driver: 'copy',
    reason: `overlay is not possible here (${failed.map((c) => `${c.name}: ${c.detail}`).join('; ')}): snapshots are materialised into the target directory`,
    checks,
  };
}
