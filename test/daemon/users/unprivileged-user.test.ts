import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { canCreateUsers, createTestUser, type TestUser } from '../../helpers/unprivileged.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';

/**
 * Issue 7 items 2–4, checked as another local user would try it: an unprivileged user
 * (created here) reads nothing of the home, the layers, the chunk cache, the content FUSE
 * mount or a copy workspace's private tree, and cannot use a device node or a setuid bit
 * from a snapshot in a workspace of either driver; it can still read the workspace's
 * world-readable files at the mount target.
 */

/** Tries each [op, path] (read, list, open) and answers path+op → 'ok' or the errno code. */
const PROBE = `
const fs = require('fs');
const out = {};
for (const [op, p] of JSON.parse(process.argv[1])) {
  try {
    if (op === 'read') fs.readFileSync(p);
    else if (op === 'list') fs.readdirSync(p);
    else fs.closeSync(fs.openSync(p, 'r'));
    out[op + ' ' + p] = 'ok';
  } catch (e) {
    out[op + ' ' + p] = e.code;
  }
}
console.log(JSON.stringify(out));
`;

/** POSTs /v1/mount {namespace, workspace, target: argv[2]} on the Unix socket argv[1]; prints the error code answered. */
const MOUNT = `
const http = require('http');
const body = JSON.stringify({ namespace: 'default', workspace: 'ws_nonexistent', target: process.argv[2] });
const req = http.request({ socketPath: process.argv[1], path: '/v1/mount', method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
  let t = '';
  res.on('data', (d) => (t += d));
  res.on('end', () => console.log(JSON.stringify({ status: res.statusCode, code: JSON.parse(t).error?.code })));
});
req.on('error', (e) => console.log(JSON.stringify({ code: e.code })));
req.end(body);
`;

/** Connects to the Unix socket argv[1], sends GET /v1/status; prints {ok} or {code}. */
const CONNECT = `
const http = require('http');
const req = http.request({ socketPath: process.argv[1], path: '/v1/status' }, (res) => { res.resume(); res.on('end', () => console.log(JSON.stringify({ ok: res.statusCode }))); });
req.on('error', (e) => console.log(JSON.stringify({ code: e.code })));
req.end();
`;

const PUB = 'world-readable\n';

function files(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(p);
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

function dirs(dir: string): string[] {
  const out = [dir];
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) out.push(...dirs(join(dir, e.name)));
  return out;
}

const mode = (p: string): number => lstatSync(p).mode & 0o7777;

