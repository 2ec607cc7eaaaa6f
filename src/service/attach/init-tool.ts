import * as fs from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { parseJsonObject } from '../../core/json-object.js';
import { excludeFromGit } from '../git/git-exclude.js';

/**
 * `awc init cursor|codex|conductor [dir]` (docs/how-to/cursor.md, codex.md, conductor.md):
 * merges into the tool's configuration a worktree setup step that runs `awc attach` on the
 * new worktree and, where the tool has a teardown hook, one that runs `awc detach`. Other
 * keys and the tool's own steps are kept; a step AWC added before is replaced, not added twice.
 *
 * The tool's configuration is committed, so it names nothing of this machine: its steps run
 * the project's launcher `.awc/awc` through the tool's variable for the project's own
 * checkout (Cursor's `ROOT_WORKTREE_PATH`, Codex's `CODEX_SOURCE_TREE_PATH`, Conductor's
 * `CONDUCTOR_ROOT_PATH`). The launcher is machine-local: a shell script that runs this
 * machine's AWC (node and the CLI by absolute path, or `--awc`) with the home and namespace
 * `init` was given, written beside the configuration and kept out of git by a `/.awc/` line
 * in the repository's `info/exclude` (never a file the project commits). So the setup works
 * in the tool's environment, with no `AWC_HOME` and no `awc` on its PATH.
 */

/** A tool `awc init` configures. */
export type InitTool = 'cursor' | 'codex' | 'conductor';

/** What `initTool` wrote. */
export interface InitToolResult {
  tool: InitTool;
  /** The configuration file (absolute). */
  file: string;
  /** The file existed and was merged into (false: created). */
  merged: boolean;
  /** AWC's steps were there already: the file was left as it was. */
  unchanged: boolean;
  /** The setup (and teardown, where the tool has one) commands AWC's steps run. */
  setup: string;
  teardown: string | null;
  /** The machine-local launcher the steps run (absolute; `<dir>/.awc/awc`). */
  launcher: string;
  /** The exclude file that keeps `.awc/` out of git (null: `dir` is not a git checkout). */
  excludedIn: string | null;
}

/** The launcher, relative to the project: git-ignored through info/exclude (see the module comment). */
export const LAUNCHER = '.awc/awc';

