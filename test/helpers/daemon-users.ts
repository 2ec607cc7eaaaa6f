import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awcOk, CLI, cleanupMounts } from './cli.js';
import { asUserArgv, createTestUser, type TestUser } from './unprivileged.js';
import { userSocketsDirOf } from '../../src/config/config.js';

/** What `awc --json` as a user gave: its exit status, output, parsed result (status 0) or error (the last stderr line). */
export interface UserCliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  json: any;
  err?: { code: string; message: string; hint: string; retryable?: boolean; details?: any };
}

/**
 * A root home whose daemon serves throw-away ordinary users: the one set-up of the tests of
 * the root daemon's per-user boundaries (test/user-caps*.test.ts, test/daemon/users/live-state-mounter.test.ts)
 * and of bench/daemon-flood.ts.
 */
export interface DaemonUsers {
  /** The 0755 work directory everything lives under (the users' HOME too). */
  work: string;
  /** The root home (0700) with the users allowed in its config.json. */
  home: string;
  /** The users, in the order the config lists them (all in namespace `default`). */
  users: TestUser[];
  /** Runs `awc --home <home> --json ...args` as `who` (env: HOME=work and the set-up's `userEnv`, then `env`). */
  as(who: TestUser, args: string[], env?: NodeJS.ProcessEnv): UserCliResult;
  /** {@link as}, asserting exit 0 (the error names the command and stderr); its parsed JSON. */
  ok(who: TestUser, args: string[], env?: NodeJS.ProcessEnv): any;
  /** The path of `who`'s API socket of the daemon. */
  socketOf(who: TestUser): string;
  /** `<work>/<user>-<name>`, made and owned by `who` (0755) when `make`; the path. */
  dirOf(who: TestUser, name: string, make?: boolean): string;
  /** Runs the Node script `script` as `who` in the background; resolves with its first line of output (JSON), rejects if it exits first. */
  background(who: TestUser, script: string, args: (string | number)[]): Promise<any>;
  /** Kills (SIGKILL) every background script still running and waits for them. */
  stopBackground(): Promise<void>;
  /** Stops the background scripts and the daemon, unmounts what is under `work`, removes the users and `work`. Never throws. */
  close(): Promise<void>;
}

/** Options of {@link daemonWithUsers}. */
export interface DaemonUsersOptions {
  /** The work directory's prefix under the temporary directory (e.g. `awc-caps-`). */
  prefix: string;
  /** How many users (default 2). */
  users?: number;
  /** More keys of the home's config.json (limits, `warmCli`, ...). */
  config?: Record<string, unknown>;
  /** Environment of every user command (besides HOME=work), e.g. `{AWC_NO_WARM: '1'}`. */
  userEnv?: NodeJS.ProcessEnv;
  /** Start the daemon (default true). */
  start?: boolean;
}

/**
 * Makes a 0755 work directory, N new users, a 0700 root home allowing them all in namespace
 * `default` (plus `config`), and starts its daemon. Call {@link DaemonUsers.close} in `after`.
 */
export function daemonWithUsers(opts: DaemonUsersOptions): DaemonUsers {
  const work = mkdtempSync(join(tmpdir(), opts.prefix));
  chmodSync(work, 0o755);
  const home = join(work, 'home');
  const users: TestUser[] = [];
  const holders: ChildProcess[] = [];
  const as = (who: TestUser, args: string[], env: NodeJS.ProcessEnv = {}): UserCliResult => {
    const r = who.run(process.execPath, [CLI, '--home', home, '--json', ...args], { HOME: work, ...opts.userEnv, ...env });
    let err: UserCliResult['err'];
    if (r.status !== 0) {
      try {
        err = JSON.parse(r.stderr.trim().split('\n').pop()!);
      } catch {
        err = undefined;
      }
    }
    return {
      status: r.status,
      stdout: r.stdout,
      stderr: r.stderr,
      json: r.status === 0 && r.stdout.trim() ? JSON.parse(r.stdout) : undefined,
      err,
    };
  };
  const stopBackground = async (): Promise<void> => {
    for (const c of holders.splice(0)) {
      if (c.exitCode !== null || c.signalCode !== null) continue;
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await gone;
    }
  };
  const d: DaemonUsers = {
    work,
    home,
    users,
    as,
    ok(who, args, env) {
      const r = as(who, args, env);
      if (r.status !== 0) throw new Error(`awc ${args.join(' ')} as ${who.name} exited ${r.status}: ${r.stderr}`);
      return r.json;
    },
    socketOf: (who) => join(userSocketsDirOf({ home }), `${who.uid}.sock`),
    dirOf(who, name, make = false) {
      const p = join(work, `${who.name}-${name}`);
      if (make) {
        mkdirSync(p);
        chownSync(p, who.uid, who.gid);
      }
      return p;
    },
    background(who, script, args) {
      const child = spawn('setpriv', asUserArgv(who, [process.execPath, '-e', script, ...args.map(String)]), {
        cwd: '/',
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      holders.push(child);
      return new Promise((resolve, reject) => {
        let out = '';
        child.stdout!.on('data', (b) => {
          out += b;
          const nl = out.indexOf('\n');
          if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)));
        });
        child.on('exit', (code) => reject(new Error(`script as ${who.name} exited ${code} before it answered`)));
      });
    },
    stopBackground,
    async close() {
      await stopBackground().catch(() => undefined);
      cleanupMounts(home, work);
      for (const u of users) u.remove();
      rmSync(work, { recursive: true, force: true });
    },
  };
  try {
    for (let i = 0; i < (opts.users ?? 2); i++) users.push(createTestUser());
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(
      join(home, 'config.json'),
      JSON.stringify({ users: users.map((u) => ({ user: u.name, namespaces: ['default'] })), ...opts.config }),
    );
    if (opts.start !== false) awcOk(home, ['daemon', 'start']);
  } catch (err) {
    void d.close();
    throw err;
  }
  return d;
}
