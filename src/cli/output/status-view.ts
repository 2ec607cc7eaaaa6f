import type { HostSection, HostStatusReport, WorkspaceStatus } from '../../service/workspace/host-status.js';
import type { FleetStatusReport } from '../../service/workspace/fleet-status.js';
import { formatBytes } from '../../core/format-bytes.js';
import { textTable } from '../../core/text-table.js';
import { age } from './workspace-table.js';

/**
 * `awc status` for people: two host lines (daemon, disk; the read path: cache, hit rate, backend
 * reads), a blank line, then the workspaces as a table (ID, NAME, STATE, OWNER, PATH, AGE, IDLE,
 * UPPER, LEASE, CHECKPOINT), or `No workspaces.`; a last line says how many were left out for
 * the viewer. `nowMs`: the clock the lease expiries are counted from (ms since the epoch).
 */
export function formatHostStatus(r: HostStatusReport, nowMs: number): string {
  const lines = [hostLine(r), readPathLine(r.host), ''];
  if (r.workspaces.length === 0) lines.push('No workspaces.');
  else
    lines.push(
      textTable(
        ['ID', 'NAME', 'STATE', 'OWNER', 'PATH', 'AGE', 'IDLE', 'UPPER', 'LEASE', 'CHECKPOINT'],
        r.workspaces.map((w) => [
          w.id,
          w.name ?? '-',
          w.state === 'mounted' ? `mounted (${w.mountDriver ?? '?'})` : w.state,
          ownerCell(w),
          w.mountPath === null
            ? '-'
            : w.mountHost !== null && w.mountHost !== r.host.name
              ? `${w.mountPath} on ${w.mountHost}`
              : w.mountPath,
          age(w.ageMs),
          w.idleMs === null ? '-' : age(w.idleMs),
          w.upperBytes === null ? '-' : formatBytes(w.upperBytes + (w.copyBytes ?? 0)),
          leaseCell(w, nowMs),
          w.lastCheckpoint === null ? '-' : `${age(nowMs - Date.parse(w.lastCheckpoint.at))} ago`,
        ]),
        [false, false, false, false, false, true, true, true],
      ),
    );
  if (r.hidden > 0) lines.push('', `${r.hidden} workspace(s) mounted or made by other users are not shown.`);
  return lines.join('\n');
}

/** `host <name> · namespace <ns> · daemon … · disk …`. */
function hostLine(r: HostStatusReport): string {
  const d = r.host.daemon;
  const daemon = d.running
    ? `daemon running (pid ${d.pid ?? '?'}${d.startedAt ? `, up ${age(Date.parse(r.at) - Date.parse(d.startedAt))}` : ''})`
    : 'daemon not running';
  const disk = r.host.disk
    ? `disk ${formatBytes(r.host.disk.availableBytes)} free of ${formatBytes(r.host.disk.totalBytes)}`
    : 'disk unknown';
  return `host ${r.host.name} · namespace ${r.namespace} · ${daemon} · ${disk}`;
}

/** The read path's figures, or why there are none. */
function readPathLine(h: HostSection): string {
  const f = h.figures;
  if (f === null)
    return h.daemon.running
      ? 'read path: not shown here (the host daemon counts every user; an administrator runs `awc metrics`)'
      : 'read path: no figures (the host daemon keeps them: `awc daemon start`)';
  const rate = f.cache.hitRate === null ? 'no lookups yet' : `hit rate ${(f.cache.hitRate * 100).toFixed(1)}%`;
  return [
    `read path: cache ${formatBytes(f.cache.bytes)} of ${formatBytes(f.cache.budgetBytes)}, ${rate} (${f.cache.hits} hits, ${f.cache.misses} misses)`,
    `backend reads ${f.backend.reads} (${formatBytes(f.backend.bytes)})`,
    `object cache ${formatBytes(f.objectCache.bytes)}`,
    `${f.mountedWorkspaces} overlay(s) mounted`,
  ].join(' · ');
}

/** `alice, mcp:<scope>, claude 01234567`: who the workspace is for ('-' when nothing is known). */
function ownerCell(w: WorkspaceStatus): string {
  const o = w.owner;
  const parts: string[] = [];
  if (o.uid !== null) parts.push(o.user ?? `uid ${o.uid}`);
  for (const s of o.scopes) parts.push(`mcp:${s}`);
  if (o.session !== null) parts.push(`claude ${o.session.slice(0, 8)}`);
  else if (o.tool === 'claude' || o.tool === 'attach') parts.push(o.tool);
  return parts.length === 0 ? '-' : parts.join(', ');
}

/** `here, 45s left` / `host-b (live, 20s left)` / `host-b (expired)` / `LOST` / `free` / `-` (never leased). */
function leaseCell(w: WorkspaceStatus, nowMs: number): string {
  const l = w.lease;
  if (l.state === 'none') return '-';
  const ms = l.expiresAt === null ? 0 : Date.parse(l.expiresAt) - nowMs;
  const left = ms > 0 ? `, ${age(ms)} left` : '';
  if (l.here === 'held') return `here${left}`;
  if (l.here === 'lost') return 'LOST';
  if (l.here === 'elsewhere') return `${l.holder ?? '?'} (${l.state}${left})`;
  return 'free';
}

/**
 * `awc status --fleet` for people: one line (namespace, the host that asked), the hosts as a
 * table (HOST, SESSION, HEARTBEAT, PID, VERSION, MOUNTED), then the workspaces (ID, NAME, STATE,
 * HOST, PATH, AGE, LEASE, CHECKPOINT) or `No workspaces.`. Times count from the report's `at`
 * (the catalog's clock).
 */
export function formatFleetStatus(r: FleetStatusReport): string {
  const nowMs = Date.parse(r.at);
  const ago = (t: string | null) => (t === null ? '-' : `${age(nowMs - Date.parse(t))} ago`);
  const hosts = textTable(
    ['HOST', 'SESSION', 'HEARTBEAT', 'PID', 'VERSION', 'MOUNTED'],
    r.hosts.map((h) => [
      h.id === r.host ? `${h.id} (this host)` : h.id,
      !h.registered ? 'never registered' : h.live ? 'live' : 'expired',
      ago(h.heartbeatAt),
      h.pid === null ? '-' : String(h.pid),
      h.daemonVersion ?? '-',
      String(h.mounted),
    ]),
    [false, false, true, true, false, true],
  );
  const lines = [`fleet · namespace ${r.namespace} · seen from ${r.host} · ${r.hosts.length} host(s)`, '', hosts, ''];
  if (r.workspaces.length === 0) lines.push('No workspaces.');
  else
    lines.push(
      textTable(
        ['ID', 'NAME', 'STATE', 'HOST', 'PATH', 'AGE', 'LEASE', 'CHECKPOINT'],
        r.workspaces.map((w) => [
          w.id,
          w.name ?? '-',
          w.state === 'mounted' ? `mounted (${w.mountDriver ?? '?'})` : w.state,
          w.mountHost ?? '-',
          w.mountPath ?? '-',
          age(w.ageMs),
          w.lease.state === 'none' ? '-' : `${w.lease.holder ?? '-'} (${w.lease.state})`,
          w.lastCheckpoint === null ? '-' : ago(w.lastCheckpoint.at),
        ]),
        [false, false, false, false, false, true],
      ),
    );
  return lines.join('\n');
}
