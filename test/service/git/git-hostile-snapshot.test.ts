/**
 * Snapshot content never runs (issue 24 item 1; docs/explanation/security.md "Snapshot
 * content never runs"): wherever AWC runs git on a snapshot's repository (`mount --warm`
 * with both drivers, `snapshot import --git`, `export --git` with its ignore check, the
 * Claude hook's branch), git reads AWC's configuration only (src/service/git/git-sandbox.ts).
 * One test per mechanism a repository's configuration (or the caller's environment) has to
 * make git run a command: each names a marker script that writes a file; a plain git in the
 * repository runs it (the test is real), AWC never does, and AWC still does its job or
 * refuses with a stable code. Also: the environment key runs runtimes from the host's PATH
 * only, never the tree's.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { awc, awcOk, CLI, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

const overlay = detectDriver('auto').driver === 'overlay';
const DRIVERS = overlay ? ['overlay', 'copy'] : ['copy'];

/** One way a repository (or the caller's environment) can make git run a command. */
interface Mechanism {
  name: string;
  /** Makes the repository hostile (after its commit); `s` is the marker script's path. */
  arm(repo: string, s: string, ctx: { port: number }): void;
  /** A plain git in (a copy of) the repository that runs the script: proves the test real. */
  real?: (repo: string) => void;
  /** The environment AWC runs with (the caller's). */
  env?: (s: string, repo: string) => NodeJS.ProcessEnv;
}

const G = (repo: string, ...a: string[]) => spawnSync('git', ['-C', repo, ...a], { encoding: 'utf8', timeout: 30_000, input: '' });
const set = (repo: string, kv: Record<string, string>) => {
  for (const [k, v] of Object.entries(kv)) execFileSync('git', ['-C', repo, 'config', k, v]);
};
/** A partial clone whose promisor remote is `url`, with the tree object of `dir/` removed. */
const promisor = (repo: string, url: string, extra: Record<string, string> = {}) => {
  // the index's cached tree of dir/ made stale (the index still matches HEAD): a status reads HEAD:dir
  G(repo, 'rm', '-q', '--cached', 'dir/c.txt');
  G(repo, 'add', 'dir/c.txt');
  set(repo, {
    'core.repositoryformatversion': '1',
    'extensions.partialClone': 'origin',
    'remote.origin.url': url,
    'remote.origin.promisor': 'true',
    ...extra,
  });
  const tree = execFileSync('git', ['-C', repo, 'rev-parse', 'HEAD:dir'], { encoding: 'utf8' }).trim();
  rmSync(join(repo, '.git', 'objects', tree.slice(0, 2), tree.slice(2)));
};
/** A status after a file changed (so git reads it, and the tree of HEAD). */
const status = (repo: string) => {
  writeFileSync(join(repo, 'a.txt'), 'changed\n');
  G(repo, 'status', '--porcelain');
};
/** An amend that opens the editor (`edit`) or signs only. */
const amend = (edit: boolean) => (repo: string) => {
  G(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '--amend', '-q', ...(edit ? [] : ['--no-edit']));
};
const branch = (repo: string) => {
  G(repo, 'checkout', '-q', '-b', 'probe');
};