/** A step that is AWC's setup or teardown, whatever command it runs AWC with (found again by a later `awc init`). */
const AWC_STEP = { setup: /\bawc\b["']?\s+attach\b/, teardown: /\bawc\b["']?\s+detach\b/ };

/** Options of `initTool`. */
export interface InitToolOptions {
  /**
   * The shell words the launcher runs (AWC with its home and namespace: the CLI's
   * selfInvocation); machine-specific, written only to the launcher.
   */
  launcher: string[];
}

/** A planned merge: the tool's file and its new text (undefined: unchanged). */
interface ToolPlan {
  file: string;
  rel: string;
  existed: boolean;
  text?: string;
  steps: Steps;
}

/**
 * Reads and merges the configuration of `tool` in `dir` without writing anything, so that a
 * malformed file is refused before anything else is done.
 * @throws E_TOOL_CONFIG, E_SYMLINK, E_SOURCE_NOT_FOUND (see initTool)
 */
export async function planTool(tool: InitTool, dir: string): Promise<ToolPlan> {
  const st = await fs.stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
  const spec = SPECS[tool];
  const file = join(dir, spec.file);
  const text = await readConfig(dir, spec.file);
  const steps = spec.steps(`sh "$${spec.root}/${LAUNCHER}"`);
  const res = await spec.merge(text, steps, file);
  return { file, rel: spec.file, existed: text !== undefined, text: res.text, steps };
}

/**
 * Writes or merges the configuration of `tool` in the repository `dir` (see the module
 * comment for each tool's file and keys), writes the launcher `.awc/awc` (0755) and keeps
 * `.awc/` out of git. Files are replaced atomically (never through a symlink; a file's mode
 * is kept). TOML comments are not kept (the file is parsed and written again); JSON keys
 * keep their order.
 * @throws E_TOOL_CONFIG (the existing file is malformed, or a key AWC must extend has a shape it cannot merge into),
 *   E_SYMLINK (a file or its directory is a symlink), E_SOURCE_NOT_FOUND (`dir` missing)
 */
export async function initTool(tool: InitTool, dir: string, opts: InitToolOptions): Promise<InitToolResult> {
  const plan = await planTool(tool, dir);
  const launcherText = [
    '#!/bin/sh',
    '# AWC for this project on this machine, written by `awc init cursor|codex|conductor`: the worktree',
    "# setup steps in the project's committed tool configuration run it. Machine-local: kept out of git",
    '# by .git/info/exclude; never commit it. Run `awc init <tool>` again to rewrite it.',
    `exec ${opts.launcher.join(' ')} "$@"`,
    '',
  ].join('\n');
  await writeConfig(dir, LAUNCHER, launcherText, 0o755);
  const excludedIn = await excludeFromGit(dir, `/${dirname(LAUNCHER)}/`);
  if (plan.text !== undefined) await writeConfig(dir, plan.rel, plan.text);
  return {
    tool,
    file: plan.file,
    merged: plan.existed,
    unchanged: plan.text === undefined,
    setup: plan.steps.setup,
    teardown: plan.steps.teardown,
    launcher: join(dir, LAUNCHER),
    excludedIn,
  };
}

/** AWC's steps for a tool. */
interface Steps {
  setup: string;
  teardown: string | null;
}

/** Drops AWC's steps from a shell script (an earlier init's), each with the `set -eu` line it began with. */
function withoutAwc(script: string, kind: 'setup' | 'teardown'): string {
  const lines = script.split('\n');
  const awc = (i: number): boolean => AWC_STEP[kind].test(lines[i] ?? '');
  return lines.filter((l, i) => !awc(i) && !(l.trim() === 'set -eu' && awc(i + 1))).join('\n');
}

interface Spec {
  /** The configuration file, relative to the repository. */
  file: string;
  /** The tool's variable naming the project's own checkout (where `.awc/awc` is), in the environment of its steps. */
  root: string;
  /** AWC's steps, running AWC as `awc` (a shell command). */
  steps: (awc: string) => Steps;
  /** The new text (undefined: nothing to change). @throws E_TOOL_CONFIG */
  merge: (text: string | undefined, steps: Steps, file: string) => Promise<{ text?: string }>;
}

const SPECS: Record<InitTool, Spec> = {
  // https://cursor.com/docs/configuration/worktrees: commands run one by one in the new worktree; no teardown hook
  cursor: {
    file: '.cursor/worktrees.json',
    root: 'ROOT_WORKTREE_PATH',
    steps: (awc) => ({ setup: `${awc} attach .`, teardown: null }),
    merge: async (text, steps, file) => {
      const cfg = parseJson(text, file);
      const key = 'setup-worktree-unix';
      const cur: unknown = cfg[key] ?? cfg['setup-worktree'];
      if (cur !== undefined && !(Array.isArray(cur) && cur.every((c) => typeof c === 'string')))
        throw notMergeable(
          file,
          `"${key}" is a script path, not a list of commands`,
          `add \`${steps.setup}\` as the first line of that script`,
        );
      const cmds = (cur ?? []) as string[];
      if (cfg[key] !== undefined && cmds[0] === steps.setup && cmds.filter((c) => AWC_STEP.setup.test(c)).length === 1) return {};
      return { text: JSON.stringify({ ...cfg, [key]: [steps.setup, ...cmds.filter((c) => !AWC_STEP.setup.test(c))] }, null, 2) + '\n' };
    },
  },
  // https://developers.openai.com/codex/app/local-environments: [setup] script when Codex makes a worktree, [cleanup] before it removes it
  codex: {
    file: '.codex/environments/environment.toml',
    root: 'CODEX_SOURCE_TREE_PATH',
    steps: (awc) => ({
      setup: `set -eu\n${awc} attach "\${CODEX_WORKTREE_PATH:-$PWD}"`,
      teardown: `set -eu\n${awc} detach "\${CODEX_WORKTREE_PATH:-$PWD}"`,
    }),
    merge: async (text, steps, file) => {
      const toml = await import('smol-toml');
      let cfg: Record<string, unknown>;
      try {
        cfg = text === undefined ? { version: 1 } : (toml.parse(text) as Record<string, unknown>);
      } catch (err) {
        throw malformed(file, (err as Error).message.split('\n')[0]!);
      }
      const next = { ...cfg };
      let changed = false;
      for (const [table, script, kind] of [
        ['setup', steps.setup, 'setup'],
        ['cleanup', steps.teardown!, 'teardown'],
      ] as const) {
        const t = cfg[table] ?? {};
        if (typeof t !== 'object' || Array.isArray(t)) throw notMergeable(file, `[${table}] is not a table`, `fix [${table}]`);
        const old = (t as Record<string, unknown>).script;
        if (old !== undefined && typeof old !== 'string')
          throw notMergeable(file, `${table}.script is not a string`, `fix ${table}.script`);
        // an earlier init's step (another launcher, or `awc` on PATH) is replaced
        const own = old === undefined ? '' : withoutAwc(old, kind).trim();
        // attach before the project's own setup (it may need the dependencies); detach after its cleanup
        const merged = own === '' ? script : table === 'setup' ? `${script}\n${own}` : `${own}\n${script}`;
        const want = `${merged}\n`;
        if (old === want) continue;
        next[table] = { ...(t as object), script: want };
        changed = true;
      }
      return changed ? { text: toml.stringify(next) + '\n' } : {};
    },
  },
  // https://docs.conductor.build/core/scripts: scripts.setup in the new workspace, scripts.archive before it is deleted
  conductor: {
    file: 'conductor.json',
    root: 'CONDUCTOR_ROOT_PATH',
    steps: (awc) => ({ setup: `${awc} attach "$CONDUCTOR_WORKSPACE_PATH"`, teardown: `${awc} detach "$CONDUCTOR_WORKSPACE_PATH"` }),
    merge: async (text, steps, file) => {
      const cfg = parseJson(text, file);
      const scripts = cfg.scripts ?? {};
      if (typeof scripts !== 'object' || Array.isArray(scripts) || scripts === null)
        throw notMergeable(file, '"scripts" is not an object', 'make "scripts" an object');
      const s = scripts as Record<string, unknown>;
      for (const k of ['setup', 'archive'])
        if (s[k] !== undefined && typeof s[k] !== 'string')
          throw notMergeable(file, `"scripts.${k}" is not a string`, `fix "scripts.${k}"`);
      const setup = s.setup as string | undefined;
      const archive = s.archive as string | undefined;
      // an earlier init's step (another launcher, or `awc` on PATH) is replaced
      const ownSetup = (setup ?? '')
        .split(' && ')
        .filter((c) => !AWC_STEP.setup.test(c))
        .join(' && ')
        .trim();
      const ownArchive = (archive ?? '')
        .split('; ')
        .filter((c) => !AWC_STEP.teardown.test(c))
        .join('; ')
        .trim();
      const next = {
        ...s,
        setup: ownSetup ? `${steps.setup} && ${ownSetup}` : steps.setup,
        archive: ownArchive ? `${ownArchive}; ${steps.teardown}` : steps.teardown,
      };
      if (next.setup === setup && next.archive === archive) return {};
      return { text: JSON.stringify({ ...cfg, scripts: next }, null, 2) + '\n' };
    },
  },
};

/** A JSON object from `text` ({} when there is no file). @throws E_TOOL_CONFIG */
function parseJson(text: string | undefined, file: string): Record<string, unknown> {
  if (text === undefined) return {};
  return parseJsonObject(text, (why) => malformed(file, why));
}

function malformed(file: string, why: string): AwcError {
  return new AwcError('E_TOOL_CONFIG', `${file} is malformed (${why}); it was left as it is`, {
    hint: 'Fix the file (or move it away) and run `awc init` again.',
    details: { file },
  });
}

function notMergeable(file: string, why: string, fix: string): AwcError {
  return new AwcError('E_TOOL_CONFIG', `${file}: ${why}, so AWC cannot add its step; it was left as it is`, {
    hint: `Do it by hand: ${fix}; or fix the key and run \`awc init\` again.`,
    details: { file },
  });
}

/** Every directory from `dir` down to `rel`'s parent must be a real directory (created when missing). @throws E_SYMLINK */
async function realDirs(dir: string, rel: string, create: boolean): Promise<void> {
  let cur = dir;
  for (const part of dirname(rel)
    .split('/')
    .filter((p) => p !== '.')) {
    cur = join(cur, part);
    const st = await fs.lstat(cur).catch(() => undefined);
    if (st?.isSymbolicLink()) throw new AwcError('E_SYMLINK', `${cur} is a symbolic link; awc init never writes through one`);
    if (!st && create) {
      await fs.mkdir(cur, { mode: 0o755 });
      await ownLikeParent(cur);
    }
  }
}

/** The file's text, or undefined when it does not exist. @throws E_SYMLINK, E_TOOL_CONFIG (not a regular file) */
async function readConfig(dir: string, rel: string): Promise<string | undefined> {
  await realDirs(dir, rel, false);
  const path = join(dir, rel);
  const st = await fs.lstat(path).catch(() => undefined);
  if (!st) return undefined;
  if (st.isSymbolicLink()) throw new AwcError('E_SYMLINK', `${path} is a symbolic link; awc init never writes through one`);
  if (!st.isFile()) throw malformed(path, 'not a regular file');
  return fs.readFile(path, 'utf8');
}

/** Replaces the file atomically (a temporary beside it, renamed), with `mode`, else keeping the mode of the one it replaces (new: 0644). */
async function writeConfig(dir: string, rel: string, text: string, fixedMode?: number): Promise<void> {
  await realDirs(dir, rel, true);
  const path = join(dir, rel);
  const old = await fs.lstat(path).catch(() => undefined);
  if (old?.isSymbolicLink()) throw new AwcError('E_SYMLINK', `${path} is a symbolic link; awc init never writes through one`);
  const mode = fixedMode ?? (old?.mode ?? 0o644) & 0o777;
  const tmp = join(dirname(path), `.${relative(dirname(path), path)}.awc-${process.pid}.tmp`);
  const fh = await fs.open(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, mode);
  try {
    await fh.writeFile(text);
    await fh.chmod(mode);
  } finally {
    await fh.close();
  }
  await ownLikeParent(tmp);
  await fs.rename(tmp, path);
}

/** Run as root in a user's repository: what AWC creates belongs to the owner of the directory it is in. */
async function ownLikeParent(path: string): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const p = await fs.stat(dirname(path));
  await fs.lchown(path, p.uid, p.gid);
}
