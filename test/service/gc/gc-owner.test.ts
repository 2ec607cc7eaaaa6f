/**
 * src/service/gc/gc-owner.ts: a gc lock whose owner is a dead process of this machine is taken
 * over at once (a gc killed by SIGKILL does not block gc for the lock's 15 minutes), and only
 * such a lock: a live process, another machine, an owner of the old format are left alone.
 * The kill-point matrix (test/e2e/kill-points.test.ts) runs the real case through the CLI.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { describe, it } from 'node:test';
import { isDeadLocalOwner, newGcOwner } from '../../../src/service/gc/gc-owner.js';

/** The owner `newGcOwner` would have made in process `pid` (same format, read from /proc). */
function ownerOf(pid: number): string {
  const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  const ns = statSync('/proc/self/ns/pid').ino;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  return `${hostname()}:${pid}:0badf00d@${boot}:${ns}:${start}`;
}

describe('gc lock owners', () => {
  it("names this process on this kernel, and this process's owner is alive", () => {
    const me = newGcOwner();
    assert.match(me, new RegExp(`^${hostname()}:${process.pid}:[0-9a-f]{8}@[0-9a-f-]+:\\d+:\\d+$`));
    assert.equal(isDeadLocalOwner(me), false);
  });

  it('a process of this machine is alive while it runs and dead once it has exited', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    await once(child, 'spawn');
    const owner = ownerOf(child.pid!);
    assert.equal(isDeadLocalOwner(owner), false);
    child.kill('SIGKILL');
    await once(child, 'exit');
    assert.equal(isDeadLocalOwner(owner), true);
  });

  it('a pid now used by another process (another start time) is dead', () => {
    const mine = ownerOf(process.pid);
    const other = mine.replace(/:(\d+)$/, (_, t: string) => `:${Number(t) + 1}`);
    assert.equal(isDeadLocalOwner(other), true);
  });

  it('another kernel (boot id), another pid namespace, or an owner without the process key is never judged dead', () => {
    const mine = ownerOf(process.pid);
    const [head, key] = mine.split('@') as [string, string];
    const [boot, ns, start] = key.split(':') as [string, string, string];
    assert.equal(
      isDeadLocalOwner(`${head.replace(`:${process.pid}:`, ':999999:')}@00000000-dead-beef-0000-000000000000:${ns}:${start}`),
      false,
    );
    assert.equal(isDeadLocalOwner(`${head.replace(`:${process.pid}:`, ':999999:')}@${boot}:1:${start}`), false);
    assert.equal(isDeadLocalOwner(`${hostname()}:999999:0badf00d`), false);
    assert.equal(isDeadLocalOwner('somebody else'), false);
  });
});
