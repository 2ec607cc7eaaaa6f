/**
 * Warm CLI workers (issue 10 item 7; docs/explanation/cli-latency.md "Warm workers"): with the
 * host daemon running, the built CLI's front hands each command to a worker the daemon forked
 * ahead, as the caller; the result must be what the command does in the caller's own process:
 * output, exit status, stdin, working directory, signals, a closed pipe. A caller the worker
 * cannot stand in for exactly (another mount namespace, no_new_privs) runs its command itself;
 * so does every caller when no daemon runs. A worker inherits none of the daemon's descriptors
 * and takes the caller's resource limits; an ordinary user's worker runs as them.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ERROR_CODES } from '../../../src/core/errors.js';
import { EXIT_DAEMON_UNAVAILABLE } from '../../../src/cli/warm/front.js';
import { BUILD_ID_FILE, cliSocketOf, frame, FrameReader, HANDSHAKE_MS, userCliSocketOf } from '../../../src/daemon/warm/warm-protocol.js';
import { pathsOf } from '../../../src/config/config.js';
import { awcOk, CLI, cleanupMounts } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

const TRACE = { AWC_WARM_TRACE: '1' };

/**
 * `awc ls`'s table with its AGE column masked: two runs seconds apart list the same workspaces
 * at other ages (`9s`, `10s`), and so with other column widths; runs of spaces count as one.
 */
const ageless = (stdout: string): string => stdout.replace(/ +/g, ' ').replace(/ \d+[smhd] /g, ' <age> ');

