import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { awc, awcOk, errorOf } from '../../helpers/cli.js';

/** Bad input gets a clear error with a stable code, a hint and exit status, and nothing is half-written. */
describe('CLI errors', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-cli-errors-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  let snap = '';

  before(() => {
    mkdirSync(join(src, 'a'), { recursive: true });
    writeFileSync(join(src, 'a', 'f.txt'), 'hello\n');
    snap = awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env).id;
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  const expectError = (args: string[], code: string, exit: number) => {
    const r = awc(home, args, env);
    assert.equal(r.code, exit, `exit status of awc ${args.join(' ')}: ${r.stderr}`);
    const e = errorOf(r);
    assert.equal(e.code, code);
    assert.ok(e.message.length > 0);
    assert.ok(e.hint.length > 0);
    return e;
  };

  test('unknown snapshot or workspace → E_NOT_FOUND (3)', () => {
    expectError(['show', 'nope'], 'E_NOT_FOUND', 3);
    expectError(['fork', 'nope'], 'E_NOT_FOUND', 3);
    expectError(['checkpoint', 'nope'], 'E_NOT_FOUND', 3);
    expectError(['export', 'nope', '--tar', join(work, 'x.tar')], 'E_NOT_FOUND', 3);
  });

  test('import of a missing source → E_SOURCE_NOT_FOUND, and no snapshot is added', () => {
    expectError(['snapshot', 'import', join(work, 'missing')], 'E_SOURCE_NOT_FOUND', 3);
    assert.equal(awcOk(home, ['snapshot', 'ls'], env).snapshots.length, 1);
  });

  test('a taken snapshot name → E_NAME_TAKEN (4), nothing added', () => {
    expectError(['snapshot', 'import', src, '--name', 'base'], 'E_NAME_TAKEN', 4);
    assert.equal(awcOk(home, ['snapshot', 'ls'], env).snapshots.length, 1);
  });

  test('fork with a bad count → E_USAGE (2); with a taken name creates none', () => {
    expectError(['fork', snap, '--count', '0'], 'E_USAGE', 2);
    expectError(['fork', snap, '--count', 'many'], 'E_USAGE', 2);
    awcOk(home, ['fork', snap, '--name', 'w'], env);
    expectError(['fork', snap, '--name', 'w'], 'E_NAME_TAKEN', 4);
    assert.equal(awcOk(home, ['ls'], env).workspaces.length, 1);
  });

  test('an unknown option: one error line and a hint naming the help of that command, as text and as JSON', () => {
    const text = awc(home, ['snapshot', 'import', src, '--no-such-option'], env, { json: false });
    assert.equal(text.code, 2);
    assert.deepEqual(text.stderr.trimEnd().split('\n'), [
      "awc: E_USAGE: unknown option '--no-such-option'",
      '  hint: Run `awc snapshot import --help` for usage.',
    ]);
    const json = awc(home, ['ls', '--no-such-option'], env);
    assert.equal(json.code, 2);
    assert.equal(json.stderr.trim().split('\n').length, 1, json.stderr);
    assert.deepEqual(errorOf(json), {
      code: 'E_USAGE',
      message: "unknown option '--no-such-option'",
      hint: 'Run `awc ls --help` for usage.',
      retryable: false,
    });
  });

  test('usage errors → E_USAGE (2)', () => {
    expectError(['no-such-command'], 'E_USAGE', 2);
    expectError(['fork'], 'E_USAGE', 2);
    expectError(['export', snap], 'E_USAGE', 2);
    expectError(['export', snap, '--tar', join(work, 'a.tar'), '--dir', join(work, 'd')], 'E_USAGE', 2);
  });

  test('mount into a non-empty directory → E_TARGET_BUSY, the directory is untouched', () => {
    const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
    const busy = join(work, 'busy');
    mkdirSync(busy);
    writeFileSync(join(busy, 'keep.txt'), 'mine');
    expectError(['mount', ws, busy], 'E_TARGET_BUSY', 4);
    assert.deepEqual(readdirSync(busy), ['keep.txt']);
    expectError(['unmount', ws], 'E_NOT_MOUNTED', 4);
  });

  test('export into a non-empty directory → E_TARGET_EXISTS (not retryable)', () => {
    const busy = join(work, 'busy2');
    mkdirSync(busy);
    writeFileSync(join(busy, 'keep.txt'), 'mine');
    expectError(['export', snap, '--dir', busy], 'E_TARGET_EXISTS', 4);
    assert.deepEqual(readdirSync(busy), ['keep.txt']);
  });

  test('invalid configuration → E_CONFIG (2)', () => {
    const r = awc(home, ['ls'], { AWC_MOUNT_DRIVER: 'teleport' });
    assert.equal(r.code, 2);
    assert.equal(errorOf(r).code, 'E_CONFIG');
  });

  test('review findings: wrong kinds of input are usage errors, existing files are never overwritten', () => {
    const notTar = join(work, 'notes.txt');
    writeFileSync(notTar, 'just text\n');
    expectError(['snapshot', 'import', notTar], 'E_USAGE', 2);
    const existing = join(work, 'exists.tar');
    writeFileSync(existing, 'keep me');
    expectError(['export', snap, '--tar', existing], 'E_TARGET_EXISTS', 4);
    assert.equal(readFileSync(existing, 'utf8'), 'keep me');
    expectError(['export', snap, '--tar', join(work, 'no-such-dir', 'x.tar')], 'E_USAGE', 2);
    const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
    expectError(['mount', ws, notTar], 'E_TARGET_BUSY', 4);
    assert.equal(readFileSync(notTar, 'utf8'), 'just text\n');
    expectError(['mount', ws, join(home, 'inside')], 'E_USAGE', 2);
    expectError(['snapshot', 'import', src, '--name', `${ws}`], 'E_USAGE', 2);
    expectError(['fork', snap, '--name', 'sn_lookalike'], 'E_USAGE', 2);
    const e = expectError(['fork', snap, '--count', 'abc'], 'E_USAGE', 2);
    assert.match(e.message, /"abc"/);
    expectError(['snapshot'], 'E_USAGE', 2);
    // a workspace id resolves as the workspace even if snapshots exist
    assert.equal(awcOk(home, ['show', ws], env).kind, 'workspace');
  });

  test('issue 24 item 9: a malformed tar is E_FORMAT (5) with a hint about the archive, not "upgrade awc"', () => {
    const count = (): number => awcOk(home, ['snapshot', 'ls'], env).snapshots.length;
    const was = count();
    const good = awc(home, ['export', 'base', '--tar', join(work, 'good.tar')], env);
    assert.equal(good.code, 0, good.stderr);
    const whole = readFileSync(join(work, 'good.tar'));
    writeFileSync(join(work, 'cut.tar'), whole.subarray(0, 700)); // cut short inside the first member
    const gz = gzipSync(whole);
    writeFileSync(join(work, 'cut.tar.gz'), gz.subarray(0, gz.length - 20)); // a corrupt gzip stream
    for (const bad of ['cut.tar', 'cut.tar.gz']) {
      const e = expectError(['snapshot', 'import', join(work, bad)], 'E_FORMAT', 5);
      assert.doesNotMatch(e.hint, /upgrade/i, bad);
      assert.match(e.hint, /archive is damaged or incomplete/, bad);
      assert.match(e.hint, /tar -tvf/, bad);
    }
    assert.equal(count(), was, 'no snapshot added');
  });

  test('human errors name the code and the hint', () => {
    const r = awc(home, ['show', 'nope'], env, { json: false });
    assert.equal(r.code, 3);
    assert.match(r.stderr, /E_NOT_FOUND/);
    assert.match(r.stderr, /hint:/);
  });
});
