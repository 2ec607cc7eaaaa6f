import type { Command } from 'commander';
import { AwcError } from '../../core/errors.js';
import type { OpenMode } from '../remote/open-awc.js';
import type { OpenedAwc } from '../remote/through-daemon.js';
import { Output, formatBytes } from '../output/output.js';

/** The program's global options (`--home`, `--json`, `--namespace`). */
export interface Globals {
  home?: string;
  json?: boolean;
  namespace?: string;
}

/**
 * Runs `fn` with an open service, closing it afterwards; `opts` says how the home is opened
 * (`create` makes a missing one; every other command answers E_NO_HOME there).
 */
export type WithAwc = <T>(fn: (awc: OpenedAwc, o: Output) => Promise<T>, opts?: OpenMode) => Promise<T>;

/** What a command's registration gets from the program (src/cli/entry/main.ts makes it once). */
export interface CliContext {
  /** The global options, as parsed (read inside an action). */
  globals(): Globals;
  /** The Output of this run (`--json` or text). */
  out(): Output;
  /** Runs a command's body with an open service (see {@link WithAwc}). */
  withAwc: WithAwc;
}

/**
 * One CLI command or command group (one file in src/cli/commands/, as restic's cmd_<name>.go):
 * `register` adds it to `program`; its implementation is loaded inside its actions, so that
 * the CLI starts fast (docs/explanation/cli-latency.md).
 */
export interface CliCommand {
  register(program: Command, ctx: CliContext): void;
}

/** The context of the commands of `program` (src/cli/entry/main.ts). */
export function cliContext(program: Command): CliContext {
  const globals = (): Globals => program.opts<Globals>();
  const out = (): Output => new Output(globals().json === true);
  const withAwc: WithAwc = async (fn, opts = {}) => {
    const g = globals();
    // an ordinary user allowed to use root's daemon: every command goes through their socket (docs/how-to/ordinary-users.md)
    const { userSocketFor } = await import('../remote/user-socket.js');
    const socket = userSocketFor(g.home);
    if (socket !== undefined && opts.adopting) throw new AwcError('E_PERMISSION', "`awc fsck --adopt-store` is for the home's owner");
    if (socket !== undefined) {
      const { remoteAwc } = await import('../remote/remote-awc.js');
      return fn(remoteAwc(socket, g.namespace ?? process.env.AWC_NAMESPACE ?? 'default'), out());
    }
    const { openAwc } = await import('../remote/open-awc.js');
    const awc = await openAwc({ home: g.home, namespace: g.namespace }, { ...opts, create: opts.create ?? false });
    try {
      return await fn(awc, out());
    } finally {
      await awc.close();
    }
  };
  return { globals, out, withAwc };
}

/** A progress callback that prints `verb: N files, B` to `o` at most every 200 ms. */
export function progress(o: Output, verb: string) {
  let last = 0;
  return (p: { files: number; bytes: number }) => {
    const now = Date.now();
    if (now - last < 200) return;
    last = now;
    o.progress(`${verb}: ${p.files} files, ${formatBytes(p.bytes)}`);
  };
}
