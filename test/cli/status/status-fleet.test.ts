import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { awc, errorOf, type CliResult } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { signal, twoHosts, waitFor, type TestHost } from '../../helpers/two-hosts.js';

const TTL = 3000;

/** The JSON of a command that must succeed. */
function ok(r: CliResult, what: string): any {
  assert.equal(r.code, 0, `${what}: ${r.stderr}`);
  return r.json;
}

/**
 * Issue 29: `awc status --fleet` from the catalog two hosts share: every host with its session
 * (live, then expired once its daemon stops renewing it), how many workspaces each mounts, and
 * the workspaces with their host and lease; a host's own `awc status` shows the other host's
 * workspace without its host-local figures.
 */
describe('awc status --fleet across two hosts (issue 29)', { skip: process.getuid?.() === 0 ? false : 'needs root (overlay)' }, () => {
  let dir: string;
  let a: TestHost;
  let b: TestHost;
  let cleanup: () => Promise<void>;

  before(async () => {
    dir = await makeTempDir('awc-status-fleet-');
    ({ a, b, cleanup } = await twoHosts(dir, TTL));
    const src = join(dir, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'base.txt'), 'base\n');
    ok(a.run(['snapshot', 'import', src, '--name', 'base']), 'import');
    ok(a.run(['fork', 'base', '--name', 'on-a']), 'fork a');
    ok(b.run(['fork', 'base', '--name', 'on-b']), 'fork b');
    ok(a.run(['fork', 'base', '--name', 'nowhere']), 'fork');
    ok(a.run(['mount', 'on-a', join(a.mnt, 'w')]), 'mount a');
    ok(b.run(['mount', 'on-b', join(b.mnt, 'w')]), 'mount b');
  });
  after(async () => {
    await cleanup?.();
    await removeTempDir(dir);
  });

  test('both hosts live, each with its workspace and lease; the text lists them', () => {
    const f = ok(a.run(['status', '--fleet']), 'status --fleet');
    assert.equal(f.kind, 'fleet');
    assert.equal(f.host, 'host-a');
    assert.deepEqual(
      f.hosts.map((h: any) => [h.id, h.registered, h.live, h.mounted]),
      [
        ['host-a', true, true, 1],
        ['host-b', true, true, 1],
      ],
    );
    assert.equal(f.hosts[1].pid, b.pids().daemon);
    const w = (n: string) => f.workspaces.find((x: any) => x.name === n);
    assert.deepEqual([w('on-a').mountHost, w('on-a').lease.holder, w('on-a').lease.state], ['host-a', 'host-a', 'live']);
    assert.deepEqual([w('on-b').mountHost, w('on-b').lease.holder, w('on-b').lease.here], ['host-b', 'host-b', 'elsewhere']);
    assert.deepEqual([w('nowhere').state, w('nowhere').mountHost, w('nowhere').lease.state], ['unmounted', null, 'none']);
    const t = awc(a.home, ['status', '--fleet'], a.env, { json: false }).stdout;
    assert.match(t, /^fleet · namespace default · seen from host-a · 2 host\(s\)$/m);
    assert.match(t, /^host-a \(this host\)\s+live\s+\d+[smhd] ago\s+\d+\s+\S+\s+1$/m);
    assert.match(t, /^host-b\s+live\s+\d+[smhd] ago\s+\d+\s+\S+\s+1$/m);
    assert.match(t, /^ws_\S+\s+on-b\s+mounted \(overlay\)\s+host-b\s+\S+\s+\d+[smhd]\s+host-b \(live\)\s+-$/m);
  });

  test("a host's own status shows the other host's workspace without host-local figures", () => {
    const s = ok(a.run(['status']), 'status');
    const onB = s.workspaces.find((x: any) => x.name === 'on-b');
    assert.deepEqual([onB.mountHost, onB.upperBytes, onB.idleMs, onB.owner.uid], ['host-b', null, null, null]);
    assert.equal(onB.lease.here, 'elsewhere');
  });

  test("a host whose daemon stopped renewing: its session shows expired, and its workspace's lease too", async () => {
    const { daemon } = b.pids();
    assert.ok(daemon);
    signal(daemon, 'SIGSTOP');
    try {
      await waitFor(
        'host-b expired',
        () => {
          const f = ok(a.run(['status', '--fleet']), 'status --fleet');
          return f.hosts.find((h: any) => h.id === 'host-b').live === false;
        },
        4 * TTL,
      );
      const f = ok(a.run(['status', '--fleet']), 'status --fleet');
      assert.equal(f.workspaces.find((x: any) => x.name === 'on-b').lease.state, 'expired');
      assert.equal(f.hosts.find((h: any) => h.id === 'host-a').live, true);
    } finally {
      signal(daemon, 'SIGCONT');
    }
  });

  test('--fleet --watch through a pipe: E_USAGE', () => {
    const r = awc(a.home, ['status', '--fleet', '--watch'], a.env, { json: false });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^awc: E_USAGE: --watch refreshes a terminal in place/);
    assert.equal(errorOf(a.run(['status', '--fleet', '--watch'])).code, 'E_USAGE');
  });
});
