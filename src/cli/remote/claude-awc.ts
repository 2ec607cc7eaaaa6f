import type { Awc } from '../../service/workspace/awc.js';
import { claudeAwc, localClaudeAwc, type ClaudeAwc } from '../../service/claude/claude-port.js';
import type { RemoteAwc } from './remote-awc.js';

/**
 * The service of the Claude Code commands for what `withAwc` opened: an Awc in process, or
 * an ordinary user's client of the root daemon (src/cli/remote/remote-awc.ts), whose host is the
 * daemon's (asked once, `GET /v1/status`) and whose import leaves directories out through
 * tar's `--exclude`. Small and type-only at its top: the CLI loads it inside an action.
 * @throws E_DAEMON_UNAVAILABLE (the daemon does not answer on the user's socket)
 */
export async function openClaudeAwc(awc: Awc): Promise<ClaudeAwc> {
  if (!isRemoteAwc(awc)) return localClaudeAwc(awc);
  const remote = awc as unknown as RemoteAwc;
  const { host } = await remote.userStatus();
  return claudeAwc(remote, host, (source, opts) =>
    remote.importSnapshot(source, { message: opts.message, labels: opts.labels, onProgress: opts.onProgress, exclude: opts.leaveOut }),
  );
}

/** True when `awc` is an ordinary user's client of the root daemon (remoteAwc), not an Awc in process. */
export function isRemoteAwc(awc: Awc): boolean {
  // the proxy has it as its own property; an Awc has no such member
  return 'userStatus' in awc;
}
