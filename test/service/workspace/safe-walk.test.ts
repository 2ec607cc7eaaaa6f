/**
 * Issue 7 item 1: a checkpoint, a directory import or `export --dir` never follows a
 * symlink or leaves its root. Deterministic: the walker's test hook swaps a directory for
 * a symlink to outside (`mv d d.real; ln -s <outside> d`) between the walk's lstat and its
 * open, on both mount drivers (the swap goes through the real mount), for the directory
 * import, and inside the tree `export --dir` is writing. Then a race: 200 checkpoints of a
 * mounted overlay workspace against a loop swapping a directory for a symlink. No snapshot
 * (and no pack) ever holds a byte from outside the workspace.
 */
import { test, describe, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc as runAwc, awcOk, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { assertNoLeak, etcDigests, makeSecret, type Secret } from '../../helpers/leak-check.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { dirFdTestHooks } from '../../../src/core/dir-fd.js';
import { AwcError } from '../../../src/core/errors.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { Digest } from '../../../src/core/digest.js';

const overlayPossible = detectDriver('auto').driver === 'overlay';

/** Installs a hook that swaps `<base>/<rel>` for a symlink to `to` the first time the walker is about to open `rel`. */
function swapOnce(rel: string, base: () => string, to: string): { fired: () => boolean } {
  let fired = false;
  dirFdTestHooks.beforeOpen = (r) => {
    if (fired || r !== rel) return;
    fired = true;
    renameSync(join(base(), rel), join(base(), `${rel}.real`));
    symlinkSync(to, join(base(), rel));
  };
  return { fired: () => fired };
}

/** What the snapshot `id` holds at `path` once exported (lstat, never followed). */
function exported(home: string, work: string, id: string, env: NodeJS.ProcessEnv): string {
  const out = join(work, `out-${id}-${Math.random().toString(36).slice(2)}`);
  awcOk(home, ['export', id, '--dir', out, '--keep-privileges'], env);
  return out;
}

for (const driver of ['overlay', 'copy'] as const) {
  describe(
    `checkpoint scan never follows a directory swapped for a symlink (${driver} driver)`,
    { skip: driver === 'copy' || overlayPossible ? false : 'overlay is not possible on this host' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-safewalk-${driver}-`));
      const home = join(work, 'home');
      const env = { AWC_MOUNT_DRIVER: driver };
      let secret: Secret;
      let snap: string;
      before(() => {
        secret = makeSecret(join(work, 'outside'));
        const src = join(work, 'src');
        mkdirSync(join(src, 'keep'), { recursive: true });
        writeFileSync(join(src, 'keep', 'a.txt'), 'a\n');
        snap = awcOk(home, ['snapshot', 'import', src], env).id;
      });
      after(() => {
        dirFdTestHooks.beforeOpen = undefined;
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      });

      for (const [what, target] of [
        ['a directory the test made', 'secret'],
        ['/etc', '/etc'],
      ] as const) {
        test(`d swapped for a symlink to ${what} between lstat and open: the symlink is recorded, nothing behind it`, async () => {
          const to = target === 'secret' ? secret.dir : target;
          const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
          const mnt = join(work, `mnt-${ws}`);
          awcOk(home, ['mount', ws, mnt], env);
          mkdirSync(join(mnt, 'd'));
          writeFileSync(join(mnt, 'd', 'inner.txt'), 'inner\n');
          const a = await Awc.open({ home, mountDriver: driver });
          try {
            const hook = swapOnce('d', () => mnt, to);
            const r = await a.checkpoint(ws);
            dirFdTestHooks.beforeOpen = undefined;
            assert.ok(hook.fired(), 'the walk opened d');
            assert.equal(r.changed, true);
            const out = exported(home, work, r.id, env);
            assert.ok(lstatSync(join(out, 'd')).isSymbolicLink(), 'd is recorded as the symlink it became');
            assert.equal(readlinkSync(join(out, 'd')), to);
            assert.ok(!existsSync(join(out, 'd.real')) || lstatSync(join(out, 'd.real')).isDirectory());
            const digests = target === 'secret' ? new Set<Digest>([secret.digest]) : etcDigests();
            await assertNoLeak(a, digests, target === 'secret' ? secret : undefined);
            // the next checkpoint sees d.real (the moved directory) and the symlink, still nothing behind it
            const r2 = await a.checkpoint(ws);
            const out2 = exported(home, work, r2.id, env);
            assert.ok(lstatSync(join(out2, 'd')).isSymbolicLink());
            assert.deepEqual(readdirSync(join(out2, 'd.real')), ['inner.txt']);
            await assertNoLeak(a, digests, target === 'secret' ? secret : undefined);
          } finally {
            dirFdTestHooks.beforeOpen = undefined;
            await a.close();
          }
          awcOk(home, ['unmount', ws, '--discard'], env);
        });
      }
    },
  );
}

describe('directory import and export --dir never follow a swapped directory', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-safewalk-dir-'));
  const home = join(work, 'home');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  let secret: Secret;
  before(() => {
    secret = makeSecret(join(work, 'outside'));
  });
  after(() => {
    dirFdTestHooks.beforeOpen = undefined;
    rmSync(work, { recursive: true, force: true });
  });

  test('snapshot import: d swapped for a symlink to outside mid-walk is recorded as the symlink', async () => {
    const src = join(work, 'src');
    mkdirSync(join(src, 'd'), { recursive: true });
    writeFileSync(join(src, 'd', 'inner.txt'), 'inner\n');
    writeFileSync(join(src, 'top.txt'), 'top\n');
    const a = await Awc.open({ home, mountDriver: 'copy' });
    try {
      const hook = swapOnce('d', () => src, secret.dir);
      const r = await a.importSnapshot(src);
      dirFdTestHooks.beforeOpen = undefined;
      assert.ok(hook.fired());
      const out = exported(home, work, r.id, env);
      assert.ok(lstatSync(join(out, 'd')).isSymbolicLink());
      assert.equal(readlinkSync(join(out, 'd')), secret.dir);
      await assertNoLeak(a, new Set([secret.digest]), secret);
    } finally {
      dirFdTestHooks.beforeOpen = undefined;
      await a.close();
    }
  });

  test('export --dir: a directory swapped for a symlink inside the tree being written → E_PATH_TRAVERSAL, nothing written outside, nothing left', async () => {
    const src = join(work, 'src2');
    mkdirSync(join(src, 'd', 'sub'), { recursive: true });
    writeFileSync(join(src, 'd', 'payload.txt'), 'payload\n');
    writeFileSync(join(src, 'd', 'sub', 'deep.txt'), 'deep\n');
    const snap = awcOk(home, ['snapshot', 'import', src], env).id;
    const victim = join(work, 'victim');
    mkdirSync(victim);
    const parent = join(work, 'exports');
    mkdirSync(parent);
    const target = join(parent, 'out');
    const a = await Awc.open({ home, mountDriver: 'copy' });
    try {
      // the directory being written: the temporary one beside the target (or the target itself, where an export writes in place)
      const tmpOf = (): string => {
        const tmp = readdirSync(parent).find((n) => n.startsWith('.awc-export-'));
        return tmp === undefined ? target : join(parent, tmp);
      };
      const hook = swapOnce('d', tmpOf, victim);
      await assert.rejects(a.export(snap, { dir: target }), (e: unknown) => e instanceof AwcError && e.code === 'E_PATH_TRAVERSAL');
      assert.ok(hook.fired());
    } finally {
      dirFdTestHooks.beforeOpen = undefined;
      await a.close();
    }
    assert.deepEqual(readdirSync(victim), [], 'nothing was written through the symlink');
    assert.deepEqual(readdirSync(parent), [], 'no target and no temporary directory is left');
  });

  test('export --dir onto a target that is a symlink to a directory is refused; the directory is untouched', () => {
    const src = join(work, 'src3');
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'f\n');
    const snap = awcOk(home, ['snapshot', 'import', src], env).id;
    const victim = join(work, 'victim3');
    mkdirSync(victim);
    const link = join(work, 'link3');
    symlinkSync(victim, link);
    const r = runAwc(home, ['export', snap, '--dir', link], env);
    assert.equal(r.code, 4, r.stderr);
    assert.equal(errorOf(r).code, 'E_TARGET_EXISTS');
    assert.deepEqual(readdirSync(victim), []);
    assert.ok(lstatSync(link).isSymbolicLink());
  });
});

describe('trees deeper than PATH_MAX', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-safewalk-deep-'));
  const home = join(work, 'home');
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  after(() => execFileSync('rm', ['-rf', work])); // coreutils rm walks by descriptors too

  test('a 6 KB path imports and exports (--dir) and imports back to the same root', () => {
    // built through descriptors: mkdir by the full path would fail with ENAMETOOLONG
    mkdirSync(join(work, 'src'));
    let fd = openSync(join(work, 'src'), 'r');
    for (let i = 0; i < 30; i++) {
      const name = String(i).padEnd(200, 'x');
      mkdirSync(`/proc/self/fd/${fd}/${name}`);
      const next = openSync(`/proc/self/fd/${fd}/${name}`, 'r');
      closeSync(fd);
      fd = next;
    }
    writeFileSync(`/proc/self/fd/${fd}/leaf.txt`, 'deep leaf\n');
    closeSync(fd);
    const imp = awcOk(home, ['snapshot', 'import', join(work, 'src')], env);
    assert.equal(imp.files, 1);
    awcOk(home, ['export', imp.id, '--dir', join(work, 'out'), '--keep-privileges'], env);
    const back = awcOk(home, ['snapshot', 'import', join(work, 'out')], env);
    assert.equal(back.root, imp.root);
  });
});

describe(
  'race: 200 checkpoints against a loop swapping a directory for a symlink',
  { skip: overlayPossible ? false : 'overlay is not possible on this host' },
  () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-safewalk-race-'));
    const home = join(work, 'home');
    const env = { AWC_MOUNT_DRIVER: 'overlay' };
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('no snapshot ever holds a byte from outside the workspace', { timeout: 120_000 }, async (t) => {
      const secret = makeSecret(join(work, 'outside'));
      const src = join(work, 'src');
      mkdirSync(src);
      writeFileSync(join(src, 'seed.txt'), 'seed\n');
      const snap = awcOk(home, ['snapshot', 'import', src], env).id;
      const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
      const mnt = join(work, 'mnt');
      awcOk(home, ['mount', ws, mnt], env);
      mkdirSync(join(mnt, 'd'));
      for (let i = 0; i < 20; i++) writeFileSync(join(mnt, 'd', `f${i}.txt`), `file ${i}\n`);
      // the swapping loop `mv d d.real; ln -s <secret> d; rm d; mv d.real d`, bounded in count and time
      // (a Node loop: no fork per step, so the symlink comes and goes within microseconds, as an attacker's would)
      const swap = `const fs = require('fs'); const [d, secret] = process.argv.slice(1); const end = Date.now() + 90000;
      for (let i = 0; i < 5e6 && Date.now() < end; i++) { try { fs.renameSync(d, d + '.real'); fs.symlinkSync(secret, d); fs.unlinkSync(d); fs.renameSync(d + '.real', d); } catch {} }`;
      const loop = spawn(process.execPath, ['-e', swap, join(mnt, 'd'), secret.dir], { stdio: 'ignore' });
      const exited = new Promise<void>((r) => loop.once('exit', () => r()));
      const a = await Awc.open({ home, mountDriver: 'overlay' });
      let ok = 0;
      let changing = 0;
      const deadline = Date.now() + 50_000;
      try {
        for (let i = 0; i < 200 && Date.now() < deadline; i++) {
          writeFileSync(join(mnt, 'seed.txt'), `seed ${i}\n`); // every checkpoint makes a snapshot
          try {
            await a.checkpoint(ws);
            ok++;
          } catch (err) {
            // a directory flipping on every look may end a checkpoint with this retryable code, never anything else
            if (!(err instanceof AwcError) || err.code !== 'E_CHANGED_DURING_READ') throw err;
            changing++;
          }
        }
      } finally {
        loop.kill('SIGKILL');
        await exited;
        await a.close();
      }
      const b = await Awc.open({ home, mountDriver: 'overlay' });
      try {
        const snaps = await assertNoLeak(b, new Set([secret.digest]), secret);
        t.diagnostic(`${ok} checkpoints, ${changing} ended in E_CHANGED_DURING_READ, ${snaps} snapshots checked`);
        assert.ok(ok >= 100, `${ok} checkpoints succeeded (${changing} ended in E_CHANGED_DURING_READ)`);
        assert.ok(snaps >= ok, `${snaps} snapshots checked`);
      } finally {
        await b.close();
      }
      // leave the directory in place for the unmount
      if (!existsSync(join(mnt, 'd')) && existsSync(join(mnt, 'd.real'))) renameSync(join(mnt, 'd.real'), join(mnt, 'd'));
      awcOk(home, ['unmount', ws, '--discard'], env);
    });
  },
);
