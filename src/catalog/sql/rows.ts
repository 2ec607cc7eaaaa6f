import type { Digest } from '../../core/digest.js';
import type { MountDriverName } from '../../core/mount-driver-name.js';
import type { SnapshotRow, WorkspaceRow } from '../port/catalog.js';
import type { SnapshotRecord, WorkspaceRecord } from './schema.js';
import { labelsFromText } from '../port/labels.js';

/**
 * Row mapping between the catalog's tables (schema.ts, snake_case) and the port's rows
 * (catalog.ts), plus the small value helpers every dialect-neutral query uses.
 */

/** A bigint column value as a JS number (pg returns bigint as a decimal string). */
export function toNum(v: number | string | bigint | null | undefined): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'number' ? v : Number(v);
}

/** Now as an ISO-8601 UTC string (the catalog's timestamp format). */
export function nowIso(): string {
  return new Date().toISOString();
}

/** `items` cut into consecutive groups of at most `size`. */
export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** A `snapshots` record as the port's `SnapshotRow` of namespace `namespace` (its name). */
export function toSnapshotRow(r: SnapshotRecord, namespace: string): SnapshotRow {
  return {
    id: r.id,
    namespace,
    name: r.name,
    root: r.root as Digest,
    parentId: r.parent_id,
    message: r.message,
    createdAt: r.created_at,
    fileCount: toNum(r.file_count),
    byteCount: toNum(r.byte_count),
    labels: labelsFromText(r.labels),
  };
}

/** A `workspaces` record as the port's `WorkspaceRow` of namespace `namespace` (its name). */
export function toWorkspaceRow(r: WorkspaceRecord, namespace: string): WorkspaceRow {
  return {
    id: r.id,
    namespace,
    name: r.name,
    baseSnapshotId: r.base_snapshot_id,
    headSnapshotId: r.head_snapshot_id,
    mountState: r.mount_state === 'mounted' ? 'mounted' : 'unmounted',
    mountPath: r.mount_path,
    mountDriver: r.mount_driver as MountDriverName | null,
    mountHost: r.mount_host,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    labels: labelsFromText(r.labels),
  };
}
