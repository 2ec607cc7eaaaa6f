/**
 * parseClaudeHookPayload (src/service/claude/claude-payload.ts) on every recorded Claude Code
 * payload (test/fixtures/claude-hooks/) and on bad input: in process, no CLI (the CLI runs
 * the same payloads in test/service/claude/claude-hook.test.ts).
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseClaudeHookPayload, worktreeNames } from '../../../src/service/claude/claude-payload.js';
import { AwcError, type ErrorCode } from '../../../src/core/errors.js';
import { PROJECT } from '../../helpers/cli.js';

const FIXTURES = join(PROJECT, 'test', 'fixtures', 'claude-hooks');
const fill = (file: string): string =>
  readFileSync(join(FIXTURES, file), 'utf8')
    .replaceAll('@PROJECT@', '/srv/proj')
    .replaceAll('@TRANSCRIPT@', '/home/u/.claude/projects/p/s.jsonl')
    .replaceAll('@WORKTREE@', '/srv/proj/.claude/worktrees/x');

describe('Claude Code hook payloads', () => {
  it('every recorded create shape gives the name and the path it asks for', () => {
    const want: Record<string, { name: string; path: string | null }> = {
      'create-2.1.50.json': { name: 'fix-login', path: null },
      'create-2.1.197-subagent.json': { name: 'agent-a1b2c3d4', path: null },
      'create-docs.json': { name: 'feat/auth', path: '/srv/proj/.claude/worktrees/feat+auth' },
      'create-worktree-path.json': { name: 'explicit-path', path: '/srv/proj/.claude/worktrees/explicit-path' },
    };
    for (const [file, w] of Object.entries(want)) {
      const p = parseClaudeHookPayload(fill(file));
      assert.equal(p.event, 'WorktreeCreate', file);
      if (p.event !== 'WorktreeCreate') continue;
      assert.equal(p.name, w.name, file);
      assert.equal(p.path, w.path, file);
      assert.equal(p.cwd, '/srv/proj', file);
      assert.equal(p.transcriptPath, '/home/u/.claude/projects/p/s.jsonl', file);
      assert.ok(p.sessionId, file);
    }
  });

  it('every recorded remove shape gives the path', () => {
    for (const file of ['remove-2.1.50.json', 'remove-2.1.197.json']) {
      const p = parseClaudeHookPayload(fill(file));
      assert.equal(p.event, 'WorktreeRemove', file);
      if (p.event === 'WorktreeRemove') assert.equal(p.path, '/srv/proj/.claude/worktrees/x', file);
    }
  });

  it('the recorded SessionStart gives its working directory and source', () => {
    const p = parseClaudeHookPayload(fill('session-start-2.1.100.json'));
    assert.equal(p.event, 'SessionStart');
    assert.equal(p.cwd, '/srv/proj/.claude/worktrees/x');
    if (p.event === 'SessionStart') assert.equal(p.source, 'startup');
    assert.equal(p.sessionId, '5f1c2a9e-7b3d-4e8a-9c41-2d6f0b8e1a37');
  });

  it("names and branches as Claude Code makes them: '/' becomes '+', branch worktree-<name>", () => {
    assert.deepEqual(worktreeNames('feat/auth'), { dir: 'feat+auth', branch: 'worktree-feat+auth' });
  });

  it('refuses what is not a payload, with E_HOOK_INPUT or E_HOOK_EVENT', () => {
    const bad: [string, ErrorCode][] = [
      ['', 'E_HOOK_INPUT'],
      ['null', 'E_HOOK_INPUT'],
      ['{"name":"x"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","name":""}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","name":"a/../b"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","name":"a b"}', 'E_HOOK_INPUT'],
      [`{"hook_event_name":"WorktreeCreate","name":"${'a'.repeat(65)}"}`, 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","name":"x","cwd":"rel"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeCreate","name":"x","worktree_path":7}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"WorktreeRemove"}', 'E_HOOK_INPUT'],
      ['{"hook_event_name":"PreToolUse"}', 'E_HOOK_EVENT'],
    ];
    for (const [text, code] of bad)
      assert.throws(
        () => parseClaudeHookPayload(text),
        (err: unknown) => err instanceof AwcError && err.code === code,
        text,
      );
  });
});
