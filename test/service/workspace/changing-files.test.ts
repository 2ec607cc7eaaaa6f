/**
 * Issue 7 item 7: files changing while a checkpoint or a directory import reads them.
 * A file rewritten continuously ends in a retryable E_CHANGED_DURING_READ that names its
 * path inside the workspace (never the host's upper path), unless --allow-changing, which
 * stores what was read and lists it in `changing`. A temp file renamed away, or a
 * directory renamed, during the scan is taken as the walk finds it: never an error. The
 * same for `snapshot import` of a directory that changes while read (git gc's churn).
 */
import { test, describe, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc as runAwc, awcOk, cleanupMounts, type CliResult } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { dirFdTestHooks } from '../../../src/core/dir-fd.js';
import { Awc } from '../../../src/service/workspace/awc.js';

const overlayPossible = detectDriver('auto').driver === 'overlay';
const BIG = 16 * 1024 * 1024;

/** Starts a process that rewrites one byte of `path` at a random offset about every millisecond (for at most 90 s). */
function rewriter(path: string): { stop: () => Promise<void> } {
  const script = `const fs = require('fs'); const fd = fs.openSync(process.argv[1], 'r+'); const size = fs.fstatSync(fd).size; const end = Date.now() + 90000;
    const b = Buffer.alloc(1); const sab = new Int32Array(new SharedArrayBuffer(4));
    while (Date.now() < end) { b[0] = Math.random() * 256; fs.writeSync(fd, b, 0, 1, Math.floor(Math.random() * size)); Atomics.wait(sab, 0, 0, 1); }`;
  const child = spawn(process.execPath, ['-e', script, path], { stdio: 'ignore' });
  return stopper(child);
}

/** Starts a bash loop (bounded in count; killed by `stop`) in `dir`. */
function loop(dir: string, body: string): { stop: () => Promise<void> } {
  const child = spawn('bash', ['-c', `cd "$1" && for i in $(seq 1 100000); do ${body}; done`, 'loop', dir], { stdio: 'ignore' });
  return stopper(child);
}

function stopper(child: ChildProcess): { stop: () => Promise<void> } {
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    stop: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** The JSON error (with details) a failed `awc --json` command printed. */
function jsonError(r: CliResult): { code: string; message: string; retryable: boolean; details?: { path?: string } } {
  return JSON.parse(r.stderr.trim().split('\n').pop()!);
}

/** Asserts the error names `rel` and nothing of the host's internals. */
function assertNamesWorkspacePath(r: CliResult, rel: string, home: string): void {
  assert.equal(r.code, 4, r.stderr);
  const e = jsonError(r);
  assert.equal(e.code, 'E_CHANGED_DURING_READ');
  assert.equal(e.retryable, true);
  assert.equal(e.details?.path, rel);
  assert.ok(e.message.includes(rel), e.message);
  for (const bad of ['/host/workspaces/', 'upper', home]) assert.ok(!r.stderr.includes(bad), `the error names ${bad}: ${r.stderr}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const driver of ['overlay', 'copy'] as const) {
  describe(
    `checkpoint of a workspace whose files change while read (${driver} driver)`,
    { skip: driver === 'copy' || overlayPossible ? false : 'overlay is not possible on this host' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-changing-${driver}-`));
      const home = join(work, 'home');
      const env = { AWC_MOUNT_DRIVER: driver };
      let snap: string;
      before(() => {
        const src = join(work, 'src');
        mkdirSync(join(src, 'src'), { recursive: true });
        writeFileSync(join(src, 'src', 'a.txt'), 'a\n');
        snap = awcOk(home, ['snapshot', 'import', src], env).id;
      });
      after(() => {
        dirFdTestHooks.beforeOpen = undefined;
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      });

      test('a file rewritten continuously → retryable E_CHANGED_DURING_READ naming src/big.bin; --allow-changing stores it and says so', async () => {
        const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
        const mnt = join(work, `mnt-${ws}`);
        awcOk(home, ['mount', ws, mnt], env);
        writeFileSync(join(mnt, 'src', 'big.bin'), Buffer.alloc(BIG, 7));
        writeFileSync(join(mnt, 'src', 'calm.txt'), 'calm\n');
        const w = rewriter(join(mnt, 'src', 'big.bin'));
        try {
          await sleep(100);
          // as below: a checkpoint whose read the rewriter did not cut in on (a loaded machine) stores a calm file, rightly;
          // up to three are taken until one read saw the file change, and that one must fail so
          let r = runAwc(home, ['checkpoint', ws], env);
          for (let i = 0; i < 2 && r.code === 0; i++) r = runAwc(home, ['checkpoint', ws], env);
          assertNamesWorkspacePath(r, 'src/big.bin', home);
          // On a loaded machine the rewriter may not run during one read; a read that saw no change is
          // not this case, so up to three checkpoints are taken until one read saw the file change.
          let ok = awcOk(home, ['checkpoint', ws, '--allow-changing'], env);
          for (let i = 0; i < 2 && ok.changing === undefined; i++) ok = awcOk(home, ['checkpoint', ws, '--allow-changing'], env);
          assert.equal(ok.changed, true);
          assert.deepEqual(ok.changing, ['src/big.bin']);
        } finally {
          await w.stop();
        }
        // once it is calm, a plain checkpoint reads it (it was not put in the stat cache) and says nothing is changing
        const calm = awcOk(home, ['checkpoint', ws], env);
        assert.equal(calm.changing, undefined);
        assert.equal(calm.changed, true);
        awcOk(home, ['unmount', ws, '--discard'], env);
      });

      test('a temp file renamed away and directories renamed during the scan: the checkpoint succeeds with the tree as the walk found it', async () => {
        const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
        const mnt = join(work, `mnt-${ws}`);
        awcOk(home, ['mount', ws, mnt], env);
        writeFileSync(join(mnt, 'tmp_pack_1'), 'temp\n');
        mkdirSync(join(mnt, 'objects', 'ab'), { recursive: true });
        writeFileSync(join(mnt, 'objects', 'ab', 'cd'), 'object\n');
        mkdirSync(join(mnt, 'refs', 'heads'), { recursive: true });
        writeFileSync(join(mnt, 'refs', 'heads', 'main'), 'ref\n');
        const a = await Awc.open({ home, mountDriver: driver });
        const fired: string[] = [];
        try {
          dirFdTestHooks.beforeOpen = (rel) => {
            if (fired.includes(rel)) return;
            if (rel === 'tmp_pack_1') renameSync(join(mnt, 'tmp_pack_1'), join(mnt, 'pack-1.pack'));
            else if (rel === 'objects') renameSync(join(mnt, 'objects'), join(mnt, 'objects.old'));
            else if (rel === 'refs/heads')
              renameSync(join(mnt, 'refs'), join(mnt, 'refs.moved')); // while the walk is inside it
            else return;
            fired.push(rel);
          };
          const r = await a.checkpoint(ws);
          dirFdTestHooks.beforeOpen = undefined;
          assert.deepEqual(fired.sort(), ['objects', 'refs/heads', 'tmp_pack_1']);
          assert.equal(r.changed, true);
          const out = join(work, `out-${ws}`);
          awcOk(home, ['export', r.id, '--dir', out, '--keep-privileges'], env);
          // gone before it was opened: absent; the directory walked while it was renamed: as found
          assert.deepEqual(readdirSync(out).sort(), ['refs', 'src']);
          assert.deepEqual(readdirSync(join(out, 'refs', 'heads')), ['main']);
        } finally {
          dirFdTestHooks.beforeOpen = undefined;
          await a.close();
        }
        awcOk(home, ['unmount', ws, '--discard'], env);
      });

      test(
        'git-gc-like churn (temp files appearing and vanishing, packs renamed, a directory renamed back and forth) never fails a checkpoint',
        { timeout: 120_000 },
        async () => {
          const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
          const mnt = join(work, `mnt-${ws}`);
          awcOk(home, ['mount', ws, mnt], env);
          mkdirSync(join(mnt, 'pack'));
          for (let i = 0; i < 50; i++) writeFileSync(join(mnt, 'pack', `keep-${i}.idx`), `idx ${i}\n`);
          const churn = loop(
            mnt,
            'echo "$i" > pack/tmp_$i; mv pack/tmp_$i pack/pack-$i.pack; rm -f pack/pack-$((i-1)).pack; mv pack pack2; mv pack2 pack',
          );
          const failures: string[] = [];
          try {
            await sleep(50);
            for (let i = 0; i < 12; i++) {
              const r = runAwc(home, ['checkpoint', ws], env);
              if (r.code !== 0) failures.push(r.stderr.trim());
            }
          } finally {
            await churn.stop();
          }
          assert.deepEqual(failures, []);
          awcOk(home, ['unmount', ws, '--discard'], env);
        },
      );
    },
  );
}

