import { spawn, type StdioOptions } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { AwcError, ERROR_CODES, type ErrorCode } from '../../core/errors.js';
import type { BindFailure, BindSpec } from '../mount/namespace-bind.js';
import { exitOf, type RunningCommand } from '../mount/run-namespace.js';

/** The stage the namespace starts with (tsc's output; the daemon runs dist/src). */
const STAGE = fileURLToPath(new URL('../mount/run-bind-main.js', import.meta.url));
const UNSHARE = '/usr/bin/unshare';

/** A started ordinary user's `awc run`: held before the stage checks anything until {@link go}. */
export interface CallerCommand extends RunningCommand {
  /** Lets the stage go on (call it once the process is in the caller's cgroup and has their limits). */
  go(): void;
}

/** What the stage said on its report descriptor, as the outcome of `ready`. */
function outcome(said: string, status: number | undefined): AwcError | undefined {
  if (said === 'ok\n') return undefined;
  const line = said.startsWith('ok\n') ? said.slice(3) : said;
  try {
    const f = JSON.parse(line) as BindFailure;
    const code = (f.code in ERROR_CODES ? f.code : 'E_MOUNT_FAILED') as ErrorCode;
    return new AwcError(code, f.message, f.hint ? { hint: f.hint } : {});
  } catch {
    return new AwcError('E_MOUNT_FAILED', `awc run's namespace stage ended before it ran the command (status ${status ?? '?'})`, {
      hint: 'It needs util-linux unshare and setpriv; the daemon log may say more.',
    });
  }
}

/**
 * Starts an ordinary user's `awc run` for the root daemon (docs/explanation/stable-paths.md
 * "The route for ordinary users"): `unshare --mount --propagation private` runs
 * src/host/mount/run-bind-main.ts in a new, private mount namespace, in a new session and process
 * group, with `stdio` (the caller's own descriptors) as its stdin, stdout and stderr. Nothing
 * is checked or mounted until {@link CallerCommand.go}: then the spec goes to the stage on
 * descriptor 3, and the stage opens and checks both directories inside the namespace
 * (a descriptor opened out here would belong to the daemon's namespace, which mount(2)
 * refuses), binds, drops to the caller and executes the command (src/host/mount/namespace-bind.ts).
 * `ready` rejects with the stage's own error (E_NOT_MOUNTED, E_PERMISSION, E_TARGET_BUSY,
 * E_MOUNT_FAILED); `exit` is the command's status (128 + a signal's number).
 */
export function startForCaller(spec: BindSpec, stdio: readonly [number, number, number]): CallerCommand {
  const io: StdioOptions = [...stdio, 'pipe', 'pipe'];
  const child = spawn(UNSHARE, ['--mount', '--propagation', 'private', '--', process.execPath, STAGE], {
    stdio: io,
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    detached: true,
  });
  const gate = child.stdio[3] as Writable;
  const report = child.stdio[4] as Readable;
  gate.on('error', () => undefined);
  const exit = exitOf(child);
  const ready = new Promise<void>((ok, fail) => {
    let said = '';
    report.on('data', (b: Buffer) => (said += b.toString()));
    report.once('end', () => {
      if (said === 'ok\n') return ok();
      void exit.then((status) => fail(outcome(said, status)), fail);
    });
  });
  ready.catch(() => undefined);
  return { child, ready, exit, go: () => gate.end(JSON.stringify(spec)) };
}
