import { AwcError, toAwcError } from '../../core/errors.js';
import { sourceMappedStack } from './bundle-stack.js';

/** How a command prints: JSON on stdout with --json, human text otherwise; errors on stderr. */
export class Output {
  constructor(readonly json: boolean) {}

  /** Prints a result: `data` as JSON, or the `human` text (a function so it is only built when needed). */
  result(data: unknown, human: () => string): void {
    if (this.json) process.stdout.write(JSON.stringify(data, null, 2) + '\n');
    else {
      const text = human();
      if (text !== '') process.stdout.write(text.endsWith('\n') ? text : text + '\n');
    }
  }

  /** Progress line on stderr, only when stderr is a TTY and not in JSON mode. */
  progress(text: string): void {
    if (!this.json && process.stderr.isTTY) process.stderr.write(`\r\x1b[K${text}`);
  }

  progressDone(): void {
    if (!this.json && process.stderr.isTTY) process.stderr.write('\r\x1b[K');
  }

  warn(text: string): void {
    process.stderr.write(this.json ? JSON.stringify({ warning: text }) + '\n' : `awc: warning: ${text}\n`);
  }

  /**
   * Prints an error (`{code, message, hint, retryable}` as JSON with --json) and returns the
   * exit status. A closed pipe (E_CLOSED_PIPE) prints nothing and returns 141.
   */
  error(err: unknown): number {
    const e: AwcError = toAwcError(err);
    if (e.code === 'E_CLOSED_PIPE') return e.exitCode; // nobody reads the output any more: nothing to say (like SIGPIPE)
    if (this.json) process.stderr.write(JSON.stringify(e.toJSON()) + '\n');
    else {
      process.stderr.write(`awc: ${e.code}: ${e.message}\n  hint: ${e.hint}\n`);
      if (e.code === 'E_INTERNAL' && e.cause instanceof Error && e.cause.stack)
        process.stderr.write(sourceMappedStack(e.cause.stack) + '\n');
    }
    return e.exitCode;
  }
}

export { formatBytes } from '../../core/format-bytes.js';
