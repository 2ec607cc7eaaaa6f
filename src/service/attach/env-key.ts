import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { realpath } from 'node:fs/promises';
import { isAbsolute, resolve as resolvePath } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { DirFd } from '../../core/dir-fd.js';
import { nameFromBytes } from '../../core/raw-name.js';
import { within } from '../../core/path-within.js';

/**
 * The environment key of a worktree: a digest of its lockfiles and of the versions of the
 * runtimes they need, as Operon's `env_key` (docs/explanation/attach.md#the-environment-key).
 * Two worktrees with the same key can share one installed dependency tree.
 */

/** One ecosystem: which lockfiles name it, which runtime its installed tree depends on, where that tree lives. */
interface Ecosystem {
  name: string;
  /** Lockfile names (the last path component). */
  files: RegExp;
  /** Runtime whose version goes into the key (see RUNTIMES). */
  runtime: keyof typeof RUNTIMES;
  /** Dependency directories the install makes, relative to the lockfile's directory. */
  dirs: string[];
  /** The install command for a lockfile of this ecosystem (run in its directory). */
  install: (file: string) => string;
}

const ECOSYSTEMS: Ecosystem[] = [
  {
    name: 'node',
    files: /^(package-lock\.json|npm-shrinkwrap\.json|yarn\.lock|pnpm-lock\.yaml|bun\.lockb?)$/,
    runtime: 'node',
    dirs: ['node_modules'],
    install: (f) =>
      f.startsWith('yarn')
        ? 'yarn install --frozen-lockfile'
        : f.startsWith('pnpm')
          ? 'pnpm install --frozen-lockfile'
          : f.startsWith('bun')
            ? 'bun install --frozen-lockfile'
            : 'npm ci',
  },
  {
    name: 'python',
    files: /^(requirements.*\.txt|poetry\.lock|uv\.lock|Pipfile\.lock|pdm\.lock)$/,
    runtime: 'python',
    dirs: ['.venv', 'venv'],
    install: (f) =>
      f === 'poetry.lock'
        ? 'POETRY_VIRTUALENVS_IN_PROJECT=true poetry install'
        : f === 'uv.lock'
          ? 'uv sync --frozen'
          : f === 'Pipfile.lock'
            ? 'PIPENV_VENV_IN_PROJECT=1 pipenv sync'
            : f === 'pdm.lock'
              ? 'pdm sync'
              : `python3 -m venv .venv && .venv/bin/pip install -r ${f}`,
  },
  {
    name: 'ruby',
    files: /^Gemfile\.lock$/,
    runtime: 'ruby',
    dirs: ['vendor/bundle'],
    install: () => 'bundle config set path vendor/bundle && bundle install',
  },
  { name: 'rust', files: /^Cargo\.lock$/, runtime: 'rust', dirs: ['target'], install: () => 'cargo build --locked' },
  { name: 'go', files: /^go\.sum$/, runtime: 'go', dirs: ['vendor'], install: () => 'go mod vendor' },
];

/** How each runtime's version is read (the command on PATH, and the part of its answer that matters for an installed tree). */
const RUNTIMES = {
  // native addons are built for a Node ABI, which changes with the major version
  node: { cmd: 'node', args: ['--version'], pick: /^v(\d+)\./ },
  // a virtualenv is bound to its interpreter's minor version
  python: { cmd: 'python3', args: ['--version'], pick: /Python (\d+\.\d+)/ },
  ruby: { cmd: 'ruby', args: ['-e', 'print RUBY_VERSION'], pick: /^(\d+\.\d+)/ },
  // rustc's artefacts are only reusable by the very same compiler
  rust: { cmd: 'rustc', args: ['--version'], pick: /^rustc (\S+)/ },
  go: { cmd: 'go', args: ['env', 'GOVERSION'], pick: /^go(\d+\.\d+)/ },
} as const;

/** Directories never searched for lockfiles: installed trees, build output, VCS data, hidden directories. */
const SKIP_DIRS = /^(\..*|node_modules|vendor|target|dist|build|venv|__pycache__)$/;
/** How deep below the worktree lockfiles are looked for (0: the worktree itself). */
const MAX_DEPTH = 2;
/** The recipe's version: part of the digested text, so a new recipe never matches an old key. */
const RECIPE = 'awc-env-key v1';

