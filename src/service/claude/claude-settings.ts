import { constants } from 'node:fs';
import { chmod, lstat, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { mkdirPrivate, PRIVATE_FILE_MODE } from '../../core/private-fs.js';
import { parseJsonObject } from '../../core/json-object.js';

/** The hook events `awc init claude` configures (SessionStart: the stable-path context, src/service/claude/claude-session.ts). */
export const CLAUDE_HOOK_EVENTS = ['WorktreeCreate', 'WorktreeRemove', 'SessionStart'] as const;

/** A planned (or done) change of one Claude Code settings file. */
interface SettingsFile {
  /** The settings file. */
  path: string;
  /** The file does not exist yet. */
  create: boolean;
  /** The change changes the file. */
  changed: boolean;
  /** The settings after the change (what is written). */
  settings: Record<string, unknown>;
  /** The existing file's permission bits (kept), when it exists. */
  mode?: number;
}

/**
 * A planned (or done) merge of AWC's hook block into `<project>/.claude/settings.local.json`
 * (machine-local: Claude Code's own git-ignored settings; the hook command names this
 * machine's node, CLI and home), and the removal of AWC's hooks from the committed
 * `.claude/settings.json` where an earlier `awc init claude` put them.
 */
export interface SettingsPlan extends SettingsFile {
  /** The hook command configured for each event. */
  command: string;
  /** `.claude/settings.json` with AWC's hooks taken out, when it has any (absent: nothing to migrate). */
  legacy?: SettingsFile;
}

/** True for a hook command that is AWC's (`… hook claude`), whatever path or home it names. */
function isAwcHook(h: unknown): h is { type: string; command: string } {
  return (
    typeof h === 'object' &&
    h !== null &&
    (h as { type?: unknown }).type === 'command' &&
    /\shook claude$/.test(String((h as { command?: unknown }).command))
  );
}

/** A settings file's JSON object (null: no file). @throws E_CLAUDE_SETTINGS (see planClaudeSettings) */
async function readSettings(
  project: string,
  name: string,
): Promise<{ path: string; settings: Record<string, unknown>; mode?: number } | null> {
  const path = join(project, '.claude', name);
  const bad = (why: string): AwcError => new AwcError('E_CLAUDE_SETTINGS', `${path}: ${why}; left as it is`, { details: { path } });
  const dirSt = await lstat(join(project, '.claude')).catch(() => undefined);
  if (dirSt && !dirSt.isDirectory()) throw bad(`${join(project, '.claude')} is not a directory`);
  const st = await lstat(path).catch(() => undefined);
  if (!st) return null;
  if (!st.isFile()) throw bad(st.isSymbolicLink() ? 'is a symbolic link (not followed)' : 'is not a regular file');
  const text = await readFile(path, 'utf8').catch((err: unknown) => Promise.reject(toAwcError(err)));
  const settings = parseJsonObject(text, bad);
  const hooks = settings.hooks ?? {};
  if (typeof hooks !== 'object' || hooks === null || Array.isArray(hooks)) throw bad('"hooks" is not an object');
  for (const event of CLAUDE_HOOK_EVENTS)
    if ((hooks as Record<string, unknown>)[event] !== undefined && !Array.isArray((hooks as Record<string, unknown>)[event]))
      throw bad(`"hooks.${event}" is not an array`);
  return { path, settings, mode: st.mode & 0o7777 };
}

/** `settings` with AWC's hook for each event set to `command` (null: taken out; groups and events left empty go too). */
function withAwcHooks(settings: Record<string, unknown>, command: string | null): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...((settings.hooks ?? {}) as Record<string, unknown>) };
  for (const event of CLAUDE_HOOK_EVENTS) {
    const groups = (merged[event] ?? []) as unknown[];
    let found = false;
    const next = groups.flatMap((g: unknown) => {
      const inner = (g as { hooks?: unknown } | null)?.hooks;
      if (!Array.isArray(inner) || !inner.some(isAwcHook)) return [g];
      found = true;
      if (command !== null) return [{ ...(g as object), hooks: inner.map((h: unknown) => (isAwcHook(h) ? { ...h, command } : h)) }];
      const rest = inner.filter((h) => !isAwcHook(h));
      return rest.length > 0 ? [{ ...(g as object), hooks: rest }] : [];
    });
    if (!found && command !== null) next.push({ hooks: [{ type: 'command', command }] });
    if (next.length > 0) merged[event] = next;
    else delete merged[event];
  }
  const { hooks: _old, ...rest } = settings;
  return Object.keys(merged).length > 0 || settings.hooks !== undefined ? { ...rest, hooks: merged } : rest;
}

