/**
 * The mount drivers AWC has (their adapters live in src/drivers/): `overlay`, an overlayfs
 * over a layer of metadata placeholders and a lazy FUSE content lower, and `copy`, the
 * snapshot materialised into a private directory shown at the target.
 */
export const MOUNT_DRIVER_NAMES = ['overlay', 'copy'] as const;

/** A mount driver's name, as the catalog records it and `awc doctor` reports it. */
export type MountDriverName = (typeof MOUNT_DRIVER_NAMES)[number];