/** What `envKey` found. */
export interface EnvKeyResult {
  /** `env1-` and the first 32 hex digits of the SHA-256 of `recipe`. */
  key: string;
  /** The text that was digested (one fact a line). */
  recipe: string;
  /** Lockfiles by relative slash path, byte order, with the SHA-256 (hex) of their content. */
  lockfiles: { path: string; sha256: string; ecosystem: string }[];
  /** Runtime versions that went into the key (`none` when the runtime is not on PATH). */
  runtimes: Record<string, string>;
  /** Dependency directories the lockfiles' installs make (relative; whether they exist or not). */
  envDirs: string[];
  /** The install to run for each lockfile (`cd <dir> && <command>` for nested ones). */
  installs: string[];
}

/** Options of `envKey`. */
export interface EnvKeyOptions {
  /** The environment whose PATH finds the runtimes (default: this process's). */
  env?: NodeJS.ProcessEnv;
}

/**
 * Computes the environment key of `dir` (see the module comment and
 * docs/explanation/attach.md#the-environment-key for the exact recipe). Lockfiles are found
 * down to MAX_DEPTH levels below `dir` without following a symlink (a symlinked lockfile or
 * directory is not looked at); runtimes are asked for their version on `opts.env`'s PATH.
 * @throws E_SOURCE_NOT_FOUND (`dir` is missing or not a directory), E_PERMISSION
 */
export async function envKey(dir: string, opts: EnvKeyOptions = {}): Promise<EnvKeyResult> {
  const root = DirFd.openRoot(dir, { follow: true });
  if (!root) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
  const found: { path: string; sha256: string; eco: Ecosystem }[] = [];
  try {
    findLockfiles(root.dir, 0, found);
  } finally {
    root.dir.close();
  }
  found.sort((a, b) => Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)));
  const runtimes: Record<string, string> = {};
  const env = await hostPathEnv(opts.env ?? process.env, dir);
  for (const name of [...new Set(found.map((f) => f.eco.runtime))].sort()) runtimes[name] = await runtimeVersion(name, env);
  const recipe = [
    RECIPE,
    `platform ${process.platform} ${process.arch}`,
    ...found.map((f) => `lockfile ${JSON.stringify(f.path)} ${f.sha256}`),
    ...Object.entries(runtimes).map(([n, v]) => `runtime ${n} ${v}`),
  ].join('\n');
  const prefixOf = (p: string): string => (p.includes('/') ? p.slice(0, p.lastIndexOf('/') + 1) : '');
  return {
    key: `env1-${createHash('sha256').update(recipe).digest('hex').slice(0, 32)}`,
    recipe,
    lockfiles: found.map((f) => ({ path: f.path, sha256: f.sha256, ecosystem: f.eco.name })),
    runtimes,
    envDirs: [...new Set(found.flatMap((f) => f.eco.dirs.map((d) => prefixOf(f.path) + d)))].sort(),
    installs: [
      ...new Set(
        found.map((f) => {
          const prefix = prefixOf(f.path);
          const cmd = f.eco.install(f.path.slice(prefix.length));
          return prefix ? `(cd ${shellQuote(prefix.slice(0, -1))} && ${cmd})` : cmd;
        }),
      ),
    ],
  };
}

/** Appends the lockfiles of `dir` (and of its subdirectories down to MAX_DEPTH) to `out`. */
function findLockfiles(dir: DirFd, depth: number, out: { path: string; sha256: string; eco: Ecosystem }[]): void {
  // the entries' types from the listing: only directories and lockfiles are looked at (lstat'ed, opened and checked)
  for (const { name: raw, type } of dir.listTyped()) {
    const name = nameFromBytes(raw);
    if (type === 'dir' ? depth >= MAX_DEPTH || SKIP_DIRS.test(name) : type !== 'file' || !ECOSYSTEMS.some((e) => e.files.test(name)))
      continue;
    const st = dir.lstat(name);
    if (!st) continue;
    if (st.isDirectory()) {
      if (depth >= MAX_DEPTH || SKIP_DIRS.test(name)) continue;
      const f = dir.open(name, st);
      if (f?.type !== 'dir') continue;
      try {
        findLockfiles(f.dir, depth + 1, out);
      } finally {
        f.dir.close();
      }
      continue;
    }
    const eco = st.isFile() ? ECOSYSTEMS.find((e) => e.files.test(name)) : undefined;
    if (!eco) continue;
    const f = dir.open(name, st);
    if (f?.type !== 'file') continue;
    try {
      out.push({ path: dir.childRel(name), sha256: createHash('sha256').update(fs.readFileSync(f.fd)).digest('hex'), eco });
    } finally {
      fs.closeSync(f.fd);
    }
  }
}

