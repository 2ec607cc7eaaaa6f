/**
 * Issue 11 part 2, `awc run` as an ordinary user through the root daemon: the command sees the
 * user's workspace at the stable path in a private mount namespace, as the user (their uid and
 * gid, no capabilities, no_new_privs), with their stdin, stdout and stderr; its writes land in
 * the workspace; the host's mount table outside never changes. And what a hostile user tries:
 * a stable path they do not own (root's /usr/sbin, /etc), one reached through a symlink,
 * someone else's workspace, a forged request. None of them mounts anything or runs anything.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readFileSync, realpathSync, rmdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { userSocketsDirOf } from '../../../src/config/config.js';
import { awcOk, CLI, cleanupMounts } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { mountTable } from '../../helpers/mount-info.js';
import { asUserArgv, createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

/** U's PATH: the system's directories (root's PATH may hold directories U cannot search: sh says 126 there). */
const USER_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

describe('awc run as an ordinary user of the root daemon (issue 11)', { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let u: TestUser;
  let project: string;
  let mnt: string;

  /** The CLI as U (`--home`), in `cwd`, with `input` on stdin. */
  const as = (args: string[], opts: { cwd?: string; input?: string; json?: boolean } = {}) => {
    const r = spawnSync('setpriv', asUserArgv(u, [process.execPath, CLI, '--home', home, ...(opts.json ? ['--json'] : []), ...args]), {
      cwd: opts.cwd ?? work,
      input: opts.input ?? '',
      encoding: 'utf8',
      env: { PATH: USER_PATH, AWC_RUN_PROBE: 'env passed' },
      timeout: 120_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  /** The error `awc --json …` printed last on stderr. */
  const errorOf = (r: { stderr: string }) =>
    JSON.parse(r.stderr.trim().split('\n').pop()!) as { code: string; message: string; hint?: string };
  /** A directory of U's. */
  const mine = (p: string): string => u.dir(p);

  before(async () => {
    work = realpathSync(await makeTempDir('awc-run-user-'));
    spawnSync('chmod', ['755', work]);
    u = createTestUser();
    home = join(work, 'home');
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: u.name, namespaces: ['default'] }] }));
    awcOk(home, ['daemon', 'start']);
    // U's project, imported by U: the snapshot records it as the stable path
    project = mine(join(work, 'project'));
    mine(join(project, 'sub'));
    writeFileSync(join(project, 'a.txt'), 'from the snapshot\n');
    chownSync(join(project, 'a.txt'), u.uid, u.gid);
    for (const args of [
      ['snapshot', 'import', project, '--name', 'base'],
      ['fork', 'base', '--name', 'w1'],
    ]) {
      const r = as(args);
      assert.equal(r.code, 0, r.stderr);
    }
    mnt = mine(join(work, 'mnt'));
    const m = as(['mount', 'w1', mnt]);
    assert.equal(m.code, 0, m.stderr);
    const e = u.run('sh', ['-c', 'echo edited in the workspace > "$1/a.txt"', 'sh', mnt]);
    assert.equal(e.status, 0, e.stderr);
  });

  after(async () => {
    cleanupMounts(home, work);
    u?.remove();
    await removeTempDir(work);
  });

  it('shows the workspace at the stable path, as the user with no privileges; writes land in the workspace; the host mount table is unchanged', () => {
    const before = mountTable(work);
    const script = [
      'pwd',
      'cat ../a.txt',
      'echo "$AWC_RUN_PROBE"',
      'id -u; id -g',
      'grep -E "^(NoNewPrivs|CapEff):" /proc/self/status | tr -s "\\t " " "',
      // the bind at the stable path keeps the workspace mount's nosuid,nodev
      `awk -v p="${project}" '$5 == p { print ($6 ~ /nosuid/ && $6 ~ /nodev/) ? "inert" : "NOT INERT" }' /proc/self/mountinfo`,
      // no copy of the workspace's own mount nor of the content plane: a long command keeps nothing else mounted
      `awk -v m="${mnt}" -v c="${join(home, 'host', 'content')}" '$5 == m || $5 == c { n++ } END { print n ? "copies: " n : "no copies" }' /proc/self/mountinfo`,
      'echo built > out.txt',
      'cat',
    ].join('; ');
    const r = as(['run', 'w1', '--', 'sh', '-c', script], { cwd: join(mnt, 'sub'), input: 'from stdin\n' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      r.stdout,
      [
        join(project, 'sub'),
        'edited in the workspace',
        'env passed',
        String(u.uid),
        String(u.gid),
        'CapEff: 0000000000000000',
        'NoNewPrivs: 1',
        'inert',
        'no copies',
        'from stdin',
        '',
      ].join('\n'),
    );
    assert.equal(readFileSync(join(mnt, 'sub', 'out.txt'), 'utf8'), 'built\n', 'the write is in the workspace');
    assert.equal(existsSync(join(project, 'sub', 'out.txt')), false, 'the directory it was shown over is untouched');
    assert.deepEqual(mountTable(work), before, 'nothing was mounted outside the namespace');
  });

  it("passes the command's status and a signal's through", () => {
    assert.equal(as(['run', 'w1', '--', 'sh', '-c', 'exit 7']).code, 7);
    assert.equal(as(['run', 'w1', '--', 'sh', '-c', 'kill -TERM $$']).code, 128 + 15);
    assert.equal(as(['run', 'w1', '--', 'no-such-command-here']).code, 127);
  });

  it('a SIGTERM to `awc run` reaches the command', async () => {
    const child = spawn(
      'setpriv',
      asUserArgv(u, [
        process.execPath,
        CLI,
        '--home',
        home,
        'run',
        'w1',
        '--',
        'sh',
        '-c',
        'trap "echo got TERM; exit 3" TERM; echo up; while :; do sleep 0.1; done',
      ]),
      { cwd: work, env: { PATH: USER_PATH }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      if (out === 'up\n') child.kill('SIGTERM');
    });
    const code = await new Promise<number | null>((ok) => child.once('exit', ok));
    assert.equal(out, 'up\ngot TERM\n');
    assert.equal(code, 3);
  });

  it('refuses a stable path the user does not own, or one reached through a symlink: nothing is mounted, nothing runs', () => {
    const marker = join(work, 'ran');
    mine(join(work, 'links'));
    symlinkSync('/etc', join(work, 'links', 'etc'));
    symlinkSync(project, join(work, 'links', 'proj'));
    for (const [at, code, said] of [
      ['/usr/sbin', 'E_PERMISSION', /is not yours \(owner uid 0\)/],
      ['/etc', 'E_PERMISSION', /is not yours/],
      [join(work, 'links', 'etc'), 'E_PERMISSION', /etc is a symlink/],
      [join(work, 'links', 'proj', 'sub'), 'E_PERMISSION', /proj is a symlink/],
      [join(project, 'a.txt'), 'E_USAGE', /not a directory/],
    ] as const) {
      const before = mountTable(work);
      const r = as(['run', 'w1', '--at', at, '--', 'sh', '-c', `touch ${marker}`], { json: true });
      assert.notEqual(r.code, 0, at);
      assert.equal(errorOf(r).code, code, `${at}: ${r.stderr}`);
      assert.match(errorOf(r).message, said);
      assert.ok(errorOf(r).hint, 'with a hint');
      assert.equal(existsSync(marker), false, `${at}: the command never ran`);
      assert.deepEqual(mountTable(work), before, at);
    }
  });

  it("refuses another user's workspace, and a forged request (a variable name with '=', a NUL)", () => {
    const rootWs = awcOk(home, ['fork', 'base', '--name', 'roots']).workspaces[0].id;
    const rootMnt = join(work, 'root-mnt');
    mkdirSync(rootMnt);
    awcOk(home, ['mount', rootWs, rootMnt]);
    const r = as(['run', rootWs, '--at', mine(join(work, 'mine')), '--', 'true'], { json: true });
    assert.equal(errorOf(r).code, 'E_PERMISSION', r.stderr);
    // the request itself, as U on U's socket
    const socket = join(userSocketsDirOf({ home }), `${u.uid}.sock`);
    const post = (body: object) =>
      u.node(
        `const http = require('http'); const req = http.request({ socketPath: ${JSON.stringify(socket)}, method: 'POST', path: '/v1/run', headers: { 'content-type': 'application/json' } }, (res) => { let s = ''; res.on('data', (d) => (s += d)); res.on('end', () => console.log(s)); }); req.end(process.argv[1].replace('@BIG@', 'x'.repeat(200000)));`,
        JSON.stringify(body),
      );
    const base = { namespace: 'default', id: 'abcdefgh12', ref: 'w1', cwd: work, command: 'true', args: [], env: {}, umask: 18 };
    assert.equal(post({ ...base, env: { 'LD_PRELOAD=x': 'y' } }).error.code, 'E_USAGE');
    assert.equal(post({ ...base, args: ['a\0b'] }).error.code, 'E_USAGE');
    assert.equal(post({ ...base, id: 'short' }).error.code, 'E_USAGE');
    assert.equal(post({ ...base, args: ['@BIG@'] }).error.code, 'E_USAGE', 'an argument execve would refuse');
    assert.equal(post({ ...base, umask: 0o1777 }).error.code, 'E_USAGE');
    // at most MAX_RUNS_PER_USER (16) of one user's runs at once
    const burst = u.node(
      `const http = require('http'); const out = []; let n = 0;
       for (let i = 0; i < 17; i++) {
         const body = JSON.stringify({ ...JSON.parse(process.argv[1]), id: 'burst' + String(i).padStart(4, '0'), command: 'sleep', args: ['3'] });
         const req = http.request({ socketPath: ${JSON.stringify(socket)}, method: 'POST', path: '/v1/run', headers: { 'content-type': 'application/json' } }, (res) => {
           let s = ''; res.on('data', (d) => (s += d)); res.on('end', () => { out.push(JSON.parse(s)); if (++n === 17) console.log(JSON.stringify(out)); });
         });
         req.end(body);
       }`,
      JSON.stringify(base),
    ) as { status?: number; error?: { code: string } }[];
    assert.equal(burst.filter((x) => x.error?.code === 'E_TOO_MANY').length, 1, JSON.stringify(burst));
    assert.equal(burst.filter((x) => x.status === 0).length, 16);
  });

  it('refuses a sandboxed caller (no_new_privs, as Landlock and seccomp need; a tracer) and one running a setuid program', () => {
    const nnp = spawnSync(
      'setpriv',
      ['--no-new-privs', ...asUserArgv(u, [process.execPath, CLI, '--home', home, '--json', 'run', 'w1', '--', 'true'])],
      {
        cwd: work,
        encoding: 'utf8',
        env: { PATH: USER_PATH },
      },
    );
    assert.equal(errorOf(nnp).code, 'E_PERMISSION', nnp.stderr);
    assert.match(errorOf(nnp).message, /confined \(NoNewPrivs\)/);
    if (spawnSync('sh', ['-c', 'command -v strace'], { stdio: 'ignore' }).status === 0) {
      const traced = spawnSync(
        'strace',
        [
          '-f',
          '-o',
          '/dev/null',
          'setpriv',
          ...asUserArgv(u, [process.execPath, CLI, '--home', home, '--json', 'run', 'w1', '--', 'true']),
        ],
        { cwd: work, encoding: 'utf8', env: { PATH: USER_PATH } },
      );
      assert.equal(errorOf(traced).code, 'E_PERMISSION', traced.stderr);
      assert.match(errorOf(traced).message, /TracerPid/);
    }
  });

  it("puts the command into the caller's cgroup (a pids cgroup of its own, v1 or v2)", (t) => {
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' '));
    const v2 = mounts.find((f) => f[f.indexOf('-') + 1] === 'cgroup2')?.[4];
    const v1 = mounts.find((f) => f[f.indexOf('-') + 1] === 'cgroup' && (f[f.indexOf('-') + 3] ?? '').split(',').includes('pids'))?.[4];
    const base = v1 ?? v2;
    if (!base) return t.skip('no pids cgroup hierarchy mounted');
    const name = `awc-run-test-${process.pid}`;
    const dir = join(base, name);
    try {
      mkdirSync(dir);
    } catch (err) {
      return t.skip(`cannot make a cgroup here: ${String(err)}`);
    }
    try {
      const argv = asUserArgv(u, [process.execPath, CLI, '--home', home, 'run', 'w1', '--', 'cat', '/proc/self/cgroup']);
      const r = spawnSync('sh', ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec setpriv "$@"', 'sh', dir, ...argv], {
        cwd: work,
        encoding: 'utf8',
        env: { PATH: USER_PATH },
      });
      if (r.status !== 0 && /cgroup\.procs/.test(r.stderr)) return t.skip(`cannot join a cgroup here: ${r.stderr}`);
      assert.equal(r.status, 0, r.stderr);
      const line = r.stdout.split('\n').find((l) => (v1 ? /^\d+:pids:/.test(l) : l.startsWith('0::')));
      assert.equal(line?.split(':')[2], `/${name}`, r.stdout);
    } finally {
      for (let i = 0; i < 50; i++) {
        try {
          rmdirSync(dir);
          break;
        } catch {
          spawnSync('sleep', ['0.1']); // the command's processes leave it as they exit
        }
      }
    }
  });

  it("gives the command the caller's resource limits, and says nothing of places the caller cannot reach", () => {
    const r = spawnSync(
      'prlimit',
      [
        '--nofile=64:64',
        '--',
        'setpriv',
        ...asUserArgv(u, [process.execPath, CLI, '--home', home, 'run', 'w1', '--', 'sh', '-c', 'ulimit -n; ulimit -Hn']),
      ],
      {
        cwd: work,
        encoding: 'utf8',
        env: { PATH: USER_PATH },
      },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, '64\n64\n');
    // a 0700 directory of root's: what is inside it (a directory, a file, nothing) all looks the same
    const hidden = join(work, 'hidden');
    mkdirSync(join(hidden, 'sub'), { recursive: true, mode: 0o700 });
    spawnSync('chmod', ['700', hidden]);
    writeFileSync(join(hidden, 'f'), 'x');
    const said = ['sub', 'f', 'nope'].map((n) => {
      const e = errorOf(as(['run', 'w1', '--at', join(hidden, n), '--', 'true'], { json: true }));
      return [e.code, e.message.replace(join(hidden, n), '<path>')];
    });
    assert.deepEqual(
      said,
      Array(3).fill(['E_PERMISSION', '<path> cannot be reached by you (a directory on the way is not searchable for uid ' + u.uid + ')']),
    );
  });
});