const MECHANISMS: Mechanism[] = [
  {
    name: 'a promisor remote whose uploadpack is a command (partial clone, a tree missing)',
    arm: (r, s) => promisor(r, `file://${r}/../nowhere`, { 'remote.origin.uploadpack': s }),
    real: status,
  },
  {
    name: 'core.sshCommand for an ssh:// promisor remote',
    arm: (r, s) => promisor(r, 'ssh://example.invalid/repo.git', { 'core.sshCommand': s }),
    real: status,
  },
  {
    name: 'a credential helper asked by an http promisor remote that wants a password',
    arm: (r, s, c) => promisor(r, `http://127.0.0.1:${c.port}/repo.git`, { 'credential.helper': `!${s}` }),
    real: status,
  },
  { name: 'core.fsmonitor', arm: (r, s) => set(r, { 'core.fsmonitor': s }), real: status },
  {
    name: 'core.hooksPath and .git/hooks',
    arm: (r, s) => {
      for (const d of ['hooks', 'evil-hooks']) {
        mkdirSync(join(r, '.git', d), { recursive: true });
        for (const h of ['post-checkout', 'reference-transaction', 'post-index-change']) cpSync(s, join(r, '.git', d, h));
      }
      set(r, { 'core.hooksPath': join(r, '.git', 'evil-hooks') });
    },
    real: branch,
  },
  {
    name: 'filters (clean, smudge, process)',
    arm: (r, s) => set(r, { 'filter.evil.clean': s, 'filter.evil.smudge': s, 'filter.proc.process': s }),
    real: status,
  },
  {
    name: 'textconv and diff.external',
    arm: (r, s) => {
      writeFileSync(join(r, '.git', 'info', 'attributes'), '* diff=evil\n');
      set(r, { 'diff.evil.textconv': s, 'diff.external': s });
    },
    real: (r) => {
      writeFileSync(join(r, 'a.txt'), 'changed\n');
      G(r, 'diff');
    },
  },
  {
    name: 'pager, editor and askPass',
    arm: (r, s) => set(r, { 'core.pager': s, 'core.editor': s, 'sequence.editor': s, 'core.askPass': s }),
    real: amend(true),
  },
  {
    name: 'gpg.program (signed commits and tags)',
    arm: (r, s) => set(r, { 'gpg.program': s, 'commit.gpgSign': 'true', 'tag.gpgSign': 'true', 'log.showSignature': 'true' }),
    real: amend(false),
  },
  {
    name: 'include and includeIf',
    arm: (r, s) => {
      mkdirSync(join(r, '.git', 'inc-hooks'));
      cpSync(s, join(r, '.git', 'inc-hooks', 'post-checkout'));
      writeFileSync(join(r, '.git', 'evil.inc'), `[core]\n\tfsmonitor = ${s}\n[filter "evil"]\n\tclean = ${s}\n`);
      writeFileSync(join(r, '.git', 'evil2.inc'), `[core]\n\thooksPath = ${join(r, '.git', 'inc-hooks')}\n`);
      set(r, { 'include.path': 'evil.inc', 'includeIf.gitdir:/.path': 'evil2.inc' });
    },
    real: status,
  },
  {
    name: 'GIT_* variables in the caller environment',
    arm: () => undefined,
    env: (s, r) => ({
      GIT_DIR: join(r, '.git', 'hostile'),
      GIT_CONFIG_PARAMETERS: `'core.fsmonitor'='${s}' 'core.hooksPath'='${join(r, '.git', 'env-hooks')}'`,
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: 'core.fsmonitor',
      GIT_CONFIG_VALUE_0: s,
      GIT_SSH_COMMAND: s,
      GIT_SSH: s,
      GIT_EXTERNAL_DIFF: s,
      GIT_ASKPASS: s,
      GIT_EDITOR: s,
      GIT_PAGER: s,
      GIT_EXEC_PATH: join(r, '.git', 'env-hooks'),
      GIT_TEMPLATE_DIR: join(r, '.git', 'env-hooks'),
    }),
  },
];

