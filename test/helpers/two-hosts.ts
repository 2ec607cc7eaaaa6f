import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathsOf } from '../../src/config/config.js';
import { SqliteCatalog } from '../../src/catalog/sqlite/sqlite-catalog.js';
import { awc, CLI, cleanupMounts, type CliResult } from './cli.js';

/** One of two AWC hosts on this machine: its own home and host id, the shared catalog and object store. */
export interface TestHost {
  id: string;
  home: string;
  /** A directory for this host's mount targets. */
  mnt: string;
  env: NodeJS.ProcessEnv;
  /** Runs `awc --json …` on this host (synchronously). */
  run(args: string[], env?: NodeJS.ProcessEnv): CliResult;
  /** Runs `awc --json …` on this host as a child process, without waiting for it. */
  spawn(args: string[]): Promise<CliResult>;
  /** Pid of this host's daemon and of its supervisor (undefined when not running). */
  pids(): { daemon?: number; supervisor?: number };
}

/**
 * Two hosts sharing one catalog (`sqlite:<dir>/shared/catalog.sqlite`) and one object store
 * (`file:<dir>/shared/objects`), as a fleet on one machine: two AWC_HOME, two AWC_HOST, short
 * lease TTLs (`ttlMs`, heartbeat every ttl/6). `catalog` is a connection of the test process for
 * reading the rows.
 */
export async function twoHosts(
  dir: string,
  ttlMs: number,
): Promise<{ a: TestHost; b: TestHost; catalog: SqliteCatalog; cleanup(): Promise<void> }> {
  const shared = join(dir, 'shared');
  mkdirSync(shared, { recursive: true });
  const base = {
    AWC_CATALOG: `sqlite:${join(shared, 'catalog.sqlite')}`,
    AWC_OBJECT_STORE: `file:${join(shared, 'objects')}`,
    AWC_LEASE_TTL_MS: String(ttlMs),
    AWC_HEARTBEAT_MS: String(Math.floor(ttlMs / 6)),
  };
  const host = (id: string): TestHost => testHost(join(dir, id), id, { ...base, AWC_HOST: id });
  const a = host('host-a');
  const b = host('host-b');
  const catalog = await SqliteCatalog.open(join(shared, 'catalog.sqlite'));
  return {
    a,
    b,
    catalog,
    async cleanup() {
      for (const h of [a, b]) stopTestHost(h, join(dir, h.id));
      cleanupMounts(a.home, dir); // and whatever else a test mounted under dir

      await catalog.close();
    },
  };
}

/**
 * One host of a fleet on this machine: home `<dir>/home`, mount targets under `<dir>/mnt`, its
 * CLI run with `env` (which names its AWC_HOST, catalog, object store and lease timing).
 */
export function testHost(dir: string, id: string, env: NodeJS.ProcessEnv): TestHost {
  const home = join(dir, 'home');
  const mnt = join(dir, 'mnt');
  mkdirSync(mnt, { recursive: true });
  const pidOf = (f: string): number | undefined => {
    try {
      return Number(readFileSync(f, 'utf8').trim()) || undefined;
    } catch {
      return undefined;
    }
  };
  return {
    id,
    home,
    mnt,
    env,
    run: (args, extra = {}) => awc(home, args, { ...env, ...extra }),
    spawn: (args) =>
      new Promise((resolve) => {
        const c = spawn(process.execPath, [CLI, '--home', home, '--json', ...args], { env: { ...process.env, ...env } });
        let stdout = '';
        let stderr = '';
        c.stdout.on('data', (d) => (stdout += d));
        c.stderr.on('data', (d) => (stderr += d));
        c.on('close', (code) => {
          let json: unknown;
          try {
            json = JSON.parse(stdout);
          } catch {
            json = undefined;
          }
          resolve({ code: code ?? -1, stdout, stderr, json });
        });
      }),
    pids: () => {
      const p = pathsOf({ home });
      return { daemon: pidOf(p.pidFile), supervisor: pidOf(p.supervisorPidFile) };
    },
  };
}

/** Stops a test host: resumes its daemon if it was stopped (SIGSTOP), stops it, unmounts everything under `dir`. Never throws. */
export function stopTestHost(h: TestHost, dir: string): void {
  // a stopped daemon cannot stop: let it go on first
  const { daemon, supervisor } = h.pids();
  for (const pid of [daemon, supervisor]) if (pid) signal(pid, 'SIGCONT');
  cleanupMounts(h.home, dir, h.env);
}

/** Sends `sig` to `pid`; a process that is gone is fine. */
export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** Polls `check` every 50 ms until it returns true; fails after `timeoutMs`. */
export async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The mount targets under `dir` (overlay, bind or FUSE), from this machine's mount table. */
export function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => p !== undefined && p.startsWith(dir + '/'));
}

/**
 * Homes of image-sharing hosts on this machine (the layer image tests): each of `names` gets
 * `<work>/host-<name>` on the overlay driver, with the catalog and store under `<work>/shared`,
 * but `own`, whose are its own (`<work>/own-<own>`); `images(name)` is its `AWC_LAYER_IMAGES`.
 * Returns each host's home and environment by name.
 */
export function imageHosts(
  work: string,
  names: readonly string[],
  own: string,
  images: (name: string) => 'on' | 'auto' | 'off',
): { homes: Record<string, string>; env: Record<string, NodeJS.ProcessEnv> } {
  const homes: Record<string, string> = {};
  const env: Record<string, NodeJS.ProcessEnv> = {};
  const shared = join(work, 'shared');
  mkdirSync(shared, { recursive: true, mode: 0o700 });
  for (const h of names) {
    homes[h] = join(work, `host-${h}`);
    const dir = h === own ? join(work, `own-${h}`) : shared;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    env[h] = {
      AWC_CATALOG: `sqlite:${join(dir, 'catalog.sqlite')}`,
      AWC_OBJECT_STORE: `file:${join(dir, 'objects')}`,
      AWC_MOUNT_DRIVER: 'overlay',
      AWC_HOST: `host-${h}`,
      AWC_LAYER_IMAGES: images(h),
    };
  }
  return { homes, env };
}
