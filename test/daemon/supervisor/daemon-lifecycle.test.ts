import { test, describe, after } from 'node:test';
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import assert from 'node:assert/strict';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { awc, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { isMounted, readMountInfo } from '../../../src/host/mount/mount-table.js';
import { loadConfig, pathsOf } from '../../../src/config/config.js';
import { cliSocketOf } from '../../../src/daemon/warm/warm-protocol.js';

/**
 * Issue 7 items 5 and 10: never two overlays on one upper (a mount that is still alive, even
 * detached, is refused with E_STILL_MOUNTED naming its holders; a daemon restart keeps the
 * content FUSE connection and the overlays instead of remounting), and `daemon stop` /
 * `doctor` clean what a daemon killed with SIGKILL left behind. Every wait is bounded.
 */
const skip = detectDriver('auto').driver === 'overlay' ? false : 'overlay is not possible on this host';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The order in which daemon stop cleans what a dead daemon left: overlays, then the layer images they read, then the content mount. */
const order = (kind: string) => ['overlay', 'layer', 'content'].indexOf(kind);

/** `awc --json …` with a 60 s bound; throws with stderr unless it exits 0. */
function ok(home: string, args: string[]): any {
  const r = awc(home, args, {}, { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`awc ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.json;
}

/**
 * Whether any thread of `pid` still runs. Not only the thread-group leader: it shows Z while the
 * other threads (the daemon's FUSE readers) are still exiting with its descriptors open, and a
 * request sent then can still be read by one of them and end with ECONNABORTED when it dies.
 */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return readdirSync(`/proc/${pid}/task`).some((t) => {
      try {
        const stat = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
        return !'ZX'.includes(stat[stat.lastIndexOf(')') + 2]!);
      } catch {
        return false;
      }
    });
  } catch {
    return false;
  }
}

async function waitUntil(what: string, cond: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** The overlays (this mount namespace) whose upper is `upper`. */
function overlaysOn(upper: string) {
  return readMountInfo().filter((m) => m.fsType === 'overlay' && m.superOptions.split(',').includes(`upperdir=${upper}`));
}

/** Lines the kernel logged about two overlays sharing an upper (undefined when the log cannot be read). */
function doubleUpperWarnings(): number | undefined {
  const r = spawnSync('dmesg', [], { encoding: 'utf8', timeout: 10_000 });
  if (r.status !== 0) return undefined;
  return r.stdout.split('\n').filter((l) => /undefined behavior/.test(l)).length;
}

/**
 * A process inside a workspace: appends `line <n>` to log.txt and fsyncs every 20 ms, reports
 * `{synced, ino}` after each fsync, and answers `read <file>` with the file's content (read
 * through the workspace, so from the content FUSE for a lower file never read before).
 */
const HOLDER = `
const fs = require('node:fs');
const fd = fs.openSync('log.txt', 'a');
const ino = fs.fstatSync(fd).ino;
let n = 0;
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const timer = setInterval(() => {
  n++;
  fs.writeSync(fd, 'line ' + n + '\\n');
  fs.fsyncSync(fd);
  say({ synced: n, ino });
}, 20);
require('node:readline').createInterface({ input: process.stdin }).on('line', (l) => {
  const [cmd, arg] = l.split(' ');
  if (cmd === 'read') {
    fs.readFile(arg, 'utf8', (err, data) => say({ read: arg, data, err: err && err.code }));
  } else if (cmd === 'exit') {
    clearInterval(timer);
    fs.closeSync(fd);
    say({ exit: n });
    process.exit(0);
  }
});
`;

class Holder {
  readonly child: ChildProcessWithoutNullStreams;
  synced = 0;
  ino = -1;
  private waiters: { match: (o: any) => boolean; resolve: (o: any) => void }[] = [];

  constructor(script: string, cwd: string) {
    this.child = spawn(process.execPath, [script], { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    createInterface({ input: this.child.stdout }).on('line', (l) => {
      const o = JSON.parse(l);
      if (o.synced !== undefined) {
        this.synced = o.synced;
        this.ino = o.ino;
      }
      for (const w of [...this.waiters])
        if (w.match(o)) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve(o);
        }
    });
  }

  /** Sends a command and waits (at most `ms`) for the answer that `match`es. */
  ask(cmd: string, match: (o: any) => boolean, ms = 30_000): Promise<any> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`holder did not answer ${JSON.stringify(cmd)} within ${ms} ms`)), ms);
      this.waiters.push({ match, resolve: (o) => (clearTimeout(t), resolve(o)) });
      this.child.stdin.write(cmd + '\n');
    });
  }

  kill(): void {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

describe('workspace mounts across daemon deaths (overlay driver)', { skip, timeout: 300_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-lifecycle-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const holderScript = join(work, 'holder.cjs');
  const holders: (Holder | ReturnType<typeof spawn>)[] = [];
  after(() => {
    for (const h of holders) {
      if (h instanceof Holder) h.kill();
      else h.kill('SIGKILL');
    }
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, 'base.txt'), 'base\n');
  for (let i = 1; i <= 4; i++) writeFileSync(join(src, `lower-${i}.txt`), `lower file ${i}\n`.repeat(1000));
  writeFileSync(holderScript, HOLDER);
  let imported = false;
  const fork = (name: string): string => {
    if (!imported) ok(home, ['snapshot', 'import', src, '--name', 'base']);
    imported = true;
    return ok(home, ['fork', 'base', '--name', name]).workspaces[0].id;
  };
  const upperOf = (ws: string) => join(home, 'host', 'workspaces', ws, 'upper');
  /** The daemon's status once one other than `deadPid` answers: started by its supervisor (20 s at most), else as a user would. */
  const restarted = async (deadPid: number): Promise<any> => {
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const st = awc(home, ['daemon', 'status'], {}, { timeoutMs: 10_000 }).json;
      if (st?.running && st.pid !== deadPid) return st;
      await sleep(200);
    }
    return ok(home, ['daemon', 'start']);
  };

  test('a mount still alive after unmount --force is refused with E_STILL_MOUNTED naming its holder; once it exits, mount works', async () => {
    const ws = fork('forced');
    const mnt = join(work, 'mnt-forced');
    ok(home, ['mount', ws, mnt]);
    writeFileSync(join(mnt, 'mine.txt'), 'kept\n');
    const sh = spawn('sh', ['-c', 'exec 3<base.txt; exec sleep 60'], { cwd: mnt, stdio: 'ignore' });
    holders.push(sh);
    await waitUntil('the holder to open its file', () => spawnSync('ls', [`/proc/${sh.pid}/fd/3`]).status === 0, 10_000);
    const u = ok(home, ['unmount', ws, '--force']);
    assert.ok(!isMounted(mnt));
    assert.equal(u.pending, true);
    const again = awc(home, ['mount', ws, mnt], {}, { timeoutMs: 60_000 });
    assert.notEqual(again.code, 0, 'a second overlay on the same upper must be refused');
    const e = errorOf(again);
    assert.equal(e.code, 'E_STILL_MOUNTED');
    assert.match(e.message, new RegExp(`pid ${sh.pid}\\b`));
    assert.match(e.message, /sleep/);
    assert.equal(overlaysOn(upperOf(ws)).length, 0);
    assert.ok(
      u.holders?.some((h: { pid: number }) => h.pid === sh.pid),
      `unmount --force names the holder: ${JSON.stringify(u)}`,
    );
    // discarding the changes under a live mount is refused too
    assert.equal(errorOf(awc(home, ['unmount', ws, '--discard'], {}, { timeoutMs: 60_000 })).code, 'E_STILL_MOUNTED');
    sh.kill('SIGKILL');
    await waitUntil('the holder to exit', () => sh.exitCode !== null || sh.signalCode !== null, 10_000);
    const m = ok(home, ['mount', ws, mnt]);
    assert.equal(m.resumed, true);
    assert.equal(readFileSync(join(mnt, 'mine.txt'), 'utf8'), 'kept\n');
    assert.equal(overlaysOn(upperOf(ws)).length, 1);
    ok(home, ['unmount', ws]);
  });

  test('a process in a mount detached by unmount --force keeps reading and writing across a daemon SIGKILL', async () => {
    const ws = fork('detached');
    const mnt = join(work, 'mnt-detached');
    ok(home, ['mount', ws, mnt]);
    const h = new Holder(holderScript, mnt);
    holders.push(h);
    await waitUntil('the holder to sync lines', () => h.synced >= 5, 20_000);
    ok(home, ['unmount', ws, '--force']);
    const status = ok(home, ['daemon', 'status']);
    process.kill(status.pid, 'SIGKILL');
    await waitUntil('the daemon to die', () => !alive(status.pid), 10_000);
    await restarted(status.pid);
    // its lower files still come from the content FUSE: the restart kept the connection
    const r = await h.ask('read lower-4.txt', (o) => o.read === 'lower-4.txt', 60_000);
    assert.equal(r.err, null, `read in the detached mount failed: ${r.err}`);
    assert.equal(r.data, 'lower file 4\n'.repeat(1000));
    assert.equal(errorOf(awc(home, ['mount', ws, mnt], {}, { timeoutMs: 60_000 })).code, 'E_STILL_MOUNTED');
    const exit = (await h.ask('exit', (o) => o.exit !== undefined)).exit as number;
    await waitUntil('the holder to exit', () => h.child.exitCode !== null, 10_000);
    ok(home, ['mount', ws, mnt]);
    assert.equal(readFileSync(join(mnt, 'log.txt'), 'utf8'), Array.from({ length: exit }, (_, i) => `line ${i + 1}\n`).join(''));
    ok(home, ['unmount', ws]);
  });

  test('daemon SIGKILL while a process writes and reads in the workspace: the restart keeps its mount, its file and every fsynced byte', async () => {
    const warningsBefore = doubleUpperWarnings();
    const ws = fork('kept');
    const mnt = join(work, 'mnt-kept');
    ok(home, ['mount', ws, mnt]);
    const before = overlaysOn(upperOf(ws));
    assert.equal(before.length, 1);
    const h = new Holder(holderScript, mnt);
    holders.push(h);
    await waitUntil('the holder to sync lines', () => h.synced >= 5, 20_000);
    assert.equal((await h.ask('read lower-1.txt', (o) => o.read === 'lower-1.txt')).data, 'lower file 1\n'.repeat(1000));
    const status = ok(home, ['daemon', 'status']);
    process.kill(status.pid, 'SIGKILL');
    await waitUntil('the daemon to die', () => !alive(status.pid), 10_000);
    // a read of a lower file never read before, while no daemon serves: it waits, then is answered
    const duringGap = h.ask('read lower-2.txt', (o) => o.read === 'lower-2.txt', 60_000);
    const syncedAtKill = h.synced;
    const st = await restarted(status.pid);
    assert.notEqual(st.pid, status.pid);
    const gap = await duringGap;
    assert.equal(gap.err, null, `read during the restart failed: ${gap.err}`);
    assert.equal(gap.data, 'lower file 2\n'.repeat(1000));
    // the process goes on with the same file
    await waitUntil('the holder to sync after the restart', () => h.synced >= syncedAtKill + 20, 20_000);
    assert.equal((await h.ask('read lower-3.txt', (o) => o.read === 'lower-3.txt')).data, 'lower file 3\n'.repeat(1000));
    assert.equal(statSync(join(mnt, 'log.txt')).ino, h.ino, 'the workspace path names the file the process writes');
    // one overlay on the upper, the very one mounted before the kill
    const now = overlaysOn(upperOf(ws));
    assert.equal(now.length, 1, `overlays on the upper: ${JSON.stringify(now)}`);
    assert.equal(now[0]!.mountId, before[0]!.mountId, 'the overlay was kept, not replaced');
    const s2 = ok(home, ['daemon', 'status']);
    assert.equal(s2.resumedConnection, true);
    assert.deepEqual(
      s2.mounts.map((m: { workspace: string }) => m.workspace).filter((w: string) => w === ws),
      [ws],
    );
    // no fsynced byte lost: what the process synced is in the workspace and in a checkpoint of it
    const exit = (await h.ask('exit', (o) => o.exit !== undefined)).exit as number;
    assert.ok(exit > syncedAtKill);
    const expected = Array.from({ length: exit }, (_, i) => `line ${i + 1}\n`).join('');
    assert.equal(readFileSync(join(mnt, 'log.txt'), 'utf8'), expected);
    const cp = ok(home, ['checkpoint', ws]);
    const out = join(work, 'export-kept');
    ok(home, ['export', cp.id, '--dir', out, '--keep-privileges']);
    assert.equal(readFileSync(join(out, 'log.txt'), 'utf8'), expected);
    const warningsAfter = doubleUpperWarnings();
    if (warningsBefore !== undefined && warningsAfter !== undefined)
      assert.equal(warningsAfter, warningsBefore, 'the kernel warned about two overlays on one upper');
    ok(home, ['unmount', ws]);
  });

  test('daemon and supervisor SIGKILLed while a process writes in the workspace: the restart remounts it only once the old mount has no users', async () => {
    const ws = fork('waits');
    const mnt = join(work, 'mnt-waits');
    ok(home, ['mount', ws, mnt]);
    const before = overlaysOn(upperOf(ws));
    const h = new Holder(holderScript, mnt);
    holders.push(h);
    await waitUntil('the holder to sync lines', () => h.synced >= 5, 20_000);
    const s = ok(home, ['daemon', 'status']);
    const pids = [s.supervisor, s.pid].filter((p) => typeof p === 'number');
    for (const p of pids) process.kill(p, 'SIGKILL');
    await waitUntil('the daemon processes to die', () => pids.every((p) => !alive(p)), 10_000);
    const started = ok(home, ['daemon', 'start']);
    const waiting = started.waiting?.find((w: { workspace: string }) => w.workspace === ws);
    assert.ok(waiting, `the workspace waits for its old mount: ${JSON.stringify(started)}`);
    assert.ok(
      waiting.holders.some((x: { pid: number }) => x.pid === h.child.pid),
      `names the holder: ${JSON.stringify(waiting)}`,
    );
    assert.deepEqual(
      overlaysOn(upperOf(ws)).map((m) => m.mountId),
      [before[0]!.mountId],
      'only the old overlay uses the upper',
    );
    const syncedAtStart = h.synced;
    await waitUntil('the holder to go on writing into the old mount', () => h.synced >= syncedAtStart + 10, 20_000);
    const exit = (await h.ask('exit', (o) => o.exit !== undefined)).exit as number;
    await waitUntil(
      'the remount once the old mount is free',
      () => ok(home, ['daemon', 'status']).mounts.some((m: { workspace: string }) => m.workspace === ws),
      20_000,
    );
    const after = overlaysOn(upperOf(ws));
    assert.equal(after.length, 1);
    assert.equal(readFileSync(join(mnt, 'log.txt'), 'utf8'), Array.from({ length: exit }, (_, i) => `line ${i + 1}\n`).join(''));
    ok(home, ['unmount', ws]);
  });

  test('daemon SIGKILL while three agents write and one checkpoints: every workspace works again by itself, one overlay each, no fsynced byte lost', async () => {
    const agents = ['many-a', 'many-b', 'many-c'].map((name) => {
      const ws = fork(name);
      const mnt = join(work, `mnt-${name}`);
      ok(home, ['mount', ws, mnt]);
      return { ws, mnt, before: overlaysOn(upperOf(ws)) };
    });
    const hs = agents.map((a) => {
      const h = new Holder(holderScript, a.mnt);
      holders.push(h);
      return h;
    });
    for (const h of hs) await waitUntil('every holder to sync lines', () => h.synced >= 5, 20_000);
    // a checkpoint of the first workspace is under way when the daemon dies
    const cpDuring = spawn(process.execPath, [CLI, '--json', '--home', home, 'checkpoint', agents[0]!.ws], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let cpOut = '';
    let cpErr = '';
    cpDuring.stdout.on('data', (d) => (cpOut += d));
    cpDuring.stderr.on('data', (d) => (cpErr += d));
    const cpDone = new Promise<number>((resolve) => cpDuring.on('close', (code) => resolve(code ?? -1)));
    const status = ok(home, ['daemon', 'status']);
    process.kill(status.pid, 'SIGKILL');
    await waitUntil('the daemon to die', () => !alive(status.pid), 10_000);
    const syncedAtKill = hs.map((h) => h.synced);
    const reads = hs.map((h, i) => h.ask(`read lower-${i + 1}.txt`, (o) => o.read === `lower-${i + 1}.txt`, 60_000));
    await restarted(status.pid);
    for (const [i, r] of (await Promise.all(reads)).entries()) {
      assert.equal(r.err, null, `agent ${i}: read during the restart failed: ${r.err}`);
      assert.equal(r.data, `lower file ${i + 1}\n`.repeat(1000));
    }
    // the checkpoint in flight either made a snapshot or failed with a retryable error: never a bug, never half a head
    const cpCode = await cpDone;
    if (cpCode !== 0) {
      const e = JSON.parse(cpErr.trim().split('\n').pop()!);
      assert.notEqual(e.code, 'E_INTERNAL', cpErr);
      assert.equal(e.retryable, true, `a checkpoint cut by the daemon's death is retryable: ${cpErr}`);
    } else assert.match(JSON.parse(cpOut).id, /\S/);
    for (const [i, h] of hs.entries())
      await waitUntil(`agent ${i} to sync after the restart`, () => h.synced >= syncedAtKill[i]! + 10, 20_000);
    for (const [i, a] of agents.entries()) {
      const now = overlaysOn(upperOf(a.ws));
      assert.equal(now.length, 1, `agent ${i}: overlays on the upper: ${JSON.stringify(now)}`);
      assert.equal(now[0]!.mountId, a.before[0]!.mountId, `agent ${i}: the overlay was kept, not replaced`);
    }
    // each workspace by itself: the agent's bytes, a new write, a checkpoint and its export
    for (const [i, a] of agents.entries()) {
      const exit = (await hs[i]!.ask('exit', (o) => o.exit !== undefined)).exit as number;
      const expected = Array.from({ length: exit }, (_, k) => `line ${k + 1}\n`).join('');
      assert.equal(readFileSync(join(a.mnt, 'log.txt'), 'utf8'), expected, `agent ${i}: the log`);
      writeFileSync(join(a.mnt, 'after.txt'), `after ${i}\n`);
      const cp = ok(home, ['checkpoint', a.ws]);
      const out = join(work, `export-${i}-many`);
      ok(home, ['export', cp.id, '--dir', out, '--keep-privileges']);
      assert.equal(readFileSync(join(out, 'log.txt'), 'utf8'), expected, `agent ${i}: the checkpoint holds every synced line`);
      assert.equal(readFileSync(join(out, 'after.txt'), 'utf8'), `after ${i}\n`);
      assert.equal(readFileSync(join(out, 'lower-1.txt'), 'utf8'), 'lower file 1\n'.repeat(1000));
      ok(home, ['unmount', a.ws]);
    }
  });

  test('the successor answers for the node ids the kernel learned from the daemon it replaced', async () => {
    // two snapshots mounted in the order opposite to the catalog's: node ids are handed out in mount order
    const srcX = join(work, 'src-x');
    const srcY = join(work, 'src-y');
    mkdirSync(srcX);
    mkdirSync(srcY);
    for (let i = 0; i < 5; i++) {
      writeFileSync(join(srcX, `x${i}.txt`), `x file ${i}\n`.repeat(50 + i));
      writeFileSync(join(srcY, `y${i}.txt`), `y file ${i}\n`.repeat(70 + i));
    }
    ok(home, ['snapshot', 'import', srcX, '--name', 'snap-x']);
    ok(home, ['snapshot', 'import', srcY, '--name', 'snap-y']);
    const wx = ok(home, ['fork', 'snap-x', '--name', 'ids-x']).workspaces[0].id;
    const wy = ok(home, ['fork', 'snap-y', '--name', 'ids-y']).workspaces[0].id;
    const mx = join(work, 'mnt-ids-x');
    const my = join(work, 'mnt-ids-y');
    ok(home, ['daemon', 'stop']);
    ok(home, ['mount', wy, my]);
    ok(home, ['mount', wx, mx]);
    const expect = (dir: string, p: string, i: number) => `${p} file ${i}\n`.repeat((p === 'x' ? 50 : 70) + i);
    for (let i = 0; i < 5; i++) {
      assert.equal(readFileSync(join(mx, `x${i}.txt`), 'utf8'), expect(mx, 'x', i));
      assert.equal(readFileSync(join(my, `y${i}.txt`), 'utf8'), expect(my, 'y', i));
    }
    const status = ok(home, ['daemon', 'status']);
    process.kill(status.pid, 'SIGKILL');
    await waitUntil('the daemon to die', () => !alive(status.pid), 10_000);
    await restarted(status.pid);
    // drop the page cache (not the dentries): the kernel reads again by the node ids it kept
    writeFileSync('/proc/sys/vm/drop_caches', '1');
    for (let i = 0; i < 5; i++) {
      assert.equal(readFileSync(join(mx, `x${i}.txt`), 'utf8'), expect(mx, 'x', i));
      assert.equal(readFileSync(join(my, `y${i}.txt`), 'utf8'), expect(my, 'y', i));
    }
    ok(home, ['unmount', wx]);
    ok(home, ['unmount', wy]);
  });

  test('after kill -9 of the daemon and its supervisor, daemon stop and doctor clean the mounts it left and say so', async () => {
    const a = fork('left-a');
    const b = fork('left-b');
    const mntA = join(work, 'mnt-left-a');
    const mntB = join(work, 'mnt-left-b');
    ok(home, ['mount', a, mntA]);
    ok(home, ['mount', b, mntB]);
    const content = join(home, 'host', 'content');
    const killAll = async () => {
      const s = ok(home, ['daemon', 'status']);
      const pids = [s.supervisor, s.pid].filter((p) => typeof p === 'number');
      for (const p of pids) process.kill(p, 'SIGKILL');
      await waitUntil('the daemon processes to die', () => pids.every((p) => !alive(p)), 10_000);
    };
    await killAll();
    assert.ok(isMounted(mntA) && isMounted(mntB) && isMounted(content), 'the dead daemon left its mounts');
    // a shell inside B: B can only be detached lazily
    const sh = spawn('sleep', ['60'], { cwd: mntB, stdio: 'ignore' });
    holders.push(sh);
    await waitUntil('the shell to start', () => spawnSync('ls', [`/proc/${sh.pid}/cwd/`]).status === 0, 10_000);
    const stop = ok(home, ['daemon', 'stop']);
    assert.equal(stop.running, false);
    const byPath = new Map(stop.cleaned.map((c: { path: string }) => [c.path, c]));
    assert.deepEqual(byPath.get(mntA), { kind: 'overlay', path: mntA, upper: upperOf(a), lazy: false });
    assert.deepEqual(byPath.get(mntB), { kind: 'overlay', path: mntB, upper: upperOf(b), lazy: true });
    assert.equal((byPath.get(content) as { kind: string } | undefined)?.kind, 'content');
    // the layer images go after the overlays that read them, before the content mount
    const kinds = stop.cleaned.map((c: { kind: string }) => c.kind);
    assert.deepEqual(
      kinds,
      [...kinds].sort((x: string, y: string) => order(x) - order(y)),
      JSON.stringify(kinds),
    );
    assert.ok(!isMounted(mntA) && !isMounted(mntB) && !isMounted(content));
    assert.equal(ok(home, ['show', a]).mountState, 'unmounted');
    // B's old mount lives on in the shell: no new mount until it exits
    assert.equal(errorOf(awc(home, ['mount', b, mntB], {}, { timeoutMs: 60_000 })).code, 'E_STILL_MOUNTED');
    sh.kill('SIGKILL');
    await waitUntil('the shell to exit', () => sh.exitCode !== null || sh.signalCode !== null, 10_000);
    // doctor finds and cleans the same leftovers
    ok(home, ['mount', a, mntA]);
    await killAll();
    const doc = ok(home, ['doctor']);
    assert.equal(doc.daemon.running, false);
    const layerMounts = doc.cleaned.filter((c: { kind: string }) => c.kind === 'layer').map((c: { path: string }) => c.path);
    assert.ok(
      layerMounts.every((p: string) => p.startsWith(join(home, 'host', 'layers') + '/') && p.endsWith('/tree')),
      JSON.stringify(layerMounts),
    );
    assert.deepEqual(doc.cleaned.map((c: { path: string }) => c.path).sort(), [content, mntA, ...layerMounts].sort());
    assert.ok(
      layerMounts.every((p: string) => !isMounted(p)),
      'the layer images are unmounted too',
    );
    assert.ok(!isMounted(mntA) && !isMounted(content));
    assert.deepEqual(ok(home, ['doctor']).cleaned, []);
    assert.deepEqual(ok(home, ['daemon', 'stop']).cleaned, []);
  });
});

