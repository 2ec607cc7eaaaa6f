import { AwcError, toAwcError } from '../../core/errors.js';

/** What {@link watchScreen} draws on and reads keys from (default: this process's terminal). */
export interface WatchTerminal {
  stdout: NodeJS.WriteStream;
  stdin: NodeJS.ReadStream;
}

/** Alternate screen on, cursor hidden / cursor shown, alternate screen off (xterm sequences, as top and watch use). */
const ENTER = '\x1b[?1049h\x1b[?25l';
const LEAVE = '\x1b[?25h\x1b[?1049l';

/**
 * Refuses `--watch` when stdout is not a terminal (a pipe, a file): there is no screen to
 * refresh in place. @throws E_USAGE
 */
export function requireTerminal(stdout: NodeJS.WriteStream = process.stdout): void {
  if (stdout.isTTY) return;
  throw new AwcError('E_USAGE', '--watch refreshes a terminal in place, and stdout is not a terminal', {
    hint: 'Drop --watch (one report), or use --json in a loop for a script (`while sleep 2; do awc status --json; done`).',
  });
}

/**
 * Shows `render()` full screen, refreshed in place every `intervalMs` (ms) until the user
 * presses q or Ctrl-C (or SIGINT / SIGTERM arrives): the alternate screen (what was on the
 * terminal comes back afterwards), each frame drawn from the top, its lines cut at the
 * terminal's width and cleared to the end, the rest of the screen cleared. The first line is
 * `title`, the refresh interval, the time and how to quit. A `render` that throws shows its
 * error in the frame, and the next refresh tries again. Resolves once the terminal is restored.
 * @throws E_USAGE when stdout is not a terminal (nothing is drawn)
 */
export async function watchScreen(
  title: string,
  intervalMs: number,
  render: () => Promise<string>,
  term: WatchTerminal = { stdout: process.stdout, stdin: process.stdin },
): Promise<void> {
  requireTerminal(term.stdout);
  const { stdout, stdin } = term;
  let wake: () => void = () => undefined;
  let stopped = false;
  const stop = () => {
    stopped = true;
    wake();
  };
  const onKey = (b: Buffer) => {
    if (b.includes(0x03) || b.includes(0x71) || b.includes(0x51)) stop(); // Ctrl-C, q, Q
  };
  const raw = stdin.isTTY === true && typeof stdin.setRawMode === 'function';
  if (raw) stdin.setRawMode(true);
  stdin.on('data', onKey).resume();
  process.on('SIGINT', stop).on('SIGTERM', stop);
  stdout.write(ENTER);
  try {
    while (!stopped) {
      const body = await render().catch((err: unknown) => {
        const e = toAwcError(err);
        return `awc: ${e.code}: ${e.message}\n  hint: ${e.hint}`;
      });
      if (stopped) break;
      const head = `${title} · every ${intervalMs / 1000}s · ${new Date().toISOString().slice(0, 19)}Z · q to quit`;
      stdout.write(frame(`${head}\n\n${body}`, stdout.columns || 80));
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, intervalMs);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
  } finally {
    stdout.write(LEAVE);
    process.off('SIGINT', stop).off('SIGTERM', stop);
    stdin.off('data', onKey).pause();
    if (raw) stdin.setRawMode(false);
  }
}

/** One frame: cursor home, each line cut at `columns` and cleared to its end, the screen below cleared. */
function frame(text: string, columns: number): string {
  const lines = text.split('\n').map((l) => `${l.length > columns ? l.slice(0, columns) : l}\x1b[K`);
  return `\x1b[H${lines.join('\r\n')}\x1b[J`;
}
