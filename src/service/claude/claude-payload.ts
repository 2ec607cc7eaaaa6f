import { isAbsolute, join, normalize } from 'node:path';
import { AwcError } from '../../core/errors.js';

/** Fields every Claude Code hook payload carries (those AWC reads; the rest is ignored). */
interface HookCommon {
  /** Claude Code's session id, when sent. */
  sessionId: string | null;
  /** Absolute path of the session's transcript (JSONL), when sent: prune's "session gone" test. */
  transcriptPath: string | null;
  /** The working directory Claude Code ran the hook from (absolute). */
  cwd: string;
}

/** A WorktreeCreate payload, whatever its shape (docs/how-to/claude-code.md#payloads). */
export interface WorktreeCreatePayload extends HookCommon {
  event: 'WorktreeCreate';
  /** The worktree's name as Claude Code gave it (`name` or `worktree_name`, else the last segment of `worktree_path`). */
  name: string;
  /** Where the workspace goes when the payload says (`worktree_path`, or `base_path` + the name); null: Claude Code's usual place. */
  path: string | null;
}

/** A WorktreeRemove payload. */
export interface WorktreeRemovePayload extends HookCommon {
  event: 'WorktreeRemove';
  /** The path the create hook printed (absolute). */
  path: string;
}

/** A SessionStart payload: a session starts (or resumes, or is cleared or compacted) in `cwd`. */
export interface SessionStartPayload extends HookCommon {
  event: 'SessionStart';
  /** `startup`, `resume`, `clear` or `compact`, when sent. */
  source: string | null;
}

/** A parsed Claude Code hook payload of an event AWC handles. */
export type ClaudeHookPayload = WorktreeCreatePayload | WorktreeRemovePayload | SessionStartPayload;

/**
 * Each `/`-separated segment of a worktree name: letters, digits, `.`, `_`, `-` (Claude Code's
 * EnterWorktree rule, 64 characters in all); never `.` or `..`.
 */
const NAME_SEGMENT = /^[A-Za-z0-9._-]+$/;

/**
 * The directory name and branch Claude Code itself derives from a worktree name: `/` becomes
 * `+` in both, and the branch is `worktree-<that>` (read from `@anthropic-ai/claude-code`
 * 2.1.197; see test/fixtures/claude-hooks/README.md).
 */
export function worktreeNames(name: string): { dir: string; branch: string } {
  const flat = name.replaceAll('/', '+');
  return { dir: flat, branch: `worktree-${flat}` };
}

/**
 * Parses the JSON a Claude Code hook (WorktreeCreate, WorktreeRemove, SessionStart) gets on stdin. Accepts every worktree shape Claude Code
 * has sent or documented (test/fixtures/claude-hooks/): the worktree name as `name` (what
 * the CLI sends, 2.1.50–2.1.197) or `worktree_name` (the hooks reference), an explicit
 * `worktree_path`, or a `base_path` to put it under. Unknown fields are ignored.
 * @throws E_HOOK_INPUT (not JSON, not an object, a missing or malformed field, a name that
 *   could escape its directory), E_HOOK_EVENT (a `hook_event_name` other than WorktreeCreate, WorktreeRemove, SessionStart)
 */
export function parseClaudeHookPayload(text: string): ClaudeHookPayload {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new AwcError('E_HOOK_INPUT', `the hook input is not JSON: ${(err as Error).message}`, { details: { bytes: text.length } });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new AwcError('E_HOOK_INPUT', 'the hook input is not a JSON object');
  const o = raw as Record<string, unknown>;
  const str = (key: string, required: boolean): string | null => {
    const v = o[key];
    if (v === undefined || v === null) {
      if (required) throw new AwcError('E_HOOK_INPUT', `the hook input has no "${key}"`, { details: { field: key } });
      return null;
    }
    if (typeof v !== 'string' || v === '' || v.includes('\0'))
      throw new AwcError('E_HOOK_INPUT', `"${key}" of the hook input is not a non-empty string`, { details: { field: key } });
    return v;
  };
  const absolute = (key: string, required: boolean): string | null => {
    const v = str(key, required);
    if (v !== null && !isAbsolute(v))
      throw new AwcError('E_HOOK_INPUT', `"${key}" of the hook input is not an absolute path: ${JSON.stringify(v)}`, {
        details: { field: key },
      });
    return v === null ? null : normalize(v);
  };
  const event = str('hook_event_name', true)!;
  const common: HookCommon = { sessionId: str('session_id', false), transcriptPath: absolute('transcript_path', false), cwd: '' };
  if (event === 'SessionStart') return { event, ...common, cwd: absolute('cwd', false) ?? process.cwd(), source: str('source', false) };
  if (event === 'WorktreeRemove') {
    return { event, ...common, cwd: absolute('cwd', false) ?? process.cwd(), path: absolute('worktree_path', true)! };
  }
  if (event !== 'WorktreeCreate') {
    throw new AwcError('E_HOOK_EVENT', `awc hook claude does not handle the ${JSON.stringify(event)} event`, {
      details: { event },
    });
  }
  const worktreePath = absolute('worktree_path', false);
  const basePath = absolute('base_path', false);
  const name = str('name', false) ?? str('worktree_name', false) ?? (worktreePath === null ? null : worktreePath.split('/').pop()!);
  if (name === null) throw new AwcError('E_HOOK_INPUT', 'the hook input has no "name" (nor "worktree_name" or "worktree_path")');
  if (name.length > 64 || name.split('/').some((s) => !NAME_SEGMENT.test(s) || s === '.' || s === '..'))
    throw new AwcError(
      'E_HOOK_INPUT',
      `worktree name ${JSON.stringify(name)}: each "/"-separated part must be letters, digits, ".", "_" or "-" (64 characters in all)`,
      { details: { field: 'name' } },
    );
  const path = worktreePath ?? (basePath === null ? null : join(basePath, worktreeNames(name).dir));
  return { event, ...common, cwd: absolute('cwd', false) ?? process.cwd(), name, path };
}
