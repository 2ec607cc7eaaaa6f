import { AwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';

/** Where a workspace is mounted, from its catalog row. @throws E_NOT_MOUNTED when the row says it is not mounted */
export function mountPathOf(ws: WorkspaceRow): string {
  if (ws.mountState !== 'mounted' || !ws.mountPath) throw new AwcError('E_NOT_MOUNTED', `workspace ${ws.id} is not mounted`);
  return ws.mountPath;
}
