/**
 * The warm pool's refill (src/daemon/warm/warm-pool.ts) with a stand-in worker: a real forked
 * Node process that says `ready` and, once handed a connection, runs until its caller closes
 * it. Workers load ahead at nice 10 and run a command at nice 0, on every thread; the pool forks replacements only once no command it
 * handed runs any more: the first of a burst of commands to end does not start loading
 * workers beside the others still running.
 */
import { strict as assert } from 'node:assert';
import { connect, type Socket } from 'node:net';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WarmCliPool } from '../../../src/daemon/warm/warm-pool.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

/** The stand-in worker: records `<pid>.ready` and `<pid>.conn` in its directory's `seen/`; exits when its connection closes. */
const WORKER = `
import { writeFileSync } from 'node:fs';
const seen = new URL('./seen/', import.meta.url).pathname;
process.on('message', (m, handle) => {
  if (m?.type === 'init') {
    writeFileSync(seen + process.pid + '.ready', '');
    process.send({ type: 'ready' });
  } else if (m?.type === 'conn' && handle) {
    writeFileSync(seen + process.pid + '.conn', '');
    process.disconnect();
    handle.on('close', () => process.exit(0));
    handle.on('error', () => process.exit(0));
    handle.resume();
  }
});
`;

describe('warm pool refills', () => {
  let work: string;
  let seen: string;
  let pool: WarmCliPool;
  let socket: string;

  before(async () => {
    work = await makeTempDir('awc-warm-pool-');
    seen = join(work, 'seen');
    mkdirSync(seen);
    writeFileSync(join(work, 'worker.mjs'), WORKER);
    socket = join(work, 'sock', 'cli.sock');
    // a refill timer longer than the test: only the end of the commands refills
    pool = new WarmCliPool({ workerFile: join(work, 'worker.mjs'), ownWorkers: 2, refillMs: 120_000 });
    await pool.serve(socket, {
      uid: process.getuid!(),
      gid: process.getgid!(),
      warm: { kind: 'local', home: work, catalog: 'sqlite', objectStore: 'fs' },
    });
  });
  after(async () => {
    await pool?.close();
    await removeTempDir(work);
  });

  const pids = (what: 'ready' | 'conn'): number[] =>
    readdirSync(seen)
      .filter((f) => f.endsWith(`.${what}`))
      .map((f) => Number(f.split('.')[0]));
  const until = async (what: string, ok: () => boolean): Promise<void> => {
    for (let i = 0; i < 600 && !ok(); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(ok(), what);
  };
  const alive = (pid: number): boolean => existsSync(`/proc/${pid}`) && !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  /** A thread's nice value (/proc/<tid>/stat, field 19; a process's id is its main thread's). */
  const niceOf = (tid: number): number => Number(readFileSync(`/proc/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
  const open = async (): Promise<Socket> => {
    const c = connect(socket);
    await new Promise<void>((r, j) => c.once('connect', () => r()).once('error', j));
    return c;
  };

  it('loads ahead at nice 10; forks no replacement while a handed command still runs, and refills once none does', async () => {
    await until('two workers ready', () => pids('ready').length === 2);
    for (const pid of pids('ready'))
      for (const tid of readdirSync(`/proc/${pid}/task`))
        assert.equal(niceOf(Number(tid)), 10, `worker ${pid} thread ${tid} loads ahead at nice 10`);

    const a = await open();
    const b = await open();
    await until('both connections handed', () => pids('conn').length === 2);
    const [first, second] = pids('conn') as [number, number];
    // a command runs at the normal priority on every thread (libuv's and V8's too, not only the main one)
    for (const pid of [first, second]) {
      const tasks = readdirSync(`/proc/${pid}/task`);
      assert.ok(tasks.length > 1, 'a Node process has threads');
      for (const tid of tasks) assert.equal(niceOf(Number(tid)), 0, `worker ${pid} thread ${tid} at nice 0`);
    }
    // the first command ends while the other still runs: no worker is forked beside it
    a.destroy();
    await until('one worker ended', () => !alive(first) || !alive(second));
    await new Promise((r) => setTimeout(r, 700));
    assert.equal(pids('ready').length, 2, 'no replacement while a handed command runs');

    // the last one ends: the pool fills up again, at nice 10
    b.destroy();
    await until('two new workers ready', () => pids('ready').length === 4);
    const fresh = pids('ready').filter((p) => p !== first && p !== second);
    assert.equal(fresh.length, 2);
    for (const pid of fresh) assert.equal(niceOf(pid), 10);
  });
});