describe(
  'daemon stop cleans the sockets a killed daemon left (issue 24 item 9)',
  { skip: process.getuid?.() !== 0 ? 'needs root' : skip },
  () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-sockets-'));
    const home = join(work, 'home');
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('after kill -9 of the daemon and its supervisor, daemon stop removes its socket, warm CLI socket, the per-user sockets and their .users directory', async () => {
      mkdirSync(home, { mode: 0o700 });
      // an allowed user (nobody, always there) gives the daemon a per-user socket directory
      writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: 'nobody', namespaces: ['default'] }] }));
      const paths = pathsOf(loadConfig({ home }, {}));
      for (const round of ['killed', 'stopped'] as const) {
        ok(home, ['daemon', 'start']);
        const s = ok(home, ['daemon', 'status']);
        await waitUntil(
          'the per-user socket',
          () => lstatSync(join(paths.userSockets, '65534.sock'), { throwIfNoEntry: false })?.isSocket() === true,
          10_000,
        );
        assert.ok(lstatSync(paths.socket).isSocket());
        if (round === 'killed') {
          const pids = [s.supervisor, s.pid].filter((p) => typeof p === 'number');
          for (const p of pids) process.kill(p, 'SIGKILL');
          await waitUntil('the daemon processes to die', () => pids.every((p) => !alive(p)), 10_000);
          assert.ok(existsSync(paths.socket) && existsSync(paths.userSockets), 'the killed daemon left its sockets');
        }
        assert.equal(ok(home, ['daemon', 'stop']).running, false);
        for (const p of [paths.socket, cliSocketOf(paths.socket), paths.userSockets])
          assert.equal(existsSync(p), false, `${round}: ${p} is left in ${dirname(p)}`);
      }
    });
  },
);
