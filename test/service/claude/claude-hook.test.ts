/**
 * `awc hook claude`, `awc init claude`, `awc prune` (docs/how-to/claude-code.md): the built
 * CLI run as a child process, fed each recorded Claude Code payload
 * (test/fixtures/claude-hooks/) on stdin as Claude Code does, against a real git project
 * with a small node_modules, one home, the host's real mount driver (overlay through the
 * host daemon as root). The same hooks as an ordinary user, through the root daemon:
 * test/service/claude/claude-user.test.ts.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isMounted } from '../../../src/host/mount/mount-table.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { SnapshotRow, WorkspaceRow } from '../../../src/catalog/port/catalog.js';
import { awc, awcOk, CLI, cleanupMounts, errorOf, PROJECT } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

const FIXTURES = join(PROJECT, 'test', 'fixtures', 'claude-hooks');

describe('Claude Code worktree hooks', () => {
  let work: string;
  let home: string;
  let project: string;
  /** A symlink to the project: Claude Code may run in a path that is not the real one. */
  let projectLink: string;
  let transcripts: string;
  /** The prepared snapshot `init claude` made. */
  let prepared: string;

  /** A recorded payload with its placeholders filled in (and `patch` merged over it). */
  const payload = (file: string, vars: Record<string, string>, patch: Record<string, unknown> = {}): string => {
    let text = readFileSync(join(FIXTURES, file), 'utf8');
    for (const [k, v] of Object.entries(vars)) text = text.replaceAll(`@${k}@`, v);
    return JSON.stringify({ ...JSON.parse(text), ...patch });
  };
  /** Runs `awc hook claude` as Claude Code does: the payload on stdin, CLAUDE_PROJECT_DIR set, in the project. */
  const runHook = (input: string, cwd = project) => {
    const r = spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
      input,
      cwd,
      encoding: 'utf8',
      env: { ...process.env, CLAUDE_PROJECT_DIR: cwd },
      timeout: 60_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const transcript = (name: string): string => {
    const p = join(transcripts, `${name}.jsonl`);
    writeFileSync(p, '{}\n');
    return p;
  };
  const git = (dir: string, ...args: string[]): string =>
    execFileSync('git', ['-c', `safe.directory=${dir}`, '-C', dir, ...args], { encoding: 'utf8' }).trim();
  let opened: Awc | undefined;
  /** The service on the test's home, in this process (reads only: fewer CLI starts). */
  const svc = async (): Promise<Awc> => (opened ??= await Awc.open({ home }, { create: false }));
  const labelled = async (kind: 'snapshot' | 'workspace', label: string): Promise<(SnapshotRow | WorkspaceRow)[]> => {
    const [k, v] = label.split('=') as [string, string];
    const s = await svc();
    return kind === 'snapshot' ? s.listSnapshots({ labels: { [k]: v } }) : s.listWorkspaces({ labels: { [k]: v } });
  };
  const workspaceIds = async (): Promise<string[]> => (await (await svc()).listWorkspaces()).map((w) => w.id);

  before(async () => {
    work = realpathSync(await makeTempDir('awc-claude-'));
    home = join(work, 'home');
    project = join(work, 'proj');
    projectLink = join(work, 'proj-link');
    transcripts = join(work, 'transcripts');
    mkdirSync(transcripts);
    mkdirSync(join(project, 'src'), { recursive: true });
    mkdirSync(join(project, 'node_modules', 'dep'), { recursive: true });
    writeFileSync(join(project, 'src', 'index.js'), 'export const x = 1;\n');
    writeFileSync(join(project, '.gitignore'), 'node_modules/\n.claude/worktrees/\n');
    writeFileSync(join(project, 'node_modules', 'dep', 'index.js'), 'module.exports = 42;\n');
    writeFileSync(join(project, 'node_modules', 'dep', 'package.json'), '{"name":"dep","version":"1.0.0"}\n');
    execFileSync('git', ['init', '-q', '-b', 'main', project]);
    git(project, 'add', '.');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'init');
    symlinkSync(project, projectLink);
  });
  after(async () => {
    await opened?.close();
    cleanupMounts(home, work);
    await removeTempDir(work);
  });

  it('create without a prepared snapshot fails at once with E_NOT_PREPARED and the hint, nothing on stdout', async () => {
    const input = payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('none') });
    // no home yet
    let r = runHook(input);
    assert.equal(r.code, 3, r.stderr);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /E_NOT_PREPARED/);
    assert.match(r.stderr, /awc init claude/);
    // a home with snapshots, none prepared for this project
    const other = join(work, 'other');
    mkdirSync(other);
    writeFileSync(join(other, 'f'), 'x');
    awcOk(home, ['snapshot', 'import', other]);
    r = runHook(input);
    assert.equal(r.code, 3, r.stderr);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /E_NOT_PREPARED.*\n.*awc init claude/);
    assert.equal(existsSync(join(project, '.claude', 'worktrees', 'fix-login')), false);
    assert.deepEqual(await workspaceIds(), []);
  });

  it('a malformed payload or an unknown event: a stable code, non-zero, nothing on stdout', () => {
    const cases: [string, string][] = [
      ['{not json', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","cwd":"/tmp"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","cwd":"/tmp","name":"../../etc"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"Stop","session_id":"s"}', 'E_HOOK_EVENT'],
    ];
    for (const [input, code] of cases) {
      const r = runHook(input);
      assert.equal(r.code, 2, `${input}: ${r.stderr}`);
      assert.equal(r.stdout, '', input);
      assert.match(r.stderr, new RegExp(code), input);
    }
  });

  it("init claude imports once, writes the hooks to settings.local.json (git-ignored), takes an older init's out of the committed settings.json, is idempotent; a malformed settings file is refused and kept", async () => {
    const settingsPath = join(project, '.claude', 'settings.json');
    const localPath = join(project, '.claude', 'settings.local.json');
    mkdirSync(join(project, '.claude'));
    const mine = {
      model: 'opus',
      permissions: { allow: ['Bash(npm test)'] },
      hooks: { PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'echo pre' }] }] },
    };
    // what an older `awc init claude` wrote into the committed file: machine paths
    const older = '/usr/bin/node /opt/awc/main.js --home /var/lib/awc --namespace default hook claude';
    const olderHooks = Object.fromEntries(
      ['WorktreeCreate', 'WorktreeRemove', 'SessionStart'].map((ev) => [ev, [{ hooks: [{ type: 'command', command: older }] }]]),
    );
    writeFileSync(settingsPath, JSON.stringify({ ...mine, hooks: { ...mine.hooks, ...olderHooks } }));
    git(project, 'add', '.claude/settings.json');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'settings of an older init');
    const first = awcOk(home, ['init', 'claude', projectLink]);
    assert.equal(first.imported, true);
    prepared = first.snapshot;
    assert.equal(first.project, project);
    assert.equal(first.settings.path, localPath);
    assert.equal(first.settings.migrated, settingsPath);
    assert.equal(first.settings.excludedIn, join(project, '.git', 'info', 'exclude'));
    // the committed file: the user's keys and hooks, none of AWC's
    assert.deepEqual(JSON.parse(readFileSync(settingsPath, 'utf8')), mine);
    const s1 = JSON.parse(readFileSync(localPath, 'utf8'));
    for (const ev of ['WorktreeCreate', 'WorktreeRemove', 'SessionStart']) {
      assert.equal(s1.hooks[ev].length, 1, ev);
      assert.match(s1.hooks[ev][0].hooks[0].command, / --home \S+ --namespace default hook claude$/);
    }
    // the user commits the migrated file, as the init told them
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qam', 'AWC hooks moved to settings.local.json');
    // settings.local.json is ignored by git; nothing the project would commit names this machine
    assert.equal(git(project, 'check-ignore', '.claude/settings.local.json'), '.claude/settings.local.json');
    const committable = git(project, 'ls-files', '--cached', '--others', '--exclude-standard').split('\n');
    for (const f of committable) {
      const text = readFileSync(join(project, f), 'utf8');
      for (const machine of [work, home, process.execPath, CLI]) assert.equal(text.includes(machine), false, `${f} names ${machine}`);
    }
    const text1 = readFileSync(localPath, 'utf8');
    const again = awcOk(home, ['init', 'claude', project]);
    assert.equal(again.imported, false);
    assert.equal(again.snapshot, first.snapshot);
    assert.equal(again.settings.changed, false);
    assert.equal(again.settings.migrated, null);
    assert.equal(readFileSync(localPath, 'utf8'), text1);
    assert.equal(
      readFileSync(join(project, '.git', 'info', 'exclude'), 'utf8')
        .split('\n')
        .filter((l) => l === '/.claude/settings.local.json').length,
      1,
    );
    assert.equal((await labelled('snapshot', `awc.claude.project=${project}`)).length, 1);

    const bad = join(work, 'bad');
    mkdirSync(join(bad, '.claude'), { recursive: true });
    writeFileSync(join(bad, '.claude', 'settings.json'), '{"model": "opus",');
    const r = awc(home, ['init', 'claude', bad]);
    assert.equal(r.code, 5, r.stderr);
    assert.equal(errorOf(r).code, 'E_CLAUDE_SETTINGS');
    assert.equal(readFileSync(join(bad, '.claude', 'settings.json'), 'utf8'), '{"model": "opus",');
    writeFileSync(join(bad, '.claude', 'settings.json'), '{}');
    writeFileSync(join(bad, '.claude', 'settings.local.json'), '[]');
    assert.equal(errorOf(awc(home, ['init', 'claude', bad])).code, 'E_CLAUDE_SETTINGS');
    assert.equal(readFileSync(join(bad, '.claude', 'settings.local.json'), 'utf8'), '[]');
    assert.equal((await labelled('snapshot', `awc.claude.project=${bad}`)).length, 0, 'nothing imported');
  });

  const shapes: { create: string; remove: string; name: string; dir: (p: string) => string; cwd?: () => string }[] = [
    { create: 'create-2.1.50.json', remove: 'remove-2.1.50.json', name: 'fix-login', dir: (p) => join(p, '.claude/worktrees/fix-login') },
    {
      create: 'create-2.1.197-subagent.json',
      remove: 'remove-2.1.197.json',
      name: 'agent-a1b2c3d4',
      dir: (p) => join(p, '.claude/worktrees/agent-a1b2c3d4'),
      cwd: () => projectLink,
    },
    { create: 'create-docs.json', remove: 'remove-2.1.50.json', name: 'feat/auth', dir: (p) => join(p, '.claude/worktrees/feat+auth') },
    {
      create: 'create-worktree-path.json',
      remove: 'remove-2.1.197.json',
      name: 'explicit-path',
      dir: (p) => join(p, '.claude/worktrees/explicit-path'),
    },
  ];
  for (const shape of shapes) {
    it(`${shape.create}: one real path on stdout, a mounted writable git checkout on its branch with node_modules; ${shape.remove} leaves nothing and a checkpoint holds the work`, async () => {
      const cwd = shape.cwd?.() ?? project;
      const vars = { PROJECT: cwd, TRANSCRIPT: transcript(shape.name.replaceAll('/', '+')) };
      const c = runHook(payload(shape.create, vars), cwd);
      assert.equal(c.code, 0, c.stderr);
      assert.match(c.stdout, /^\/[^\n]+\n$/, 'exactly one line');
      const path = c.stdout.trimEnd();
      assert.equal(path, shape.dir(project));
      assert.equal(realpathSync(path), path, 'symlink-free');
      assert.ok(isMounted(path), 'mounted');
      assert.equal(git(path, 'rev-parse', '--abbrev-ref', 'HEAD'), `worktree-${shape.name.replaceAll('/', '+')}`);
      assert.equal(readFileSync(join(path, 'node_modules', 'dep', 'index.js'), 'utf8'), 'module.exports = 42;\n');
      assert.equal(existsSync(join(path, '.claude', 'worktrees')), false, 'the worktrees are not in the snapshot');
      writeFileSync(join(path, 'src', 'work.js'), `// ${shape.name}\n`);
      writeFileSync(join(path, '.env'), `TOKEN=${shape.name}\n`); // a secret: never stored, kept by the remove
      const [ws] = await labelled('workspace', `awc.claude.name=${shape.name}`);
      assert.ok(ws, 'labelled');
      assert.equal(ws.labels['awc.claude.project'], project);
      assert.equal((ws as WorkspaceRow).baseSnapshotId, prepared, 'forked from the prepared snapshot (not from an earlier checkpoint)');
      assert.equal(ws.labels['awc.claude.transcript'], vars.TRANSCRIPT);
      // SessionStart in the worktree offers `awc run` at the stable path (the project), by the hook's own absolute
      // invocation, and the offered command works from a shell with no awc on PATH and no AWC_HOME
      const s = runHook(payload('session-start-2.1.100.json', { ...vars, WORKTREE: join(path, 'src') }), join(path, 'src'));
      assert.equal(s.code, 0, s.stderr);
      const ctx = JSON.parse(s.stdout).hookSpecificOutput;
      assert.equal(ctx.hookEventName, 'SessionStart');
      const offered = /`([^`]+) <command>`/.exec(ctx.additionalContext)?.[1];
      assert.equal(
        offered,
        `${process.execPath} ${realpathSync(CLI)} --home ${home} --namespace default run ${path} --`,
        ctx.additionalContext,
      );
      assert.ok(ctx.additionalContext.includes(`Its base was built at ${project}.`), ctx.additionalContext);
      const { AWC_HOME: _h, ...noHome } = process.env;
      const ran = spawnSync('/bin/sh', ['-c', `${offered} sh -c 'pwd; cat work.js'`], {
        cwd: join(path, 'src'),
        encoding: 'utf8',
        env: { ...noHome, PATH: '/usr/bin:/bin' },
      });
      assert.equal(ran.status, 0, ran.stderr);
      assert.equal(ran.stdout, `${join(project, 'src')}\n// ${shape.name}\n`);

      const r = runHook(payload(shape.remove, { ...vars, WORKTREE: path }), cwd);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, '');
      assert.equal(existsSync(path), false, 'directory gone');
      assert.equal(isMounted(path), false);
      assert.equal((await workspaceIds()).includes(ws.id), false);
      assert.match(r.stderr, /1 secret file\(s\) kept on this host/);
      const [set] = awcOk(home, ['kept', 'ls', ws.id]).sets;
      assert.deepEqual(
        set.files.map((f: { path: string; keptAt: string }) => [f.path, readFileSync(f.keptAt, 'utf8')]),
        [['.env', `TOKEN=${shape.name}\n`]],
      );
      const [snap] = await labelled('snapshot', `awc.claude.name=${shape.name}`);
      assert.ok(snap, 'the checkpoint is labelled');
      const out = join(work, `out-${ws.id}`);
      await (await svc()).export(snap.id, { dir: out });
      assert.equal(readFileSync(join(out, 'src', 'work.js'), 'utf8'), `// ${shape.name}\n`);
      rmSync(out, { recursive: true });
    });
  }

  it('SessionStart outside a workspace, or with no home at all, says nothing and never fails the session', () => {
    const outside = runHook(payload('session-start-2.1.100.json', { TRANSCRIPT: transcript('s-out'), WORKTREE: work }), work);
    assert.deepEqual([outside.code, outside.stdout], [0, '']);
    const r = spawnSync(process.execPath, [CLI, '--home', join(work, 'no-home'), 'hook', 'claude'], {
      input: payload('session-start-2.1.100.json', { TRANSCRIPT: transcript('s-none'), WORKTREE: work }),
      cwd: work,
      encoding: 'utf8',
    });
    assert.deepEqual([r.status, r.stdout], [0, '']);
    assert.match(r.stderr, /SessionStart: no workspace context/);
  });

  it('prune releases a workspace whose directory is gone and one whose transcript is gone; --dry-run changes nothing', async () => {
    const made: Record<string, { path: string; transcript: string; base: string }> = {};
    for (const name of ['p-dir', 'p-session', 'p-live']) {
      const t = transcript(name);
      const c = runHook(payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: t }, { name }));
      assert.equal(c.code, 0, c.stderr);
      const path = c.stdout.trimEnd();
      const ws = (await (await svc()).listWorkspaces({ labels: { 'awc.claude.path': path } }))[0]!;
      made[name] = { path, transcript: t, base: ws.baseSnapshotId };
      writeFileSync(join(made[name].path, `${name}.txt`), name);
    }
    // --update imports again while workspaces are mounted inside the project: they are left out of it
    const up = awcOk(home, ['init', 'claude', project, '--update']);
    assert.equal(up.imported, true);
    assert.deepEqual(up.replaced, { id: made['p-live']!.base, removed: false }, 'the old one is kept: workspaces use it');
    const upOut = join(work, 'out-update');
    await (await svc()).export(up.snapshot, { dir: upOut });
    assert.equal(existsSync(join(upOut, 'src', 'index.js')), true);
    assert.equal(existsSync(join(upOut, '.claude', 'worktrees')), false);
    rmSync(upOut, { recursive: true });
    // directory gone: unmounted (as after a reboot) and removed
    awcOk(home, ['unmount', made['p-dir']!.path]);
    rmdirSync(made['p-dir']!.path);
    // session gone: Claude Code deleted its transcript
    rmSync(made['p-session']!.transcript);

    const state = async () => (await (await svc()).listWorkspaces()).map((w) => [w.id, w.headSnapshotId, w.mountState, w.mountPath]);
    const before = await state();
    const dry = awcOk(home, ['prune', '--dry-run']);
    assert.equal(dry.dryRun, true);
    assert.deepEqual(dry.pruned.map((e: any) => [e.name, e.reason]).sort(), [
      ['p-dir', 'directory-gone'],
      ['p-session', 'session-gone'],
    ]);
    assert.deepEqual(await state(), before, 'dry run changed nothing');
    assert.ok(isMounted(made['p-session']!.path));

    const r = awcOk(home, ['prune']);
    assert.deepEqual(r.pruned.map((e: any) => [e.name, e.reason, e.error]).sort(), [
      ['p-dir', 'directory-gone', undefined],
      ['p-session', 'session-gone', undefined],
    ]);
    assert.equal(r.kept, 1);
    assert.equal(existsSync(made['p-session']!.path), false);
    const left = (await (await svc()).listWorkspaces()).map((w) => w.labels['awc.claude.name']);
    assert.deepEqual(left, ['p-live']);
    for (const name of ['p-dir', 'p-session']) {
      const [snap] = await labelled('snapshot', `awc.claude.name=${name}`);
      assert.ok(snap, `${name}: its work is checkpointed`);
    }
    assert.ok(isMounted(made['p-live']!.path), 'the live one stays mounted');
    const rm = runHook(
      payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: made['p-live']!.transcript, WORKTREE: made['p-live']!.path }),
    );
    assert.equal(rm.code, 0, rm.stderr);
  });

  it("WorktreeRemove refuses a workspace its project's hooks did not make (awc fork, another project's hook): E_PERMISSION, nothing checkpointed, unmounted, removed or deleted", async () => {
    // one made by `awc fork` and mounted by hand where a hook would put it
    const direct = join(project, '.claude', 'worktrees', 'direct');
    mkdirSync(direct, { recursive: true });
    const forked = awcOk(home, ['fork', prepared, '--name', 'direct']);
    const directId: string = (forked.workspaces ?? [forked])[0].id;
    awcOk(home, ['mount', directId, direct]);
    writeFileSync(join(direct, 'mine.txt'), "not the hook's\n");
    // one made by the hooks of another project
    const other = join(work, 'proj2');
    mkdirSync(other);
    writeFileSync(join(other, 'f.txt'), 'other project\n');
    awcOk(home, ['init', 'claude', other]);
    const made = runHook(payload('create-2.1.50.json', { PROJECT: other, TRANSCRIPT: transcript('proj2') }, { name: 'theirs' }), other);
    assert.equal(made.code, 0, made.stderr);
    const theirs = made.stdout.trimEnd();
    assert.ok(theirs.startsWith(join(other, '.claude', 'worktrees')), theirs);
    writeFileSync(join(theirs, 'work.txt'), 'their work\n');

    const s = await svc();
    const snapshotsBefore = (await s.listSnapshots()).map((x) => x.id).sort();
    const rowsBefore = (await s.listWorkspaces()).map((w) => [w.id, w.headSnapshotId, w.mountState, w.mountPath]);
    for (const path of [direct, theirs]) {
      // run from this project (cwd and CLAUDE_PROJECT_DIR), as this project's Claude Code would
      const r = runHook(payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('intruder'), WORKTREE: path }));
      assert.equal(r.code, 6, r.stderr);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /E_PERMISSION: workspace \S+ at /);
      assert.match(r.stderr, /hint: A hook removes only the workspaces its own project's hooks made/);
      assert.ok(isMounted(path), `${path} is still mounted`);
    }
    assert.match(
      runHook(payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('intruder'), WORKTREE: theirs })).stderr,
      new RegExp(`made by the hooks of project ${other}, not of ${project}`),
    );
    assert.deepEqual((await s.listSnapshots()).map((x) => x.id).sort(), snapshotsBefore, 'nothing checkpointed');
    assert.deepEqual(
      (await s.listWorkspaces()).map((w) => [w.id, w.headSnapshotId, w.mountState, w.mountPath]),
      rowsBefore,
      'nothing unmounted or removed',
    );
    assert.equal(readFileSync(join(direct, 'mine.txt'), 'utf8'), "not the hook's\n");
    assert.equal(readFileSync(join(theirs, 'work.txt'), 'utf8'), 'their work\n');

    // the other project's own hook removes its workspace; the forked one goes by hand
    const own = runHook(payload('remove-2.1.50.json', { PROJECT: other, TRANSCRIPT: transcript('proj2'), WORKTREE: theirs }), other);
    assert.equal(own.code, 0, own.stderr);
    assert.equal(existsSync(theirs), false);
    awcOk(home, ['rm', directId, '--force']);
    rmdirSync(direct);
  });
  it("WorktreeRemove trusts CLAUDE_PROJECT_DIR, never the payload's cwd: a payload naming another project's cwd and workspace is refused, unset or set to the caller's project, and nothing changes", async () => {
    const victim = join(work, 'proj3');
    mkdirSync(victim);
    writeFileSync(join(victim, 'f.txt'), 'victim project\n');
    awcOk(home, ['init', 'claude', victim]);
    const made = runHook(payload('create-2.1.50.json', { PROJECT: victim, TRANSCRIPT: transcript('proj3') }, { name: 'victims' }), victim);
    assert.equal(made.code, 0, made.stderr);
    const theirs = made.stdout.trimEnd();
    writeFileSync(join(theirs, 'work.txt'), 'victim work\n');

    const s = await svc();
    const snapshotsBefore = (await s.listSnapshots()).map((x) => x.id).sort();
    const rowsBefore = (await s.listWorkspaces()).map((w) => [w.id, w.headSnapshotId, w.mountState, w.mountPath]);
    // the payload names the victim's project as its cwd; the hook runs in the attacker's project
    const input = payload('remove-2.1.50.json', { PROJECT: victim, TRANSCRIPT: transcript('attacker'), WORKTREE: theirs });
    const { CLAUDE_PROJECT_DIR: _unset, ...env } = process.env;
    for (const [what, extra] of [
      ['CLAUDE_PROJECT_DIR unset', {}],
      ["CLAUDE_PROJECT_DIR the attacker's project", { CLAUDE_PROJECT_DIR: project }],
    ] as const) {
      const r = spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
        input,
        cwd: project,
        encoding: 'utf8',
        env: { ...env, ...extra },
        timeout: 60_000,
      });
      assert.equal(r.status, 6, `${what}: ${r.stderr}`);
      assert.equal(r.stdout, '', what);
      assert.match(r.stderr, /E_PERMISSION: workspace \S+ at /, what);
      assert.ok(isMounted(theirs), `${what}: ${theirs} is still mounted`);
    }
    assert.deepEqual((await s.listSnapshots()).map((x) => x.id).sort(), snapshotsBefore, 'nothing checkpointed');
    assert.deepEqual(
      (await s.listWorkspaces()).map((w) => [w.id, w.headSnapshotId, w.mountState, w.mountPath]),
      rowsBefore,
      'nothing unmounted or removed',
    );
    assert.equal(readFileSync(join(theirs, 'work.txt'), 'utf8'), 'victim work\n');

    const own = runHook(payload('remove-2.1.50.json', { PROJECT: victim, TRANSCRIPT: transcript('proj3'), WORKTREE: theirs }), victim);
    assert.equal(own.code, 0, own.stderr);
    assert.equal(existsSync(theirs), false);
  });

  it("WorktreeRemove makes no noise: no snapshot when nothing is uncommitted (ignored files do not count), idempotent; a commit alone is in the project's branch, not in a snapshot", async () => {
    const s = await svc();
    const create = (name: string): string => {
      const c = runHook(payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript(name) }, { name }));
      assert.equal(c.code, 0, c.stderr);
      return c.stdout.trimEnd();
    };
    const remove = (name: string, path: string) =>
      runHook(payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript(name), WORKTREE: path }));
    const snapshots = async () => (await s.listSnapshots()).map((x) => x.id).sort();

    // untouched but for what git ignores (a rebuilt node_modules, a cache) and git's own bookkeeping
    const quiet = create('quiet');
    writeFileSync(join(quiet, 'node_modules', 'dep', 'index.js'), 'module.exports = 43;\n');
    mkdirSync(join(quiet, 'node_modules', '.cache'));
    writeFileSync(join(quiet, 'node_modules', '.cache', 'x'), 'cache\n');
    assert.equal(git(quiet, 'status', '--porcelain'), '');
    const before = await snapshots();
    const r = remove('quiet', quiet);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /nothing uncommitted \(its commits are in the project's repository\): no snapshot kept; unmounted and removed/);
    assert.equal(existsSync(quiet), false);
    assert.equal(isMounted(quiet), false);
    assert.deepEqual(await snapshots(), before, 'no snapshot');
    assert.deepEqual(await labelled('workspace', 'awc.claude.name=quiet'), []);
    // Claude Code may send it twice
    const again = remove('quiet', quiet);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /no workspace there and the directory is gone; nothing to do/);
    assert.deepEqual(await snapshots(), before);

    // a commit and nothing uncommitted: the commit is in the project's repository already, so no snapshot either
    const committed = create('committed');
    writeFileSync(join(committed, 'src', 'index.js'), 'export const x = 2;\n');
    git(committed, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qam', 'x = 2');
    assert.equal(git(committed, 'status', '--porcelain'), '');
    const c = remove('committed', committed);
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stderr, /nothing uncommitted \(its commits are in the project's repository\): no snapshot kept/);
    assert.match(c.stderr, new RegExp(`branch worktree-committed is kept in ${project} with its commits`));
    assert.deepEqual(await snapshots(), before, 'no snapshot');
    assert.equal(git(project, 'log', '-1', '--format=%s', 'worktree-committed'), 'x = 2');

    // the same name again: the kept branch is checked out as it is (its commit, not the project's HEAD), never made anew
    const tip = git(project, 'rev-parse', 'worktree-committed');
    assert.notEqual(tip, git(project, 'rev-parse', 'HEAD'));
    const c2 = runHook(payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('committed') }, { name: 'committed' }));
    assert.equal(c2.code, 0, c2.stderr);
    const again2 = c2.stdout.trimEnd();
    assert.match(c2.stderr, new RegExp(`on branch worktree-committed at ${tip.slice(0, 12)}`));
    assert.doesNotMatch(c2.stderr, /new branch/);
    assert.equal(git(again2, 'rev-parse', 'HEAD'), tip);
    assert.equal(git(again2, 'rev-parse', '--abbrev-ref', 'HEAD'), 'worktree-committed');
    assert.equal(readFileSync(join(again2, 'src', 'index.js'), 'utf8'), 'export const x = 2;\n', "the branch's files");
    assert.equal(git(again2, 'status', '--porcelain'), '');
    const r2 = remove('committed', again2);
    assert.equal(r2.code, 0, r2.stderr);
    assert.equal(git(project, 'rev-parse', 'worktree-committed'), tip, 'the branch is kept as it was');
  });

  it('a create runs git four times (one rev-parse tells the HEAD and whether the branch exists) and starts no node to learn its version', () => {
    // a git and a node on PATH that log each start, then run the real ones
    const bin = join(work, 'counting-bin');
    mkdirSync(bin, { recursive: true });
    const log = join(work, 'started.log');
    const realGit = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
    writeFileSync(join(bin, 'git'), `#!/bin/sh\necho "git $1" >> '${log}'\nexec '${realGit}' "$@"\n`, { mode: 0o755 });
    writeFileSync(join(bin, 'node'), `#!/bin/sh\necho "node $1" >> '${log}'\nexec '${process.execPath}' "$@"\n`, { mode: 0o755 });
    // the host's node after the counting one: a PATH whose node is not this process's own asks it (`node --version`)
    const path = `${bin}:${dirname(process.execPath)}:${process.env.PATH}`;
    const run = (name: string, env: NodeJS.ProcessEnv) =>
      spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
        input: payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript(name) }, { name }),
        cwd: project,
        encoding: 'utf8',
        env: { ...process.env, CLAUDE_PROJECT_DIR: project, ...env },
        timeout: 60_000,
      });
    const started = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
    // a lockfile at HEAD (taken out again at the end): its environment key names Node's version
    writeFileSync(join(project, 'package-lock.json'), '{"name":"proj","lockfileVersion":3,"packages":{}}\n');
    git(project, 'add', 'package-lock.json');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'a lockfile');

    const c = run('counted', { PATH: path });
    assert.equal(c.status, 0, c.stderr);
    const counted = c.stdout.trimEnd();
    assert.deepEqual(started().sort(), ['git clean', 'git read-tree', 'git rev-parse', 'git worktree', 'node --version']);
    rmSync(log);
    // with this process's own node first on PATH, no node is started at all
    const own = run('own-node', { PATH: `${dirname(process.execPath)}:${path}` });
    assert.equal(own.status, 0, own.stderr);
    assert.deepEqual(
      started().filter((l) => l.startsWith('node')),
      [],
    );
    for (const [name, p] of [
      ['counted', counted],
      ['own-node', own.stdout.trimEnd()],
    ] as const) {
      assert.equal(git(p, 'rev-parse', 'HEAD'), git(project, 'rev-parse', 'HEAD'));
      const r = runHook(payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript(name), WORKTREE: p }));
      assert.equal(r.code, 0, r.stderr);
    }
    git(project, 'rm', '-q', 'package-lock.json');
    git(project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'no lockfile');
  });

  it('a busy WorktreeRemove names the processes holding the mount and a hint a hook can follow; once they end, the work is kept and one printed command brings it back', async () => {
    const c = runHook(payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('busy') }, { name: 'busy' }));
    assert.equal(c.code, 0, c.stderr);
    const path = c.stdout.trimEnd();
    writeFileSync(join(path, 'notes.txt'), 'uncommitted\n');
    // a shell left in the worktree
    const shell = spawn('sleep', ['60'], { cwd: join(path, 'src'), stdio: 'ignore' });
    try {
      const input = payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('busy'), WORKTREE: path });
      const r = runHook(input);
      assert.equal(r.code, 4, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`E_TARGET_BUSY: ${path} is busy: in use by pid ${shell.pid} \\(sleep, cwd ${join(path, 'src')}\\)`),
      );
      assert.match(r.stderr, new RegExp(`hint: End those processes \\(\`kill ${shell.pid}\`\\)`));
      assert.match(r.stderr, /its work is checkpointed in \S+/);
      assert.doesNotMatch(r.stderr, /--force/);
      assert.ok(isMounted(path), 'still mounted');
    } finally {
      shell.kill();
      await new Promise((done) => shell.once('exit', done));
    }
    const r = runHook(payload('remove-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('busy'), WORKTREE: path }));
    assert.equal(r.code, 0, r.stderr);
    assert.equal(existsSync(path), false);
    // the one command that brings the work back, run as printed from a shell with no awc on PATH
    const back = /to bring the work back as a directory: (.+)$/m.exec(r.stderr)?.[1];
    assert.ok(back, r.stderr);
    const { AWC_HOME: _h, ...noHome } = process.env;
    const ran = spawnSync('/bin/sh', ['-c', back], { cwd: work, encoding: 'utf8', env: { ...noHome, PATH: '/usr/bin:/bin' } });
    assert.equal(ran.status, 0, ran.stderr);
    assert.equal(readFileSync(join(path, 'notes.txt'), 'utf8'), 'uncommitted\n');
    rmSync(path, { recursive: true });
  });

  it('five worktrees at once, each a registered git worktree of the project at its HEAD (a commit after init) with the installed dependencies; commits land in the project; removes keep the branches, checkpoint only uncommitted work, and leave no registration', async () => {
    // a project with npm dependencies installed offline from a local package, and enough tracked files to tell a re-read
    const proj = join(work, 'proj-five');
    const pkg = join(work, 'pkg-dep');
    mkdirSync(pkg);
    writeFileSync(join(pkg, 'package.json'), '{"name":"local-dep","version":"1.0.0","main":"index.js"}\n');
    writeFileSync(join(pkg, 'index.js'), 'module.exports = "dep";\n');
    mkdirSync(join(proj, 'src'), { recursive: true });
    for (let i = 0; i < 150; i++) writeFileSync(join(proj, 'src', `m${i}.js`), `export const m${i} = ${i};\n`);
    writeFileSync(join(proj, 'package.json'), '{"name":"five","version":"1.0.0","private":true}\n');
    writeFileSync(join(proj, '.gitignore'), 'node_modules/\n.claude/worktrees/\n');
    const tgz = execFileSync('npm', ['pack', '--silent', pkg], { cwd: work, encoding: 'utf8' }).trim().split('\n').pop()!;
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--silent', join(work, tgz)], { cwd: proj });
    assert.equal(readFileSync(join(proj, 'node_modules', 'local-dep', 'index.js'), 'utf8'), 'module.exports = "dep";\n');
    execFileSync('git', ['init', '-q', '-b', 'main', proj]);
    // the project's own configuration: commits in its worktrees carry this identity
    git(proj, 'config', 'user.name', 'Project Dev');
    git(proj, 'config', 'user.email', 'dev@example.com');
    git(proj, 'add', '.');
    git(proj, 'commit', '-q', '-m', 'init');
    const init = awcOk(home, ['init', 'claude', proj]);
    // of .git the prepared snapshot keeps what a worktree starts from: no objects, refs or hooks for every create to delete
    const tar = join(work, 'prepared.tar');
    awcOk(home, ['export', init.snapshot, '--tar', tar]);
    const gitEntries = execFileSync('tar', ['-tf', tar], { encoding: 'utf8' })
      .split('\n')
      .filter((e) => e.startsWith('./.git/'));
    assert.deepEqual(gitEntries.sort(), ['./.git/', './.git/config', './.git/index']);
    // main moves on after init: a change, a new file, a deletion
    writeFileSync(join(proj, 'src', 'm0.js'), 'export const m0 = "after init";\n');
    writeFileSync(join(proj, 'src', 'added.js'), 'export const added = true;\n');
    rmSync(join(proj, 'src', 'm1.js'));
    git(proj, 'add', '-A');
    git(proj, 'commit', '-q', '-m', 'after init');
    const head = git(proj, 'rev-parse', 'HEAD');
    const s = await svc();
    const snapshots = async () => (await s.listSnapshots()).map((x) => x.id).sort();
    const names = ['w1', 'w2', 'w3', 'w4', 'w5'];
    const hook = (input: string): Promise<{ code: number; stdout: string; stderr: string }> =>
      new Promise((done) => {
        const child = spawn(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
          cwd: proj,
          env: { ...process.env, CLAUDE_PROJECT_DIR: proj },
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (b: Buffer) => (stdout += b));
        child.stderr.on('data', (b: Buffer) => (stderr += b));
        child.on('close', (code) => done({ code: code ?? -1, stdout, stderr }));
        child.stdin.end(input);
      });
    const vars = (n: string) => ({ PROJECT: proj, TRANSCRIPT: transcript(`five-${n}`) });
    const made = await Promise.all(names.map((n) => hook(payload('create-2.1.50.json', vars(n), { name: n }))));
    const paths: Record<string, string> = {};
    const listed = `${git(proj, 'worktree', 'list', '--porcelain')}\n`;
    for (const [i, n] of names.entries()) {
      const c = made[i]!;
      assert.equal(c.code, 0, c.stderr);
      const path = c.stdout.trimEnd();
      paths[n] = path;
      assert.equal(path, join(proj, '.claude', 'worktrees', n));
      assert.equal(readFileSync(join(path, '.git'), 'utf8'), `gitdir: ${join(proj, '.git', 'worktrees', n)}\n`);
      assert.ok(listed.includes(`worktree ${path}\nHEAD ${head}\nbranch refs/heads/worktree-${n}\n`), listed);
      assert.equal(git(path, 'rev-parse', 'HEAD'), head, `${n} is at the project's HEAD`);
      assert.equal(readFileSync(join(path, 'src', 'm0.js'), 'utf8'), 'export const m0 = "after init";\n');
      assert.equal(existsSync(join(path, 'src', 'added.js')), true);
      assert.equal(existsSync(join(path, 'src', 'm1.js')), false);
      assert.equal(readFileSync(join(path, 'node_modules', 'local-dep', 'index.js'), 'utf8'), 'module.exports = "dep";\n');
      // clean, and the index vouches for the files the hook did not write: status re-reads none of the 150
      assert.equal(git(path, 'status', '--porcelain'), '');
      const stale = spawnSync('git', ['-C', path, 'diff-files', '--name-only'], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
      assert.ok(
        stale.every((f) => ['src/m0.js', 'src/added.js'].includes(f)),
        `${n}: the index does not match ${stale.length} files: ${stale.slice(0, 5).join(', ')}`,
      );
    }
    // a commit in each, with the project's identity, is in the project's repository at once
    for (const n of names) {
      writeFileSync(join(paths[n]!, 'src', `${n}.js`), `export const ${n} = 1;\n`);
      git(paths[n]!, 'add', '.');
      git(paths[n]!, 'commit', '-q', '-m', `work of ${n}`);
      assert.equal(git(proj, 'log', '-1', '--format=%s|%an|%P', `worktree-${n}`), `work of ${n}|Project Dev|${head}`);
    }
    // git in a worktree works as in one git made: log, rebase onto a newer main
    writeFileSync(join(proj, 'src', 'later.js'), 'later\n');
    git(proj, 'add', '.');
    git(proj, 'commit', '-q', '-m', 'later on main');
    git(paths['w1']!, 'rebase', '-q', 'main');
    assert.equal(git(paths['w1']!, 'log', '--format=%s', '-3'), 'work of w1\nlater on main\nafter init');

    const before = await snapshots();
    const remove = (n: string) => hook(payload('remove-2.1.50.json', { ...vars(n), WORKTREE: paths[n]! }));
    // w1, w3: committed work only: no snapshot
    for (const n of ['w1', 'w3']) {
      const r = await remove(n);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /no snapshot kept/);
    }
    assert.deepEqual(await snapshots(), before, 'no snapshot for worktrees with nothing uncommitted');
    // w2: uncommitted work is checkpointed; its diff and export hold no .git path
    writeFileSync(join(paths['w2']!, 'src', 'draft.js'), 'draft\n');
    const r2 = await remove('w2');
    assert.equal(r2.code, 0, r2.stderr);
    const cp = /checkpointed as (\S+);/.exec(r2.stderr)?.[1];
    assert.ok(cp, r2.stderr);
    const changed = awcOk(home, ['diff', cp]).changes.map((c: { path: string }) => c.path);
    assert.ok(changed.includes('src/draft.js'), changed.join(' '));
    assert.deepEqual(
      changed.filter((p: string) => p === '.git' || p.startsWith('.git/')),
      [],
    );
    const back = /to bring the work back as a directory: (.+)$/m.exec(r2.stderr)?.[1];
    const ran = spawnSync('/bin/sh', ['-c', back!], { cwd: work, encoding: 'utf8' });
    assert.equal(ran.status, 0, ran.stderr);
    assert.equal(readFileSync(join(paths['w2']!, 'src', 'draft.js'), 'utf8'), 'draft\n');
    rmSync(paths['w2']!, { recursive: true });
    // w4: a shell inside makes the remove wait; w5: removed twice
    const shell = spawn('sleep', ['60'], { cwd: join(paths['w4']!, 'src'), stdio: 'ignore' });
    const busy = await remove('w4');
    shell.kill();
    await new Promise((done) => shell.once('exit', done));
    assert.equal(busy.code, 4, busy.stderr);
    assert.match(busy.stderr, /E_TARGET_BUSY/);
    assert.ok(git(proj, 'worktree', 'list').includes(paths['w4']!), 'still registered while mounted');
    for (const n of ['w4', 'w5', 'w5']) assert.equal((await remove(n)).code, 0);
    // nothing left registered or mounted; every branch and commit kept
    assert.equal(git(proj, 'worktree', 'list', '--porcelain').split('\n\n').filter(Boolean).length, 1);
    assert.equal(existsSync(join(proj, '.git', 'worktrees')) && readdirSync(join(proj, '.git', 'worktrees')).length > 0, false);
    for (const n of names) {
      assert.equal(existsSync(paths[n]!), false);
      assert.equal(git(proj, 'log', '-1', '--format=%s', `worktree-${n}`), `work of ${n}`);
    }
    assert.deepEqual(
      (await snapshots()).filter((x) => !before.includes(x)),
      [cp],
      'one snapshot in all: the uncommitted work of w2',
    );

    // a lockfile changed on main: the worktree still comes up at HEAD, and says how to refresh
    const lock = JSON.parse(readFileSync(join(proj, 'package-lock.json'), 'utf8'));
    writeFileSync(join(proj, 'package-lock.json'), JSON.stringify({ ...lock, name: 'five-renamed' }, null, 2));
    git(proj, 'commit', '-qam', 'lockfile changed');
    const st = await hook(payload('create-2.1.50.json', vars('w6'), { name: 'w6' }));
    assert.equal(st.code, 0, st.stderr);
    const w6 = st.stdout.trimEnd();
    paths['w6'] = w6;
    assert.equal(git(w6, 'rev-parse', 'HEAD'), git(proj, 'rev-parse', 'HEAD'));
    const refresh = st.stderr.split('\n').filter((l) => l.includes('init claude --update'));
    assert.equal(refresh.length, 1, st.stderr);
    assert.ok(
      refresh[0]!.includes(`${process.execPath} ${realpathSync(CLI)} --home ${home} --namespace default init claude --update ${proj}`),
    );
    const ss = runHook(payload('session-start-2.1.100.json', { ...vars('w6'), WORKTREE: w6 }), w6);
    assert.match(JSON.parse(ss.stdout).hookSpecificOutput.additionalContext, /init claude --update/);
    const r6 = await remove('w6');
    assert.equal(r6.code, 0, r6.stderr);
  });
});