/**
 * Reads `<project>/.claude/settings.local.json` and merges AWC's WorktreeCreate /
 * WorktreeRemove / SessionStart hooks in (`{hooks: {WorktreeCreate: [{hooks: [{type:
 * "command", command}]}]}}`, Claude Code's settings shape), keeping every other key and hook.
 * An AWC hook already there (a command ending in ` hook claude`) gets `command` instead of a
 * second entry, so running it again changes nothing. The committed `.claude/settings.json`
 * gets no hook: AWC's hooks an earlier init wrote there are planned out of it (`legacy`).
 * Nothing is written here (see writeClaudeSettings).
 * @throws E_CLAUDE_SETTINGS (either file not JSON, not an object, `hooks` or an event's entry
 *   of the wrong type, a symlink or not a regular file: never followed nor overwritten)
 */
export async function planClaudeSettings(project: string, command: string): Promise<SettingsPlan> {
  const local = await readSettings(project, 'settings.local.json');
  const shared = await readSettings(project, 'settings.json');
  const settings = local?.settings ?? {};
  const out = withAwcHooks(settings, command);
  const plan: SettingsPlan = {
    path: join(project, '.claude', 'settings.local.json'),
    create: local === null,
    changed: local === null || JSON.stringify(out) !== JSON.stringify(settings),
    command,
    settings: out,
    ...(local?.mode !== undefined ? { mode: local.mode } : {}),
  };
  if (shared) {
    const stripped = withAwcHooks(shared.settings, null);
    if (JSON.stringify(stripped) !== JSON.stringify(shared.settings))
      plan.legacy = { path: shared.path, create: false, changed: true, settings: stripped, mode: shared.mode };
  }
  return plan;
}

/**
 * Writes a planned merge (when it changes anything), and the committed settings without
 * AWC's hooks (`legacy`, when planned): each to a new file beside it, then renamed over it, so Claude Code reads the old or the new settings, never a part. The existing
 * file's mode is kept; a new file (and a new `.claude` directory) is private (0600 / 0700).
 * @throws the file system's error as an AwcError (E_PERMISSION, E_NO_SPACE, E_READ_ONLY…)
 */
export async function writeClaudeSettings(plan: SettingsPlan): Promise<void> {
  await writeSettingsFile(plan);
  if (plan.legacy) await writeSettingsFile(plan.legacy);
}

/** Writes one planned settings file (see writeClaudeSettings). */
async function writeSettingsFile(plan: SettingsFile): Promise<void> {
  if (!plan.changed) return;
  const tmp = `${plan.path}.awc-${process.pid}.tmp`;
  try {
    await mkdirPrivate(join(plan.path, '..'));
    const c = constants;
    const fh = await open(tmp, c.O_WRONLY | c.O_CREAT | c.O_EXCL | c.O_NOFOLLOW, PRIVATE_FILE_MODE);
    try {
      await fh.writeFile(JSON.stringify(plan.settings, null, 2) + '\n');
      await fh.sync();
    } finally {
      await fh.close();
    }
    await chmod(tmp, plan.mode ?? PRIVATE_FILE_MODE);
    await rename(tmp, plan.path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw toAwcError(err);
  }
}