describe('git never reads a snapshot configuration', () => {
  let work: string;
  let home: string;
  let server: ChildProcess;
  let port = 0;
  const runHook = (input: string, cwd: string, env: NodeJS.ProcessEnv) => {
    const r = spawnSync(process.execPath, [CLI, '--home', home, 'hook', 'claude'], {
      input,
      cwd,
      encoding: 'utf8',
      env: { ...process.env, ...env, CLAUDE_PROJECT_DIR: cwd },
      timeout: 120_000,
    });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };

  before(async () => {
    work = realpathSync(await makeTempDir('awc-hostile-git-'));
    home = join(work, 'home');
    // an http server that wants a password: git asks its credential helper
    server = spawn(
      process.execPath,
      [
        '-e',
        `const s=require('http').createServer((q,r)=>{r.writeHead(401,{'WWW-Authenticate':'Basic realm="x"'});r.end()});s.listen(0,'127.0.0.1',()=>console.log(s.address().port))`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    port = await new Promise<number>((res) => server.stdout!.once('data', (b: Buffer) => res(Number(b.toString().trim()))));
  });
  after(async () => {
    server?.kill();
    cleanupMounts(home, work);
    await removeTempDir(work);
  });

  MECHANISMS.forEach((m, i) => {
    it(`${m.name}: never runs on mount --warm (${DRIVERS.join(', ')}), snapshot import --git, export --git, the claude hook`, () => {
      const dir = join(work, `m${i}`);
      const repo = join(dir, 'repo');
      const marker = join(dir, 'ran');
      const s = join(dir, 'evil.sh');
      mkdirSync(join(repo, 'dir'), { recursive: true });
      writeFileSync(s, `#!/bin/sh\necho "$0 $*" >> ${marker}\nexit 1\n`, { mode: 0o755 });
      chmodSync(s, 0o755);
      // the user's repository (export target) and the hostile one: the same commit
      const user = join(dir, 'user');
      execFileSync('git', ['init', '-q', '-b', 'main', repo]);
      writeFileSync(join(repo, 'a.txt'), 'one\n');
      writeFileSync(join(repo, 'b.p'), 'bee\n');
      writeFileSync(join(repo, 'dir', 'c.txt'), 'see\n');
      writeFileSync(join(repo, '.gitignore'), '*.log\n.claude/\n');
      // attributes naming drivers: harmless until a configuration defines them
      writeFileSync(join(repo, '.gitattributes'), '*.txt filter=evil diff=evil\n*.p filter=proc\n');
      G(repo, 'add', '-A');
      G(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'base');
      cpSync(repo, user, { recursive: true });
      m.arm(repo, s, { port });
      const env = m.env?.(s, repo) ?? {};
      if (m.real) {
        const probe = join(dir, 'probe');
        cpSync(repo, probe, { recursive: true });
        m.real(probe);
        assert.ok(existsSync(marker), `the test is real: a plain git there runs the command (${m.name})`);
        rmSync(marker);
      }
      const noMarker = (what: string) =>
        assert.ok(!existsSync(marker), `${what} ran the snapshot's command: ${existsSync(marker) ? readFileSync(marker, 'utf8') : ''}`);
      const name = `h${i}`;
      awcOk(home, ['snapshot', 'import', repo, '--name', name]);
      noMarker('snapshot import');

      // mount --warm, both drivers: nothing runs, nothing is written into the workspace
      for (const driver of DRIVERS) {
        const ws = awcOk(home, ['fork', name]).workspaces[0].id;
        const mnt = join(dir, `mnt-${driver}`);
        const r = awcOk(home, ['mount', ws, mnt, '--warm'], { ...env, AWC_MOUNT_DRIVER: driver });
        noMarker(`mount --warm (${driver})`);
        assert.ok(r.warmed.entries > 0, 'the walk ran');
        if (!m.name.includes('promisor')) assert.equal(r.warmed.git, true, `git's status warmed it (${driver})`);
        else assert.equal(r.warmed.git, false, 'a missing object fails the status: never fetched');
        if (driver === 'overlay')
          assert.deepEqual(readdirSync(join(home, 'host', 'workspaces', ws, 'upper')), [], 'the status wrote nothing into the upper');
        const cp = awcOk(home, ['checkpoint', ws]);
        assert.equal(cp.changed, false, `--warm changed nothing (${driver}): ${JSON.stringify(cp)}`);
        awcOk(home, ['unmount', ws]);
        noMarker(`unmount (${driver})`);
      }

      // snapshot import --git: done, or refused with a stable code (a missing object is never fetched)
      const imp = awc(home, ['snapshot', 'import', '--git', repo, '--name', `${name}-git`], env);
      noMarker('snapshot import --git');
      if (m.name.includes('promisor')) {
        assert.notEqual(imp.code, 0, 'a partial clone with a missing object is refused');
        assert.match(errorOf(imp).code, /^E_GIT_(NOT_A_REPO|FAILED)$/);
        assert.match(errorOf(imp).message, /dir|object|tree|clone/i);
      } else {
        assert.equal(imp.code, 0, imp.stderr);
        // export --git into the user's repository: a file git tracks and one it ignores (the ignore check)
        const ws = awcOk(home, ['fork', `${name}-git`]).workspaces[0].id;
        const mnt = join(dir, 'mnt-export');
        awcOk(home, ['mount', ws, mnt], env);
        writeFileSync(join(mnt, 'added.txt'), 'new\n');
        writeFileSync(join(mnt, 'x.log'), 'ignored\n');
        awcOk(home, ['checkpoint', ws], env);
        const ex = awc(home, ['export', ws, '--git', user, '--branch', 'awc/out'], env);
        assert.equal(ex.code, 0, ex.stderr);
        noMarker('export --git');
        assert.deepEqual(
          ex.json.changes.map((c: { path: string }) => c.path),
          ['added.txt'],
        );
        assert.equal(ex.json.ignored, 1);
        awcOk(home, ['unmount', ws, '--discard']);
      }

      // the claude hook: the prepared snapshot holds the hostile .git; the project's own repository is the user's
      // again (git runs there with its configuration, as the user's git would), and nothing of the snapshot's runs
      awcOk(home, ['init', 'claude', repo], env);
      noMarker('init claude');
      rmSync(join(repo, '.git'), { recursive: true, force: true });
      cpSync(join(user, '.git'), join(repo, '.git'), { recursive: true });
      const input = JSON.stringify({
        session_id: `s${i}`,
        transcript_path: join(dir, 't.jsonl'),
        cwd: repo,
        hook_event_name: 'WorktreeCreate',
        name: `w${i}`,
      });
      const c = runHook(input, repo, env);
      noMarker('the claude hook');
      if (c.code === 0) {
        const path = c.stdout.trim();
        assert.equal(readFileSync(join(path, '.git'), 'utf8'), `gitdir: ${join(repo, '.git', 'worktrees', `w${i}`)}\n`);
        assert.equal(
          G(path, 'rev-parse', '--abbrev-ref', 'HEAD').stdout.trim(),
          `worktree-w${i}`,
          'a worktree of the project on its branch',
        );
        assert.equal(G(path, 'status', '--porcelain').stdout, '', "the project's HEAD, clean");
        const rm = runHook(
          JSON.stringify({ session_id: `s${i}`, cwd: repo, hook_event_name: 'WorktreeRemove', worktree_path: path }),
          repo,
          env,
        );
        assert.equal(rm.code, 0, rm.stderr);
        noMarker('the claude hook (remove)');
      } else {
        assert.ok(m.name.includes('promisor'), `the hook failed: ${c.stderr}`);
        assert.match(c.stderr, /E_BRANCH_FAILED/);
      }
    });
  });

  it('a repository whose .git/config (or HEAD) is a FIFO: mount --warm returns promptly with warmed.git false, snapshot import --git never blocks', () => {
    const dir = join(work, 'fifo');
    const repo = join(dir, 'repo');
    mkdirSync(repo, { recursive: true });
    execFileSync('git', ['init', '-q', '-b', 'main', repo]);
    writeFileSync(join(repo, 'a.txt'), 'one\n');
    G(repo, 'add', '-A');
    G(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'base');
    rmSync(join(repo, '.git', 'config'));
    execFileSync('mkfifo', ['-m', '644', join(repo, '.git', 'config')]);
    awcOk(home, ['snapshot', 'import', repo, '--name', 'fifo-config']);
    for (const driver of DRIVERS) {
      const ws = awcOk(home, ['fork', 'fifo-config']).workspaces[0].id;
      const mnt = join(dir, `mnt-${driver}`);
      const t0 = Date.now();
      const r = awc(home, ['mount', ws, mnt, '--warm'], { AWC_MOUNT_DRIVER: driver }, { timeoutMs: 45_000 });
      assert.equal(r.code, 0, `mount --warm (${driver}) returned (${Date.now() - t0} ms): ${r.stderr}`);
      assert.ok(Date.now() - t0 < 45_000, `promptly (${driver})`);
      assert.ok(r.json.warmed.entries > 0, 'the walk ran');
      assert.equal(r.json.warmed.git, false, `a FIFO config: no status (${driver})`);
      awcOk(home, ['unmount', ws, '--discard']);
    }
    // snapshot import --git of that repository, and of one whose HEAD is a FIFO: an answer, never a hang
    const imp = awc(home, ['snapshot', 'import', '--git', repo, '--name', 'fifo-config-git'], {}, { timeoutMs: 45_000 });
    assert.ok(imp.code === 0 || /^E_GIT_/.test(errorOf(imp).code), `import --git answered: ${imp.code} ${imp.stderr}`);
    rmSync(join(repo, '.git', 'HEAD'));
    execFileSync('mkfifo', ['-m', '644', join(repo, '.git', 'HEAD')]);
    const head = awc(home, ['snapshot', 'import', '--git', repo, '--name', 'fifo-head-git'], {}, { timeoutMs: 45_000 });
    assert.notEqual(head.code, 0, head.stderr);
    assert.equal(errorOf(head).code, 'E_GIT_NOT_A_REPO', head.stderr);
  });

  it('the environment key runs runtimes from the host PATH only, never the tree', () => {
    const tree = join(work, 'envkey');
    const marker = join(work, 'envkey-ran');
    mkdirSync(join(tree, 'bin'), { recursive: true });
    mkdirSync(join(tree, 'node_modules', '.bin'), { recursive: true });
    writeFileSync(join(tree, 'package-lock.json'), '{"lockfileVersion":3}\n');
    for (const d of ['', 'bin', 'node_modules/.bin'])
      writeFileSync(join(tree, d, 'node'), `#!/bin/sh\ntouch ${marker}\necho v99.0.0\n`, { mode: 0o755 });
    const host = spawnSync('node', ['--version'], { encoding: 'utf8' })
      .stdout.trim()
      .replace(/^v(\d+)\..*$/, '$1');
    const env = { PATH: `.:node_modules/.bin:${join(tree, 'bin')}:${process.env.PATH}` };
    const r = spawnSync(process.execPath, [CLI, '--json', 'env-key', '.'], {
      cwd: tree,
      encoding: 'utf8',
      env: { ...process.env, ...env },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(!existsSync(marker), "a runtime of the tree's ran");
    assert.equal(JSON.parse(r.stdout).runtimes.node, host, "the host's node answered");
  });
});
