import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chmodSync,
  chownSync,
  closeSync,
  openSync,
  readSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { asUserArgv, canCreateUsers, createTestUser, type TestUser } from '../../helpers/unprivileged.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { userSocketsDirOf } from '../../../src/config/config.js';

/** Connects to the Unix socket argv[1], sends GET /v1/status; prints {ok} or {code}. */
const CONNECT = `
const http = require('http');
const req = http.request({ socketPath: process.argv[1], path: '/v1/status' }, (res) => { res.resume(); res.on('end', () => console.log(JSON.stringify({ ok: res.statusCode }))); });
req.on('error', (e) => console.log(JSON.stringify({ code: e.code })));
req.end();
`;

/** The uploadMaxBytes of the test home: 64 MiB. */
const UPLOAD_CAP = 64 * 1024 * 1024;

/** Runs `argv` as `who` without waiting; resolves with its exit status and output once it ended. */
function spawnAs(
  who: TestUser,
  argv: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn('setpriv', asUserArgv(who, argv), { cwd: '/', env: { PATH: process.env.PATH, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('close', (status) => done({ status, stdout, stderr }));
  });
}

/** The allocated bytes (st_blocks × 512) of each file in `dir` (none when it is missing). */
function allocatedIn(dir: string): number[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).map((n) => Number(lstatSync(join(dir, n), { bigint: true }).blocks) * 512);
}

/**
 * Issue 10 item 1: an ordinary user allowed by the root home's `users` works through their
 * own socket of the root daemon (overlay driver): files cross the boundary as the user,
 * mounts are theirs, and what the configuration does not allow is refused with a code.
 */