describe('warm CLI workers of the host daemon', { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let u: TestUser;
  let cliSocket: string;

  /** The built CLI on the home (no --home: AWC_HOME, as a user's shell sets it), in `cwd`. */
  const run = (args: string[], opts: { env?: NodeJS.ProcessEnv; input?: string; cwd?: string; prefix?: string[] } = {}) => {
    const [cmd, ...pre] = opts.prefix ?? [process.execPath];
    const r = spawnSync(cmd!, [...pre, ...(opts.prefix ? [process.execPath] : []), CLI, ...args], {
      encoding: 'utf8',
      cwd: opts.cwd ?? work,
      input: opts.input ?? '',
      env: { PATH: process.env.PATH, AWC_HOME: home, ...opts.env },
      timeout: 60_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const warmRan = (stderr: string) => stderr.includes('runs the command');
  /** The same command warm and in its own process: same status, stdout and stderr (without the trace line). */
  const same = (args: string[], opts: { input?: string } = {}) => {
    const warm = run(args, { ...opts, env: TRACE });
    assert.ok(warmRan(warm.stderr), `${args.join(' ')} went to a warm worker: ${warm.stderr}`);
    const cold = run(args, { ...opts, env: { AWC_NO_WARM: '1' } });
    const strip = (s: string) => s.replace(/^awc: warm worker .* runs the command\n/m, '');
    assert.deepEqual(
      { code: warm.code, stdout: ageless(warm.stdout), stderr: strip(warm.stderr) },
      { ...cold, stdout: ageless(cold.stdout) },
      args.join(' '),
    );
    return warm;
  };
  /** Starts `awc hook claude` waiting for its stdin (kept open); resolves with the worker that runs it. */
  const waitingHook = async (cwd: string, extra: NodeJS.ProcessEnv = {}, shell = ''): Promise<{ child: ChildProcess; worker: number }> => {
    const child = spawn('sh', ['-c', `${shell} exec "$@"`, 'sh', process.execPath, CLI, 'hook', 'claude'], {
      cwd,
      env: { PATH: process.env.PATH, AWC_HOME: home, ...TRACE, ...extra },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    for (let i = 0; i < 1200 && !warmRan(err); i++) await new Promise((r) => setTimeout(r, 25));
    assert.ok(warmRan(err), `the hook went to a warm worker: ${err}`);
    // the worker running it is the one whose working directory is the caller's
    const worker = workers().find((pid) => readlinkSync(`/proc/${pid}/cwd`) === cwd);
    assert.ok(worker, 'a worker in the caller directory');
    return { child, worker };
  };
  const workers = (): number[] =>
    readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .map(Number)
      .filter((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('warm-worker.js');
        } catch {
          return false;
        }
      });
  const exitOf = (child: ChildProcess) =>
    new Promise<number | null>((r) => child.once('exit', (code, sig) => r(code ?? (sig ? -1 : null))));
  const metricCount = (uid: number): number => {
    const m = new RegExp(`awc_warm_cli_commands_total\\{uid="${uid}"\\} (\\d+)`).exec(
      run(['metrics'], { env: { AWC_NO_WARM: '1' } }).stdout,
    );
    return m ? Number(m[1]) : 0;
  };

  /** Sends a raw request (`H`) to the root worker socket; resolves with the first frame that comes back, then closes the connection (never answering `G`). */
  const firstAnswer = (req: { build: string; argv: string[]; env: Record<string, string | undefined> }) =>
    new Promise<{ type: string; payload: string }>((resolve, reject) => {
      const c = connect(cliSocket);
      const reader = new FrameReader();
      c.on('error', reject);
      c.on('connect', () => c.write(frame('H', JSON.stringify({ v: 1, ...req, cwd: work, umask: 0o22, tty: [false, false, false] }))));
      c.on('data', (d: Buffer) => {
        for (const f of reader.push(d)) {
          c.destroy();
          resolve({ type: f.type, payload: f.payload.toString() });
        }
      });
    });

  before(async () => {
    work = realpathSync(await makeTempDir('awc-warm-'));
    chmodSync(work, 0o755);
    home = join(work, 'home');
    u = createTestUser();
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: u.name, namespaces: ['default'] }], warmWorkers: 3 }));
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    const bigSrc = join(work, 'big');
    mkdirSync(bigSrc);
    writeFileSync(join(bigSrc, 'b.bin'), Buffer.alloc(1 << 20, 7));
    awcOk(home, ['snapshot', 'import', bigSrc, '--name', 'big']);
    awcOk(home, ['daemon', 'start']);
    cliSocket = cliSocketOf(pathsOf({ home }).socket);
  });

  after(async () => {
    cleanupMounts(home, work);
    u?.remove();
    await removeTempDir(work);
  });

  it('serves root on a 0600 socket beside the API socket; ls, show, fork and errors are what they are in process', () => {
    const st = statSync(cliSocket);
    assert.ok(st.isSocket());
    assert.equal(st.mode & 0o777, 0o600);
    assert.equal(st.uid, 0);
    const before = metricCount(0);
    same(['ls']);
    same(['--json', 'snapshot', 'ls']);
    same(['show', 'base']);
    same(['show', 'nothing']); // E_NOT_FOUND: status 3, the message on stderr
    same(['--json', 'show', 'nothing']);
    same(['fork', 'base', '--bogus']); // E_USAGE from commander
    const forked = run(['--json', 'fork', 'base', '--name', 'warm-1'], { env: TRACE });
    assert.equal(forked.code, 0, forked.stderr);
    assert.ok(warmRan(forked.stderr));
    assert.equal(JSON.parse(forked.stdout).workspaces[0].name, 'warm-1');
    assert.ok(metricCount(0) >= before + 7, 'each command was handed to a worker');
    assert.equal(EXIT_DAEMON_UNAVAILABLE, ERROR_CODES.E_DAEMON_UNAVAILABLE.exit);
  });

  it('keeps warmWorkers (3 here) loaded for the daemon user', async () => {
    const daemonPid = Number(readFileSync(join(home, 'host', 'awcd.pid'), 'utf8').trim());
    const ppid = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
    const own = () => workers().filter((pid) => ppid(pid) === daemonPid).length;
    for (let i = 0; i < 400 && own() < 3; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(own(), 3, 'three workers of this daemon');
  });

  it('runs in the caller directory (a relative mount path) and with its environment', () => {
    const dir = join(work, 'cwd-a');
    mkdirSync(dir);
    const m = run(['mount', 'warm-1', 'mnt'], { cwd: dir, env: TRACE });
    assert.equal(m.code, 0, m.stderr);
    assert.ok(warmRan(m.stderr));
    assert.equal(readFileSync(join(dir, 'mnt', 'a.txt'), 'utf8'), 'a\n');
    const um = run(['unmount', './mnt', '--discard'], { cwd: dir, env: TRACE });
    assert.equal(um.code, 0, um.stderr);
    assert.ok(warmRan(um.stderr));
    // AWC_NAMESPACE from the caller's environment
    const other = run(['--json', 'ls'], { env: { ...TRACE, AWC_NAMESPACE: 'elsewhere' } });
    assert.deepEqual(JSON.parse(other.stdout).workspaces, []);
  });

  it('stdin reaches the command; a closed stdout ends it with 141; a signal reaches it', async () => {
    const hook = same(['hook', 'claude'], { input: '{}' });
    assert.match(hook.stderr, /E_HOOK_INPUT: the hook input has no "hook_event_name"/, 'the JSON was read from stdin');
    // a tar larger than a pipe holds, read 1000 bytes of
    const pipe = spawnSync(
      'bash',
      ['-c', `'${process.execPath}' '${CLI}' export big --tar - | head -c 1000 >/dev/null; echo "\${PIPESTATUS[0]}"`],
      {
        encoding: 'utf8',
        env: { PATH: process.env.PATH, AWC_HOME: home, HOME: work },
      },
    );
    assert.equal(pipe.stdout, '141\n', `status of export --tar - | head -c 1000 (${pipe.stderr})`);
    assert.equal(pipe.stderr, '', 'nothing said');
    assert.ok(metricCount(0) > 0);
    const dir = join(work, 'cwd-sig');
    mkdirSync(dir);
    const { child, worker } = await waitingHook(dir);
    const done = exitOf(child);
    child.kill('SIGINT');
    assert.equal(await done, 130, 'as a SIGINT ends it in process');
    for (let i = 0; i < 600 && existsPid(worker); i++) await new Promise((r) => setTimeout(r, 25));
    assert.ok(!existsPid(worker), 'the worker ended with the command');
  });

  it('a worker holds none of the daemon descriptors, takes the caller limits and umask, and ending it mid-command is an error, not a silent success', async () => {
    const dir = join(work, 'cwd-fd');
    mkdirSync(dir);
    const { child, worker } = await waitingHook(dir, {}, 'ulimit -n 300; umask 027;');
    assert.match(readFileSync(`/proc/${worker}/status`, 'utf8'), /^Umask:\s+0027$/m, 'the caller umask');
    const fds = readdirSync(`/proc/${worker}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${worker}/fd/${fd}`);
      } catch {
        return '';
      }
    });
    assert.ok(!fds.some((l) => l === '/dev/fuse'), `no FUSE connection: ${fds.join(' ')}`);
    assert.ok(!fds.some((l) => l.startsWith(home)), `nothing of the home: ${fds.join(' ')}`);
    assert.match(readFileSync(`/proc/${worker}/limits`, 'utf8'), /Max open files\s+300\s+300/);
    const done = exitOf(child);
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    process.kill(worker, 'SIGKILL');
    assert.equal(await done, EXIT_DAEMON_UNAVAILABLE);
    assert.match(err, /E_DAEMON_UNAVAILABLE: the host daemon's warm worker running this command went away/);
  });

  it('a caller in another mount namespace, with no_new_privs, or traced runs its command itself', () => {
    const traced = spawnSync('sh', ['-c', 'command -v strace'], { stdio: 'ignore' }).status === 0;
    for (const [prefix, why] of [
      [['unshare', '-m'], 'mnt namespace'],
      [['setpriv', '--no-new-privs'], 'NoNewPrivs'],
      ...(traced ? ([[['strace', '-f', '-o', '/dev/null'], 'a tracer \\(TracerPid\\)']] as const) : []),
    ] as const) {
      const r = run(['ls'], { env: TRACE, prefix: [...prefix] });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, new RegExp(`declined: ${why}`));
      assert.ok(!warmRan(r.stderr));
    }
  });

  it('a request of another build is declined before anything runs', async () => {
    const f = await firstAnswer({ build: 'not-this-build', argv: ['fork', 'base'], env: {} });
    const reply = `${f.type}:${f.payload}`;
    assert.equal(reply, 'D:another build');
  });

  it('a daemon that does not answer (stopped) never hangs the CLI: after HANDSHAKE_MS the command runs in process', () => {
    const pid = Number(readFileSync(pathsOf({ home }).pidFile, 'utf8').trim());
    assert.ok(pid > 0, 'the daemon pid');
    const cold = run(['ls'], { env: { AWC_NO_WARM: '1' } });
    process.kill(pid, 'SIGSTOP');
    try {
      const t0 = Date.now();
      const r = run(['ls'], { env: TRACE });
      assert.match(r.stderr, new RegExp(`no warm worker answered in ${HANDSHAKE_MS} ms`));
      assert.ok(!warmRan(r.stderr));
      assert.deepEqual([r.code, ageless(r.stdout)], [cold.code, ageless(cold.stdout)], 'the same answer, from this process');
      assert.ok(Date.now() - t0 >= HANDSHAKE_MS, 'it waited for the worker first');
    } finally {
      process.kill(pid, 'SIGCONT');
    }
  });

  it('a worker that accepted runs nothing until the front says go: a front that left after A leaves no trace', async () => {
    const build = readFileSync(join(dirname(CLI), '..', '..', '..', 'cli', BUILD_ID_FILE), 'utf8').trim();
    const name = 'never-forked';
    // gone after the first answer, without G
    const first = (await firstAnswer({ build, argv: ['fork', 'base', '--name', name], env: { PATH: process.env.PATH, AWC_HOME: home } }))
      .type;
    assert.equal(first, 'A', 'the worker accepted');
    await new Promise((r) => setTimeout(r, 1500));
    const ls = JSON.parse(run(['--json', 'ls'], { env: { AWC_NO_WARM: '1' } }).stdout) as { workspaces: { name: string | null }[] };
    assert.equal(
      ls.workspaces.some((w) => w.name === name),
      false,
      'no workspace was forked',
    );
  });

  it('an ordinary user gets a worker of their own, running as them; without the daemon every command runs in process', () => {
    const sock = userCliSocketOf(pathsOf({ home }).userSockets, u.uid);
    const st = statSync(sock);
    assert.equal(st.uid, u.uid);
    assert.equal(st.mode & 0o777, 0o600);
    const dir = join(work, 'cwd-user');
    mkdirSync(dir);
    chownSync(dir, u.uid, u.gid);
    const asUser = ['setpriv', '--reuid', String(u.uid), '--regid', String(u.gid), '--init-groups', '--'];
    const before = metricCount(u.uid);
    const forked = run(['--home', home, '--json', 'fork', 'base', '--name', 'users-own'], { cwd: dir, env: TRACE, prefix: asUser });
    assert.equal(forked.code, 0, forked.stderr);
    assert.ok(warmRan(forked.stderr), forked.stderr);
    assert.equal(metricCount(u.uid), before + 1);
    mkdirSync(join(dir, 'ws'));
    chownSync(join(dir, 'ws'), u.uid, u.gid);
    const mounted = run(['--home', home, 'mount', 'users-own', 'ws'], { cwd: dir, env: TRACE, prefix: asUser });
    assert.equal(mounted.code, 0, mounted.stderr);
    assert.equal(statSync(join(dir, 'ws', 'a.txt')).uid, u.uid, 'the workspace is theirs');
    const um = run(['--home', home, 'unmount', './ws', '--discard'], { cwd: dir, env: TRACE, prefix: asUser });
    assert.equal(um.code, 0, um.stderr);
    assert.ok(warmRan(um.stderr));
    // root cannot use a user's worker (nor the other way round: the socket is 0600)
    const other = spawnSync('setpriv', [
      '--reuid',
      String(u.uid),
      '--regid',
      String(u.gid),
      '--init-groups',
      '--',
      'test',
      '-w',
      cliSocket,
    ]);
    assert.notEqual(other.status, 0, 'the user cannot write to root warm socket');
    awcOk(home, ['daemon', 'stop']);
    const cold = run(['--json', 'ls'], { env: TRACE });
    assert.equal(cold.code, 0, cold.stderr);
    assert.ok(!warmRan(cold.stderr));
    assert.ok(JSON.parse(cold.stdout).workspaces.length > 0);
  });
});

function existsPid(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