describe('snapshot import of a directory that changes while read', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-changing-import-'));
  const home = join(work, 'home');
  after(() => rmSync(work, { recursive: true, force: true }));

  test('a file rewritten continuously → E_CHANGED_DURING_READ naming its path in the source; --allow-changing stores it', async () => {
    const src = join(work, 'src');
    mkdirSync(join(src, 'data'), { recursive: true });
    writeFileSync(join(src, 'data', 'big.bin'), Buffer.alloc(BIG, 3));
    const w = rewriter(join(src, 'data', 'big.bin'));
    try {
      await sleep(100);
      const r = runAwc(home, ['snapshot', 'import', src]);
      assertNamesWorkspacePath(r, 'data/big.bin', home);
      assert.ok(!jsonError(r).message.includes(src), 'the path is relative to the imported directory');
      const ok = awcOk(home, ['snapshot', 'import', src, '--allow-changing']);
      assert.deepEqual(ok.changing, ['data/big.bin']);
      assert.equal(ok.files, 1);
    } finally {
      await w.stop();
    }
  });

  test('git-gc-like churn while importing a repository: every import succeeds', { timeout: 120_000 }, async () => {
    const src = join(work, 'repo');
    mkdirSync(join(src, 'objects', 'pack'), { recursive: true });
    for (let i = 0; i < 200; i++) writeFileSync(join(src, `file-${i}.txt`), `file ${i}\n`);
    const churn = loop(
      src,
      'echo "$i" > objects/pack/tmp_pack_$i; mv objects/pack/tmp_pack_$i objects/pack/pack-$i.pack; rm -f objects/pack/pack-$((i-1)).pack; mv objects objects.tmp; mv objects.tmp objects',
    );
    const failures: string[] = [];
    try {
      await sleep(50);
      for (let i = 0; i < 12; i++) {
        const r = runAwc(home, ['snapshot', 'import', src]);
        if (r.code !== 0) failures.push(r.stderr.trim());
      }
    } finally {
      await churn.stop();
    }
    assert.deepEqual(failures, []);
  });
});
