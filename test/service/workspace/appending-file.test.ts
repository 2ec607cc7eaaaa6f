/**
 * Issue 12, fidelity item 16: a file appended to continuously while it is checkpointed.
 * Every checkpoint either fails retryably (E_CHANGED_DURING_READ) or stores one consistent
 * version: the entry's size, its content digest, its chunks and the bytes read back agree,
 * and the bytes are a prefix of what the writer wrote (never a torn mix). With
 * --allow-changing it succeeds and names the file in `changing`; what it stored is still
 * consistent in itself.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { sha256 } from '../../../src/core/digest.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { awc as runAwc, awcOk, cleanupMounts } from '../../helpers/cli.js';

const LINE = 32;
/** The writer's stream: line i is i, zero-padded to LINE − 1 digits, then a newline. */
const line = (i: number) => `${String(i).padStart(LINE - 1, '0')}\n`;
const PRE = 200_000; // lines written before the first checkpoint (6.4 MB)

function stream(lines: number): Buffer {
  return Buffer.from(Array.from({ length: lines }, (_, i) => line(i)).join(''));
}

/** Appends line after line to `path` (from line PRE on), a few at a time, until killed. */
function appender(path: string): { stop: () => Promise<void> } {
  const script = `const fs = require('fs'); const fd = fs.openSync(process.argv[1], 'a'); let i = ${PRE};
    const line = (i) => String(i).padStart(${LINE - 1}, '0') + '\\n'; const sab = new Int32Array(new SharedArrayBuffer(4));
    for (;;) { let s = ''; for (let k = 0; k < 64; k++) s += line(i++); fs.writeSync(fd, s); Atomics.wait(sab, 0, 0, 1); }`;
  const child = spawn(process.execPath, ['-e', script, path], { stdio: 'ignore' });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    stop: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

const overlayPossible = detectDriver('auto').driver === 'overlay';

for (const driver of ['overlay', 'copy'] as const)
  describe(
    `a file appended to while it is checkpointed (${driver} driver)`,
    { skip: driver === 'copy' || overlayPossible ? false : 'overlay is not possible on this host' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-append-${driver}-`));
      const home = join(work, 'home');
      const env = { AWC_MOUNT_DRIVER: driver };
      after(() => {
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      });

      test(
        'each checkpoint is one consistent version or a retryable failure; --allow-changing flags it',
        { timeout: 180_000 },
        async () => {
          const src = join(work, 'src');
          mkdirSync(src);
          writeFileSync(join(src, 'README'), 'x\n');
          const snap = awcOk(home, ['snapshot', 'import', src], env).id;
          const ws = awcOk(home, ['fork', snap], env).workspaces[0].id;
          const mnt = join(work, 'mnt');
          awcOk(home, ['mount', ws, mnt], env);
          writeFileSync(join(mnt, 'log.txt'), stream(PRE));
          const ids: { id: string; flagged: boolean }[] = [];
          let failed = 0;
          const w = appender(join(mnt, 'log.txt'));
          try {
            for (let i = 0; i < 8; i++) {
              const r = runAwc(home, ['checkpoint', ws], env);
              if (r.code === 0) {
                assert.equal(r.json.changing, undefined);
                ids.push({ id: r.json.id, flagged: false });
              } else {
                const e = JSON.parse(r.stderr.trim().split('\n').pop()!);
                assert.deepEqual([e.code, e.retryable, e.details?.path], ['E_CHANGED_DURING_READ', true, 'log.txt'], r.stderr);
                failed++;
              }
            }
            const allowed = awcOk(home, ['checkpoint', ws, '--allow-changing'], env);
            if (allowed.changing) assert.deepEqual(allowed.changing, ['log.txt']);
            ids.push({ id: allowed.id, flagged: allowed.changing !== undefined });
          } finally {
            await w.stop();
          }
          assert.ok(failed > 0 || ids.some((x) => x.flagged), 'the appends were seen by at least one read (else the test proves nothing)');
          const svc = await Awc.open({ home, mountDriver: driver });
          try {
            const reader = svc.reader();
            for (const { id, flagged } of ids) {
              const snapRow = await svc.getSnapshot(id);
              const tree = await reader.readTree((await reader.readRoot(snapRow.root)).tree);
              const f = tree.entries.find((e) => e.name === 'log.txt');
              assert.ok(f?.type === 'file');
              const parts: Buffer[] = [];
              for await (const b of reader.readFile(f)) parts.push(b);
              const bytes = Buffer.concat(parts);
              assert.equal(bytes.length, f.size, `${id}: size`);
              assert.equal(
                f.chunks.reduce((n, c) => n + c.size, 0),
                f.size,
                `${id}: chunks`,
              );
              assert.equal(sha256(bytes), f.digest, `${id}: digest`);
              if (!flagged) {
                assert.ok(bytes.length >= PRE * LINE);
                const lines = Math.ceil(bytes.length / LINE);
                assert.ok(bytes.equals(stream(lines).subarray(0, bytes.length)), `${id}: a version the writer wrote, not a torn mix`);
              }
            }
          } finally {
            await svc.close();
          }
          awcOk(home, ['unmount', ws, '--discard'], env);
        },
      );
    },
  );
