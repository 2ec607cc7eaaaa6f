import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { constants as osConstants } from 'node:os';
import { resolve } from 'node:path';
import { isatty } from 'node:tty';
import { runFast } from './front-run.js';
import { socketPathOf, userSocketsDirOf } from '../../config/config.js';
import {
  BUILD_ID_FILE,
  cliSocketOf,
  FORWARDED_SIGNALS,
  FrameReader,
  frame,
  HANDSHAKE_MS,
  userCliSocketOf,
  type WarmRequest,
} from '../../daemon/warm/warm-protocol.js';

/**
 * Commands a warm worker never runs: they are the daemon itself (`daemon start|run|stop|…`
 * would start or stop the very process the worker belongs to), a long-lived stdio server whose
 * start-up cost is paid once per session (`mcp`), the demos (they start daemons of their own),
 * or `run` (its command needs this process's own descriptors, terminal and process group).
 */
const OWN_PROCESS = new Set(['daemon', 'mcp', 'demo', 'run']);

/**
 * `awc status --watch` also runs in its own process: it puts the caller's terminal in raw mode
 * (q and Ctrl-C quit) and redraws it until stopped, which a worker's relayed stdio cannot do.
 */
function watches(argv: readonly string[], words: { command?: string; index?: number }): boolean {
  return words.command === 'status' && argv.slice((words.index ?? 0) + 1).some((a) => a === '--watch' || a.startsWith('--watch='));
}

/** OWN_PROCESS less `run`: a worker may resolve a run (`--print-target`) that this process then starts. */
const RUN_ALLOWED = new Set([...OWN_PROCESS].filter((c) => c !== 'run'));

/** Exit status of E_DAEMON_UNAVAILABLE (src/core/errors.ts; test/daemon/warm/warm-cli.test.ts checks they agree). */
export const EXIT_DAEMON_UNAVAILABLE = 6;

/**
 * The global options before the command and the command's name (the first other word) with its index, or
 * undefined when the words are not the plain `[--home D] [--namespace N] [--json] <command> …`.
 */
export function commandOf(argv: readonly string[]): { home?: string; command?: string; index?: number } | undefined {
  let home: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--json') continue;
    if (a === '--home' || a === '--namespace') {
      if (i + 1 >= argv.length) return undefined;
      if (a === '--home') home = argv[i + 1];
      i++;
      continue;
    }
    if (a.startsWith('--home=')) home = a.slice('--home='.length);
    else if (!a.startsWith('--namespace=')) return a.startsWith('-') ? { home } : { home, command: a, index: i };
  }
  return { home };
}

/** `socket` of a home's config.json, when it sets one (anything unreadable: none; the command itself reports it). */
function configuredSocket(home: string): string | undefined {
  try {
    const s = (JSON.parse(readFileSync(resolve(home, 'config.json'), 'utf8')) as { socket?: unknown }).socket;
    return typeof s === 'string' && s.startsWith('/') ? s : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The warm CLI sockets to try, in order, for `argv` run by this process's user (see
 * docs/explanation/cli-latency.md "Warm workers"); none for the commands that must run in the
 * caller's own process, and with `AWC_NO_WARM=1`. Root: the one beside the daemon socket of
 * the home (`--home`, `AWC_HOME`, `/var/lib/awc`; `AWC_SOCKET` or config.json's `socket`
 * moves it). An ordinary user: root's per-user one for the home (as src/cli/remote/user-socket.ts
 * finds the per-user API socket), then, with an explicit home, the one of their own daemon there.
 */
export function warmSockets(argv: readonly string[], env: NodeJS.ProcessEnv, uid = process.getuid?.(), own = OWN_PROCESS): string[] {
  const words = commandOf(argv);
  if (env.AWC_NO_WARM === '1' || uid === undefined || !words || (words.command && own.has(words.command)) || watches(argv, words))
    return [];
  const explicit = words.home ?? (env.AWC_HOME || undefined);
  const envSocket = env.AWC_SOCKET || undefined;
  if (uid === 0) {
    const home = resolve(explicit ?? '/var/lib/awc');
    return [cliSocketOf(socketPathOf({ home, socket: envSocket ?? configuredSocket(home) }))];
  }
  const out = [userCliSocketOf(userSocketsDirOf({ home: explicit ?? '/var/lib/awc', socket: envSocket }), uid)];
  if (explicit !== undefined) out.push(cliSocketOf(socketPathOf({ home: explicit, socket: envSocket ?? configuredSocket(explicit) })));
  return out;
}

/** This build's id (dist/cli/build-id, written by scripts/bundle-cli.mjs; '' when missing: no worker accepts it). */
function readBuildId(bundleDir: URL): string {
  try {
    return readFileSync(new URL(BUILD_ID_FILE, bundleDir), 'utf8').trim();
  } catch {
    return '';
  }
}

/** The request for this process's command. */
function requestOf(argv: string[], build: string): WarmRequest {
  const umask = process.umask(0o022);
  process.umask(umask);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  const tty: [boolean, boolean, boolean] = [isatty(0), isatty(1), isatty(2)];
  const term = tty[1] ? process.stdout : tty[2] ? process.stderr : undefined;
  return { v: 1, build, argv, cwd: process.cwd(), env, umask, tty, columns: term?.columns, rows: term?.rows };
}

/** Where {@link runWarm} puts the command's stdout and its status. */
export interface WarmSink {
  out(b: Buffer): void;
  exit(status: number): void;
}

