import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { awc, awcOk, cleanupMounts, CLI, errorOf } from '../../helpers/cli.js';
import { tmuxPane, tmuxSkip } from '../../helpers/tmux.js';
import { mcpSession } from '../../helpers/mcp-client.js';

const overlaySkip = process.getuid?.() === 0 && detectDriver('auto').driver === 'overlay' ? false : 'needs root and overlay';

/** One workspace of `awc status --json` by name. */
function row(status: any, name: string): any {
  const w = status.workspaces.find((x: { name: string }) => x.name === name);
  assert.ok(w, `${name} in ${JSON.stringify(status.workspaces.map((x: { name: string }) => x.name))}`);
  return w;
}

/**
 * Issue 29: `awc status` of one host from its own state, through the real CLI on a real home
 * (overlay mounts, the host daemon started by the first mount): its JSON shape and values
 * (upper bytes grow with a write in the mount, the last checkpoint follows `awc checkpoint`,
 * the daemon's read-path figures), the refusals of `--watch`, and `--watch` itself in a
 * pseudo-terminal (tmux), read back with `tmux capture-pane`.
 */
describe('awc status (issue 29)', { skip: overlaySkip }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-status-'));
  const home = join(work, 'home');
  const mnt = join(work, 'mnt');

  before(() => {
    mkdirSync(join(work, 'src'));
    writeFileSync(join(work, 'src', 'readme.txt'), 'hello\n');
    awcOk(home, ['snapshot', 'import', join(work, 'src'), '--name', 'base']);
  });

  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  test('without a daemon: the host section says so, no workspaces; the text says `No workspaces.`', () => {
    const s = awcOk(home, ['status']);
    assert.deepEqual(Object.keys(s), ['kind', 'at', 'namespace', 'viewer', 'host', 'workspaces', 'hidden']);
    assert.equal(s.kind, 'host');
    assert.equal(s.namespace, 'default');
    assert.deepEqual(s.viewer, { uid: 0, through: 'home' });
    assert.deepEqual(s.host.daemon, { running: false, pid: null, startedAt: null });
    assert.equal(s.host.figures, null);
    assert.equal(s.host.home, home);
    assert.ok(s.host.disk.totalBytes > 0 && s.host.disk.availableBytes <= s.host.disk.totalBytes, JSON.stringify(s.host.disk));
    assert.deepEqual(s.workspaces, []);
    assert.equal(s.hidden, 0);
    const text = awc(home, ['status'], {}, { json: false });
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^host \S+ · namespace default · daemon not running · disk /);
    assert.match(text.stdout, /\n\nNo workspaces\.\n$/);
  });

  test('a mounted workspace: owner, path, age, idle, lease; upper bytes grow with a write; the last checkpoint follows `awc checkpoint`', () => {
    awcOk(home, ['fork', 'base', '--name', 'w1', '--label', 'awc.claude.session=0123456789abcdef0123']);
    mkdirSync(mnt);
    awcOk(home, ['mount', 'w1', mnt]);
    const s0 = awcOk(home, ['status']);
    const w0 = row(s0, 'w1');
    assert.equal(w0.state, 'mounted');
    assert.equal(w0.mountDriver, 'overlay');
    assert.equal(w0.mountPath, mnt);
    assert.equal(w0.mountHost, s0.host.name);
    assert.deepEqual(w0.owner, { uid: 0, user: 'root', scopes: [], session: '0123456789abcdef0123', tool: 'claude' });
    assert.equal(w0.lease.here, 'held');
    assert.equal(w0.lease.state, 'live');
    assert.ok(Date.parse(w0.lease.expiresAt) > Date.parse(s0.at), 'the lease expires after now');
    assert.equal(w0.lastCheckpoint, null);
    assert.ok(w0.ageMs >= 0 && w0.ageMs < 120_000, `age ${w0.ageMs}`);
    assert.ok(w0.idleMs >= 0 && w0.idleMs <= w0.ageMs + 1000, `idle ${w0.idleMs}`);
    assert.equal(typeof w0.upperBytes, 'number');
    assert.equal(w0.copyBytes, 0);
    // the daemon the mount started: its pid and read path
    assert.equal(s0.host.daemon.running, true);
    assert.equal(s0.host.daemon.pid, awcOk(home, ['daemon', 'status']).pid);
    assert.equal(s0.host.figures.mountedWorkspaces, 1);
    assert.ok(s0.host.figures.cache.budgetBytes > 0);
    for (const k of ['hits', 'misses', 'bytes'] as const) assert.equal(typeof s0.host.figures.cache[k], 'number');
    assert.equal(typeof s0.host.figures.backend.reads, 'number');

    writeFileSync(join(mnt, 'big.bin'), Buffer.alloc(1024 * 1024, 7));
    const w1 = row(awcOk(home, ['status']), 'w1');
    assert.ok(w1.upperBytes >= w0.upperBytes + 1024 * 1024, `upper ${w0.upperBytes} → ${w1.upperBytes}`);
    assert.ok(Date.parse(w1.lastActivityAt) >= Date.parse(w0.lastActivityAt));

    const cp = awcOk(home, ['checkpoint', 'w1', '-m', 'one']);
    const w2 = row(awcOk(home, ['status']), 'w1');
    assert.equal(w2.lastCheckpoint.snapshot, cp.id);
    assert.equal(w2.lastCheckpoint.at, awcOk(home, ['show', cp.id]).createdAt);
  });

  test('text: one row per workspace under a header, with its owner, path, upper size and checkpoint', () => {
    const r = awc(home, ['status'], {}, { json: false });
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, / · daemon running \(pid \d+, up \d+[smhd]\) · disk /);
    assert.match(lines[1]!, /^read path: cache .* of .*, (hit rate [\d.]+%|no lookups yet) \(\d+ hits, \d+ misses\) · backend reads \d+/);
    assert.equal(lines[2], '');
    assert.match(lines[3]!, /^ID\s+NAME\s+STATE\s+OWNER\s+PATH\s+AGE\s+IDLE\s+UPPER\s+LEASE\s+CHECKPOINT$/);
    assert.equal(lines.length, 5);
    const cells = lines[4]!.split(/\s{2,}/);
    assert.equal(cells[1], 'w1');
    assert.equal(cells[2], 'mounted (overlay)');
    assert.equal(cells[3], 'root, claude 01234567');
    assert.equal(cells[4], mnt);
    assert.match(cells[7]!, /^1\.\d MiB$/);
    assert.match(cells[8]!, /^here, \d+s left$/);
    assert.match(cells[9]!, /^\d+s ago$/);
  });

  test('--watch is refused without a terminal, with --json and with a bad interval (E_USAGE, exit 2)', () => {
    for (const args of [
      ['status', '--watch'],
      ['status', '--watch', '0.1'],
      ['status', '--watch', 'soon'],
    ]) {
      const r = awc(home, args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.equal(errorOf(r).code, 'E_USAGE');
      assert.equal(r.stdout, '');
    }
    const text = awc(home, ['status', '--watch'], {}, { json: false });
    assert.equal(text.code, 2);
    assert.match(text.stderr, /^awc: E_USAGE: --watch refreshes a terminal in place, and stdout is not a terminal\n/);
  });

  test(
    '--watch on a terminal: redrawn in place with what changed; q quits, Ctrl-C too, and the screen comes back',
    { skip: tmuxSkip() },
    async () => {
      const pane = tmuxPane([
        'sh',
        '-c',
        'echo before-watch; exec "$@"',
        'sh',
        process.execPath,
        CLI,
        '--home',
        home,
        'status',
        '--watch',
        '0.5',
      ]);
      try {
        const first = await pane.waitFor(/^ws_\S+\s+w1\s+mounted \(overlay\)/m);
        const lines = first.split('\n');
        assert.match(lines[0]!, /^awc status · every 0\.5s · \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ · q to quit$/);
        assert.match(first, /^ID\s+NAME\s+STATE\s+OWNER\s+PATH/m);
        assert.ok(!first.includes('before-watch'), 'the alternate screen hides what was on the terminal');
        writeFileSync(join(mnt, 'more.bin'), Buffer.alloc(3 * 1024 * 1024, 1));
        const again = await pane.waitFor(/\s4\.\d MiB\s/);
        assert.equal(again.split('\n').filter((l) => l.startsWith('ws_')).length, 1, 'redrawn in place, not appended');
        pane.keys('q');
        await pane.waitFor(/\[exit \d+\]/);
        assert.equal(pane.exitStatus(), 0);
        assert.match(pane.screen(), /before-watch/);
      } finally {
        pane.close();
      }
      const ctrlC = tmuxPane([process.execPath, CLI, '--home', home, 'status', '--watch']);
      try {
        await ctrlC.waitFor(/^ws_\S+\s+w1/m);
        ctrlC.keys('C-c');
        await ctrlC.waitFor(/\[exit \d+\]/);
        assert.equal(ctrlC.exitStatus(), 0);
      } finally {
        ctrlC.close();
      }
    },
  );

  test('a workspace an MCP server forked: its scope is its owner, as `mcp:<scope>` in the text', async () => {
    const m = await mcpSession(home, 'agent-x', {}, undefined, { args: ['--root', work, '--snapshot', 'base'] });
    let id: string;
    try {
      id = (await m.ok('workspace_fork', { snapshot: 'base', name: 'from-mcp' })).workspaces[0].id;
    } finally {
      await m.close();
    }
    const w = row(awcOk(home, ['status']), 'from-mcp');
    assert.equal(w.id, id);
    assert.deepEqual(w.owner, { uid: null, user: null, scopes: ['agent-x'], session: null, tool: 'mcp' });
    assert.equal(w.state, 'unmounted');
    assert.deepEqual([w.upperBytes, w.idleMs, w.lastCheckpoint], [null, null, null]);
    const text = awc(home, ['status'], {}, { json: false }).stdout;
    assert.match(text, new RegExp(`^${id}\\s+from-mcp\\s+unmounted\\s+mcp:agent-x\\s+-\\s`, 'm'));
  });
});
