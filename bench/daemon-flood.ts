#!/usr/bin/env node
/**
 * One user floods the root daemon while another works (issue 24 item 3; not a timed test).
 *
 *   node dist/bench/daemon-flood.js [--duration S] [--no-write]
 *
 * A root home allows two throw-away users. The worker forks and mounts a workspace of a
 * snapshot of many small files, then for `duration` seconds (default 60) reads files of its
 * mount one after another (each file once: every read is cold, served by the daemon's
 * content FUSE server) with a checkpoint through the daemon (`awc checkpoint`, the CLI in
 * its own process over the user's socket) after every 50 reads. It does this twice in one
 * run: alone, then while the flooder, for the same duration, opens connections to its own
 * socket as fast as it can (up to 5000 open at once; as each closes another is opened),
 * half of them idle, half sending an 8 MiB request body as fast as the daemon takes it,
 * never finishing it. Reported side by side: the worker's successes and p50 / p99 latency of
 * reads and checkpoints, the daemon's peak RSS and open descriptors, and what the flooder
 * got. Target: every read and checkpoint succeeds, p99 ≤ 2× the run without the flood.
 * Needs root, useradd, setpriv and /dev/fuse (overlay). Writes bench/DAEMON-FLOOD.md and
 * its section of docs/benchmarks.md (unless --no-write).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { CLI } from './common.js';
import { emitDocSection } from './doc-section.js';
import { fmtBytes, fmtMs, median, percentile } from './util.js';
import { awcOk } from '../test/helpers/cli.js';
import { daemonWithUsers } from '../test/helpers/daemon-users.js';
import { asUserArgv, type TestUser } from '../test/helpers/unprivileged.js';

const BEGIN = '<!-- daemon-flood:begin (bench/daemon-flood.ts writes this section; bench/DAEMON-FLOOD.md keeps it) -->';
const END = '<!-- daemon-flood:end -->';
const FILES_PER_DIR = 100;
const CHECKPOINT_EVERY = 50;

/** The worker, as its user: argv[1] is its JSON settings; prints `{read, checkpoint, failed, errors}` (latencies in ms). */
const WORKER = `
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const c = JSON.parse(process.argv[1]);
const ms = (t) => Number(process.hrtime.bigint() - t) / 1e6;
const out = { read: [], checkpoint: [], failed: { read: 0, checkpoint: 0 }, errors: [], wrapped: false };
const t0 = Date.now();
let i = 0;
while (Date.now() - t0 < c.durationMs) {
  if (i === c.count) out.wrapped = true;
  const k = c.first + (i % c.count);
  const f = path.join('d' + Math.floor(k / c.perDir), 'f' + k + '.txt');
  i++;
  let t = process.hrtime.bigint();
  try {
    fs.readFileSync(path.join(c.mnt, f));
    out.read.push(ms(t));
  } catch (e) {
    out.failed.read++;
    if (out.errors.length < 5) out.errors.push('read: ' + e.code);
  }
  if (i % c.every === 0) {
    fs.writeFileSync(path.join(c.mnt, 'edit.txt'), String(i));
    t = process.hrtime.bigint();
    const r = spawnSync(process.execPath, [c.cli, '--home', c.home, '--json', 'checkpoint', c.ws, '-m', 'edit ' + i], { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: c.userHome, AWC_NO_WARM: '1' } });
    if (r.status === 0) out.checkpoint.push(ms(t));
    else {
      out.failed.checkpoint++;
      if (out.errors.length < 5) out.errors.push('checkpoint: ' + r.stderr.trim().split('\\n').pop());
    }
  }
}
console.log(JSON.stringify(out));
`;

/** The flooder, as its user: argv[1] socket, argv[2] duration (ms), argv[3] most open at once; prints what it got. */
const FLOOD = `
const net = require('net');
const [sock, durationMs, maxOpen] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
const chunk = Buffer.alloc(64 * 1024, 0x20);
const BODY = 8 * 1024 * 1024;
const s = { opened: 0, refused429: 0, refusedBudget: 0, otherAnswers: 0, closedUnanswered: 0, connectErrors: 0, bodyBytesSent: 0 };
let open = 0;
const t0 = Date.now();
const live = () => Date.now() - t0 < durationMs;
function one(withBody) {
  open++;
  s.opened++;
  const c = net.connect(sock);
  let answer = '';
  let connected = false;
  c.on('error', () => undefined);
  c.on('data', (d) => { if (answer.length < 512) answer += d; });
  c.on('close', () => {
    open--;
    if (!connected) s.connectErrors++;
    else if (answer === '') s.closedUnanswered++;
    else if (/^HTTP\\/1\\.1 429/.test(answer)) s.refused429++;
    else if (/E_TOO_MANY/.test(answer)) s.refusedBudget++;
    else s.otherAnswers++;
    if (live()) setImmediate(fill);
  });
  c.on('connect', () => {
    connected = true;
    if (!withBody) return;
    c.write('POST /v1/call HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json\\r\\ncontent-length: ' + BODY + '\\r\\n\\r\\n');
    let left = BODY - 1;
    const pump = () => {
      while (left > 0 && live()) {
        const b = chunk.subarray(0, Math.min(left, chunk.length));
        left -= b.length;
        s.bodyBytesSent += b.length;
        if (!c.write(b)) return void c.once('drain', pump);
      }
    };
    pump();
  });
}
function fill() {
  while (open < maxOpen && live()) one(s.opened % 2 === 0);
}
fill();
setTimeout(() => { s.openAtEnd = open; console.log(JSON.stringify(s)); process.exit(0); }, durationMs);
`;

