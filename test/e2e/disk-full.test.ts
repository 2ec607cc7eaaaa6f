/**
 * Issue 12, "Crash safety": the upper's disk fills up. The whole AWC home (catalog, object
 * store, cache, uppers or copies) sits on a 48 MiB tmpfs; a process writing into a mounted
 * workspace fills it. Asserted, for the overlay and the copy driver: the writer gets ENOSPC;
 * AWC keeps working (ls, show, the daemon, reading and exporting, the other workspace); a
 * checkpoint on the full disk (its new bytes cannot fit) is E_NO_SPACE with a hint and moves nothing (no temporary object
 * left behind); once space is freed the next checkpoint holds exactly the workspace, and every
 * snapshot exports as it should.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';
import { awc, awcOk, cleanupMounts, errorOf, readTreeInfo } from '../helpers/cli.js';
import { exportedTree, withHome } from '../helpers/crash-check.js';

const MiB = 1 << 20;

/** Names of the temporary files a directory store's put leaves while it writes (`.tmp-…`), anywhere under `dir`. */
function tempObjects(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.name.startsWith('.tmp-')) out.push(join(d, e.name));
      if (e.isDirectory()) walk(join(d, e.name));
    }
  };
  walk(dir);
  return out;
}

/** Writes 1 MiB blocks of random bytes to `path` until the disk is full; returns the error code and the bytes written. */
function fill(path: string): { code: string | undefined; written: number } {
  const fd = openSync(path, 'w');
  const block = randomBytes(MiB);
  let written = 0;
  try {
    for (;;) written += writeSync(fd, block);
  } catch (err) {
    return { code: (err as NodeJS.ErrnoException).code, written };
  } finally {
    closeSync(fd);
  }
}

for (const driver of ['overlay', 'copy'] as const) {
  const skip = driver === 'overlay' && detectDriver('auto').driver !== 'overlay' ? 'overlay is not possible on this host' : false;
  describe(`the home's disk fills up under a ${driver} workspace`, { skip }, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-full-${driver}-`));
    const home = join(work, 'home');
    const env = { AWC_MOUNT_DRIVER: driver };
    after(() => {
      cleanupMounts(home, work, env);
      rmSync(work, { recursive: true, force: true });
    });

    it('the writer gets ENOSPC, AWC keeps working, a checkpoint is E_NO_SPACE, and the next one holds the workspace', async () => {
      mkdirSync(home);
      const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=48m,mode=0700', 'tmpfs', home]);
      assert.equal(m.status, 0, `mount tmpfs: ${m.stderr}`);
      const src = join(work, 'src');
      mkdirSync(src);
      writeFileSync(join(src, 'a.txt'), 'alpha\n');
      writeFileSync(join(src, 'r.bin'), randomBytes(200_000));
      const base = awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env).id;
      const baseTree = readTreeInfo(src);
      const [w1, w2] = awcOk(home, ['fork', 'base', '--name', 'w', '--count', '2'], env).workspaces.map((w: { id: string }) => w.id);
      const m1 = join(work, 'm1');
      const m2 = join(work, 'm2');
      awcOk(home, ['mount', w1, m1], env);
      awcOk(home, ['mount', w2, m2], env);
      writeFileSync(join(m1, 'before.txt'), 'written before the disk filled\n');

      const filled = fill(join(m1, 'fill.bin'));
      assert.equal(filled.code, 'ENOSPC', 'the writer gets ENOSPC');
      assert.ok(filled.written > 16 * MiB, `the writer wrote ${filled.written} bytes first`);

      // AWC keeps working on the full disk
      assert.equal(awc(home, ['ls'], env).code, 0);
      assert.equal(awcOk(home, ['show', w1], env).mountState, 'mounted');
      assert.equal(awcOk(home, ['daemon', 'status'], env).running, true);
      assert.equal(readFileSync(join(m2, 'a.txt'), 'utf8'), 'alpha\n', 'the other workspace reads');
      assert.equal(readFileSync(join(m1, 'before.txt'), 'utf8'), 'written before the disk filled\n');
      const out = join(work, 'export-full');
      awcOk(home, ['export', 'base', '--dir', out], env);
      assert.deepEqual(readTreeInfo(out), baseTree, 'an export to another disk works');
      // a catalog write on the full disk: done, or E_NO_SPACE (SQLITE_FULL), never half
      const fork = awc(home, ['fork', 'base', '--name', 'during'], env);
      if (fork.code !== 0) {
        assert.equal(errorOf(fork).code, 'E_NO_SPACE', fork.stderr);
        assert.notEqual(awc(home, ['show', 'during'], env).code, 0, 'no workspace was made');
      }

      // (its new bytes cannot fit: the disk has none left)
      const cp = awc(home, ['checkpoint', w1], env);
      assert.notEqual(cp.code, 0, 'a checkpoint of more bytes than the disk has left fails');
      const e = errorOf(cp);
      assert.equal(e.code, 'E_NO_SPACE', cp.stderr);
      assert.ok(e.hint.length > 0, 'E_NO_SPACE carries a hint');
      assert.equal(awcOk(home, ['show', w1], env).headSnapshotId, base, 'the head did not move');
      assert.deepEqual(tempObjects(join(home, 'objects')), [], 'no temporary object is left behind');

      // space freed: the next checkpoint holds the workspace exactly
      truncateSync(join(m1, 'fill.bin'), 8 * MiB);
      const want1 = readTreeInfo(m1);
      const next = awcOk(home, ['checkpoint', w1], env);
      assert.equal(next.changed, true);
      writeFileSync(join(m2, 'other.txt'), 'the other workspace writes again\n');
      const want2 = readTreeInfo(m2);
      const other = awcOk(home, ['checkpoint', w2], env);
      await withHome(home, { mountDriver: driver }, async (svc) => {
        assert.deepEqual(await exportedTree(svc, next.id, work), want1, 'the checkpoint holds the workspace');
        assert.deepEqual(await exportedTree(svc, other.id, work), want2);
        assert.deepEqual(await exportedTree(svc, base, work), baseTree);
      });
      cleanupMounts(home, work, env);
    });
  });
}