/** The caller's own stdout, and the end of this process with the command's status. */
const TO_CALLER: WarmSink = { out: (b) => void process.stdout.write(b), exit: (status) => process.exit(status) };

/**
 * Runs the command through the warm worker behind `socket` and exits with its status once it
 * finished; resolves 'declined' when a worker answered that it
 * will not run it, 'unavailable' when nothing answers (no socket, no daemon, or the worker went
 * away before it accepted: in both of the latter nothing ran and the caller runs it itself).
 * A worker that goes away after it accepted ends this process with E_DAEMON_UNAVAILABLE's status
 * (or 128 + the signal this process passed on to it).
 */
export function runWarm(socket: string, req: WarmRequest, sink: WarmSink = TO_CALLER): Promise<'declined' | 'unavailable'> {
  return new Promise((done) => {
    const conn = connect(socket);
    const reader = new FrameReader();
    let accepted = false;
    let finished = false;
    let signalled: string | undefined;
    const onSignal = (sig: NodeJS.Signals) => {
      signalled = sig;
      conn.write(frame('S', sig));
    };
    conn.once('error', () => undefined); // 'close' follows and decides
    conn.on('connect', () => conn.write(frame('H', JSON.stringify(req))));
    // no answer in time (a stopped or hung daemon still has its socket accepted by the kernel): run it here
    const patience = setTimeout(() => {
      if (accepted || finished) return;
      finished = true;
      if (process.env.AWC_WARM_TRACE === '1') process.stderr.write(`awc: no warm worker answered in ${HANDSHAKE_MS} ms\n`);
      conn.destroy();
      fallBack('unavailable');
    }, HANDSHAKE_MS);
    // a closed stdout (`awc ls | head -1`): stop quietly with 141, as in process (the worker sees the connection go)
    const onOutError = (err: NodeJS.ErrnoException) => {
      conn.destroy();
      process.exit(err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED' ? 141 : EXIT_DAEMON_UNAVAILABLE);
    };
    const fallBack = (why: 'declined' | 'unavailable') => {
      process.stdout.off('error', onOutError);
      process.stderr.off('error', onOutError);
      done(why);
    };
    conn.on('data', (chunk: Buffer) => {
      for (const f of reader.push(chunk)) {
        if (f.type === 'O') sink.out(f.payload);
        else if (f.type === 'R') process.stderr.write(f.payload);
        else if (f.type === 'A') {
          if (finished) return;
          clearTimeout(patience);
          accepted = true;
          conn.write(frame('G'));
          if (process.env.AWC_WARM_TRACE === '1') process.stderr.write(`awc: warm worker ${socket} runs the command\n`);
          process.stdout.on('error', onOutError);
          process.stderr.on('error', onOutError);
          for (const sig of FORWARDED_SIGNALS) process.on(sig, onSignal);
        } else if (f.type === 'D') {
          clearTimeout(patience);
          finished = true;
          if (process.env.AWC_WARM_TRACE === '1') process.stderr.write(`awc: warm worker declined: ${f.payload.toString()}\n`);
          conn.destroy();
          return fallBack('declined');
        } else if (f.type === 'W') {
          process.stdin.on('data', (d: Buffer) => conn.write(frame('I', d)));
          process.stdin.once('end', () => conn.write(frame('E')));
        } else if (f.type === 'X') {
          finished = true;
          // stdout and stderr are written synchronously on Linux (files, pipes, terminals): nothing is left unwritten
          conn.destroy();
          sink.exit(Number(f.payload.toString()));
        }
      }
    });
    conn.on('close', () => {
      clearTimeout(patience);
      if (finished) return;
      if (!accepted) return fallBack('unavailable');
      if (signalled) process.exit(128 + osConstants.signals[signalled as NodeJS.Signals]);
      process.stderr.write(
        "awc: E_DAEMON_UNAVAILABLE: the host daemon's warm worker running this command went away before it finished\n  hint: Check `awc daemon status` and the daemon's log, then run the command again (AWC_NO_WARM=1 runs it in this process).\n",
      );
      process.exit(EXIT_DAEMON_UNAVAILABLE);
    });
  });
}

/**
 * The CLI's entry (bin: dist/cli/front.cjs; dist/src/cli/entry/main.js imports it; `bundleDir` is dist/cli/):
 * runs the command through a warm worker of the host daemon when one serves this user and
 * home, else imports the bundled CLI (dist/cli/awc.js) and runs it in this process.
 */
export async function front(bundleDir: URL): Promise<void> {
  const argv = process.argv.slice(2);
  const build = readBuildId(bundleDir);
  // root's `awc run`: resolved by a worker, started here (src/cli/warm/front-run.ts)
  const fast = await runFast(argv, {
    commandOf,
    sockets: (a) => warmSockets(a, process.env, process.getuid?.(), RUN_ALLOWED),
    request: (a) => requestOf(a, build),
    runWarm,
  }).catch(() => 'fallback' as const);
  if (fast !== 'fallback') process.exit(fast);
  for (const socket of warmSockets(argv, process.env)) {
    let req: WarmRequest;
    try {
      req = requestOf(argv, build);
    } catch {
      break; // no working directory any more: the command in this process says what it makes of that
    }
    const r = await runWarm(socket, req);
    if (r === 'declined') break;
  }
  await import(new URL('awc.js', bundleDir).href);
}
