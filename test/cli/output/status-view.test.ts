import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatHostStatus } from '../../../src/cli/output/status-view.js';
import type { HostStatusReport, WorkspaceStatus } from '../../../src/service/workspace/host-status.js';

const NOW = Date.parse('2026-12-07T12:00:00Z');

function ws(over: Partial<WorkspaceStatus>): WorkspaceStatus {
  return {
    id: 'ws_1',
    name: 'w',
    state: 'unmounted',
    mountDriver: null,
    mountPath: null,
    mountHost: null,
    owner: { uid: null, user: null, scopes: [], session: null, tool: null },
    createdAt: '2026-12-07T11:00:00Z',
    ageMs: 3_600_000,
    lastActivityAt: null,
    idleMs: null,
    upperBytes: null,
    copyBytes: null,
    lease: { state: 'none', here: 'free', holder: null, expiresAt: null },
    lastCheckpoint: null,
    ...over,
  };
}

function report(workspaces: WorkspaceStatus[], over: Partial<HostStatusReport> = {}): HostStatusReport {
  return {
    kind: 'host',
    at: new Date(NOW).toISOString(),
    namespace: 'default',
    viewer: { uid: 0, through: 'home' },
    host: {
      name: 'host-a',
      home: '/var/lib/awc',
      daemon: { running: true, pid: 42, startedAt: '2026-12-07T11:00:00Z' },
      figures: {
        cache: { hits: 3, misses: 1, hitRate: 0.75, bytes: 2048, budgetBytes: 1024 ** 3 },
        backend: { reads: 1, bytes: 65536 },
        objectCache: { bytes: 0, objects: 0 },
        mountedWorkspaces: 1,
      },
      disk: { totalBytes: 100 * 1024 ** 3, freeBytes: 60 * 1024 ** 3, availableBytes: 50 * 1024 ** 3 },
    },
    workspaces,
    hidden: 0,
    ...over,
  };
}

test('awc status text: the host lines, then one row per workspace with owner, path, sizes, lease and checkpoint', () => {
  const out = formatHostStatus(
    report([
      ws({
        id: 'ws_a',
        name: 'a',
        state: 'mounted',
        mountDriver: 'overlay',
        mountPath: '/srv/a',
        mountHost: 'host-a',
        owner: { uid: 1001, user: 'alice', scopes: ['s1'], session: '0123456789abcdef', tool: 'claude' },
        idleMs: 90_000,
        upperBytes: 3 * 1024 * 1024,
        copyBytes: 0,
        lease: { state: 'live', here: 'held', holder: 'host-a', expiresAt: '2026-12-07T12:00:25Z' },
        lastCheckpoint: { snapshot: 'sn_1', at: '2026-12-07T11:55:00Z' },
      }),
      ws({
        id: 'ws_b',
        name: null,
        state: 'mounted',
        mountDriver: 'copy',
        mountPath: '/srv/b',
        mountHost: 'host-b',
        owner: { uid: null, user: null, scopes: [], session: null, tool: 'attach' },
        lease: { state: 'expired', here: 'elsewhere', holder: 'host-b', expiresAt: '2026-12-07T11:59:00Z' },
      }),
      ws({ id: 'ws_c', state: 'released', owner: { uid: 7, user: null, scopes: [], session: null, tool: null } }),
    ]),
    NOW,
  );
  const lines = out.split('\n');
  assert.equal(lines[0], 'host host-a · namespace default · daemon running (pid 42, up 60m) · disk 50.0 GiB free of 100.0 GiB');
  assert.equal(
    lines[1],
    'read path: cache 2.0 KiB of 1.0 GiB, hit rate 75.0% (3 hits, 1 misses) · backend reads 1 (64.0 KiB) · object cache 0 B · 1 overlay(s) mounted',
  );
  assert.equal(lines[2], '');
  const cells = lines.slice(3).map((l) => l.split(/\s{2,}/).map((c) => c.trim()));
  assert.deepEqual(cells[0], ['ID', 'NAME', 'STATE', 'OWNER', 'PATH', 'AGE', 'IDLE', 'UPPER', 'LEASE', 'CHECKPOINT']);
  assert.deepEqual(cells[1], [
    'ws_a',
    'a',
    'mounted (overlay)',
    'alice, mcp:s1, claude 01234567',
    '/srv/a',
    '60m',
    '90s',
    '3.0 MiB',
    'here, 25s left',
    '5m ago',
  ]);
  assert.deepEqual(cells[2], ['ws_b', '-', 'mounted (copy)', 'attach', '/srv/b on host-b', '60m', '-', '-', 'host-b (expired)', '-']);
  assert.deepEqual(cells[3], ['ws_c', 'w', 'released', 'uid 7', '-', '60m', '-', '-', '-', '-']);
  assert.equal(lines.length, 7);
});

test('awc status text: `No workspaces.`, no figures without a daemon, and the count of workspaces left out', () => {
  const none = formatHostStatus(
    report([], {
      host: { ...report([]).host, daemon: { running: false, pid: null, startedAt: null }, figures: null, disk: null },
    }),
    NOW,
  );
  assert.equal(
    none,
    'host host-a · namespace default · daemon not running · disk unknown\nread path: no figures (the host daemon keeps them: `awc daemon start`)\n\nNo workspaces.',
  );
  const user = formatHostStatus(report([], { hidden: 2, host: { ...report([]).host, figures: null } }), NOW);
  assert.match(user, /^read path: not shown here \(the host daemon counts every user; an administrator runs `awc metrics`\)$/m);
  assert.match(user, /\n\nNo workspaces\.\n\n2 workspace\(s\) mounted or made by other users are not shown\.$/);
});