/** `awc --home HOME --json ARGS` under umask 000 (modes must not depend on it); the parsed stdout. */
function awcUmask0(home: string, args: string[], env: NodeJS.ProcessEnv = {}): any {
  const r = spawnSync('sh', ['-c', 'umask 000 && exec "$0" "$@"', process.execPath, CLI, '--home', home, '--json', ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
  });
  if (r.status !== 0) throw new Error(`awc ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

describe('an unprivileged local user (issue 7 items 2-4)', { skip: canCreateUsers() ? false : 'needs root, useradd and setpriv' }, () => {
  const overlay = detectDriver('auto').driver === 'overlay';
  const work = mkdtempSync(join(tmpdir(), 'awc-unpriv-'));
  const home = join(work, 'home');
  const mnt = { overlay: join(work, 'mnt-overlay'), copy: join(work, 'mnt-copy') };
  const tar = join(work, 'snap.tar');
  const ws: Record<string, string> = {};
  let user: TestUser;
  let snapRoot = '';

  before(() => {
    chmodSync(work, 0o755); // mount targets and the tar must be reachable by the user
    user = createTestUser();
    // a snapshot holding a setuid-root copy of id(1), a 0666 char device 1,3 (like /dev/null),
    // a world-readable file and a root-only one, built with GNU tar in a root-only directory
    const stage = mkdtempSync(join(tmpdir(), 'awc-unpriv-stage-'));
    copyFileSync('/usr/bin/id', join(stage, 'id-suid'));
    chmodSync(join(stage, 'id-suid'), 0o4755);
    execFileSync('mknod', ['-m', '666', join(stage, 'null-dev'), 'c', '1', '3']);
    writeFileSync(join(stage, 'pub.txt'), PUB);
    chmodSync(join(stage, 'pub.txt'), 0o644);
    writeFileSync(join(stage, 'secret.txt'), 'root only\n');
    chmodSync(join(stage, 'secret.txt'), 0o600);
    chmodSync(stage, 0o755);
    execFileSync('tar', ['-cf', tar, '-C', stage, '--numeric-owner', '.']);
    rmSync(stage, { recursive: true, force: true });
    chmodSync(tar, 0o644);
    // everything that creates the home, the store, the daemon's files and the mounts runs under umask 000
    snapRoot = awcUmask0(home, ['snapshot', 'import', tar, '--name', 'base']).root;
    for (const d of ['overlay', 'copy'] as const) {
      if (d === 'overlay' && !overlay) continue;
      ws[d] = awcUmask0(home, ['fork', 'base', '--name', d]).workspaces[0].id;
      awcUmask0(home, ['mount', ws[d]!, mnt[d]], { AWC_MOUNT_DRIVER: d });
    }
  });

  after(() => {
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
    user?.remove();
  });

  test('the home is 0700, the catalog and every object 0600, every directory of the store 0700 (under umask 000); the socket lives outside it', () => {
    assert.equal(mode(home), 0o700);
    for (const f of ['catalog.sqlite', 'catalog.sqlite-wal', 'catalog.sqlite-shm'])
      if (existsSync(join(home, f))) assert.equal(mode(join(home, f)), 0o600, f);
    const objects = files(join(home, 'objects'));
    assert.ok(objects.length > 0);
    for (const f of objects) assert.equal(mode(f), 0o600, f);
    for (const d of dirs(join(home, 'objects'))) assert.equal(mode(d), 0o700, d);
    for (const d of ['host', 'host/workspaces', 'host/cache']) assert.equal(mode(join(home, d)), 0o700, d);
    for (const id of Object.values(ws)) {
      assert.equal(mode(join(home, 'host', 'workspaces', id)), 0o700, id);
      assert.equal(mode(join(home, 'host', 'workspaces', id, 'state.json')), 0o600, id);
    }
    if (overlay) {
      for (const d of ['host/layers', 'host/content']) assert.equal(lstatSync(join(home, d)).mode & 0o077, 0, d);
      for (const f of ['host/awcd.pid', 'host/awcd.log']) assert.equal(mode(join(home, f)), 0o600, f);
      // the layer's own files (an image and its content index, or a layer directory's meta.json), not its tree
      const layerFiles = readdirSync(join(home, 'host', 'layers', snapRoot.slice(7))).filter((n) => n !== 'tree');
      assert.ok(layerFiles.includes('image.erofs') || layerFiles.includes('meta.json'), layerFiles.join(' '));
      for (const f of layerFiles) assert.equal(mode(join(home, 'host', 'layers', snapRoot.slice(7), f)), 0o600, f);
      for (const d of ['host/layers', `host/layers/${snapRoot.slice(7)}`, `host/workspaces/${ws.overlay}/work`])
        assert.equal(mode(join(home, d)), 0o700, d);
      assert.equal(mode(join(home, 'host', 'workspaces', ws.overlay!, 'upper')), 0o755, 'the upper root carries the snapshot root mode');
      const status = awcOk(home, ['daemon', 'status']);
      assert.equal(status.running, true);
      assert.equal(existsSync(join(home, 'host', 'awcd.sock')), false, 'no socket in the home');
      const sock = join('/run/awc', `${createHash('sha256').update(home).digest('hex').slice(0, 12)}.sock`);
      assert.ok(lstatSync(sock).isSocket(), 'the socket is /run/awc/<12 hex of sha256(home)>.sock');
      assert.equal(mode(sock), 0o600, 'no socketGroup: root only');
      assert.equal(lstatSync('/run/awc').uid, 0);
      assert.equal(mode('/run/awc') & 0o022, 0);
      assert.deepEqual(user.node(CONNECT, sock), { code: 'EACCES' });
    }
  });

  test('cannot read the home, the catalog, an object, a layer, the cache, the content mount or a copy tree', async () => {
    const probes: [string, string][] = [
      ['list', home],
      ['read', join(home, 'catalog.sqlite')],
      ['read', files(join(home, 'objects'))[0]!],
    ];
    if (overlay) {
      // a read through the workspace fills the chunk cache (written in the background)
      assert.equal(
        user.node(`console.log(JSON.stringify(require('fs').readFileSync(${JSON.stringify(join(mnt.overlay, 'pub.txt'))}, 'utf8')))`),
        PUB,
      );
      const deadline = Date.now() + 10_000;
      while (files(join(home, 'host', 'cache')).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const cached = files(join(home, 'host', 'cache'));
      assert.ok(cached.length > 0, 'a chunk reached the disk cache');
      for (const f of cached) assert.equal(mode(f), 0o600, f);
      const layer = join(home, 'host', 'layers', snapRoot.slice(7), 'tree');
      assert.equal(mode(join(layer, 'pub.txt')), 0o644, 'the layer keeps the snapshot modes: only its parents keep users out');
      const hex = createHash('sha256').update(PUB).digest('hex');
      probes.push(
        ['read', join(layer, 'pub.txt')],
        ['open', join(layer, 'null-dev')],
        ['read', cached[0]!],
        ['list', join(home, 'host', 'content')],
        ['read', join(home, 'host', 'content', hex.slice(0, 2), hex)],
        ['list', join(home, 'host', 'layers')],
      );
    }
    probes.push(['read', join(home, 'host', 'workspaces', ws.copy!, 'tree', 'pub.txt')]);
    const got = user.node(PROBE, JSON.stringify(probes));
    for (const [op, p] of probes) assert.equal(got[`${op} ${p}`], 'EACCES', `${op} ${p}`);
    // the reproduction: `awc --home … export` as another user
    const out = join(work, `export-${user.name}`);
    mkdirSync(out);
    chownSync(out, user.uid, user.gid);
    const r = user.run(process.execPath, [CLI, '--home', home, '--json', 'export', 'base', '--dir', join(out, 'x')], { HOME: out });
    assert.notEqual(r.status, 0);
    assert.match(JSON.parse(r.stderr.trim().split('\n').pop()!).code, /^E_(PERMISSION|CONFIG)$/);
    assert.deepEqual(readdirSync(out), []);
  });

  for (const d of ['overlay', 'copy'] as const) {
    test(
      `cannot use a device node or a setuid bit from the snapshot in a ${d} workspace, yet reads its files`,
      { skip: d === 'overlay' && !overlay ? 'overlay is not possible on this host' : false },
      () => {
        const m = mnt[d];
        assert.equal(mode(join(m, 'id-suid')), 0o4755, 'the snapshot mode is shown as is');
        assert.ok(lstatSync(join(m, 'null-dev')).isCharacterDevice());
        const got = user.node(
          PROBE,
          JSON.stringify([
            ['read', join(m, 'pub.txt')],
            ['open', join(m, 'null-dev')],
            ['read', join(m, 'secret.txt')],
          ]),
        );
        assert.deepEqual(got, {
          [`read ${join(m, 'pub.txt')}`]: 'ok',
          [`open ${join(m, 'null-dev')}`]: 'EACCES',
          [`read ${join(m, 'secret.txt')}`]: 'EACCES',
        });
        const id = user.run(join(m, 'id-suid'), ['-u']);
        assert.equal(id.status, 0, id.stderr);
        assert.equal(id.stdout.trim(), String(user.uid), "the setuid-root binary runs with the user's own uid");
        const mi = execFileSync('findmnt', ['-n', '-o', 'OPTIONS', '--mountpoint', m], { encoding: 'utf8' });
        assert.match(mi, /nosuid/);
        assert.match(mi, /nodev/);
      },
    );
  }

  test('a copy workspace whose bind mount is gone (a reboot) is bound again, nosuid,nodev, by mounting it at the same target', () => {
    writeFileSync(join(mnt.copy, 'kept.txt'), 'kept\n');
    execFileSync('umount', [mnt.copy]);
    assert.deepEqual(readdirSync(mnt.copy), []);
    const r = awcOk(home, ['mount', ws.copy!, mnt.copy], { AWC_MOUNT_DRIVER: 'copy' });
    assert.equal(r.resumed, true);
    assert.equal(readFileSync(join(mnt.copy, 'kept.txt'), 'utf8'), 'kept\n');
    assert.match(
      execFileSync('findmnt', ['-n', '-o', 'OPTIONS', '--mountpoint', mnt.copy], { encoding: 'utf8' }),
      /nosuid.*nodev|nodev.*nosuid/,
    );
  });

  test('a copy workspace unmounts without leaving its private tree behind', () => {
    const tree = join(home, 'host', 'workspaces', ws.copy!, 'tree');
    assert.ok(existsSync(tree));
    assert.equal(awc(home, ['unmount', ws.copy!], { AWC_MOUNT_DRIVER: 'copy' }).code, 4, 'kept.txt is not checkpointed');
    awcOk(home, ['unmount', ws.copy!, '--discard'], { AWC_MOUNT_DRIVER: 'copy' });
    assert.equal(existsSync(tree), false);
    assert.deepEqual(readdirSync(mnt.copy), []);
    assert.equal(spawnSync('findmnt', ['-n', '--mountpoint', mnt.copy]).status, 1, 'the bind mount is gone');
  });

  test(
    'a socketGroup lets its members connect to the daemon socket (0660 root:group) and nobody else',
    { skip: overlay ? false : 'needs the host daemon' },
    () => {
      const home2 = join(work, 'home2');
      awcOk(home2, ['daemon', 'start'], { AWC_SOCKET_GROUP: user.name });
      try {
        const sock = join('/run/awc', `${createHash('sha256').update(home2).digest('hex').slice(0, 12)}.sock`);
        const st = lstatSync(sock);
        assert.equal(st.mode & 0o777, 0o660);
        assert.equal(st.uid, 0);
        assert.equal(st.gid, user.gid);
        // the user with its group (setpriv --clear-groups keeps the real and effective gid)
        assert.deepEqual(user.node(CONNECT, sock), { ok: 200 });
        // the whole API is theirs (docs/explanation/security.md), but never a mount over a non-empty directory or into the home
        const r = user.run(process.execPath, ['-e', MOUNT, sock, '/etc']);
        assert.deepEqual(JSON.parse(r.stdout), { status: 400, code: 'E_TARGET_BUSY' });
        const r2 = user.run(process.execPath, ['-e', MOUNT, sock, join(home2, 'host')]);
        assert.deepEqual(JSON.parse(r2.stdout), { status: 400, code: 'E_USAGE' });
      } finally {
        awc(home2, ['daemon', 'stop', '--force']);
      }
    },
  );

  test('as an ordinary user, the copy driver leaves out setuid bits and device nodes, says so, and a checkpoint keeps them', () => {
    const uhome = join(work, 'user-home');
    const umnt = join(work, 'user-mnt');
    mkdirSync(uhome);
    mkdirSync(umnt);
    chownSync(uhome, user.uid, user.gid);
    chownSync(umnt, user.uid, user.gid);
    const run = (args: string[]): any => {
      const r = user.run(process.execPath, [CLI, '--home', join(uhome, 'awc'), '--json', ...args], { HOME: uhome });
      assert.equal(r.status, 0, `awc ${args.join(' ')}: ${r.stderr}`);
      return JSON.parse(r.stdout);
    };
    run(['snapshot', 'import', tar, '--name', 'base']);
    const id = run(['fork', 'base', '--name', 'w']).workspaces[0].id;
    const m = run(['mount', id, join(umnt, 'w')]);
    assert.equal(m.driver, 'copy');
    assert.deepEqual(m.leftOut.map((l: { path: string }) => l.path).sort(), ['id-suid', 'null-dev']);
    assert.equal(mode(join(umnt, 'w', 'id-suid')), 0o755, 'setuid bit not materialised');
    assert.equal(existsSync(join(umnt, 'w', 'null-dev')), false, 'device node not materialised');
    assert.equal(mode(join(uhome, 'awc')), 0o700);
    // (files materialised by an ordinary user belong to it: a checkpoint records that owner, shown with --metadata only)
    assert.deepEqual(run(['diff', id]).changes, [], 'what was left out is not a change');
    writeFileSync(join(umnt, 'w', 'new.txt'), 'x');
    const cp = run(['checkpoint', id]);
    assert.equal(cp.changed, true);
    const diff = run(['diff', 'base', cp.id]);
    assert.deepEqual(
      diff.changes.map((c: { path: string; status: string }) => [c.path, c.status]),
      [['new.txt', 'added']],
      'null-dev kept, id-suid keeps its mode',
    );
    const meta = run(['diff', 'base', cp.id, '--metadata']).changes as {
      path: string;
      old?: { mode: number };
      new?: { mode: number; type: string };
    }[];
    assert.equal(meta.find((c) => c.path === 'id-suid')?.new?.mode, 0o4755, 'the setuid bit is kept in the checkpoint');
    run(['unmount', id]);
  });

  test('an existing home with looser modes is tightened when it is opened', () => {
    const old = join(work, 'old-home');
    awcOk(old, ['snapshot', 'import', join(work, 'mnt-copy'), '--name', 'empty']);
    chmodSync(old, 0o755);
    chmodSync(join(old, 'catalog.sqlite'), 0o644);
    const obj = files(join(old, 'objects'))[0]!;
    chmodSync(obj, 0o644);
    awcOk(old, ['snapshot', 'ls']);
    assert.equal(mode(old), 0o700);
    assert.equal(mode(join(old, 'catalog.sqlite')), 0o600);
    assert.equal(mode(obj), 0o600);
  });

  test('a home owned by another user is refused', () => {
    const theirs = join(work, 'their-home');
    mkdirSync(theirs);
    chownSync(theirs, user.uid, user.gid);
    const r = awc(theirs, ['snapshot', 'import', mnt.copy]);
    assert.equal(r.code, 6, r.stderr);
    assert.equal(errorOf(r).code, 'E_PERMISSION');
    assert.deepEqual(readdirSync(theirs), [], 'nothing written there');
  });
});
