import { claudeAwc, localClaudeAwc, type ClaudeAwc } from '../../service/claude/claude-port.js';
import { throughDaemon, type OpenedAwc } from './through-daemon.js';

/**
 * The service of the Claude Code commands for what `withAwc` opened: an Awc in process, or
 * an ordinary user's client of the root daemon (src/cli/remote/remote-awc.ts), whose host is the
 * daemon's (asked once, `GET /v1/status`) and whose import leaves directories out through
 * tar's `--exclude`. Small and type-only at its top: the CLI loads it inside an action.
 * @throws E_DAEMON_UNAVAILABLE (the daemon does not answer on the user's socket)
 */
export async function openClaudeAwc(awc: OpenedAwc): Promise<ClaudeAwc> {
  if (!throughDaemon(awc)) return localClaudeAwc(awc);
  const remote = awc;
  const { host } = await remote.userStatus();
  return claudeAwc(remote, host, (source, opts) =>
    remote.importSnapshot(source, { message: opts.message, labels: opts.labels, onProgress: opts.onProgress, exclude: opts.leaveOut }),
  );
}

/** True when `awc` is an ordinary user's client of the root daemon (remoteAwc), not an Awc in process. */
export const isRemoteAwc = throughDaemon;
