import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatWorkspaceTable, type ListedWorkspace } from '../../../src/cli/output/workspace-table.js';
import { awc, awcOk } from '../../helpers/cli.js';

const NOW = Date.parse('2026-12-07T12:00:00Z');
const NO_LEASE = {
  here: 'free',
  holder: null,
  epoch: null,
  state: 'none',
  expiresAt: null,
  takenFrom: null,
  takenAt: null,
  note: null,
} as const;

function row(over: Partial<ListedWorkspace>): ListedWorkspace {
  return {
    id: 'ws_1',
    namespace: 'default',
    name: null,
    baseSnapshotId: 'sn_1',
    headSnapshotId: 'sn_1',
    mountState: 'unmounted',
    mountPath: null,
    mountDriver: null,
    mountHost: null,
    createdAt: '2026-12-07T11:00:00Z',
    updatedAt: '2026-12-07T11:00:00Z',
    labels: {},
    lease: NO_LEASE,
    ...over,
  } as ListedWorkspace;
}

test('awc ls as a table: a header, names for hook-made workspaces, owner, lease, age, only the user labels', () => {
  const out = formatWorkspaceTable(
    [
      row({ id: 'ws_a', name: 'alice', labels: { team: 'red', 'awc.git.commit': 'abc' }, createdAt: '2026-12-07T11:59:30Z' }),
      row({
        id: 'ws_b',
        mountState: 'mounted',
        mountPath: '/p/.claude/worktrees/fix',
        mountDriver: 'overlay',
        labels: { 'awc.claude.name': 'fix', 'awc.claude.session': '0123456789abcdef' },
        lease: { ...NO_LEASE, here: 'held', state: 'live', epoch: 3 },
        createdAt: '2026-12-04T12:00:00Z',
      }),
      row({
        id: 'ws_c',
        labels: { 'awc.attach.dir': '/src/app-wt' },
        lease: { ...NO_LEASE, here: 'elsewhere', holder: 'host-b', state: 'live', epoch: 1 },
      }),
    ],
    NOW,
    false,
  );
  const lines = out.split('\n').map((l) => l.split(/\s{2,}/));
  assert.deepEqual(lines[0], ['ID', 'NAME', 'STATE', 'PATH', 'OWNER', 'LEASE', 'AGE', 'LABELS']);
  assert.deepEqual(lines[1], ['ws_a', 'alice', 'unmounted', '-', '-', '-', '30s', 'team=red']);
  assert.deepEqual(lines[2], [
    'ws_b',
    'claude:fix',
    'mounted (overlay)',
    '/p/.claude/worktrees/fix',
    'claude session 01234567',
    'here',
    '3d',
    '-',
  ]);
  assert.deepEqual(lines[3], ['ws_c', 'attach:app-wt', 'unmounted', '-', 'awc attach', 'host-b (live)', '60m', '-']);
  const starts = out.split('\n').map((l) => l.indexOf(l.split(/\s{2,}/)[2]!));
  assert.equal(new Set(starts).size, 1, 'columns are aligned');
});

test('awc ls through the CLI: an empty message, then the table; --json unchanged', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-ls-table-'));
  try {
    const home = join(work, 'home');
    mkdirSync(join(work, 'src'));
    writeFileSync(join(work, 'src', 'a'), 'a\n');
    const env = { AWC_MOUNT_DRIVER: 'copy' };
    awcOk(home, ['snapshot', 'import', join(work, 'src'), '--name', 'base'], env);
    assert.match(awc(home, ['ls'], env, { json: false }).stdout, /^no workspaces yet: fork one .*awc fork <snapshot>/);
    assert.match(awc(home, ['ls', '--label', 'x=y'], env, { json: false }).stdout, /^no workspace has these labels/);
    awcOk(home, ['fork', 'base', '--name', 'w1'], env);
    const text = awc(home, ['ls'], env, { json: false }).stdout.trimEnd().split('\n');
    assert.equal(text.length, 2);
    assert.match(text[0]!, /^ID\s+NAME\s+STATE\s+PATH\s+OWNER\s+LEASE\s+AGE\s+LABELS$/);
    assert.match(text[1]!, /^ws_\S+\s+w1\s+unmounted\s+-/);
    const json = awcOk(home, ['ls'], env);
    assert.deepEqual(Object.keys(json), ['workspaces']);
    assert.equal(json.workspaces[0].name, 'w1');
    assert.ok('lease' in json.workspaces[0] && 'labels' in json.workspaces[0]);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
