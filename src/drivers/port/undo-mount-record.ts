import type { Catalog } from '../../catalog/port/catalog.js';

/**
 * Undoes `Catalog.mountLeased` after the mount itself failed: clears the mount record and,
 * when that mount had taken the lease (`taken`), releases it again (nothing private of the
 * workspace was made). Best effort: a failure here is left for the next mount or unmount.
 */
export async function undoMountRecord(catalog: Catalog, workspaceId: string, host: string, taken: boolean): Promise<void> {
  try {
    await catalog.setMount(workspaceId, null);
    if (taken) await catalog.releaseLease(workspaceId, host);
  } catch {
    // the record stays: `awc unmount` clears it
  }
}
