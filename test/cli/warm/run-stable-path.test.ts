/**
 * Issue 11 part 2, `awc run <workspace> [--at PATH] -- <cmd…>` as root: the command sees the
 * mounted workspace at the stable path (by default where its snapshot was imported from, the
 * `awc.path` label) in a private mount namespace. Its writes land in the workspace, not in the
 * directory it is shown over. Its status, working directory and environment are passed through.
 * The host's mount table outside the namespace never changes.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { mountTable } from '../../helpers/mount-info.js';
import { commandOf } from '../../../src/cli/warm/front.js';
import { usersAndOverlaySkip } from '../../helpers/unprivileged.js';

describe('awc run: a workspace at its stable path (issue 11)', { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let src: string;
  let mnt: string;
  let ws: string;

  /** `awc run` with the built CLI in `cwd`; output as text. */
  const run = (args: string[], cwd = work, env: NodeJS.ProcessEnv = {}) => {
    const r = spawnSync(process.execPath, [CLI, '--home', home, 'run', ...args], {
      encoding: 'utf8',
      cwd,
      env: { ...process.env, ...env },
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };

  before(async () => {
    work = realpathSync(await makeTempDir('awc-run-'));
    home = join(work, 'home');
    src = join(work, 'project');
    mkdirSync(join(src, 'sub'), { recursive: true });
    writeFileSync(join(src, 'a.txt'), 'from the snapshot\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    awcOk(home, ['daemon', 'start']);
    ws = awcOk(home, ['fork', 'base', '--name', 'w1']).workspaces[0].id;
    mnt = join(work, 'mnt');
    mkdirSync(mnt);
    awcOk(home, ['mount', ws, mnt]);
    writeFileSync(join(mnt, 'a.txt'), 'edited in the workspace\n');
  });

  after(async () => {
    cleanupMounts(home, work);
    await removeTempDir(work);
  });

  it('the front finds the run word past global options whose value is "run" (where it adds --print-target)', () => {
    assert.deepEqual(commandOf(['--home', 'run', '--json', 'run', 'w1', '--', 'true']), { home: 'run', command: 'run', index: 3 });
  });

  it('a directory import records its path as the label awc.path', () => {
    const snaps = awcOk(home, ['snapshot', 'ls']).snapshots as { name: string; labels: Record<string, string> }[];
    assert.equal(snaps.find((s) => s.name === 'base')?.labels['awc.path'], src);
  });

  it('the command sees the workspace at the import path; its writes land in the workspace; the host mount table is unchanged', () => {
    const before = mountTable(work);
    const r = run([ws, '--', 'sh', '-c', 'pwd; cat a.txt; echo built > out.txt; echo "$AWC_RUN_PROBE"'], work, {
      AWC_RUN_PROBE: 'env passed',
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${src}\nedited in the workspace\nenv passed\n`);
    assert.equal(readFileSync(join(mnt, 'out.txt'), 'utf8'), 'built\n', 'the write is in the workspace');
    assert.equal(existsSync(join(src, 'out.txt')), false, 'the directory it was shown over is untouched');
    assert.equal(readFileSync(join(src, 'a.txt'), 'utf8'), 'from the snapshot\n');
    assert.deepEqual(mountTable(work), before, 'nothing was mounted outside the namespace');
  });

  it('started inside the mount, the command runs at the same place under the stable path; its status is passed through', () => {
    // both routes: a warm worker resolves it and this process starts it (the daemon runs), and all in process
    for (const env of [{ AWC_WARM_TRACE: '1' }, { AWC_NO_WARM: '1' }]) {
      const r = run([ws, '--', 'sh', '-c', 'pwd; exit 7'], join(mnt, 'sub'), env);
      assert.equal(r.code, 7, r.stderr);
      assert.equal(r.stdout, `${join(src, 'sub')}\n`);
      if (env.AWC_WARM_TRACE) assert.match(r.stderr, /warm worker \S+ runs the command/, 'resolved by a warm worker');
    }
    const killed = run([ws, '--', 'sh', '-c', 'kill -TERM $$']);
    assert.equal(killed.code, 128 + 15, 'a signal as a shell reports it');
  });

  it('--at shows it elsewhere; a missing stable path, an unmounted workspace and a command that cannot start are clear errors', () => {
    const other = join(work, 'elsewhere');
    mkdirSync(other);
    const r = run([ws, '--at', other, '--', 'cat', 'out.txt']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'built\n');
    const missing = awc(home, ['run', ws, '--at', join(work, 'nope'), '--', 'true']);
    assert.equal(errorOf(missing).code, 'E_USAGE');
    assert.match(errorOf(missing).hint, /mkdir -p/);
    assert.equal(errorOf(awc(home, ['run', ws, '--at', join(src, 'a.txt', 'x'), '--', 'true'])).code, 'E_USAGE', 'a path through a file');
    const idle = awcOk(home, ['fork', 'base', '--name', 'w2']).workspaces[0].id;
    assert.equal(errorOf(awc(home, ['run', idle, '--', 'true'])).code, 'E_NOT_MOUNTED');
    const nothing = run([ws, '--', 'no-such-command-here']);
    assert.equal(nothing.code, 127, 'as a shell says of a command it cannot find');
    // a command named like a variable is still the command (env(1) would take it for an assignment and print the environment)
    const named = run([ws, '--', 'X=1']);
    assert.deepEqual([named.code, named.stdout], [127, '']);
  });

  it('a long command does not keep another workspace mounted: its namespace holds no copy of it, so it is unmounted and mounted again', async () => {
    const other = awcOk(home, ['fork', 'base', '--name', 'w3']).workspaces[0].id;
    const mnt3 = join(work, 'mnt3');
    mkdirSync(mnt3);
    awcOk(home, ['mount', other, mnt3]);
    const content = join(home, 'host', 'content');
    // the command says its pid (its write lands in w1), then outlives the unmount and mount below
    const long = spawn(process.execPath, [CLI, '--home', home, 'run', ws, '--', 'sh', '-c', 'echo $$ > running; exec sleep 60'], {
      stdio: 'ignore',
    });
    const ended = new Promise((r) => long.once('exit', r));
    try {
      for (let i = 0; i < 300 && !existsSync(join(mnt, 'running')); i++) await new Promise((r) => setTimeout(r, 50));
      const pid = Number(readFileSync(join(mnt, 'running'), 'utf8'));
      const inside = readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
        .split('\n')
        .map((l) => l.split(' ')[4]);
      assert.ok(inside.includes(src), 'the workspace is at its stable path in the namespace');
      assert.ok(!inside.includes(mnt3), "no copy of the other workspace's mount");
      assert.ok(!inside.includes(mnt), "nor of this workspace's own mount (the stable path's bind holds it)");
      assert.ok(!inside.includes(content), "nor of the home's content plane");
      awcOk(home, ['unmount', other]);
      awcOk(home, ['mount', other, mnt3]);
      assert.equal(readFileSync(join(mnt3, 'a.txt'), 'utf8'), 'from the snapshot\n');
      awcOk(home, ['unmount', other]);
      assert.equal(readFileSync(join(src, 'a.txt'), 'utf8'), 'from the snapshot\n', 'outside, the stable path is the project');
      assert.equal(long.exitCode, null, 'the command still runs');
    } finally {
      long.kill('SIGTERM');
      await ended;
    }
  });
});