/**
 * `env` with a PATH of the host's only: its absolute entries that are neither `dir` nor below
 * it (nor below its real path), so that no runtime of the tree being keyed (a `node` in the
 * workspace, a relative entry such as `.` or `node_modules/.bin`) ever runs
 * (docs/explanation/security.md "Snapshot content never runs").
 */
export async function hostPathEnv(env: NodeJS.ProcessEnv, dir: string): Promise<NodeJS.ProcessEnv> {
  const roots = [...new Set([resolvePath(dir), await realpath(dir).catch(() => resolvePath(dir))])];
  const inside = (p: string) => roots.some((r) => within(r, p));
  const keep: string[] = [];
  for (const entry of (env.PATH ?? '').split(':')) {
    if (!isAbsolute(entry)) continue;
    const real = await realpath(entry).catch(() => undefined);
    if (real === undefined || inside(resolvePath(entry)) || inside(real)) continue;
    keep.push(entry);
  }
  return { ...env, PATH: keep.join(':') };
}

/** The version of a runtime as RUNTIMES picks it (run from `/`, on `env`'s PATH), or `none` when it is not on PATH or does not answer. */
function runtimeVersion(name: keyof typeof RUNTIMES, env: NodeJS.ProcessEnv): Promise<string> {
  // one create asks twice (the snapshot's key, then the worktree's): the same answer a moment later
  const key = `${name}\0${env.PATH ?? ''}`;
  const known = recentVersions.get(key);
  if (known && Date.now() - known.at < VERSION_REUSE_MS) return known.version;
  const version = askRuntimeVersion(name, env);
  recentVersions.set(key, { at: Date.now(), version });
  return version;
}

/** How long a runtime's version, once asked, is taken again without asking (ms): a command's span, not a daemon's life. */
const VERSION_REUSE_MS = 10_000;
/** Versions asked lately, by runtime and PATH. */
const recentVersions = new Map<string, { at: number; version: Promise<string> }>();

/**
 * The path of the first executable `cmd` on `path` (a PATH value of absolute entries), or
 * undefined when there is none: what execFile would run.
 */
function onPath(cmd: string, path: string): string | undefined {
  for (const entry of path.split(':')) {
    const p = `${entry}/${cmd}`;
    try {
      if (fs.statSync(p).isFile()) {
        fs.accessSync(p, fs.constants.X_OK);
        return p;
      }
    } catch {
      // not there, or not executable: the next entry
    }
  }
  return undefined;
}

/**
 * The version part of this process's own Node when the `node` on `env`'s PATH is the very
 * executable this process runs (their real paths are one file): the answer `node --version`
 * would give, without starting a process. Otherwise undefined.
 */
function ownNodeVersion(env: NodeJS.ProcessEnv): string | undefined {
  const found = onPath('node', env.PATH ?? '');
  if (found === undefined) return undefined;
  try {
    if (fs.realpathSync(found) !== fs.realpathSync(process.execPath)) return undefined;
  } catch {
    return undefined;
  }
  return RUNTIMES.node.pick.exec(process.version)?.[1];
}

/** Runs the runtime's version command on `env`'s PATH: the version part of its answer, or `none`. */
function askRuntimeVersion(name: keyof typeof RUNTIMES, env: NodeJS.ProcessEnv): Promise<string> {
  const own = name === 'node' ? ownNodeVersion(env) : undefined;
  if (own !== undefined) return Promise.resolve(own);
  const r = RUNTIMES[name];
  return new Promise((resolve) => {
    execFile(r.cmd, [...r.args], { env, cwd: '/', timeout: 10_000 }, (err, stdout, stderr) => {
      const m = r.pick.exec(`${stdout}`.trim()) ?? r.pick.exec(`${stderr}`.trim());
      resolve(err || !m ? 'none' : m[1]!);
    });
  });
}

/** `s` as one POSIX shell word (single-quoted unless it is plainly safe). */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
