/**
 * Issue 10 item 3 "as a non-root user": `awc hook claude` (every recorded payload shape of
 * test/fixtures/claude-hooks/, create and remove), `awc init claude` and `awc prune` run by
 * the built CLI as a real throw-away user, a client of one real root daemon (overlay driver)
 * whose `users` configuration allows them. The privileged steps go through the daemon; the
 * directories, git and `.claude/settings.local.json` are the user's own.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isMounted } from '../../../src/host/mount/mount-table.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { SnapshotRow, WorkspaceRow } from '../../../src/catalog/port/catalog.js';
import { awcOk, CLI, cleanupMounts, PROJECT } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

const FIXTURES = join(PROJECT, 'test', 'fixtures', 'claude-hooks');

/** Every recorded create shape, the remove shape run after it, the worktree name and its directory name. */
const SHAPES = [
  { create: 'create-2.1.50.json', remove: 'remove-2.1.50.json', name: 'fix-login', dir: 'fix-login' },
  { create: 'create-2.1.197-subagent.json', remove: 'remove-2.1.197.json', name: 'agent-a1b2c3d4', dir: 'agent-a1b2c3d4' },
  { create: 'create-docs.json', remove: 'remove-2.1.50.json', name: 'feat/auth', dir: 'feat+auth' },
  { create: 'create-worktree-path.json', remove: 'remove-2.1.197.json', name: 'explicit-path', dir: 'explicit-path' },
];

