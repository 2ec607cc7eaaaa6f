import { spawnSync, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, readlinkSync, readFileSync as rf } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Path of the compiled CLI. */
export const CLI = fileURLToPath(new URL('../../src/cli/entry/main.js', import.meta.url));
/** The project checkout (three levels above dist/test/helpers). */
export const PROJECT = fileURLToPath(new URL('../../..', import.meta.url));

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  json: any;
}

/** Runs `awc --home HOME --json ...args` as a user would; parses stdout as JSON when it is. */
export function awc(
  home: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  opts: { json?: boolean; timeoutMs?: number } = {},
): CliResult {
  const full = ['--home', home, ...(opts.json === false ? [] : ['--json']), ...args];
  const r = spawnSync(process.execPath, [CLI, ...full], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    maxBuffer: 256 * 1024 * 1024,
    timeout: opts.timeoutMs,
  });
  let json: any;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    json = undefined;
  }
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, json };
}

/** Like `awc` but throws with stderr when the exit status is not 0. */
export function awcOk(home: string, args: string[], env: NodeJS.ProcessEnv = {}): any {
  const r = awc(home, args, env);
  if (r.code !== 0) throw new Error(`awc ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.json;
}

/** Parses the JSON error an `awc --json` command printed on stderr. */
export function errorOf(r: CliResult): { code: string; message: string; hint: string } {
  return JSON.parse(r.stderr.trim().split('\n').pop()!);
}

/** Unmounts everything mounted under `dir` (lazily, deepest first) and stops the daemon of `home` (run with `env` added, e.g. its AWC_CATALOG). Never throws. */
export function cleanupMounts(home: string, dir: string = home, env: NodeJS.ProcessEnv = {}): void {
  spawnSync(process.execPath, [CLI, '--home', home, 'daemon', 'stop', '--force'], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, ...env },
  });
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p) => p && (p === dir || p.startsWith(dir + '/')))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  try {
    for (const c of readdirSync('/sys/fs/fuse/connections')) void c;
  } catch {
    // no fusectl
  }
}

/** What a path is, for tree comparisons: type, permission bits, content hash or symlink target. */
export interface NodeInfo {
  type: 'file' | 'dir' | 'symlink' | 'other';
  mode: number;
  hash?: string;
  target?: string;
}

/** Reads a directory tree (without following symlinks) into path → NodeInfo. `skip` drops paths (and their subtrees). */
export function readTreeInfo(root: string, skip: (rel: string) => boolean = () => false): Map<string, NodeInfo> {
  const out = new Map<string, NodeInfo>();
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const r = rel === '' ? name : `${rel}/${name}`;
      if (skip(r)) continue;
      const st = lstatSync(p);
      const mode = st.mode & 0o7777;
      if (st.isDirectory()) {
        out.set(r, { type: 'dir', mode });
        walk(p, r);
      } else if (st.isFile()) out.set(r, { type: 'file', mode, hash: createHash('sha256').update(rf(p)).digest('hex') });
      else if (st.isSymbolicLink()) out.set(r, { type: 'symlink', mode: 0, target: readlinkSync(p) });
      else out.set(r, { type: 'other', mode });
    }
  };
  walk(root, '');
  return out;
}

/** Changes between two tree infos as path → status (added, deleted, modified, type-changed, mode-changed), the oracle for `awc diff`. */
export function diffInfo(a: Map<string, NodeInfo>, b: Map<string, NodeInfo>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [p, x] of a) {
    const y = b.get(p);
    if (!y) out.set(p, 'deleted');
    else if (x.type !== y.type) out.set(p, 'type-changed');
    else if (x.hash !== y.hash || x.target !== y.target) out.set(p, 'modified');
    else if (x.mode !== y.mode) out.set(p, 'mode-changed');
  }
  for (const p of b.keys()) if (!a.has(p)) out.set(p, 'added');
  return out;
}

/** Copies a tree with `cp -a` (the baseline a user would pick). */
export function copyTree(from: string, to: string): void {
  execFileSync('cp', ['-a', from, to]);
}

/**
 * Kills the host daemon of `home` and its supervisor (SIGKILL: a crash of the whole daemon,
 * the content FUSE connection with it) and waits up to 10 s until both are gone (a zombie
 * counts as gone). Returns the status the daemon gave before.
 */
export function killDaemon(home: string): { pid: number; supervisor?: number } {
  const status = awcOk(home, ['daemon', 'status']);
  const pids: number[] = [status.supervisor, status.pid].filter((p) => typeof p === 'number');
  for (const pid of pids) process.kill(pid, 'SIGKILL');
  const gone = (pid: number): boolean => {
    try {
      process.kill(pid, 0);
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat[stat.lastIndexOf(')') + 2] === 'Z';
    } catch {
      return true;
    }
  };
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && !pids.every(gone));
  return status;
}
