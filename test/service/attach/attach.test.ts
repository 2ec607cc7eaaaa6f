/**
 * `awc env-key`, `awc prepare`, `awc attach` / `awc detach` and `awc init
 * cursor|codex|conductor` (src/service/attach/env-key.ts, attach.ts, init-tool.ts;
 * docs/explanation/attach.md). Real git worktrees, the real overlay driver through the host
 * daemon, real bind mounts; each tool's generated setup run the way the tool runs it (its
 * working directory and environment variables, from its documentation). One home.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse as parseToml } from 'smol-toml';
import { envKey } from '../../../src/service/attach/env-key.js';
import { initTool } from '../../../src/service/attach/init-tool.js';
import { attach, detach } from '../../../src/service/attach/attach.js';
import type { Awc } from '../../../src/service/workspace/awc.js';
import { openAwc } from '../../../src/cli/remote/open-awc.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc, CLI, cleanupMounts, errorOf, killDaemon } from '../../helpers/cli.js';
import { readMountInfo } from '../../../src/host/mount/mount-table.js';
import { attachMountsDir, refuseInsideHome } from '../../../src/host/mount/mount-commands.js';

const git = (cwd: string, ...args: string[]): string =>
  execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', ...args], { cwd, encoding: 'utf8' });

describe('awc attach', () => {
  let work: string;
  let home: string;
  let repo: string;
  /** The service in this process (the CLI's way: overlay mounts through the host daemon), for what needs no CLI. */
  let svc: Awc;
  const ok = (args: string[]): any => {
    const r = awc(home, args);
    assert.equal(r.code, 0, `awc ${args.join(' ')}: ${r.stderr}`);
    return r.json;
  };
  const worktree = (name: string): string => {
    const wt = join(work, name);
    git(repo, 'worktree', 'add', '-q', '-b', name, wt);
    return wt;
  };
  const mountOf = (path: string) => readMountInfo().find((m) => m.mountPoint === path);
  /** The per-mount options (field 6 of /proc/self/mountinfo) of the mount at `path`. */
  const mountOptions = (path: string): string | undefined =>
    readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .find((f) => f[4] === path)?.[5];

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-attach-'));
    home = join(work, 'home');
    svc = await openAwc({ home });
    repo = join(work, 'repo');
    mkdirSync(join(repo, 'node_modules', 'dep'), { recursive: true });
    writeFileSync(join(repo, 'package.json'), '{"name":"app","version":"1.0.0","dependencies":{"dep":"1.0.0"}}\n');
    writeFileSync(
      join(repo, 'package-lock.json'),
      '{"name":"app","lockfileVersion":3,"packages":{"node_modules/dep":{"version":"1.0.0"}}}\n',
    );
    writeFileSync(join(repo, '.gitignore'), 'node_modules/\n');
    writeFileSync(join(repo, 'index.js'), "console.log(require('dep'));\n");
    // what `npm ci` would have installed
    writeFileSync(join(repo, 'node_modules', 'dep', 'package.json'), '{"name":"dep","version":"1.0.0","main":"index.js"}\n');
    writeFileSync(join(repo, 'node_modules', 'dep', 'index.js'), "module.exports = 'dep says hi';\n");
    git(repo, 'init', '-q', '-b', 'main');
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', 'app');
  });
  after(async () => {
    await svc.close();
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('a workspace may be mounted inside the home only as a direct child of host/attach/mnt', () => {
    const mnt = attachMountsDir('/h');
    assert.equal(mnt, '/h/host/attach/mnt');
    refuseInsideHome('/h/host/attach/mnt/ws_1', '/h');
    refuseInsideHome('/elsewhere/x', '/h');
    for (const t of ['/h', '/h/objects', '/h/host/attach/mnt', '/h/host/attach/mnt/ws_1/x', '/h/host/attach/mnt/../../catalog.sqlite'])
      assert.throws(
        () => refuseInsideHome(t, '/h'),
        (e: any) => e.code === 'E_USAGE',
        t,
      );
  });

  it('env key: stable across the order files were made, changed by a lockfile or the runtime', async () => {
    const a = join(work, 'ek-a');
    const b = join(work, 'ek-b');
    mkdirSync(join(a, 'py'), { recursive: true });
    mkdirSync(join(b, 'py'), { recursive: true });
    writeFileSync(join(a, 'package-lock.json'), 'L1');
    writeFileSync(join(a, 'py', 'requirements.txt'), 'R1');
    writeFileSync(join(b, 'py', 'requirements.txt'), 'R1');
    writeFileSync(join(b, 'package-lock.json'), 'L1');
    const ka = await envKey(a);
    assert.equal((await envKey(b)).key, ka.key);
    assert.deepEqual(
      ka.lockfiles.map((l) => l.path),
      ['package-lock.json', 'py/requirements.txt'],
    );
    assert.deepEqual(ka.envDirs, ['node_modules', 'py/.venv', 'py/venv']);
    assert.match(ka.key, /^env1-[0-9a-f]{32}$/);
    // a lockfile's content, a new lockfile
    writeFileSync(join(b, 'package-lock.json'), 'L2');
    assert.notEqual((await envKey(b)).key, ka.key);
    writeFileSync(join(b, 'package-lock.json'), 'L1');
    writeFileSync(join(b, 'yarn.lock'), 'Y');
    assert.notEqual((await envKey(b)).key, ka.key);
    rmSync(join(b, 'yarn.lock'));
    assert.equal((await envKey(b)).key, ka.key);
    // another node on PATH (another major version): another key
    const fake = join(work, 'fake-node');
    mkdirSync(fake);
    writeFileSync(join(fake, 'node'), '#!/bin/sh\necho v99.1.0\n');
    chmodSync(join(fake, 'node'), 0o755);
    const k99 = await envKey(a, { env: { ...process.env, PATH: `${fake}:${process.env.PATH}` } });
    assert.equal(k99.runtimes.node, '99');
    assert.notEqual(k99.key, ka.key);
    // the CLI prints the same key
    assert.equal(ok(['env-key', a]).key, ka.key);
  });

  it('attaches a prepared environment into git worktrees: require() works, writes are private, detach restores', async () => {
    const prep = ok(['prepare', repo, '--name', 'app-env']);
    assert.deepEqual(prep.envDirs, ['node_modules']);
    const wt1 = worktree('wt1');
    const wt2 = worktree('wt2');
    assert.equal(existsSync(join(wt1, 'node_modules')), false);
    const a1 = ok(['attach', wt1]);
    assert.equal(a1.snapshot, prep.id);
    assert.equal(a1.already, false);
    assert.equal(ok(['attach', wt1]).already, true, 'attaching an attached worktree says so');
    await attach(svc, wt2);
    // the mount is nosuid,nodev and the private workspace is not in the worktree
    const opts = mountOptions(join(wt1, 'node_modules'));
    assert.ok(opts, 'node_modules is a mount point');
    assert.match(opts, /nosuid/);
    assert.match(opts, /nodev/);
    assert.ok(a1.mountPath.startsWith(join(home, 'host') + '/'));
    const run = spawnSync(process.execPath, ['index.js'], { cwd: wt1, encoding: 'utf8' });
    assert.equal(run.stdout, 'dep says hi\n', run.stderr);
    // writes are private to the worktree's workspace
    writeFileSync(join(wt1, 'node_modules', 'dep', 'patched.js'), 'x');
    assert.equal(existsSync(join(wt2, 'node_modules', 'dep', 'patched.js')), false);
    assert.equal(existsSync(join(repo, 'node_modules', 'dep', 'patched.js')), false);
    // git sees nothing new: node_modules stays what .gitignore ignores
    assert.equal(git(wt1, 'status', '--porcelain'), '');
    assert.equal(git(wt1, 'status', '--porcelain', '--ignored'), '!! node_modules/\n');
    const ws = (await svc.listWorkspaces({ labels: { 'awc.attach.dir': wt1 } }))[0];
    assert.equal(ws?.id, a1.workspace, 'the attach workspace is labelled with the worktree');

    const d = ok(['detach', wt1]);
    assert.deepEqual(d.unmounted, [join(wt1, 'node_modules')]);
    assert.equal(existsSync(join(wt1, 'node_modules')), false, 'the mount point attach made is gone');
    assert.equal(mountOf(join(wt1, 'node_modules')), undefined);
    assert.equal(mountOf(a1.mountPath), undefined);
    assert.equal(existsSync(a1.mountPath), false);
    assert.equal(
      ok(['ls']).workspaces.find((w: any) => w.id === a1.workspace),
      undefined,
      'the workspace is removed',
    );
    assert.equal(git(wt1, 'status', '--porcelain', '--ignored'), '');
    await rejectsWith(detach(svc, wt1), 'E_NOT_MOUNTED');
    // wt2 is untouched by wt1's detach
    assert.equal(readFileSync(join(wt2, 'node_modules', 'dep', 'index.js'), 'utf8'), "module.exports = 'dep says hi';\n");
    await detach(svc, wt2);
  });

  it('after the host daemon is killed and started again, attach makes the binds again on the remounted workspace', () => {
    const wt = worktree('restart');
    const a = ok(['attach', wt]);
    writeFileSync(join(wt, 'node_modules', 'private.txt'), 'kept\n');
    killDaemon(home);
    ok(['daemon', 'start']);
    const again = ok(['attach', wt]);
    assert.equal(again.restored, true);
    assert.equal(again.workspace, a.workspace, 'the same workspace');
    assert.equal(readFileSync(join(wt, 'node_modules', 'private.txt'), 'utf8'), 'kept\n', 'its private writes are kept');
    assert.equal(spawnSync(process.execPath, ['index.js'], { cwd: wt, encoding: 'utf8' }).stdout, 'dep says hi\n');
    assert.equal(ok(['attach', wt]).already, true);
    ok(['detach', wt]);
    assert.equal(existsSync(join(wt, 'node_modules')), false);
  });

  it('refuses: no matching environment (with the install and prepare hint), a non-empty or symlinked node_modules', async () => {
    const other = worktree('other');
    writeFileSync(join(other, 'package-lock.json'), '{"changed":true}\n');
    let e: { code: string; hint: string } = errorOf(awc(home, ['attach', other]));
    assert.equal(e.code, 'E_NO_ENV');
    assert.match(e.hint, /npm ci/);
    assert.match(e.hint, /awc prepare/);

    const full = worktree('full');
    mkdirSync(join(full, 'node_modules', 'x'), { recursive: true });
    e = await rejectsWith(attach(svc, full), 'E_TARGET_EXISTS');
    assert.match(e.hint, /rm -rf/);
    assert.ok(existsSync(join(full, 'node_modules', 'x')), 'nothing was touched');

    const linked = worktree('linked');
    const elsewhere = join(work, 'elsewhere');
    mkdirSync(elsewhere);
    symlinkSync(elsewhere, join(linked, 'node_modules'));
    await rejectsWith(attach(svc, linked), 'E_SYMLINK');
    assert.ok(lstatSync(join(linked, 'node_modules')).isSymbolicLink());
    assert.equal(mountOf(elsewhere), undefined, 'nothing was mounted through the link');
    // no workspace was left behind by the refusals
    assert.equal(ok(['ls']).workspaces.filter((w: any) => w.labels?.['awc.attach.dir']).length, 0);
  });

  /**
   * Runs `script` with `shell` the way a tool runs its setup: in `cwd`, with the tool's `env`
   * added, and neither AWC_HOME nor an `awc` on PATH (the setup finds AWC through `.awc/awc`).
   */
  const runAsTool = (shell: string, script: string, cwd: string, env: Record<string, string>): void => {
    const { AWC_HOME: _home, AWC_NAMESPACE: _ns, ...toolEnv } = process.env;
    const r = spawnSync(shell, ['-c', script], {
      cwd,
      encoding: 'utf8',
      env: { ...toolEnv, PATH: '/usr/bin:/bin', ...env },
    });
    assert.equal(r.status, 0, `${shell} -c ${script}: ${r.stderr}`);
  };
  const attached = (wt: string): boolean =>
    mountOf(join(wt, 'node_modules')) !== undefined && existsSync(join(wt, 'node_modules', 'dep', 'index.js'));
  /** `awc init <tool> repo` as a user runs it (`--home` given, no AWC_HOME), then checks what it wrote beside the tool's file. */
  const init = (tool: string): any => {
    const r = ok(['init', tool, repo]);
    assert.equal(r.launcher, join(repo, '.awc', 'awc'));
    assert.equal(lstatSync(r.launcher).mode & 0o777, 0o755);
    assert.match(readFileSync(r.launcher, 'utf8'), new RegExp(`--home ${home} --namespace default "\\$@"\n$`));
    assert.equal(r.excludedIn, join(repo, '.git', 'info', 'exclude'));
    assert.equal(git(repo, 'check-ignore', '.awc/awc'), '.awc/awc\n');
    return r;
  };
  /** Commits the project as a user would (`git add .`); no committed file names a path of this machine. */
  const commitAll = (msg: string): void => {
    git(repo, 'add', '.');
    git(repo, 'commit', '-q', '-m', msg);
    for (const f of git(repo, 'ls-files').trim().split('\n')) {
      const text = readFileSync(join(repo, f), 'utf8');
      for (const machine of [work, home, process.execPath, CLI]) assert.equal(text.includes(machine), false, `${f} names ${machine}`);
    }
  };
  const launcherStep = (v: string): string => `sh "$${v}/.awc/awc"`;

  it('cursor: .cursor/worktrees.json setup commands run in the new worktree attach it, with no AWC_HOME and no awc on PATH', async () => {
    writeFileSync(join(repo, '.cursor-keep'), '');
    mkdirSync(join(repo, '.cursor'));
    writeFileSync(join(repo, '.cursor', 'worktrees.json'), JSON.stringify({ 'setup-worktree': ['echo generic'], other: 1 }));
    const r = init('cursor');
    assert.equal(r.merged, true);
    const cfg = JSON.parse(readFileSync(join(repo, '.cursor', 'worktrees.json'), 'utf8'));
    assert.deepEqual(cfg['setup-worktree-unix'], [`${launcherStep('ROOT_WORKTREE_PATH')} attach .`, 'echo generic']);
    assert.equal(cfg.other, 1);
    assert.deepEqual(cfg['setup-worktree'], ['echo generic']);
    assert.equal(init('cursor').unchanged, true);
    commitAll('cursor');
    const wt = worktree('cursor-wt');
    // Cursor reads the file in the worktree and runs each command there, ROOT_WORKTREE_PATH naming the project
    const cmds: string[] = JSON.parse(readFileSync(join(wt, '.cursor', 'worktrees.json'), 'utf8'))['setup-worktree-unix'];
    for (const c of cmds) runAsTool('sh', c, wt, { ROOT_WORKTREE_PATH: repo });
    assert.ok(attached(wt));
    ok(['detach', wt]);
  });

  it("codex: .codex/environments/environment.toml setup attaches, cleanup detaches; an older init's step replaced, other keys kept", async () => {
    mkdirSync(join(repo, '.codex', 'environments'), { recursive: true });
    const file = join(repo, '.codex', 'environments', 'environment.toml');
    writeFileSync(
      file,
      'version = 1\nname = "app"\n\n[setup]\nscript = "set -eu\\nawc attach \\"${CODEX_WORKTREE_PATH:-$PWD}\\"\\necho own-setup\\n"\n\n[[actions]]\nname = "Run"\ncommand = "npm start"\n',
    );
    init('codex');
    const cfg = parseToml(readFileSync(file, 'utf8')) as any;
    assert.equal(cfg.name, 'app');
    assert.equal(cfg.actions[0].command, 'npm start');
    const step = launcherStep('CODEX_SOURCE_TREE_PATH');
    assert.equal(cfg.setup.script, `set -eu\n${step} attach "\${CODEX_WORKTREE_PATH:-$PWD}"\necho own-setup\n`);
    assert.equal(cfg.cleanup.script, `set -eu\n${step} detach "\${CODEX_WORKTREE_PATH:-$PWD}"\n`);
    assert.equal(init('codex').unchanged, true);
    commitAll('codex');
    const wt = worktree('codex-wt');
    const env = { CODEX_WORKTREE_PATH: wt, CODEX_SOURCE_TREE_PATH: repo };
    runAsTool('sh', cfg.setup.script, wt, env);
    assert.ok(attached(wt));
    runAsTool('sh', cfg.cleanup.script, wt, env);
    assert.equal(existsSync(join(wt, 'node_modules')), false);
    // malformed TOML: refused, left as it is
    writeFileSync(file, 'version = = 1\n');
    await rejectsWith(initTool('codex', repo, { launcher: ['awc'] }), 'E_TOOL_CONFIG');
    assert.equal(readFileSync(file, 'utf8'), 'version = = 1\n');
  });

  it('conductor: conductor.json setup attaches in the workspace, archive detaches; merged, malformed refused', async () => {
    const file = join(repo, 'conductor.json');
    writeFileSync(file, JSON.stringify({ scripts: { setup: 'echo own-setup', run: 'npm run dev' }, runScriptMode: 'nonconcurrent' }));
    init('conductor');
    const cfg = JSON.parse(readFileSync(file, 'utf8'));
    const step = launcherStep('CONDUCTOR_ROOT_PATH');
    assert.equal(cfg.scripts.setup, `${step} attach "$CONDUCTOR_WORKSPACE_PATH" && echo own-setup`);
    assert.equal(cfg.scripts.archive, `${step} detach "$CONDUCTOR_WORKSPACE_PATH"`);
    assert.equal(cfg.scripts.run, 'npm run dev');
    assert.equal(cfg.runScriptMode, 'nonconcurrent');
    assert.equal(init('conductor').unchanged, true);
    commitAll('conductor');
    // a workspace path with a space: the scripts quote it
    const wt = join(work, 'conductor ws');
    git(repo, 'worktree', 'add', '-q', '-b', 'conductor-ws', wt);
    // Conductor runs its scripts with zsh in the workspace directory
    const shell = spawnSync('zsh', ['-c', 'true']).status === 0 ? 'zsh' : 'sh';
    const env = {
      CONDUCTOR_WORKSPACE_PATH: wt,
      CONDUCTOR_ROOT_PATH: repo,
      CONDUCTOR_WORKSPACE_NAME: 'conductor ws',
      CONDUCTOR_DEFAULT_BRANCH: 'main',
    };
    runAsTool(shell, cfg.scripts.setup, wt, env);
    assert.ok(attached(wt));
    runAsTool(shell, cfg.scripts.archive, wt, env);
    assert.equal(existsSync(join(wt, 'node_modules')), false);
    writeFileSync(file, '{"scripts": ');
    const e = errorOf(spawnSync(process.execPath, [CLI, '--json', 'init', 'conductor', repo], { encoding: 'utf8' }) as any);
    assert.equal(e.code, 'E_TOOL_CONFIG');
    assert.equal(readFileSync(file, 'utf8'), '{"scripts": ');
  });
});
