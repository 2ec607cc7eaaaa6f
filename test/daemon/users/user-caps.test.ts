import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { awcOk } from '../../helpers/cli.js';
import { daemonWithUsers, type DaemonUsers } from '../../helpers/daemon-users.js';
import { asUserArgv, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

/**
 * Holds argv[2] connections to the socket argv[1], each a request whose body never ends
 * (`content-length` argv[3], argv[4] bytes of it sent as fast as the socket takes them), then
 * after argv[5] ms prints one JSON line: how many got an answer (before their body ended), their
 * status codes and error codes, and how many are still open; then GET /v1/status on one more connection and prints
 * its answer. Stays alive (the connections held) until killed.
 */
const HOLD = `
const net = require('net');
const [sock, n, declared, send, wait] = process.argv.slice(1).map((x, i) => (i === 0 ? x : Number(x)));
const chunk = Buffer.alloc(64 * 1024, 0x20);
const held = [];
const answers = [];
for (let i = 0; i < n; i++) {
  const c = net.connect(sock);
  let got = '';
  // an answer (the first bytes are enough: status line and a short JSON error)
  c.on('data', (d) => { if (got === '') setTimeout(() => answers.push(got), 50); got += d; });
  c.on('error', () => undefined);
  c.on('connect', () => {
    c.write('POST /v1/call HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json\\r\\ncontent-length: ' + declared + '\\r\\n\\r\\n');
    let left = send;
    const pump = () => { while (left > 0) { const b = chunk.subarray(0, Math.min(left, chunk.length)); left -= b.length; if (!c.write(b)) return void c.once('drain', pump); } };
    pump();
  });
  held.push(c);
}
setTimeout(() => {
  const codes = answers.map((a) => { const m = /"code":"([A-Z_]+)"/.exec(a); return (a.split(' ')[1] || '?') + ' ' + (m ? m[1] : ''); });
  const http = require('http');
  const req = http.request({ socketPath: sock, path: '/v1/status' }, (res) => {
    let b = '';
    res.on('data', (d) => (b += d));
    res.on('end', () => console.log(JSON.stringify({ answered: answers.length, codes, open: held.filter((c) => !c.destroyed).length, extra: { status: res.statusCode, body: JSON.parse(b) } })));
  });
  req.on('error', (e) => console.log(JSON.stringify({ answered: answers.length, codes, open: held.filter((c) => !c.destroyed).length, extra: { error: e.code } })));
  req.end();
}, wait);
`;

/** Connects to the socket argv[1] and sends nothing; prints `{closedAfterMs}` once the daemon closes it, or `{closed: false}` after argv[2] ms. */
const IDLE = `
const c = require('net').connect(process.argv[1]);
const t0 = Date.now();
c.on('error', () => undefined);
c.on('close', () => { console.log(JSON.stringify({ closedAfterMs: Date.now() - t0 })); process.exit(0); });
setTimeout(() => { console.log(JSON.stringify({ closed: false })); process.exit(0); }, Number(process.argv[2]));
`;

/** The VmRSS of `pid` in bytes. */
function rssOf(pid: number): number {
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return Number(kb) * 1024;
}

/**
 * Issue 24 item 3: one user cannot take the root daemon down for everyone. Per-user connection
 * caps, idle timeouts, one budget for request bodies in flight and a per-user mount cap: a
 * user over a cap gets E_TOO_MANY naming it; another user's commands and reads in their own
 * mount still succeed. Real daemon, real users, real sockets.
 */
describe('per-user resource caps of the root daemon (issue 24 item 3)', { skip: usersAndOverlaySkip() }, () => {
  const CAP = 8;
  const IDLE_MS = 1500;
  const BUDGET = 32 * 1024 * 1024;
  let d: DaemonUsers;
  let home: string;
  let flood: TestUser; // opens connections and bodies
  let other: TestUser; // works in its own workspace meanwhile
  const mine = (who: TestUser, name: string): string => d.dirOf(who, name);
  const as = (who: TestUser, args: string[]) => d.as(who, args);
  const ok = (who: TestUser, args: string[]) => {
    const r = as(who, args);
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.json;
  };
  const socketOf = (who: TestUser): string => d.socketOf(who);
  /** Runs `script` as `who` in the background; resolves with its first line of output (JSON). */
  const background = (who: TestUser, script: string, args: (string | number)[]): Promise<any> => d.background(who, script, args);
  const stopHolders = () => d.stopBackground();
  /** The other user's work: a command, and a read of a file in its own mount (FUSE underneath). */
  const otherWorks = () => {
    assert.equal(ok(other, ['ls']).workspaces.length >= 1, true);
    const cat = other.run('cat', [join(mine(other, 'mnt'), 'a.txt')]);
    assert.equal(cat.status, 0, cat.stderr);
    assert.equal(cat.stdout, 'alpha\n');
    assert.equal(awcOk(home, ['daemon', 'status']).pid > 0, true, 'root sees the daemon running');
  };

  before(() => {
    d = daemonWithUsers({
      prefix: 'awc-caps-',
      config: {
        warmCli: 'off',
        userMaxConnections: CAP,
        userIdleTimeoutMs: IDLE_MS,
        userRequestTimeoutMs: 120_000,
        requestBodyBudgetBytes: BUDGET,
        userMaxMounts: 2,
      },
      userEnv: { AWC_NO_WARM: '1' },
    });
    home = d.home;
    [flood, other] = d.users as [TestUser, TestUser];
    const src = join(d.work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    for (const dir of ['mnt', 'mnt2', 'mnt3']) d.dirOf(other, dir, true);
    ok(other, ['fork', 'base', '--name', 'o1']);
    ok(other, ['mount', 'o1', mine(other, 'mnt')]);
  });

  after(async () => {
    await d?.close();
  });

  test('a user over userMaxConnections gets E_TOO_MANY naming the cap; another user works on', async () => {
    // CAP connections with requests in progress (bodies that never end), then one more
    const r = await background(flood, HOLD, [socketOf(flood), CAP, 100, 10, 1000]).catch(async (e) => {
      await stopHolders();
      throw e;
    });
    try {
      checkCapped(r);
    } finally {
      await stopHolders();
    }
    // the connections closed, the user is served again
    await new Promise((res) => setTimeout(res, 300));
    ok(flood, ['ls']);
  });

  /** Test 1's checks while the connections are held. */
  const checkCapped = (r: any) => {
    assert.equal(r.open, CAP, 'the held connections stay open (a request in progress is not idle)');
    assert.equal(r.extra.status, 429, JSON.stringify(r));
    assert.equal(r.extra.body.error.code, 'E_TOO_MANY');
    assert.equal(r.extra.body.error.retryable, true);
    assert.deepEqual(r.extra.body.error.details, { cap: 'userMaxConnections', value: CAP });
    assert.match(r.extra.body.error.message, /userMaxConnections: 8/);
    assert.match(r.extra.body.error.hint, /userMaxConnections \(8\)/, 'the hint names the limit that was hit');
    // the user's own commands are refused with the same retryable error
    const mineNow = as(flood, ['ls']);
    assert.equal(mineNow.err?.code, 'E_TOO_MANY', mineNow.stderr);
    assert.match(mineNow.err!.message, /userMaxConnections/);
    // nobody else notices
    otherWorks();
  };

  test('a connection with no request is closed after userIdleTimeoutMs', async () => {
    const r = await background(flood, IDLE, [socketOf(flood), 10_000]).finally(stopHolders);
    assert.ok(r.closedAfterMs !== undefined, `the idle connection was never closed: ${JSON.stringify(r)}`);
    assert.ok(r.closedAfterMs >= IDLE_MS - 100 && r.closedAfterMs < IDLE_MS + 3000, `closed after ${r.closedAfterMs} ms`);
  });

  test('many slow unfinished bodies: the daemon holds no more than the body budget, another user works on', async () => {
    const pid = awcOk(home, ['daemon', 'status']).pid as number;
    const before = rssOf(pid);
    // 48 connections each declaring the largest body (8 MiB) and sending 7 MiB of it, never the rest
    let r: any;
    let grown: number;
    try {
      r = await background(flood, HOLD, [socketOf(flood), 48, 8 * 1024 * 1024, 7 * 1024 * 1024, 4000]);
      grown = rssOf(pid) - before;
      otherWorks();
    } finally {
      await stopHolders();
    }
    assert.ok(grown < BUDGET + 48 * 1024 * 1024, `the daemon grew by ${(grown / 2 ** 20).toFixed(0)} MiB (budget ${BUDGET / 2 ** 20} MiB)`);
    // every answer is the retryable refusal: over the connection cap (429), or over the user's share of the budget (400)
    assert.ok(r.codes.length > 0, 'some were answered');
    for (const c of r.codes) assert.match(c, /^(400|429) E_TOO_MANY$/);
    assert.ok(r.codes.filter((c: string) => c === '400 E_TOO_MANY').length >= CAP - 1, `all admitted but one refused: ${r.codes}`);
    // its connections gone, its share of the budget is back: the user is served again
    await new Promise((res) => setTimeout(res, 300));
    ok(flood, ['ls']);
  });

  test('the (userMaxMounts+1)th mount of a user is E_TOO_MANY naming the cap; an unmount frees a place', () => {
    ok(other, ['fork', 'base', '--name', 'o2']);
    ok(other, ['fork', 'base', '--name', 'o3']);
    ok(other, ['mount', 'o2', mine(other, 'mnt2')]);
    const third = as(other, ['mount', 'o3', mine(other, 'mnt3')]);
    assert.equal(third.err?.code, 'E_TOO_MANY', third.stderr);
    assert.equal(third.err?.retryable, true);
    assert.match(third.err!.message, /userMaxMounts: 2/);
    assert.match(third.err!.hint, /userMaxMounts \(2\)/, 'the hint names the limit that was hit');
    // another user's mounts do not count against it
    d.dirOf(flood, 'mnt', true);
    ok(flood, ['fork', 'base', '--name', 'f1']);
    ok(flood, ['mount', 'f1', mine(flood, 'mnt')]);
    ok(other, ['unmount', 'o2']);
    ok(other, ['mount', 'o3', mine(other, 'mnt3')]);
    otherWorks();
  });
});

/** Opens argv[2] connections to the socket argv[1] that send nothing; after argv[3] ms prints `{open, closed}`; then stays alive. */
const IDLE_MANY = `
const net = require('net');
const [sock, n, wait] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
const held = [];
for (let i = 0; i < n; i++) {
  const c = net.connect(sock);
  c.on('error', () => undefined);
  held.push(c);
}
setTimeout(() => console.log(JSON.stringify({ open: held.filter((c) => !c.destroyed).length, closed: held.filter((c) => c.destroyed).length })), wait);
`;

/**
 * The descriptor reserve (fdReserve): a daemon whose limit less the reserve leaves room for
 * ~150 descriptors closes a user's connections past that, while another user's reads in its
 * mount (the content FUSE server opening packs and cache files) and root's commands go on.
 */
describe('descriptors held in reserve for the content FUSE server (issue 24 item 3)', { skip: usersAndOverlaySkip() }, () => {
  let d: DaemonUsers;
  let home: string;
  let flood: TestUser;
  let other: TestUser;
  let holder: ChildProcess | undefined;
  let mnt: string;
  const limit = Number(/Max open files\s+(\d+)/.exec(readFileSync('/proc/self/limits', 'utf8'))![1]);
  const ROOM = 150;
  const asOther = (args: string[]) => d.as(other, args);

  before(() => {
    d = daemonWithUsers({
      prefix: 'awc-fdres-',
      config: { userMaxConnections: 5000, userIdleTimeoutMs: 60_000, fdReserve: limit - ROOM },
      userEnv: { AWC_NO_WARM: '1' },
    });
    home = d.home;
    [flood, other] = d.users as [TestUser, TestUser];
    const src = join(d.work, 'src');
    mkdirSync(src);
    for (let i = 0; i < 50; i++) writeFileSync(join(src, `f${i}.txt`), `file ${i}\n`.repeat(100 + i));
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    mnt = d.dirOf(other, 'mnt', true);
    for (const args of [
      ['fork', 'base', '--name', 'o1'],
      ['mount', 'o1', mnt],
    ]) {
      const r = asOther(args);
      assert.equal(r.status, 0, r.stderr);
    }
  });

  after(async () => {
    holder?.kill('SIGKILL');
    await d?.close();
  });

  test('connections past the reserve are closed; the other user reads its mount, root works on', async () => {
    const pid = awcOk(home, ['daemon', 'status']).pid as number;
    assert.ok(readdirSync(`/proc/${pid}/fd`).length < ROOM - 20, 'the idle daemon is well under the room');
    holder = spawn('setpriv', asUserArgv(flood, [process.execPath, '-e', IDLE_MANY, d.socketOf(flood), '600', '1500']), {
      cwd: '/',
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const r = await new Promise<any>((resolve) => {
      let out = '';
      holder!.stdout!.on('data', (d) => {
        out += d;
        if (out.includes('\n')) resolve(JSON.parse(out));
      });
    });
    try {
      assert.ok(r.closed > 0, `some connections were closed: ${JSON.stringify(r)}`);
      assert.ok(r.open < ROOM, `the daemon kept fewer than the room: ${JSON.stringify(r)}`);
      assert.ok(readdirSync(`/proc/${pid}/fd`).length <= ROOM + 10, 'the daemon stays near the room');
      // every file of the other user's mount reads (cold: the content FUSE server opens what it needs)
      const cat = other.run('sh', ['-c', 'cat "$0"/f*.txt | wc -c', mnt]);
      assert.equal(cat.status, 0, cat.stderr);
      assert.ok(Number(cat.stdout.trim()) > 0);
      assert.equal(awcOk(home, ['daemon', 'status']).pid, pid, 'root sees the daemon running');
    } finally {
      holder.kill('SIGKILL');
    }
    await new Promise((res) => setTimeout(res, 500));
    assert.equal(asOther(['ls']).status, 0, 'the other user is served again');
  });
});