describe(
  'ordinary users through the root daemon (issue 10 item 1)',
  {
    skip: !canCreateUsers()
      ? 'needs root, useradd and setpriv'
      : detectDriver('auto').driver !== 'overlay'
        ? 'overlay is not possible here'
        : false,
  },
  () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-users-'));
    const home = join(work, 'home');
    let u: TestUser; // allowed through its group, namespace default
    let u2: TestUser; // not allowed
    let u3: TestUser; // allowed by name, not the mounter
    const mine = (name: string): string => join(work, `${u.name}-${name}`);
    const as = (who: TestUser, args: string[]) => {
      const r = who.run(process.execPath, [CLI, '--home', home, '--json', ...args], { HOME: work });
      const err = r.status === 0 ? undefined : (JSON.parse(r.stderr.trim().split('\n').pop()!) as { code: string; hint?: string });
      return { status: r.status, json: r.status === 0 && r.stdout.trim() ? JSON.parse(r.stdout) : undefined, err, stderr: r.stderr };
    };
    const ok = (who: TestUser, args: string[]) => {
      const r = as(who, args);
      assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
      return r.json;
    };

    before(() => {
      chmodSync(work, 0o755);
      u = createTestUser();
      u2 = createTestUser();
      u3 = createTestUser();
      mkdirSync(home, { mode: 0o700 });
      writeFileSync(
        join(home, 'config.json'),
        JSON.stringify({
          users: [
            { group: u.name, namespaces: ['default', 'team-*'] },
            { user: u3.name, namespaces: ['default'] },
          ],
          uploadMaxBytes: UPLOAD_CAP,
        }),
      );
      awcOk(home, ['daemon', 'start']);
      // U's source tree, a directory U owns (and a root-only one)
      const src = mine('src');
      mkdirSync(join(src, 'sub'), { recursive: true });
      writeFileSync(join(src, 'a.txt'), 'alpha\n');
      writeFileSync(join(src, 'sub', 'b.txt'), 'beta\n');
      writeFileSync(join(src, 'gone.txt'), 'to delete\n');
      writeFileSync(join(src, '.env'), 'TOKEN=never-stored\n'); // the daemon imports the user's tar through the secret filter
      for (const p of [src, join(src, 'sub'), join(src, 'a.txt'), join(src, 'sub', 'b.txt'), join(src, 'gone.txt'), join(src, '.env')])
        chownSync(p, u.uid, u.gid);
      mkdirSync(join(work, 'root-only'), { mode: 0o700 });
      writeFileSync(join(work, 'root-only', 'x'), 'x');
      // a snapshot root made of root's files (owners 0:0, 0644 and 0755)
      const rsrc = join(work, 'root-src');
      mkdirSync(join(rsrc, 'd'), { recursive: true, mode: 0o755 });
      writeFileSync(join(rsrc, 'd', 'r.txt'), 'root file\n', { mode: 0o644 });
      awcOk(home, ['snapshot', 'import', rsrc, '--name', 'rootbase']);
      for (const d of ['mnt', 'mnt2', 'out']) {
        mkdirSync(mine(d));
        chownSync(mine(d), u.uid, u.gid);
      }
      mkdirSync(join(work, 'root-empty'));
    });

    after(() => {
      cleanupMounts(home, work);
      for (const x of [u, u2, u3]) x?.remove();
      rmSync(work, { recursive: true, force: true });
    });

    test('the daemon made a 0600 socket owned by each allowed user, none for the others', () => {
      const dir = userSocketsDirOf({ home });
      const d = lstatSync(dir);
      assert.equal(d.uid, 0);
      assert.equal(d.mode & 0o7777, 0o755);
      for (const x of [u, u3]) {
        const s = lstatSync(join(dir, `${x.uid}.sock`));
        assert.ok(s.isSocket());
        assert.equal(s.uid, x.uid);
        assert.equal(s.mode & 0o777, 0o600);
      }
      assert.equal(existsSync(join(dir, `${u2.uid}.sock`)), false);
      // U2 cannot connect to U's socket; nor use awc with that home
      assert.deepEqual(u2.node(CONNECT, join(dir, `${u.uid}.sock`)), { code: 'EACCES' });
      assert.equal(as(u2, ['ls']).err?.code, 'E_PERMISSION');
    });

    test('import, fork, mount, edit as the user, checkpoint, diff, export, unmount, rm', () => {
      const snap = ok(u, ['snapshot', 'import', mine('src'), '--name', 'base']);
      assert.equal(snap.files, 3);
      assert.deepEqual(snap.secrets, [{ path: '.env', size: 19 }]);
      assert.deepEqual(
        ok(u, ['snapshot', 'ls'])
          .snapshots.map((s: { name: string }) => s.name)
          .sort(),
        ['base', 'rootbase'],
      );
      ok(u, ['fork', 'base', '--name', 'w1']);
      ok(u, ['fork', 'base', '--name', 'w2']);
      assert.equal(ok(u, ['ls']).workspaces.length, 2);
      const m = ok(u, ['mount', 'w1', mine('mnt')]);
      assert.equal(m.driver, 'overlay');
      for (const p of ['', 'a.txt', 'sub', 'sub/b.txt']) assert.equal(statSync(join(mine('mnt'), p)).uid, u.uid, `owner of ${p || '.'}`);
      const sh = u.run('sh', [
        '-c',
        'cd "$0" && echo changed > a.txt && echo new > sub/c.txt && rm gone.txt && stat -c %u sub/c.txt',
        mine('mnt'),
      ]);
      assert.equal(sh.status, 0, sh.stderr);
      assert.equal(sh.stdout.trim(), String(u.uid));
      const diff = ok(u, ['diff', 'w1']);
      assert.deepEqual(
        diff.changes.map((c: { path: string; status: string }) => `${c.status} ${c.path}`).sort(),
        ['added sub/c.txt', 'deleted gone.txt', 'modified a.txt'].sort(),
      );
      // another allowed user may not touch U's mounted workspace
      for (const args of [
        ['unmount', 'w1'],
        ['rm', 'w1'],
        ['checkpoint', 'w1'],
      ])
        assert.equal(as(u3, args).err?.code, 'E_PERMISSION', args.join(' '));
      const cp = ok(u, ['checkpoint', 'w1', '-m', 'work']);
      assert.equal(cp.changed, true);
      ok(u, ['export', 'w1', '--tar', join(mine('out'), 'w1.tar')]);
      assert.equal(statSync(join(mine('out'), 'w1.tar')).uid, u.uid);
      ok(u, ['export', 'w1', '--dir', join(mine('out'), 'w1')]);
      assert.equal(readFileSync(join(mine('out'), 'w1', 'a.txt'), 'utf8'), 'changed\n');
      assert.equal(readFileSync(join(mine('out'), 'w1', 'sub', 'c.txt'), 'utf8'), 'new\n');
      assert.equal(existsSync(join(mine('out'), 'w1', 'gone.txt')), false);
      for (const p of ['w1', 'w1/a.txt', 'w1/sub/c.txt']) assert.equal(statSync(join(mine('out'), p)).uid, u.uid, p);
      ok(u, ['unmount', 'w1']);
      ok(u, ['rm', 'w1']);
      assert.equal(ok(u, ['ls']).workspaces.length, 1);
    });

    test("a snapshot of root's files appears owned by the user who mounts it, who may write it", () => {
      ok(u, ['fork', 'rootbase', '--name', 'w3']);
      ok(u, ['mount', 'w3', mine('mnt2')]);
      for (const p of ['', 'd', 'd/r.txt']) assert.equal(statSync(join(mine('mnt2'), p)).uid, u.uid, `owner of ${p || '.'}`);
      const sh = u.run('sh', ['-c', 'echo mine > "$0/d/r.txt" && cat "$0/d/r.txt"', mine('mnt2')]);
      assert.equal(sh.status, 0, sh.stderr);
      assert.equal(sh.stdout, 'mine\n');
      ok(u, ['unmount', 'w3', '--discard']);
      ok(u, ['rm', 'w3']);
    });

    test('refusals: a namespace not allowed, a target not theirs, a directory they cannot read', () => {
      const ns = as(u, ['--namespace', 'other', 'ls']);
      assert.equal(ns.err?.code, 'E_PERMISSION');
      assert.match(ns.err?.hint ?? '', /config\.json/);
      assert.equal(ok(u, ['--namespace', 'team-a', 'ls']).workspaces.length, 0);
      symlinkSync(join(work, 'root-empty'), mine('link'));
      for (const t of [join(work, 'root-empty'), '/etc', mine('link')])
        assert.equal(as(u, ['mount', 'w2', t]).err?.code, 'E_PERMISSION', t);
      assert.equal(ok(u, ['show', 'w2']).mountState, 'unmounted');
      const imp = as(u, ['snapshot', 'import', join(work, 'root-only'), '--name', 'stolen']);
      assert.equal(imp.err?.code, 'E_PERMISSION');
      assert.equal(
        ok(u, ['snapshot', 'ls']).snapshots.some((s: { name: string }) => s.name === 'stolen'),
        false,
      );
    });

    test('export --dir as the user: setuid/setgid bits cleared and listed (kept with --keep-privileges), user xattrs set, a device node refused', () => {
      const psrc = join(work, 'priv-src');
      mkdirSync(join(psrc, 'sg'), { recursive: true });
      chmodSync(join(psrc, 'sg'), 0o2750);
      writeFileSync(join(psrc, 'suid'), '#!/bin/sh\n', { mode: 0o4755 });
      chmodSync(join(psrc, 'suid'), 0o4755);
      writeFileSync(join(psrc, 'sg', 'plain'), 'plain\n', { mode: 0o640 });
      chmodSync(join(psrc, 'sg', 'plain'), 0o640);
      execFileSync('setfattr', ['-n', 'user.note', '-v', 'kept', join(psrc, 'sg', 'plain')]);
      execFileSync('mkfifo', ['-m', '0640', join(psrc, 'fifo')]);
      awcOk(home, ['snapshot', 'import', psrc, '--name', 'privbase']);
      const out = join(mine('out'), 'priv');
      const e = ok(u, ['export', 'privbase', '--dir', out]);
      assert.deepEqual(e.leftOut, [{ path: 'suid', reason: 'setuid/setgid bit cleared' }]);
      const mode = (p: string) => lstatSync(join(out, p)).mode & 0o7777;
      assert.equal(mode('suid'), 0o755);
      assert.equal(mode('sg'), 0o2750, "a directory's setgid bit stays");
      assert.equal(mode('sg/plain'), 0o640);
      assert.ok(lstatSync(join(out, 'fifo')).isFIFO());
      assert.equal(mode('fifo'), 0o640);
      for (const p of ['', 'suid', 'sg', 'sg/plain', 'fifo']) assert.equal(lstatSync(join(out, p)).uid, u.uid, p);
      assert.equal(execFileSync('getfattr', ['--only-values', '-n', 'user.note', join(out, 'sg', 'plain')], { encoding: 'utf8' }), 'kept');
      const kept = ok(u, ['export', 'privbase', '--dir', join(mine('out'), 'priv-kept'), '--keep-privileges']);
      assert.equal(kept.leftOut, undefined);
      assert.equal(lstatSync(join(mine('out'), 'priv-kept', 'suid')).mode & 0o7777, 0o4755, 'kept: setuid to the user, who owns the file');
      // a device node: an ordinary user cannot make one, so the export fails and leaves nothing
      execFileSync('mknod', ['-m', '600', join(psrc, 'null-dev'), 'c', '1', '3']);
      awcOk(home, ['snapshot', 'import', psrc, '--name', 'devbase']);
      const before = readdirSync(mine('out')).sort();
      assert.equal(as(u, ['export', 'devbase', '--dir', join(mine('out'), 'dev')]).err?.code, 'E_PERMISSION');
      assert.deepEqual(readdirSync(mine('out')).sort(), before, 'nothing is left of the failed export');
    });

    test('export --dir as the user of a sparse file (GNU sparse 1.0 from the daemon): its data in place, its holes unallocated', () => {
      const ssrc = join(work, 'sparse-src');
      mkdirSync(ssrc);
      const f = join(ssrc, 'disk.img');
      execFileSync('truncate', ['-s', String(64 * 1024 ** 3), f]);
      execFileSync('sh', ['-c', `printf 'data in the middle' | dd of="${f}" bs=1 seek=${32 * 1024 ** 3} conv=notrunc status=none`]);
      awcOk(home, ['snapshot', 'import', ssrc, '--name', 'sparsebase']);
      const out = join(mine('out'), 'sparse');
      ok(u, ['export', 'sparsebase', '--dir', out]);
      const st = statSync(join(out, 'disk.img'));
      assert.equal(st.size, 64 * 1024 ** 3);
      assert.equal(st.uid, u.uid);
      assert.ok(st.blocks * 512 <= 1024 * 1024, `64 GiB with 18 bytes of data allocates ${st.blocks * 512} bytes`);
      const b = Buffer.alloc(18);
      const fd = openSync(join(out, 'disk.img'), 'r');
      readSync(fd, b, 0, 18, 32 * 1024 ** 3);
      closeSync(fd);
      assert.equal(b.toString(), 'data in the middle');
    });

    test("issue 24 item 9: an ordinary user's import is recorded with the message root's import records, `import <the user's path>`", () => {
      const src = mine('src');
      ok(u, ['snapshot', 'import', src, '--name', 'with-message']);
      assert.equal(ok(u, ['show', 'with-message']).message, `import ${src}`);
      awcOk(home, ['snapshot', 'import', src, '--name', 'with-message-root']);
      assert.equal(ok(u, ['show', 'with-message-root']).message, `import ${src}`, "root's, the same words");
      ok(u, ['snapshot', 'import', src, '--name', 'with-own-message', '-m', 'mine']);
      assert.equal(ok(u, ['show', 'with-own-message']).message, 'mine');
    });

    test('issue 24 item 9: export --tar into a missing directory is E_USAGE for an ordinary user as for root, with the same words', () => {
      const rootErr = errorOf(awc(home, ['export', 'rootbase', '--tar', '/missing/dir/x.tar']));
      const userErr = as(u, ['export', 'rootbase', '--tar', '/missing/dir/x.tar']).err as { code: string; message: string; hint: string };
      assert.equal(rootErr.code, 'E_USAGE');
      assert.deepEqual(userErr, rootErr);
      assert.match(userErr.message, /the directory \/missing\/dir does not exist/);
      assert.match(userErr.hint, /existing directory/);
      // and a file that exists already: E_TARGET_EXISTS up front, for both
      const there = join(mine('out'), 'there.tar');
      writeFileSync(there, 'x');
      chownSync(there, u.uid, u.gid);
      assert.equal(as(u, ['export', 'rootbase', '--tar', there]).err?.code, 'E_TARGET_EXISTS');
      assert.equal(errorOf(awc(home, ['export', 'rootbase', '--tar', there])).code, 'E_TARGET_EXISTS');
    });

    test('issue 24 item 4: a 1 TiB sparse file of the user imports as its data: the uploads directory stays small, the snapshot reads back right', async () => {
      const src = mine('big-sparse');
      mkdirSync(src);
      chownSync(src, u.uid, u.gid);
      const TiB = 1024 ** 4;
      const sh = u.run('sh', [
        '-c',
        'truncate -s 1T "$0/disk.img" && printf head | dd of="$0/disk.img" bs=1 conv=notrunc status=none && printf "half way" | dd of="$0/disk.img" bs=1 seek=549755813888 conv=notrunc status=none',
        src,
      ]);
      assert.equal(sh.status, 0, sh.stderr);
      const uploads = join(home, 'host', 'uploads');
      let most = 0;
      const poll = setInterval(() => (most = Math.max(most, ...allocatedIn(uploads))), 2);
      const r = await spawnAs(u, [process.execPath, CLI, '--home', home, '--json', 'snapshot', 'import', src, '--name', 'bigsparse'], {
        HOME: work,
      }).finally(() => clearInterval(poll));
      assert.equal(r.status, 0, r.stderr);
      assert.equal(JSON.parse(r.stdout).bytes, TiB);
      assert.ok(most <= 1024 * 1024, `the upload of 1 TiB with 12 bytes of data allocated ${most} bytes in ${uploads}`);
      assert.deepEqual(allocatedIn(uploads), [], 'the upload is removed once imported');
      const out = join(mine('out'), 'big-sparse');
      ok(u, ['export', 'bigsparse', '--dir', out]);
      const st = statSync(join(out, 'disk.img'));
      assert.equal(st.size, TiB);
      assert.ok(st.blocks * 512 <= 1024 * 1024, `1 TiB with 12 bytes of data allocates ${st.blocks * 512} bytes`);
      const b = Buffer.alloc(8);
      const fd = openSync(join(out, 'disk.img'), 'r');
      readSync(fd, b, 0, 4, 0);
      assert.equal(b.subarray(0, 4).toString(), 'head');
      readSync(fd, b, 0, 8, TiB / 2);
      assert.equal(b.toString(), 'half way');
      readSync(fd, b, 0, 8, TiB / 4);
      assert.ok(b.equals(Buffer.alloc(8)), 'a hole reads as zeros');
      closeSync(fd);
    });

    test('issue 24 item 4: an upload over uploadMaxBytes is refused with E_UPLOAD_TOO_LARGE, and nothing of it stays in the uploads directory', () => {
      const src = mine('too-big');
      mkdirSync(src);
      writeFileSync(join(src, 'random.bin'), randomBytes(UPLOAD_CAP + 16 * 1024 * 1024)); // dense and incompressible
      for (const p of [src, join(src, 'random.bin')]) chownSync(p, u.uid, u.gid);
      for (const from of [src, join(src, 'random.bin')]) {
        // a directory (tar made by the user's process) and a file the user passes as a tar: both counted as they arrive
        const r = as(u, ['snapshot', 'import', from, '--name', 'too-big']);
        assert.equal(r.err?.code, 'E_UPLOAD_TOO_LARGE', r.stderr);
        assert.match(r.err?.hint ?? '', /uploadMaxBytes/);
        assert.deepEqual(readdirSync(join(home, 'host', 'uploads')), [], 'nothing half-written left in uploads');
      }
      assert.equal(
        ok(u, ['snapshot', 'ls']).snapshots.some((s: { name: string }) => s.name === 'too-big'),
        false,
      );
    });
  },
);
