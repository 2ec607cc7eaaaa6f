import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** Why tmux tests cannot run here (node:test's `skip`), or false. */
export function tmuxSkip(): string | false {
  return spawnSync('tmux', ['-V'], { stdio: 'ignore' }).status === 0 ? false : 'needs tmux (.ci/run installs it)';
}

/** A command running in a pseudo-terminal of a private tmux server: its screen, keys, how it ended. */
export interface TmuxPane {
  /** The visible screen now (`tmux capture-pane -p`), trailing blank lines dropped. */
  screen(): string;
  /** Sends keys as tmux names them (`q`, `C-c`, `Enter`). */
  keys(...keys: string[]): void;
  /** Polls the screen (every 100 ms) until `test` passes; the screen then. @throws with the last screen after `timeoutMs` */
  waitFor(test: RegExp | ((screen: string) => boolean), timeoutMs?: number): Promise<string>;
  /** The command's exit status once it ended (the pane prints `[exit N]` and stays), else undefined. */
  exitStatus(): number | undefined;
  /** Kills the tmux server (and what still runs in it). Never throws. */
  close(): void;
}

/**
 * Starts `argv` (each word quoted for sh) in a new detached tmux session of its own server
 * (`-L`), `cols` × `rows` characters, `env` added; when the command ends the pane shows
 * `[exit <status>]` and stays until {@link TmuxPane.close}.
 */
export function tmuxPane(argv: string[], opts: { cols?: number; rows?: number; env?: NodeJS.ProcessEnv } = {}): TmuxPane {
  const server = `awc-test-${process.pid}-${randomBytes(4).toString('hex')}`;
  const tmux = (...args: string[]) => spawnSync('tmux', ['-L', server, ...args], { encoding: 'utf8' });
  const quote = (w: string) => `'${w.replaceAll("'", "'\\''")}'`;
  const exports = Object.entries(opts.env ?? {})
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${quote(v!)} `)
    .join('');
  const shell = `${exports}${argv.map(quote).join(' ')}; echo "[exit $?]"; sleep 600`;
  const r = tmux(
    '-f',
    '/dev/null',
    'new-session',
    '-d',
    '-s',
    'main',
    '-x',
    String(opts.cols ?? 160),
    '-y',
    String(opts.rows ?? 40),
    shell,
  );
  if (r.status !== 0) throw new Error(`tmux new-session: ${r.stderr}`);
  const screen = () => tmux('capture-pane', '-p', '-t', 'main').stdout.replace(/\s+$/, '');
  return {
    screen,
    keys: (...keys) => void tmux('send-keys', '-t', 'main', ...keys),
    async waitFor(test, timeoutMs = 20_000) {
      const ok = typeof test === 'function' ? test : (s: string) => test.test(s);
      const until = Date.now() + timeoutMs;
      for (;;) {
        const s = screen();
        if (ok(s)) return s;
        if (Date.now() > until) throw new Error(`the screen did not show ${String(test)} within ${timeoutMs} ms:\n${s}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    exitStatus() {
      const m = /\[exit (\d+)\]/.exec(screen());
      return m ? Number(m[1]) : undefined;
    },
    close: () => void tmux('kill-server'),
  };
}
