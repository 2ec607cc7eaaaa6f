/**
 * Issue 10 item 1 "every command works for a non-root user who is allowed to use AWC": every
 * command of the built CLI (listed from its own `--help`, so a new command without a case
 * here fails) run as a real throw-away user against one real root daemon (overlay driver),
 * each with a check of its effect, or the documented E_PERMISSION refusal of the commands
 * that stay with the administrator (docs/how-to/ordinary-users.md). Focused tests: a git
 * export as the user checked with git itself, the user's kept secrets (theirs, 0600), and
 * the snapshot scope of the content reads a user's git export makes.
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
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isMounted } from '../../../src/host/mount/mount-table.js';
import { userSocketsDirOf } from '../../../src/config/config.js';
import { awcOk, CLI, cleanupMounts } from '../../helpers/cli.js';
import { mcpSession } from '../../helpers/mcp-client.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { asUserArgv, createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';

/** Every leaf command of the built CLI (`snapshot import`, `ls`, …), walked through `--help`. */
function leafCommands(path: string[] = []): string[] {
  const help = execFileSync(process.execPath, [CLI, ...path, '--help'], { encoding: 'utf8' });
  const at = help.indexOf('\nCommands:\n');
  if (at < 0) return [path.join(' ')];
  const names = [...help.slice(at).matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1]!).filter((n) => n !== 'help');
  return names.flatMap((n) => leafCommands([...path, n]));
}

