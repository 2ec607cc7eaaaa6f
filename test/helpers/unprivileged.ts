import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, mkdirSync } from 'node:fs';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';

/** A throw-away system user for tests that check what another local user can do. */
export interface TestUser {
  name: string;
  uid: number;
  gid: number;
  /** Runs a command as this user (`setpriv --reuid --regid --clear-groups`, cwd `/`). */
  run(cmd: string, args: string[], env?: NodeJS.ProcessEnv): SpawnSyncReturns<string>;
  /** Runs `sh -c script sh ...args` as this user; its stdout, trimmed. @throws Error when it exits non-zero */
  sh(script: string, env?: NodeJS.ProcessEnv, ...args: string[]): string;
  /** Makes directory `path` (and its missing parents) and gives it to this user; returns `path`. */
  dir(path: string): string;
  /** Runs a Node script (CommonJS, argv[1] = `arg`) as this user and parses its stdout as JSON. */
  node(script: string, arg?: string): any;
  /** Kills every process of the user (SIGKILL) and waits until none is left (10 s at most): a daemon or warm CLI of a home the user made. Never throws. */
  stopProcesses(): void;
  /** Kills the user's processes, then removes the user (and its group). Never throws. */
  remove(): void;
}

/** True when tests can create users and switch to them (root, useradd and setpriv present). */
export function canCreateUsers(): boolean {
  if (process.getuid?.() !== 0) return false;
  return ['useradd', 'userdel', 'setpriv'].every((c) => spawnSync('sh', ['-c', `command -v ${c}`], { stdio: 'ignore' }).status === 0);
}

/** Why a test of ordinary users of the root daemon (real users, overlay) cannot run here, for node:test's `skip`; false when it can. */
export function usersAndOverlaySkip(): string | false {
  if (!canCreateUsers()) return 'needs root, useradd and setpriv';
  return detectDriver('auto').driver !== 'overlay' ? 'overlay is not possible here' : false;
}

/**
 * Runs a shadow-utils command, retried for up to 10 s while another process holds /etc/passwd or
 * /etc/group (test files run two at a time, so two may add or remove users at once). Exit codes in
 * `ok` also count as success (6: no such user or group). Other failures throw, or with `bestEffort` are
 * left (userdel of a user a lingering process still runs as).
 */
function retryLocked(cmd: string, args: string[], ok: number[] = [], bestEffort = false): void {
  const until = Date.now() + 10_000;
  for (;;) {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    if (r.status === 0 || ok.includes(r.status ?? -1)) return;
    if (Date.now() > until || !/lock|try again/i.test(r.stderr)) {
      if (bestEffort) return;
      throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}

/** Creates a system user `awctest-<random>` without a home (`useradd -M -r`), with its own group. */
export function createTestUser(): TestUser {
  const name = `awctest-${randomBytes(4).toString('hex')}`;
  retryLocked('useradd', ['-M', '-r', '-U', '-s', '/usr/sbin/nologin', name]);
  const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
  const run = (cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> =>
    spawnSync('setpriv', ['--reuid', String(uid), '--regid', String(gid), '--clear-groups', '--', cmd, ...args], {
      encoding: 'utf8',
      cwd: '/',
      env: { PATH: process.env.PATH, ...env },
      maxBuffer: 64 * 1024 * 1024,
      timeout: 120_000,
    });
  return {
    name,
    uid,
    gid,
    run,
    sh(script: string, env: NodeJS.ProcessEnv = {}, ...args: string[]): string {
      const r = run('sh', ['-c', script, 'sh', ...args], env);
      if (r.status !== 0) throw new Error(`${script} as ${name} exited ${r.status}: ${r.stderr}`);
      return r.stdout.trim();
    },
    dir(path: string): string {
      mkdirSync(path, { recursive: true });
      chownSync(path, uid, gid);
      return path;
    },
    node(script: string, arg = ''): any {
      const r = run(process.execPath, ['-e', script, arg]);
      if (r.status !== 0) throw new Error(`node as ${name} exited ${r.status}: ${r.stderr}`);
      return JSON.parse(r.stdout);
    },
    stopProcesses(): void {
      // SIGKILL every process of the user (a daemon or warm CLI of its own home), then wait until none is left (10 s at most)
      const until = Date.now() + 10_000;
      while (spawnSync('pkill', ['-KILL', '-u', String(uid)]).status === 0 && Date.now() < until)
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    },
    remove(): void {
      this.stopProcesses();
      retryLocked('userdel', [name], [6], true);
      retryLocked('groupdel', [name], [6], true);
    },
  };
}

/** The setpriv(1) arguments that run `argv` as `u` (its uid and gid, no supplementary groups). */
export function asUserArgv(u: Pick<TestUser, 'uid' | 'gid'>, argv: string[]): string[] {
  return ['--reuid', String(u.uid), '--regid', String(u.gid), '--clear-groups', '--', ...argv];
}