describe('Claude Code worktree hooks as an ordinary user, through the root daemon', { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let project: string;
  let transcripts: string;
  let u: TestUser; // the user whose Claude Code runs the hooks
  let other: TestUser; // another allowed user of the same namespace
  let prepared: string;

  /** Runs the built CLI as `who`, in `cwd`, with `input` on stdin, as Claude Code runs a hook (CLAUDE_PROJECT_DIR set). */
  const as = (who: TestUser, args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv; home?: boolean } = {}) => {
    const r = spawnSync(
      'setpriv',
      [
        '--reuid',
        String(who.uid),
        '--regid',
        String(who.gid),
        '--clear-groups',
        '--',
        process.execPath,
        CLI,
        ...(opts.home === false ? [] : ['--home', home]),
        ...args,
      ],
      {
        input: opts.input ?? '',
        cwd: project,
        encoding: 'utf8',
        env: { PATH: process.env.PATH, HOME: join(work, `home-${who.name}`), CLAUDE_PROJECT_DIR: project, ...opts.env },
        timeout: 120_000,
      },
    );
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const okAs = (who: TestUser, args: string[]): any => {
    const r = as(who, ['--json', ...args]);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };
  /** Runs a shell command as `u` (its stdout, trimmed); fails the test on a non-zero exit. */
  const shAs = (who: TestUser, script: string, ...args: string[]): string => {
    const r = spawnSync(
      'setpriv',
      ['--reuid', String(who.uid), '--regid', String(who.gid), '--clear-groups', '--', 'sh', '-c', script, 'sh', ...args],
      {
        encoding: 'utf8',
        cwd: '/',
        env: { PATH: process.env.PATH, HOME: join(work, `home-${who.name}`) },
      },
    );
    assert.equal(r.status, 0, `${script}: ${r.stderr}`);
    return r.stdout.trim();
  };
  /** A recorded payload with its placeholders filled in (and `patch` merged over it). */
  const payload = (file: string, vars: Record<string, string>, patch: Record<string, unknown> = {}): string => {
    let text = readFileSync(join(FIXTURES, file), 'utf8');
    for (const [k, v] of Object.entries(vars)) text = text.replaceAll(`@${k}@`, v);
    return JSON.stringify({ ...JSON.parse(text), ...patch });
  };
  /** A transcript file of `u` (prune's "session gone" test looks for it). */
  const transcript = (name: string): string => {
    const p = join(transcripts, `${name}.jsonl`);
    writeFileSync(p, '{}\n');
    chownSync(p, u.uid, u.gid);
    return p;
  };
  const chownTree = (p: string, who: TestUser): void => {
    chownSync(p, who.uid, who.gid);
    if (lstatSync(p).isDirectory()) for (const e of readdirSync(p)) chownTree(join(p, e), who);
  };
  let opened: Awc | undefined;
  /** The service on the home, as root in this process (reads and exports only: fewer CLI starts). */
  const svc = async (): Promise<Awc> => (opened ??= await Awc.open({ home }, { create: false }));
  const rootLs = async (): Promise<WorkspaceRow[]> => (await svc()).listWorkspaces();
  const labelledSnapshot = async (label: string): Promise<SnapshotRow | undefined> => {
    const [k, v] = label.split('=') as [string, string];
    return (await (await svc()).listSnapshots({ labels: { [k]: v } }))[0];
  };
  /** The content of `rel` in `snapshot` (undefined: not there), through an export. */
  const exported = async (snapshot: string, rel: string): Promise<string | undefined> => {
    const out = join(work, `out-${snapshot}`);
    await (await svc()).export(snapshot, { dir: out });
    try {
      return existsSync(join(out, rel)) ? readFileSync(join(out, rel), 'utf8') : undefined;
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  };

  before(async () => {
    work = realpathSync(await makeTempDir('awc-claude-user-'));
    chmodSync(work, 0o755);
    u = createTestUser();
    other = createTestUser();
    home = join(work, 'home');
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(
      join(home, 'config.json'),
      JSON.stringify({
        users: [
          { user: u.name, namespaces: ['default'] },
          { user: other.name, namespaces: ['default'] },
        ],
      }),
    );
    awcOk(home, ['daemon', 'start']);
    for (const who of [u, other]) {
      mkdirSync(join(work, `home-${who.name}`));
      chownSync(join(work, `home-${who.name}`), who.uid, who.gid);
    }
    // u's project: a git checkout with its installed dependencies (and a worktree dir the import leaves out)
    project = join(work, 'proj');
    transcripts = join(work, 'transcripts');
    mkdirSync(transcripts);
    chownSync(transcripts, u.uid, u.gid);
    mkdirSync(join(project, 'src'), { recursive: true });
    mkdirSync(join(project, 'node_modules', 'x'), { recursive: true });
    mkdirSync(join(project, '.claude', 'worktrees', 'left-over'), { recursive: true });
    writeFileSync(join(project, 'src', 'index.js'), 'export const x = 1;\n');
    writeFileSync(join(project, '.gitignore'), 'node_modules/\n.claude/worktrees/\n');
    writeFileSync(join(project, 'node_modules', 'x', 'index.js'), 'module.exports = 42;\n');
    writeFileSync(join(project, '.claude', 'worktrees', 'left-over', 'f'), 'not imported\n');
    execFileSync('git', ['init', '-q', '-b', 'main', project]);
    const git = (...a: string[]) => execFileSync('git', ['-C', project, '-c', 'user.name=t', '-c', 'user.email=t@example.com', ...a]);
    git('add', '.');
    git('commit', '-q', '-m', 'init');
    chownTree(project, u);
  });

  after(async () => {
    await opened?.close();
    cleanupMounts(home, work);
    u?.remove();
    other?.remove();
    await removeTempDir(work);
  });

  it('without a daemon socket: E_DAEMON_UNAVAILABLE with a hint; with one but no prepared snapshot: E_NOT_PREPARED; nothing on stdout', async () => {
    const input = payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: transcript('none') });
    const none = as(u, ['hook', 'claude'], { input, home: false, env: { AWC_SOCKET: join(work, 'no-daemon', 'awcd.sock') } });
    assert.equal(none.code, 6, none.stderr);
    assert.equal(none.stdout, '');
    assert.match(none.stderr, /E_DAEMON_UNAVAILABLE/);
    assert.match(none.stderr, /hint: .*administrator/);
    const unprepared = as(u, ['hook', 'claude'], { input });
    assert.equal(unprepared.code, 3, unprepared.stderr);
    assert.equal(unprepared.stdout, '');
    assert.match(unprepared.stderr, /E_NOT_PREPARED.*\n.*awc init claude/);
    assert.equal(existsSync(join(project, '.claude', 'worktrees', 'fix-login')), false);
    assert.deepEqual(await rootLs(), []);
  });

  it('init claude as the user imports the project (worktrees left out) and writes settings.local.json owned by the user', async () => {
    const r = okAs(u, ['init', 'claude', project]);
    assert.equal(r.imported, true);
    assert.equal(r.project, project);
    prepared = r.snapshot;
    const settings = join(project, '.claude', 'settings.local.json');
    assert.equal(r.settings.path, settings);
    const st = statSync(settings);
    assert.equal(st.uid, u.uid, 'settings.local.json is the user’s');
    assert.equal(st.mode & 0o077, 0, 'private');
    const s = JSON.parse(readFileSync(settings, 'utf8'));
    for (const ev of ['WorktreeCreate', 'WorktreeRemove', 'SessionStart'])
      assert.match(s.hooks[ev][0].hooks[0].command, new RegExp(` --home ${home} --namespace default hook claude$`), ev);
    assert.equal((await labelledSnapshot(`awc.claude.project=${project}`))?.id, prepared);
    assert.equal(await exported(prepared, 'node_modules/x/index.js'), 'module.exports = 42;\n');
    assert.equal(await exported(prepared, '.claude/worktrees/left-over/f'), undefined, '.claude/worktrees is left out');
  });

  for (const shape of SHAPES) {
    it(`${shape.create} then ${shape.remove}: the user's mounted git checkout on its branch, then nothing left and the work in a checkpoint`, async () => {
      const vars = { PROJECT: project, TRANSCRIPT: transcript(shape.dir) };
      const c = as(u, ['hook', 'claude'], { input: payload(shape.create, vars) });
      assert.equal(c.code, 0, c.stderr);
      assert.match(c.stdout, /^\/[^\n]+\n$/, 'exactly one line');
      const path = c.stdout.trimEnd();
      assert.equal(path, join(project, '.claude', 'worktrees', shape.dir));
      assert.equal(realpathSync(path), path, 'absolute and symlink-free');
      assert.ok(isMounted(path), 'a mount');
      assert.equal(statSync(path).uid, u.uid, 'owned by the user');
      assert.equal(shAs(u, 'cd "$1" && git branch --show-current', path), `worktree-${shape.dir}`);
      assert.equal(readFileSync(join(path, 'node_modules', 'x', 'index.js'), 'utf8'), 'module.exports = 42;\n');
      assert.equal(shAs(u, 'cd "$1" && echo "// $2" > src/work.js && stat -c %u src/work.js', path, shape.name), String(u.uid));
      assert.equal(shAs(u, 'cd "$1" && git status --porcelain', path), '?? src/work.js');
      const ws = (await rootLs()).find((w) => w.labels['awc.claude.name'] === shape.name);
      assert.ok(ws, 'labelled');
      assert.equal(ws.labels['awc.claude.uid'], String(u.uid));

      const r = as(u, ['hook', 'claude'], { input: payload(shape.remove, { ...vars, WORKTREE: path }) });
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, '');
      assert.equal(existsSync(path), false, 'no directory');
      assert.equal(isMounted(path), false, 'no mount');
      assert.equal(
        (await rootLs()).some((w) => w.id === ws.id),
        false,
        'the workspace is removed',
      );
      const snap = await labelledSnapshot(`awc.claude.name=${shape.name}`);
      assert.ok(snap, 'the checkpoint is labelled');
      assert.equal(await exported(snap.id, 'src/work.js'), `// ${shape.name}\n`, 'the checkpoint holds the work');
    });
  }

  it("init --update and prune as the user: prune releases their stale workspace; another user's prune leaves it alone", async () => {
    const t = transcript('stale');
    const c = as(u, ['hook', 'claude'], { input: payload('create-2.1.50.json', { PROJECT: project, TRANSCRIPT: t }, { name: 'stale' }) });
    assert.equal(c.code, 0, c.stderr);
    const path = c.stdout.trimEnd();
    shAs(u, 'echo stale > "$1/stale.txt"', path);
    // the worktree registration remove unregisters: recorded by the user's hook; no other member of the namespace may write it
    const ws = (await rootLs()).find((w) => w.labels['awc.claude.name'] === 'stale')!;
    assert.equal(ws.labels['awc.claude.gitdir'], join(project, '.git', 'worktrees', 'stale'));
    for (const key of ['awc.claude.gitdir', 'awc.claude.refs']) {
      const forged = as(other, ['label', ws.id, `${key}=/tmp`]);
      assert.equal(forged.code, 6, forged.stderr);
      assert.match(forged.stderr, /E_PERMISSION/);
    }
    assert.deepEqual((await rootLs()).find((w) => w.id === ws.id)!.labels, ws.labels);
    // --update as the user while a workspace is mounted inside the project: the label moves, the old one is kept, the mount left out
    const up = okAs(u, ['init', 'claude', project, '--update']);
    assert.equal(up.imported, true);
    assert.deepEqual(up.replaced, { id: prepared, removed: false }, 'kept: a workspace uses it');
    assert.deepEqual(
      (await (await svc()).listSnapshots({ labels: { 'awc.claude.project': project } })).map((x) => x.id),
      [up.snapshot],
      'the label moved',
    );
    assert.equal(await exported(up.snapshot, '.claude/worktrees/stale/stale.txt'), undefined);
    rmSync(t); // Claude Code deleted the session's transcript
    const theirs = okAs(other, ['prune']);
    assert.deepEqual(theirs.pruned, []);
    assert.equal(theirs.others, 1);
    assert.ok(isMounted(path), "another user's prune leaves it mounted");
    const mine = okAs(u, ['prune']);
    assert.deepEqual(
      mine.pruned.map((e: { name: string; reason: string; error?: unknown }) => [e.name, e.reason, e.error]),
      [['stale', 'session-gone', undefined]],
    );
    assert.equal(existsSync(path), false);
    assert.equal(isMounted(path), false);
    assert.deepEqual(await rootLs(), []);
    assert.equal(await exported((await labelledSnapshot('awc.claude.name=stale'))!.id, 'stale.txt'), 'stale\n');
  });
});