/** A plain CPU hog, as the flooder's user: spins for argv[1] ms and never contacts the daemon; prints its loop count. */
const HOG = `
const end = Date.now() + Number(process.argv[1]);
let n = 0;
while (Date.now() < end) n++;
console.log(JSON.stringify({ n }));
`;

interface WorkerResult {
  read: number[];
  checkpoint: number[];
  failed: { read: number; checkpoint: number };
  errors: string[];
  wrapped: boolean;
}

/** Runs `script` as `who` in the background; resolves with its one JSON line. */
function runAs(who: TestUser, script: string, args: string[]): Promise<any> {
  const child = spawn('setpriv', asUserArgv(who, [process.execPath, '-e', script, ...args]), {
    cwd: '/',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  return new Promise((resolve, reject) =>
    child.on('exit', (code) => {
      try {
        resolve(JSON.parse(out.trim().split('\n').pop()!));
      } catch {
        reject(new Error(`script as ${who.name} exited ${code}: ${out.slice(0, 500)}`));
      }
    }),
  );
}

/** Samples the daemon's RSS and open descriptors every 250 ms until stopped; the peaks. */
function sampler(pid: number): { stop(): { rss: number; fds: number } } {
  let rss = 0;
  let fds = 0;
  const take = () => {
    try {
      rss = Math.max(rss, Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024);
      fds = Math.max(fds, readdirSync(`/proc/${pid}/fd`).length);
    } catch {
      // gone: the run reports it
    }
  };
  take();
  const t = setInterval(take, 250);
  return {
    stop() {
      clearInterval(t);
      take();
      return { rss, fds };
    },
  };
}

function row(name: string, w: WorkerResult, peak: { rss: number; fds: number }, base?: WorkerResult): string {
  const reads = w.read.length + w.failed.read;
  const cps = w.checkpoint.length + w.failed.checkpoint;
  const ratio = (xs: number[], ys: number[] | undefined) =>
    ys && ys.length > 0 ? ` (${(percentile(xs, 99) / percentile(ys, 99)).toFixed(2)}×)` : '';
  return `| ${name} | ${w.read.length} / ${reads} | ${fmtMs(median(w.read))} | ${fmtMs(percentile(w.read, 99))}${ratio(w.read, base?.read)} | ${w.checkpoint.length} / ${cps} | ${fmtMs(median(w.checkpoint))} | ${fmtMs(percentile(w.checkpoint, 99))}${ratio(w.checkpoint, base?.checkpoint)} | ${fmtBytes(peak.rss)} | ${peak.fds} |`;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const durationS = args.includes('--duration') ? Number(args[args.indexOf('--duration') + 1]) : 60;
  const write = !args.includes('--no-write');
  // the set-up of the tests of the daemon's per-user caps (test/helpers/daemon-users.ts): a root home allowing two new users, its daemon started
  const d = daemonWithUsers({ prefix: 'awc-bench-flood-', userEnv: { AWC_NO_WARM: '1' } });
  const { work, home } = d;
  const [worker, flooder] = d.users as [TestUser, TestUser];
  const awc = (a: string[], who?: TestUser) => (who ? d.ok(who, a) : awcOk(home, a));
  try {
    // enough files that no run reads one twice (each read cold): one read per 4 ms at most
    const perRun = Math.max(1000, Math.ceil((durationS * 1000) / 4));
    const src = join(work, 'src');
    for (let i = 0; i < 3 * perRun; i++) {
      const rel = join(`d${Math.floor(i / FILES_PER_DIR)}`, `f${i}.txt`);
      if (i % FILES_PER_DIR === 0) mkdirSync(join(src, `d${i / FILES_PER_DIR}`), { recursive: true });
      writeFileSync(join(src, rel), `file ${i}\n`.repeat(1 + (i % 200)));
    }
    awc(['snapshot', 'import', src, '--name', 'base']);
    const pid = awc(['daemon', 'status']).pid as number;
    const mnt = d.dirOf(worker, 'mnt', true);
    awc(['fork', 'base', '--name', 'w'], worker);
    awc(['mount', 'w', mnt], worker);
    const settings = (half: number) =>
      JSON.stringify({
        cli: CLI,
        home,
        userHome: work,
        mnt,
        ws: 'w',
        every: CHECKPOINT_EVERY,
        durationMs: durationS * 1000,
        // the files by their numbers (a list of them would be over the kernel's 128 KiB for one argument)
        first: half * perRun,
        count: perRun,
        perDir: FILES_PER_DIR,
      });
    const load0 = loadavg();
    // alone
    let s = sampler(pid);
    const alone = (await runAs(worker, WORKER, [settings(0)])) as WorkerResult;
    const alonePeak = s.stop();
    // beside a CPU hog of the other user (no daemon contact): what sharing the cores alone costs
    s = sampler(pid);
    const [hogged] = await Promise.all([
      runAs(worker, WORKER, [settings(1)]) as Promise<WorkerResult>,
      runAs(flooder, HOG, [String(durationS * 1000)]),
    ]);
    const hogPeak = s.stop();
    // flooded: both at once for the same duration
    s = sampler(pid);
    const sock = d.socketOf(flooder);
    const [flooded, flood] = await Promise.all([
      runAs(worker, WORKER, [settings(2)]) as Promise<WorkerResult>,
      runAs(flooder, FLOOD, [sock, String(durationS * 1000), '5000']),
    ]);
    const floodPeak = s.stop();
    const alive = awc(['daemon', 'status']).pid === pid;
    const load1 = loadavg();
    const allOk = flooded.failed.read === 0 && flooded.failed.checkpoint === 0;
    const within = (k: 'read' | 'checkpoint') => percentile(flooded[k], 99) <= 2 * percentile(alone[k], 99);
    const met = allOk && within('read') && within('checkpoint');
    const share = (k: 'read' | 'checkpoint') => (percentile(flooded[k], 99) / percentile(hogged[k], 99)).toFixed(2);
    const text = [
      '## One user floods the daemon, another works (issue 24 item 3)',
      '',
      `Generated by \`npm run bench:daemon-flood\` (bench/daemon-flood.ts) on ${new Date().toISOString().slice(0, 10)}, runs of ${durationS} s each (\`--duration ${durationS}\`; the issue's figure is 60 s), default caps (\`userMaxConnections\` 64, \`userIdleTimeoutMs\` 30000, \`requestBodyBudgetBytes\` 128 MiB, \`fdReserve\` 1024; descriptor limit of the daemon ${readFileSync(`/proc/${pid}/limits`, 'utf8').match(/Max open files\s+(\d+)/)?.[1] ?? '?'}). One ordinary user (the worker) reads files of its own mounted workspace (overlay), each once, so every read is cold and served by the daemon's content FUSE server, and checkpoints the workspace through the daemon (\`awc checkpoint\`, the CLI in its own process over its socket) after every ${CHECKPOINT_EVERY} reads, as fast as it goes; first alone, then beside a process of another user that only spins on a core for the same time (never touching the daemon: what sharing the 2 cores alone costs), then while another ordinary user opens connections to its own socket of the same daemon as fast as it can (up to 5000 open at once, a new one as each closes; half idle, half sending an 8 MiB request body as fast as the daemon takes it and never finishing it). Machine: ${cpus().length} cores, load average ${load0[0].toFixed(2)} before and ${load1[0].toFixed(2)} after (the flooder's own process shares the cores with the worker and the daemon). Target: every read and checkpoint of the worker succeeds and their p99 is at most 2× the run without the flood.`,
      '',
      '| run | reads ok / all | read p50 | read p99 | checkpoints ok / all | checkpoint p50 | checkpoint p99 | daemon peak RSS | daemon peak open descriptors |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
      row('alone', alone, alonePeak),
      row('beside a CPU hog (no daemon contact)', hogged, hogPeak, alone),
      row('during the flood', flooded, floodPeak, alone),
      '',
      `The flooder in ${durationS} s: ${flood.opened} connections opened; ${flood.refused429} answered \`E_TOO_MANY\` (userMaxConnections), ${flood.refusedBudget} bodies answered \`E_TOO_MANY\` (the body budget), ${flood.closedUnanswered} closed by the daemon unanswered (idle timeout, or refused past the cap's waiting room), ${flood.otherAnswers} other answers, ${flood.connectErrors} connect errors (the socket's backlog full), ${fmtBytes(flood.bodyBytesSent)} of body bytes sent. The daemon ${alive ? 'kept answering `awc daemon status` after it' : 'did NOT answer `awc daemon status` after it'}. ${flooded.errors.length > 0 ? `Worker errors: ${flooded.errors.join('; ')}.` : 'The worker saw no error.'}${alone.wrapped || hogged.wrapped || flooded.wrapped ? ' (A run read all its files and started over: some reads were warm.)' : ''}`,
      '',
      `Result: ${met ? 'met' : 'NOT MET'} (all succeeded: ${allOk ? 'yes' : 'no'}; read p99 ${within('read') ? '≤' : '>'} 2×; checkpoint p99 ${within('checkpoint') ? '≤' : '>'} 2×). Against the run beside the CPU hog (the same cores shared, no daemon work): read p99 ${share('read')}×, checkpoint p99 ${share('checkpoint')}× — the part of the flood's cost that is the daemon's.`,
      '',
      'Run it: `npm run bench:daemon-flood` (`node dist/bench/daemon-flood.js [--duration S] [--no-write]`, root, useradd, setpriv, /dev/fuse).',
    ].join('\n');
    emitDocSection(text, write, 'DAEMON-FLOOD.md', BEGIN, END);
  } finally {
    await d.close();
  }
}

await main();
