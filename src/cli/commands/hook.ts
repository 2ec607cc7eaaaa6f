import type { Command } from 'commander';
import type { CliCommand, CliContext, WithAwc } from './command.js';
import type { ClaudeRemoveResult } from '../../service/claude/claude-hook.js';

/** The most a hook payload may be (bytes): Claude Code's are well under 4 KiB. */
const MAX_PAYLOAD = 1024 * 1024;

/**
 * Reads all of stdin as UTF-8 (at most MAX_PAYLOAD bytes).
 * @throws E_HOOK_INPUT when stdin is a terminal (no payload is coming) or too long
 */
async function readPayload(): Promise<string> {
  const { AwcError } = await import('../../core/errors.js');
  if (process.stdin.isTTY)
    throw new AwcError('E_HOOK_INPUT', 'awc hook claude reads the hook payload (JSON) on stdin; stdin is a terminal', {
      hint: 'Claude Code runs it with the payload on stdin; to try it by hand: `awc hook claude < payload.json`.',
    });
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of process.stdin as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > MAX_PAYLOAD) throw new AwcError('E_HOOK_INPUT', `the hook input is over ${MAX_PAYLOAD} bytes`);
    chunks.push(c);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * SessionStart: the stable-path context for a session in an AWC workspace, as Claude Code's
 * `hookSpecificOutput.additionalContext` on stdout (nothing for any other directory), naming
 * AWC by the hook's own absolute invocation (selfInvocation). It never
 * fails the session: an error (no home, no daemon) is one line on stderr, and the exit is 0.
 */
async function sessionStart(program: Command, withAwc: WithAwc, cwd: string, log: (line: string) => void): Promise<void> {
  try {
    await withAwc(async (opened) => {
      const { openClaudeAwc } = await import('../remote/claude-awc.js');
      const { claudeSessionContext } = await import('../../service/claude/claude-session.js');
      const { selfInvocation } = await import('./self-command.js');
      // the agent's shell may have no awc on PATH: the text names AWC as this hook runs it
      const { envKey } = await import('../../service/attach/env-key.js');
      const ctx = await claudeSessionContext(await openClaudeAwc(opened), cwd, { awc: selfInvocation(program, opened).join(' '), envKey });
      if (ctx)
        process.stdout.write(`${JSON.stringify({ hookSpecificOutput: { hookEventName: 'SessionStart', additionalContext: ctx.text } })}\n`);
    });
  } catch (err) {
    log(`SessionStart: no workspace context (${err instanceof Error ? err.message : String(err)})`);
  }
}

/**
 * The WorktreeRemove lines for stderr: what was done; the branch kept in the project (and the
 * git command that checks it out again); and, when uncommitted work was checkpointed, the one
 * command (`awc` as `awc`, this hook's own absolute invocation) that brings it back.
 */
function removeLine(r: ClaudeRemoveResult, awc: string, shellWord: (s: string) => string): string {
  if (r.workspace === null) return `${r.path}: no workspace there and the directory is gone; nothing to do`;
  const secrets = r.kept ? `; ${r.kept.length} secret file(s) kept on this host (\`${awc} kept ls ${r.workspace}\`)` : '';
  const done = `unmounted and removed; ${r.path} is gone${secrets}`;
  const dir = shellWord(r.path ?? `./${r.workspace}`);
  const branch =
    r.branch !== null && r.project !== null
      ? `\nawc: branch ${r.branch} is kept in ${r.project} with its commits: \`git -C ${shellWord(r.project)} worktree add ${dir} ${r.branch}\` checks it out again`
      : '';
  if (r.work.work === false) return `${r.workspace}: ${r.work.why}: no snapshot kept; ${done}${branch}`;
  const kept = r.checkpointed ? `${r.work.why}: checkpointed as ${r.snapshot}` : `no changes since ${r.snapshot}`;
  const back = `${awc} export ${r.snapshot} --dir ${dir}`;
  return `${r.workspace}: ${kept}; ${done}${branch}\nawc: to bring the work back as a directory: ${back}`;
}

/**
 * Registers `awc hook claude` (docs/reference/claude-code.md): Claude Code's WorktreeCreate,
 * WorktreeRemove and SessionStart hooks. One JSON payload on stdin; for create, stdout is
 * exactly one line, the workspace's real path; for SessionStart, the workspace's context as
 * JSON (or nothing); every log line goes to stderr.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    const hook = program.command('hook').description('hooks of agent tools (run by the tool, not by hand)');
    hook
      .command('claude')
      .description("Claude Code's WorktreeCreate / WorktreeRemove / SessionStart hook: payload on stdin; create prints the workspace path")
      .action(async () => {
        const { parseClaudeHookPayload } = await import('../../service/claude/claude-payload.js');
        const { AwcError } = await import('../../core/errors.js');
        // a malformed payload is refused before anything is opened
        const p = parseClaudeHookPayload(await readPayload());
        const log = (line: string): void => void process.stderr.write(`awc: ${line}\n`);
        if (p.event === 'SessionStart') return sessionStart(program, withAwc, p.cwd, log);
        try {
          await withAwc(async (opened, o) => {
            const { openClaudeAwc } = await import('../remote/claude-awc.js');
            const awc = await openClaudeAwc(opened);
            if (p.event === 'WorktreeCreate') {
              const { claudeWorktreeCreate } = await import('../../service/claude/claude-hook.js');
              const { selfInvocation } = await import('./self-command.js');
              const r = await claudeWorktreeCreate(awc, p, {
                projectDir: process.env.CLAUDE_PROJECT_DIR,
                onLog: log,
                awc: selfInvocation(program, opened).join(' '),
                envKey: (await import('../../service/attach/env-key.js')).envKey,
              });
              // the one line Claude Code reads (whatever --json says: the hook contract is the path)
              process.stdout.write(`${r.path}\n`);
              return;
            }
            const { claudeWorktreeRemove } = await import('../../service/claude/claude-hook.js');
            const r = await claudeWorktreeRemove(awc, p, { projectDir: process.env.CLAUDE_PROJECT_DIR });
            const { selfInvocation, shellWord } = await import('./self-command.js');
            log(removeLine(r, selfInvocation(program, opened).join(' '), shellWord));
            if (o.json) o.result(r, () => '');
          });
        } catch (err) {
          // a home that does not exist yet holds no prepared snapshot either
          if (err instanceof AwcError && err.code === 'E_NO_HOME' && p.event === 'WorktreeCreate')
            throw new AwcError('E_NOT_PREPARED', `no prepared snapshot: ${err.message}`, {
              hint: 'Run `awc init claude <project>` once: it imports the project with its dependencies.',
            });
          throw err;
        }
      });
  },
};