describe('every command as an ordinary user of the root daemon (issue 10 item 1)', { skip: usersAndOverlaySkip() }, () => {
  let work: string;
  let home: string;
  let u: TestUser;
  let uhome: string;
  const covered = new Set<string>();
  const ids: Record<string, string> = {};

  /** Runs the built CLI as U (`--home`, `--json`), in `cwd`, with `input` on stdin. */
  const as = (args: string[], opts: { cwd?: string; input?: string } = {}) => {
    const r = spawnSync('setpriv', asUserArgv(u, [process.execPath, CLI, '--home', home, '--json', ...args]), {
      cwd: opts.cwd ?? work,
      input: opts.input ?? '',
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: uhome, CLAUDE_PROJECT_DIR: opts.cwd },
      timeout: 120_000,
    });
    let json: any;
    try {
      json = JSON.parse(r.stdout);
    } catch {
      json = undefined;
    }
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, json };
  };
  /** A command that must work: its JSON result. */
  const ok = (command: string, args: string[], opts: { cwd?: string; input?: string } = {}): any => {
    covered.add(command);
    const r = as(args, opts);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.json;
  };
  /** A command an ordinary user is refused: E_PERMISSION naming the command root runs. */
  const adminOnly = (command: string, args: string[]): void => {
    covered.add(command);
    const r = as(args);
    assert.equal(r.code, 6, `${args.join(' ')}: ${r.stderr}`);
    const e = JSON.parse(r.stderr.trim().split('\n').pop()!);
    assert.equal(e.code, 'E_PERMISSION');
    assert.match(e.hint, new RegExp(`runs \`awc ${command}\` as root`));
  };
  /** A shell command as U; its stdout, trimmed. */
  const sh = (script: string, ...args: string[]): string => u.sh(script, { HOME: uhome }, ...args);
  /** A directory of U's. */
  const mine = (name: string): string => u.dir(join(work, name));
  const chownTree = (p: string): void => {
    chownSync(p, u.uid, u.gid);
    if (lstatSync(p).isDirectory()) for (const e of readdirSync(p)) chownTree(join(p, e));
  };

  before(async () => {
    work = realpathSync(await makeTempDir('awc-user-every-'));
    chmodSync(work, 0o755);
    u = createTestUser();
    home = join(work, 'home');
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: u.name, namespaces: ['default'] }] }));
    awcOk(home, ['daemon', 'start']);
    uhome = mine('uhome');
    // U's checkout with installed dependencies, and a git repository of theirs
    const src = join(work, 'src');
    mkdirSync(join(src, 'node_modules', 'x'), { recursive: true });
    writeFileSync(join(src, 'package-lock.json'), '{"lockfileVersion":3}\n');
    writeFileSync(join(src, 'node_modules', 'x', 'index.js'), 'module.exports = 42;\n');
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    chownTree(src);
    const repo = mine('repo');
    sh(
      'cd "$1" && git init -q -b main && printf "node_modules/\\n" > .gitignore && echo r > r.txt && git add . && git -c user.name=U -c user.email=u@example.com commit -qm init',
      repo,
    );
  });

  after(async () => {
    cleanupMounts(home, work);
    u?.remove();
    await removeTempDir(work);
  });

  it('runs every command of the CLI as the user: each works through the daemon or is refused as administrative', async () => {
    const listed = leafCommands();
    assert.ok(listed.length > 30 && listed.includes('snapshot import') && listed.includes('init claude'), listed.join(', '));
    const repo = join(work, 'repo');
    const commit = sh('git -C "$1" rev-parse HEAD', repo);

    // who the daemon takes U for; its driver
    assert.equal(ok('daemon status', ['daemon', 'status']).uid, u.uid);
    assert.equal(ok('doctor', ['doctor']).driver, 'overlay');

    // snapshots: a directory and a git repository, both read as U
    ids.base = ok('snapshot import', ['snapshot', 'import', join(work, 'src'), '--name', 'base']).id;
    const g = ok('snapshot import', ['snapshot', 'import', '--git', repo, '--name', 'g']);
    assert.equal(g.git.commit, commit);
    assert.ok(ok('snapshot ls', ['snapshot', 'ls']).snapshots.some((s: { id: string }) => s.id === ids.base));

    // workspaces: fork, list, show, label, mount (theirs), write, diff, checkpoint, export, unmount
    ids.w1 = ok('fork', ['fork', 'base', '--name', 'w1']).workspaces[0].id;
    assert.ok(ok('ls', ['ls']).workspaces.some((w: { id: string }) => w.id === ids.w1));
    assert.equal(ok('show', ['show', 'w1']).id, ids.w1);
    assert.equal(ok('label', ['label', 'w1', 'team=a']).labels.team, 'a');
    const mnt = mine('mnt');
    ok('mount', ['mount', 'w1', mnt]);
    assert.equal(statSync(join(mnt, 'a.txt')).uid, u.uid, 'files appear owned by U');
    sh('echo beta > "$1/b.txt" && echo TOKEN=1 > "$1/.env"', mnt);
    assert.deepEqual(
      ok('diff', ['diff', 'w1']).changes.map((c: { path: string }) => c.path),
      ['b.txt'],
    );
    const cp = ok('checkpoint', ['checkpoint', 'w1']);
    assert.equal(cp.changed, true);
    assert.deepEqual(
      cp.secrets.map((s: { path: string }) => s.path),
      ['.env'],
    );
    const out = join(mine('out'), 'w1.tar');
    ok('export', ['export', 'w1', '--tar', out]);
    assert.equal(statSync(out).uid, u.uid);
    assert.ok(sh('tar -tf "$1"', out).split('\n').includes('./b.txt'));
    ok('unmount', ['unmount', 'w1']);
    assert.equal(isMounted(mnt), false);

    // rm of a mounted workspace keeps its secret for U; kept ls | restore | rm are U's
    ok('mount', ['mount', 'w1', mnt]);
    const removed = ok('rm', ['rm', 'w1', '--force']);
    assert.deepEqual(
      removed.kept.map((k: { path: string }) => k.path),
      ['.env'],
    );
    const sets = ok('kept ls', ['kept', 'ls']).sets;
    assert.equal(sets.length, 1);
    const rest = mine('restored');
    ok('kept restore', ['kept', 'restore', ids.w1, rest]);
    assert.equal(readFileSync(join(rest, '.env'), 'utf8'), 'TOKEN=1\n');
    assert.equal(statSync(join(rest, '.env')).uid, u.uid);
    assert.equal(statSync(join(rest, '.env')).mode & 0o777, 0o600);
    ok('kept rm', ['kept', 'rm', sets[0].id]);
    assert.deepEqual(ok('kept ls', ['kept', 'ls']).sets, []);

    // usage of the namespace, computed by the daemon
    const usage = ok('usage', ['usage']);
    assert.equal(usage.namespace, 'default');
    assert.ok(usage.totals.snapshots >= 2);
    // this host's status, made by the daemon for U (test/daemon/users/user-status.test.ts tries it harder)
    const status = ok('status', ['status']);
    assert.deepEqual(status.viewer, { uid: u.uid, through: 'daemon' });
    assert.equal(status.host.figures, null);

    // attach: environment key and prepare as U, the binds into U's worktree, detach
    const prepared = ok('prepare', ['prepare', join(work, 'src')]);
    const wt = mine('wt');
    writeFileSync(join(wt, 'package-lock.json'), '{"lockfileVersion":3}\n');
    chownSync(join(wt, 'package-lock.json'), u.uid, u.gid);
    assert.equal(ok('env-key', ['env-key', wt]).key, prepared.envKey);
    ok('attach', ['attach', wt]);
    assert.ok(isMounted(join(wt, 'node_modules')));
    assert.equal(statSync(join(wt, 'node_modules')).uid, u.uid);
    assert.match(readFileSync(join(wt, 'node_modules', 'x', 'index.js'), 'utf8'), /42/);
    ok('detach', ['detach', wt]);
    assert.equal(existsSync(join(wt, 'node_modules')), false);

    // the tools' configurations, written as U
    for (const [tool, file] of [
      ['cursor', '.cursor/worktrees.json'],
      ['codex', '.codex/environments/environment.toml'],
      ['conductor', 'conductor.json'],
    ] as const) {
      ok(`init ${tool}`, ['init', tool, wt]);
      assert.equal(statSync(join(wt, file)).uid, u.uid, file);
    }

    // Claude Code: init, a worktree created and removed by the hook, prune
    ok('init claude', ['init', 'claude', repo], { cwd: repo });
    const payload = (event: string, extra: Record<string, string>) =>
      JSON.stringify({ session_id: 's-1', transcript_path: join(uhome, 't.jsonl'), cwd: repo, hook_event_name: event, ...extra });
    covered.add('hook claude');
    const c = as(['hook', 'claude'], { cwd: repo, input: payload('WorktreeCreate', { name: 'agent-1' }) });
    assert.equal(c.code, 0, c.stderr);
    const wtPath = c.stdout.trim();
    assert.ok(isMounted(wtPath));
    assert.equal(sh('cd "$1" && git branch --show-current', wtPath), 'worktree-agent-1');
    const r = as(['hook', 'claude'], { cwd: repo, input: payload('WorktreeRemove', { worktree_path: wtPath }) });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(existsSync(wtPath), false);
    assert.deepEqual(ok('prune', ['prune']).pruned, []);

    // MCP: the tools go through the daemon; the scope's markers are U's own
    covered.add('mcp');
    const m = await mcpSession(home, 'u-scope', { PATH: process.env.PATH, HOME: uhome }, u, {
      args: ['--root', uhome, '--snapshot', 'base'],
    });
    try {
      const forked = await m.ok('workspace_fork', { snapshot: 'base', count: 1 });
      const listedWs = await m.ok('workspace_list');
      assert.deepEqual(
        listedWs.workspaces.map((w: { id: string }) => w.id),
        [forked.workspaces[0].id],
      );
      assert.equal((await m.ok('usage')).namespace, 'default');
      await m.ok('workspace_remove', { workspace: forked.workspaces[0].id });
    } finally {
      await m.close();
    }
    assert.equal(statSync(join(uhome, '.local', 'share', 'awc', 'mcp-scopes', 'u-scope')).uid, u.uid);

    // what stays with the administrator
    adminOnly('gc', ['gc', '--dry-run']);
    adminOnly('fsck', ['fsck']);
    adminOnly('metrics', ['metrics']);
    adminOnly('release', ['release', '--idle']);
    adminOnly('daemon start', ['daemon', 'start']);
    adminOnly('daemon stop', ['daemon', 'stop']);
    adminOnly('daemon run', ['daemon', 'run']);
    adminOnly('demo main', ['demo', 'main']);
    adminOnly('demo fanout', ['demo', 'fanout']);
    adminOnly('quota set', ['quota', 'set', '--stored', '1']);
    adminOnly('quota show', ['quota', 'show']);
    adminOnly('quota unset', ['quota', 'unset']);
    adminOnly('quota unset', ['quota', 'clear']);
    // through the daemon, in a private namespace, as U (issue 11 part 2; test/daemon/users/run-user.test.ts tries it harder)
    covered.add('run');
    ids.wr = ok('fork', ['fork', 'base', '--name', 'wr']).workspaces[0].id;
    const runMnt = mine('mnt-run');
    ok('mount', ['mount', 'wr', runMnt]);
    const ran = as(['run', 'wr', '--at', mine('stable'), '--', 'sh', '-c', 'id -u; pwd; cat a.txt']);
    assert.equal(ran.code, 0, ran.stderr);
    assert.equal(ran.stdout, `${u.uid}\n${join(work, 'stable')}\nalpha\n`);
    assert.ok(existsSync(join(userSocketsDirOf({ home }), `${u.uid}.sock`)), 'the daemon still runs');

    // printed from the CLI's own definitions, the same for every user
    assert.match(ok('completion', ['completion', 'bash']).script, /^complete -o default -F _awc awc$/m);

    assert.deepEqual([...listed].sort(), [...covered].sort(), 'every command of the CLI has a case here, and only those');
  });

  it("keeps a user's secret as theirs: owned by them, 0600", () => {
    // the first test's set is gone (kept rm); make another and look at it
    ids.w2 = ok('fork', ['fork', 'base', '--name', 'w2']).workspaces[0].id;
    const mnt = mine('mnt2');
    ok('mount', ['mount', 'w2', mnt]);
    sh('echo KEY=2 > "$1/.env.local"', mnt);
    const kept = ok('rm', ['rm', 'w2', '--force']).kept;
    const st = statSync(kept[0].keptAt);
    assert.equal(st.uid, u.uid);
    assert.equal(st.gid, u.gid);
    assert.equal(st.mode & 0o777, 0o600);
    const set = JSON.parse(readFileSync(join(kept[0].keptAt.split('/files/')[0], 'kept.json'), 'utf8'));
    assert.deepEqual(set.owner, { uid: u.uid, gid: u.gid });
    // root's own kept sets are not the user's: a set without owner is not listed for them
    assert.ok(ok('kept ls', ['kept', 'ls']).sets.every((s: { owner?: { uid: number } }) => s.owner?.uid === u.uid));
  });

  it('exports to git as the user: the commit in their repository, verified with git (parent, fsck --strict, objects theirs)', () => {
    const repo = join(work, 'repo');
    const base = sh('git -C "$1" rev-parse main', repo);
    ok('fork', ['fork', 'g', '--name', 'gw']);
    const mnt = mine('gmnt');
    ok('mount', ['mount', 'gw', mnt]);
    sh('echo new > "$1/n.txt" && echo changed > "$1/r.txt" && mkdir -p "$1/node_modules/y" && echo i > "$1/node_modules/y/i.js"', mnt);
    const r = ok('checkpoint', ['checkpoint', 'gw', '--git-branch', 'feat', '-m', 'agent work']);
    assert.equal(r.git.created, true);
    assert.equal(sh('git -C "$1" rev-parse feat', repo), r.git.commit);
    assert.equal(sh('git -C "$1" rev-parse feat^', repo), base, 'the parent is the imported commit');
    assert.equal(sh('git -C "$1" log -1 --format=%s feat', repo), 'agent work');
    assert.deepEqual(sh('git -C "$1" diff --name-status main feat', repo).split('\n'), ['A\tn.txt', 'M\tr.txt'], 'node_modules is ignored');
    assert.equal(sh('git -C "$1" show feat:n.txt', repo), 'new');
    sh('git -C "$1" fsck --strict', repo);
    assert.equal(sh('find "$1/.git" ! -user "$2" | head -1', repo, String(u.uid)), '', 'git wrote as the user');
    const e = ok('export', ['export', 'gw', '--git', repo, '--branch', 'feat2']);
    assert.equal(sh('git -C "$1" rev-parse feat2^', repo), base);
    assert.equal(e.changes.length, 2);
    ok('unmount', ['unmount', 'gw']);
  });

  it('refuses to attach into a worktree that is not the user’s, or through a symlink, and detach of what another attached', () => {
    const fails = (args: string[]) => {
      const r = as(args);
      assert.notEqual(r.code, 0, args.join(' '));
      return JSON.parse(r.stderr.trim().split('\n').pop()!).code as string;
    };
    assert.equal(fails(['attach', join(work, 'no-such-wt')]), 'E_SOURCE_NOT_FOUND');
    assert.equal(fails(['detach', join(work, 'no-such-wt')]), 'E_NOT_MOUNTED');
    const rootWt = join(work, 'root-wt');
    mkdirSync(rootWt);
    writeFileSync(join(rootWt, 'package-lock.json'), '{"lockfileVersion":3}\n');
    assert.equal(fails(['attach', rootWt]), 'E_PERMISSION');
    assert.equal(existsSync(join(rootWt, 'node_modules')), false);
    const linked = mine('linked-wt');
    writeFileSync(join(linked, 'package-lock.json'), '{"lockfileVersion":3}\n');
    sh('ln -s /etc "$1/node_modules"', linked);
    assert.equal(fails(['attach', linked]), 'E_SYMLINK');
    // a root-owned directory inside the user's worktree on the way to a mount point
    const nested = mine('nested-wt');
    mkdirSync(join(nested, 'pkg'));
    writeFileSync(join(nested, 'pkg', 'package-lock.json'), '{"lockfileVersion":3}\n');
    chownSync(join(nested, 'pkg', 'package-lock.json'), u.uid, u.gid);
    const snap = awcOk(home, ['show', ids.base]);
    awcOk(home, ['label', snap.id, 'awc.env-dirs=pkg/node_modules']);
    assert.equal(fails(['attach', nested, '--snapshot', snap.id]), 'E_PERMISSION');
    assert.equal(existsSync(join(nested, 'pkg', 'node_modules')), false);
    // root's attach of a worktree: the user may not detach it
    const rootAttached = mine('root-attached');
    writeFileSync(join(rootAttached, 'package-lock.json'), '{"lockfileVersion":3}\n');
    awcOk(home, ['label', snap.id, 'awc.env-dirs=node_modules']);
    awcOk(home, ['attach', rootAttached, '--snapshot', snap.id]);
    assert.equal(fails(['detach', rootAttached]), 'E_PERMISSION');
    assert.ok(isMounted(join(rootAttached, 'node_modules')));
    awcOk(home, ['detach', rootAttached]);
  });

  it("serves a user's content reads only from the snapshots they name, of their namespaces", () => {
    // root's snapshot in a namespace U may not use
    const secret = join(work, 'root-secret');
    mkdirSync(secret, { mode: 0o700 });
    writeFileSync(join(secret, 'k'), 'root only\n');
    const other = awcOk(home, ['--namespace', 'other', 'snapshot', 'import', secret]);
    const otherRoot = awcOk(home, ['--namespace', 'other', 'show', other.id]).root;
    const mineSnap = awcOk(home, ['show', ids.base]);
    const CALL = `
const http = require('http');
const [socket, body] = [process.argv[1], process.argv[2]];
const req = http.request({ socketPath: socket, method: 'POST', path: '/v1/call', headers: { 'content-type': 'application/json' } }, (res) => {
  let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => console.log(JSON.stringify({ status: res.statusCode, body: JSON.parse(b) })));
});
req.end(body);`;
    const socket = join(userSocketsDirOf({ home }), `${u.uid}.sock`);
    const call = (ns: string, method: string, args: unknown[]) => {
      const r = u.run(process.execPath, ['-e', CALL, socket, JSON.stringify({ namespace: ns, method, args })]);
      assert.equal(r.status, 0, r.stderr);
      return JSON.parse(r.stdout) as { status: number; body: any };
    };
    // their own snapshot's root: served
    assert.equal(call('default', 'content.readRoot', [[ids.base], mineSnap.root]).body.type, 'root');
    // another namespace's root named under their snapshot: refused
    assert.equal(call('default', 'content.readRoot', [[ids.base], otherRoot]).body.error.code, 'E_PERMISSION');
    // the other snapshot named: not in their namespace
    assert.equal(call('default', 'content.readRoot', [[other.id], otherRoot]).body.error.code, 'E_NOT_FOUND');
    assert.equal(call('other', 'content.readRoot', [[other.id], otherRoot]).body.error.code, 'E_PERMISSION');
  });
});
