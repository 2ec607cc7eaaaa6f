import { constants } from 'node:fs';
import { chmod, lstat, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { mkdirPrivate, PRIVATE_FILE_MODE } from '../../core/private-fs.js';
import { parseJsonObject } from '../../core/json-object.js';

/** The hook events `awc init claude` configures (SessionStart: the stable-path context, src/service/claude/claude-session.ts). */
export const CLAUDE_HOOK_EVENTS = ['WorktreeCreate', 'WorktreeRemove', 'SessionStart'] as const;

/** A planned (or done) merge of AWC's hook block into `<project>/.claude/settings.json`. */
export interface SettingsPlan {
  /** The settings file. */
  path: string;
  /** The file does not exist yet. */
  create: boolean;
  /** The merge changes the file (false: AWC's hooks are there already with this command). */
  changed: boolean;
  /** The hook command configured for each event. */
  command: string;
  /** The merged settings (what is written). */
  settings: Record<string, unknown>;
  /** The existing file's permission bits (kept), when it exists. */
  mode?: number;
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

/**
 * Reads `<project>/.claude/settings.json` and merges AWC's WorktreeCreate / WorktreeRemove
 * hooks in (`{hooks: {WorktreeCreate: [{hooks: [{type: "command", command}]}]}}`, Claude
 * Code's settings shape), keeping every other key and hook. An AWC hook already there (a
 * command ending in ` hook claude`) gets `command` instead of a second entry, so running it
 * again changes nothing. Nothing is written here (see writeClaudeSettings).
 * @throws E_CLAUDE_SETTINGS (not JSON, not an object, `hooks` or an event's entry of the wrong
 *   type, a symlink or not a regular file: never followed nor overwritten)
 */
export async function planClaudeSettings(project: string, command: string): Promise<SettingsPlan> {
  const path = join(project, '.claude', 'settings.json');
  const bad = (why: string): AwcError => new AwcError('E_CLAUDE_SETTINGS', `${path}: ${why}; left as it is`, { details: { path } });
  const dirSt = await lstat(join(project, '.claude')).catch(() => undefined);
  if (dirSt && !dirSt.isDirectory()) throw bad(`${join(project, '.claude')} is not a directory`);
  const st = await lstat(path).catch(() => undefined);
  let settings: Record<string, unknown> = {};
  if (st) {
    if (!st.isFile()) throw bad(st.isSymbolicLink() ? 'is a symbolic link (not followed)' : 'is not a regular file');
    const text = await readFile(path, 'utf8').catch((err: unknown) => Promise.reject(toAwcError(err)));
    settings = parseJsonObject(text, bad);
  }
  const before = JSON.stringify(settings);
  const hooks = settings.hooks ?? {};
  if (typeof hooks !== 'object' || hooks === null || Array.isArray(hooks)) throw bad('"hooks" is not an object');
  const merged: Record<string, unknown> = { ...(hooks as Record<string, unknown>) };
  for (const event of CLAUDE_HOOK_EVENTS) {
    const groups = merged[event] ?? [];
    if (!Array.isArray(groups)) throw bad(`"hooks.${event}" is not an array`);
    let found = false;
    const next = groups.map((g: unknown) => {
      const inner = (g as { hooks?: unknown } | null)?.hooks;
      if (!Array.isArray(inner) || !inner.some(isAwcHook)) return g;
      found = true;
      return { ...(g as object), hooks: inner.map((h: unknown) => (isAwcHook(h) ? { ...h, command } : h)) };
    });
    if (!found) next.push({ hooks: [{ type: 'command', command }] });
    merged[event] = next;
  }
  const out = { ...settings, hooks: merged };
  return { path, create: !st, changed: JSON.stringify(out) !== before, command, settings: out, ...(st ? { mode: st.mode & 0o7777 } : {}) };
}

/**
 * Writes a planned merge (when it changes anything): to a new file beside it, then renamed
 * over it, so Claude Code reads the old or the new settings, never a part. The existing
 * file's mode is kept; a new file (and a new `.claude` directory) is private (0600 / 0700).
 * @throws the file system's error as an AwcError (E_PERMISSION, E_NO_SPACE, E_READ_ONLY…)
 */
export async function writeClaudeSettings(plan: SettingsPlan): Promise<void> {
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
