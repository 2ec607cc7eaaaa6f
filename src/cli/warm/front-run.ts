import { startInNamespace, waitInForeground } from '../../host/mount/run-namespace.js';
import type { WarmRequest } from '../../daemon/warm/warm-protocol.js';

/** What the fast run takes of the front (src/cli/warm/front.ts), passed in so the two modules do not import each other. */
export interface FrontParts {
  commandOf(argv: readonly string[]): { command?: string; index?: number } | undefined;
  /** The warm sockets for `argv`, with `run` allowed. */
  sockets(argv: readonly string[]): string[];
  request(argv: string[]): WarmRequest;
  runWarm(
    socket: string,
    req: WarmRequest,
    sink: { out(b: Buffer): void; exit(status: number): void },
  ): Promise<'declined' | 'unavailable'>;
}

/** What `awc run --print-target` prints (src/cli/commands/run.ts): where the command runs. */
export interface PrintedRunTarget {
  source: string;
  at: string;
  cwd: string;
  command: string;
  args: string[];
}

/** The flag the front adds after `run` so that a warm worker resolves the run and prints it, running nothing. */
export const PRINT_TARGET = '--print-target';

/** `argv` with {@link PRINT_TARGET} right after the `run` word (undefined when `run` is not the command). */
function withPrintTarget(argv: readonly string[], commandOf: FrontParts['commandOf']): string[] | undefined {
  const words = commandOf(argv);
  if (words?.command !== 'run' || words.index === undefined) return undefined;
  const i = words.index;
  return [...argv.slice(0, i + 1), PRINT_TARGET, ...argv.slice(i + 1)];
}

/**
 * Root's `awc run` the fast way (docs/explanation/cli-latency.md "awc run"): a warm worker
 * resolves the run (`awc run --print-target …`: the workspace, its mount, the stable path, the
 * working directory there, the command), and this process starts the namespace itself with
 * its own terminal, environment and process group, as the command in process does. Saves the
 * CLI's load in this process (about 90 ms of a 165 ms `awc run -- true`). Returns the
 * command's status; 'fallback' when no worker answered, one declined, or the namespace could
 * not be made (nothing ran: the command in process then says why, in its words). A worker's
 * error (E_NOT_MOUNTED, E_USAGE…) is printed by the worker on stderr; its status is returned.
 */
export async function runFast(argv: readonly string[], front: FrontParts): Promise<number | 'fallback'> {
  const asked = withPrintTarget(argv, front.commandOf);
  if (!asked || process.getuid?.() !== 0) return 'fallback';
  for (const socket of front.sockets(asked)) {
    const out: Buffer[] = [];
    let status: number | undefined;
    const r = await new Promise<'declined' | 'unavailable' | 'done'>((done) => {
      void front
        .runWarm(socket, front.request(asked), {
          out: (b) => void out.push(b),
          exit: (s) => {
            status = s;
            done('done');
          },
        })
        .then(done);
    });
    if (r === 'declined') return 'fallback';
    if (r === 'unavailable') continue;
    if (status !== 0) return status ?? 1;
    let t: PrintedRunTarget;
    try {
      t = JSON.parse(Buffer.concat(out).toString('utf8')) as PrintedRunTarget;
    } catch {
      return 'fallback';
    }
    return runHere(t);
  }
  return 'fallback';
}

/** Starts the resolved run with this process's stdio and environment; its status, or 'fallback' when the namespace could not be made. */
async function runHere(t: PrintedRunTarget): Promise<number | 'fallback'> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  const r = startInNamespace({
    source: t.source,
    at: t.at,
    cwd: t.cwd,
    command: t.command,
    args: t.args,
    env,
    stdio: ['inherit', 'inherit', 'inherit'],
  });
  return waitInForeground(r).catch(() => 'fallback' as const);
}
