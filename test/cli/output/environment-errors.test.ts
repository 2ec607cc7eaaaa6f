import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, awc, awcOk, errorOf } from '../../helpers/cli.js';

/**
 * Errors of the environment (a full disk, a read-only home, a path over the system's limit,
 * a closed pipe, a damaged pack) get their own stable code with a hint, never E_INTERNAL,
 * and an export that fails leaves nothing behind.
 */
describe('environment errors', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-env-errors-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  const mounts: string[] = [];

  const sh = (cmd: string): { code: number; stdout: string; stderr: string } => {
    const r = spawnSync('bash', ['-c', cmd], { encoding: 'utf8', env: { ...process.env, ...env } });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  /** Mounts a tmpfs of `size` at a new directory the test owns. */
  const tmpfs = (name: string, size: string): string => {
    const dir = join(work, name);
    mkdirSync(dir);
    const r = sh(`mount -t tmpfs -o size=${size},mode=0700 tmpfs '${dir}'`);
    assert.equal(r.code, 0, r.stderr);
    mounts.push(dir);
    return dir;
  };
  /** Fills the file system holding `dir` until a write fails with ENOSPC, then frees `leave` bytes. */
  const fill = (dir: string, leave = 0): void => {
    const filler = join(dir, 'filler');
    const fd = openSync(filler, 'w');
    const block = Buffer.alloc(64 * 1024, 1);
    try {
      for (;;) writeSync(fd, block);
    } catch (err) {
      assert.equal((err as NodeJS.ErrnoException).code, 'ENOSPC');
    }
    try {
      for (;;) writeSync(fd, block.subarray(0, 512));
    } catch {
      // full to the last block
    }
    closeSync(fd);
    if (leave > 0) truncateSync(filler, statSync(filler).size - leave);
  };
  const expectError = (r: ReturnType<typeof awc>, code: string, exit: number): { code: string; message: string; hint: string } => {
    assert.equal(r.code, exit, `exit status: ${r.stderr.slice(0, 500)}`);
    const e = errorOf(r);
    assert.equal(e.code, code, r.stderr.slice(0, 500));
    assert.ok(e.hint.length > 0);
    return e;
  };

  before(() => {
    mkdirSync(join(src, 'd'), { recursive: true });
    writeFileSync(join(src, 'd', 'small.txt'), 'hello\n');
    writeFileSync(join(src, 'big.bin'), randomBytes(6 * 1024 * 1024));
    awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env);
    for (let i = 0; i < 3; i++) awcOk(home, ['fork', 'base', '--count', '400'], env);
  });
  after(() => {
    for (const m of mounts.reverse()) spawnSync('umount', ['-l', m]);
    rmSync(work, { recursive: true, force: true });
  });

  test('export --tar onto a full disk → E_NO_SPACE (6), and no file (or temporary file) is left', () => {
    const full = tmpfs('full', '2m');
    const r = awc(home, ['export', 'base', '--tar', join(full, 'out.tar')], env);
    expectError(r, 'E_NO_SPACE', 6);
    assert.deepEqual(readdirSync(full), [], 'nothing left on the full disk');
    assert.doesNotMatch(r.stderr, /at .*\.js:\d+/, 'no stack trace');
  });

  test('export --tar of a snapshot with a damaged pack → E_INTEGRITY (5), no partial archive', () => {
    const bad = join(work, 'bad-home');
    sh(`cp -a '${home}' '${bad}'`);
    const packs = sh(`find '${join(bad, 'objects')}' -type f`)
      .stdout.trim()
      .split('\n');
    const pack = packs.map((p) => ({ p, size: statSync(p).size })).sort((a, b) => b.size - a.size)[0]!.p;
    const fd = openSync(pack, 'r+');
    writeSync(fd, Buffer.from('damaged!'), 0, 8, Math.floor(statSync(pack).size / 2));
    closeSync(fd);
    const outDir = join(work, 'out-bad');
    mkdirSync(outDir);
    const r = awc(bad, ['export', 'base', '--tar', join(outDir, 'x.tar')], env);
    expectError(r, 'E_INTEGRITY', 5);
    assert.deepEqual(readdirSync(outDir), [], 'no partial archive and no temporary file');
  });

  test('an export interrupted by SIGINT removes its temporary file and exits 130', async () => {
    const big = join(work, 'big-src');
    mkdirSync(big);
    writeFileSync(join(big, 'zeros.bin'), Buffer.alloc(512 * 1024 * 1024)); // one chunk in the store, 512 MiB to write
    awcOk(home, ['snapshot', 'import', big, '--name', 'zeros'], env);
    const outDir = join(work, 'out-int');
    mkdirSync(outDir);
    const child = spawn(process.execPath, [CLI, '--home', home, '--json', 'export', 'zeros', '--tar', join(outDir, 'z.tar')], {
      env: { ...process.env, ...env },
      stdio: 'ignore',
    });
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const deadline = Date.now() + 30_000;
    while (readdirSync(outDir).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    assert.match(readdirSync(outDir)[0] ?? '', /^\.awc-tmp-/, 'the export writes a temporary file first');
    child.kill('SIGINT');
    assert.equal(await exited, 130);
    assert.deepEqual(readdirSync(outDir), [], 'nothing left');
    rmSync(big, { recursive: true });
  });

  test('a complete export appears at once, 0600, and is a valid archive', () => {
    const outDir = join(work, 'out-ok');
    mkdirSync(outDir);
    const tar = join(outDir, 'x.tar');
    awcOk(home, ['export', 'base', '--tar', tar], env);
    assert.deepEqual(readdirSync(outDir), ['x.tar']);
    assert.equal(statSync(tar).mode & 0o777, 0o600);
    assert.match(sh(`tar tf '${tar}'`).stdout, /\.\/d\/small\.txt/);
  });

  test('a closed pipe ends quietly with status 141: `ls | head -1`, `export --tar - | head -c 1000`', () => {
    const cli = `'${process.execPath}' '${CLI}' --home '${home}'`;
    for (const cmd of [`${cli} ls | head -1`, `${cli} --json ls | head -c 100`, `${cli} export base --tar - | head -c 1000`]) {
      const r = sh(`${cmd} >/dev/null; echo "status \${PIPESTATUS[0]}" >&2`);
      assert.equal(r.stderr, 'status 141\n', `${cmd}: only the status, no error and no stack trace`);
    }
  });

  test('a path over the system limit → E_NAME_TOO_LONG (7)', () => {
    const long = join(work, 'x'.repeat(5000));
    const ws = awcOk(home, ['fork', 'base'], env).workspaces[0].id;
    expectError(awc(home, ['mount', ws, long], env), 'E_NAME_TOO_LONG', 7);
    expectError(awc(home, ['export', 'base', '--dir', long], env), 'E_NAME_TOO_LONG', 7);
    expectError(awc(home, ['export', 'base', '--tar', join(long, 'x.tar')], env), 'E_NAME_TOO_LONG', 7);
    expectError(awc(home, ['snapshot', 'import', long], env), 'E_NAME_TOO_LONG', 7);
  });

  test('a read-only home → E_READ_ONLY (6) with a hint; doctor still answers and says so', () => {
    const ro = join(work, 'ro-home');
    mkdirSync(ro);
    assert.equal(sh(`mount --bind '${home}' '${ro}' && mount -o remount,bind,ro '${ro}'`).code, 0);
    mounts.push(ro);
    for (const args of [['ls'], ['snapshot', 'ls'], ['fork', 'base'], ['snapshot', 'import', src]]) {
      const e = expectError(awc(ro, args, env), 'E_READ_ONLY', 6);
      assert.match(e.hint, /writable --home/);
    }
    expectError(awc(ro, ['daemon', 'start'], env), 'E_READ_ONLY', 6);
    const r = awc(ro, ['doctor'], env);
    assert.equal(r.code, 0, r.stderr);
    const check = r.json.checks.find((c: { name: string }) => c.name === 'home');
    assert.equal(check.ok, false);
    assert.match(check.detail, /read-only/);
  });

  test('a read-only target → E_READ_ONLY (6): mount and export --tar', () => {
    const rofs = join(work, 'ro-fs');
    mkdirSync(rofs);
    assert.equal(sh(`mount -t tmpfs -o ro,size=1m tmpfs '${rofs}'`).code, 0);
    mounts.push(rofs);
    const ws = awcOk(home, ['fork', 'base'], env).workspaces[0].id;
    expectError(awc(home, ['mount', ws, join(rofs, 'deep', 'mnt')], env), 'E_READ_ONLY', 6);
    expectError(awc(home, ['export', 'base', '--tar', join(rofs, 'x.tar')], env), 'E_READ_ONLY', 6);
  });

  test('a full disk during fork and import → E_NO_SPACE (6); the catalog is intact once space is freed', () => {
    const disk = tmpfs('tiny', '3m');
    const small = join(disk, 'home');
    const tiny = join(work, 'tiny-src');
    mkdirSync(tiny);
    writeFileSync(join(tiny, 'a.txt'), 'a\n');
    awcOk(small, ['snapshot', 'import', tiny, '--name', 'base'], env);
    fill(disk);
    expectError(awc(small, ['fork', 'base', '--count', '2000'], env), 'E_NO_SPACE', 6);
    expectError(awc(small, ['snapshot', 'import', src], env), 'E_NO_SPACE', 6);
    rmSync(join(disk, 'filler'));
    // room for the catalog's files, not for the transaction: SQLite rolls back by itself (SQLITE_FULL)
    fill(disk, 200 * 1024);
    const e = expectError(awc(small, ['fork', 'base', '--count', '5000'], env), 'E_NO_SPACE', 6);
    assert.doesNotMatch(e.message, /rollback/);
    rmSync(join(disk, 'filler'));
    assert.equal(awcOk(small, ['fork', 'base', '--count', '3'], env).workspaces.length, 3);
    assert.equal(awcOk(small, ['ls'], env).workspaces.length, 3);
  });

  test('read-only commands on a missing home → E_NO_HOME (3) naming it, and create nothing', () => {
    const none = join(work, 'no-home');
    for (const args of [
      ['ls'],
      ['snapshot', 'ls'],
      ['show', 'x'],
      ['diff', 'x'],
      ['export', 'x', '--tar', join(work, 'n.tar')],
      ['usage'],
      ['status'],
      ['status', '--fleet'],
      ['fork', 'x'],
    ]) {
      const e = expectError(awc(none, args, env), 'E_NO_HOME', 3);
      assert.ok(e.message.includes(none), e.message);
    }
    assert.equal(existsSync(none), false, 'nothing was created');
    const r = awc(none, ['doctor'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(existsSync(none), false, 'doctor created nothing');
    awcOk(none, ['snapshot', 'import', src], env);
    assert.equal(awcOk(none, ['snapshot', 'ls'], env).snapshots.length, 1);
    assert.ok(readFileSync(join(none, 'catalog.sqlite')).length > 0);
  });
});
