import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { AwcError } from '../../core/errors.js';
import type { CleanedMount } from '../../drivers/overlay/leftovers.js';
import { packageVersion } from '../output/package-version.js';

/** One line about a mount a dead daemon left and that was cleaned. */
export function describeCleaned(c: CleanedMount): string {
  const what = c.kind === 'content' ? 'content FUSE' : 'overlay';
  return c.error
    ? `${what} at ${c.path}: could not unmount (${c.error})`
    : `${what} at ${c.path}: unmounted${c.lazy ? ' lazily (still in use: processes keep their files)' : ''}`;
}

/**
 * Registers `awc daemon start|stop|status|run` on `program`; `g` gives the global options
 * (home, namespace), `out` the output of this invocation. Implementations load in the actions.
 */
export const command: CliCommand = {
  register(program: Command, { globals: g, out }: CliContext): void {
    const daemon = program.command('daemon').description('the host daemon (content FUSE server and overlay mounts)');
    for (const step of [daemonStart, daemonStop, daemonStatus, daemonRun]) step(daemon, g, out);
  },
};

/** `awc daemon start`: the host daemon in the background. */
function daemonStart(daemon: Command, g: CliContext['globals'], out: CliContext['out']): void {
  daemon
    .command('start')
    .description('start the host daemon in the background')
    .action(async () => {
      const o = out();
      const [{ loadConfig }, { DaemonClient }] = await Promise.all([
        import('../../config/config.js'),
        import('../../daemon/supervisor/client.js'),
      ]);
      const client = new DaemonClient(loadConfig({ home: g().home, namespace: g().namespace }));
      if (!(await client.running())) await client.start();
      const s = await client.call('GET', '/v1/status');
      o.result(s, () => `awcd running (pid ${(s as { pid: number }).pid})`);
    });
}

/** `awc daemon stop`: unmount everything and stop the daemon. */
function daemonStop(daemon: Command, g: CliContext['globals'], out: CliContext['out']): void {
  daemon
    .command('stop')
    .description('unmount everything (uncheckpointed changes are kept) and stop the daemon')
    .option('--force', 'detach mounts that are in use (lazy unmount) instead of refusing')
    .action(async (opts: { force?: boolean }) => {
      // --json: {running: false, stopped, cleaned: [{kind, path, upper?, lazy, error?}]}
      const o = out();
      const [{ loadConfig }, { stopDaemon }] = await Promise.all([
        import('../../config/config.js'),
        import('../../daemon/supervisor/stop.js'),
      ]);
      const config = loadConfig({ home: g().home, namespace: g().namespace });
      const r = await stopDaemon(config, opts.force === true);
      o.result(r, () => [r.stopped ? 'awcd stopped' : 'awcd is not running', ...r.cleaned.map(describeCleaned)].join('\n'));
    });
}

/** `awc daemon status`. */
function daemonStatus(daemon: Command, g: CliContext['globals'], out: CliContext['out']): void {
  daemon
    .command('status')
    .description('is the daemon running, and what it has mounted')
    .action(async () => {
      const o = out();
      // an ordinary user: who the daemon takes them for, through their socket
      if (await (await import('./user-guards.js')).answerForUser('status', g(), o)) return;
      const [{ loadConfig, pathsOf }, { DaemonClient }, { livePid }] = await Promise.all([
        import('../../config/config.js'),
        import('../../daemon/supervisor/client.js'),
        import('../../daemon/supervisor/pid-file.js'),
      ]);
      const config = loadConfig({ home: g().home, namespace: g().namespace });
      const client = new DaemonClient(config);
      if (!(await client.running())) {
        // a live supervisor is starting a daemon that died again
        const supervisor = livePid(pathsOf(config).supervisorPidFile);
        o.result(supervisor === undefined ? { running: false } : { running: false, supervisor }, () =>
          supervisor === undefined ? 'awcd is not running' : `awcd is not running; its supervisor (pid ${supervisor}) is starting it again`,
        );
        return;
      }
      const s = (await client.call('GET', '/v1/status', undefined, { start: false })) as {
        pid: number;
        mounts: { workspace: string; path: string }[];
        contentObjects: number;
      };
      o.result({ running: true, ...s }, () =>
        [
          `awcd running (pid ${s.pid}), ${s.contentObjects} content objects known`,
          ...s.mounts.map((m) => `  ${m.workspace} at ${m.path}`),
        ].join('\n'),
      );
    });
}

/** `awc daemon run`: the daemon in the foreground (its supervisor runs this). */
function daemonRun(daemon: Command, g: CliContext['globals'], _out: CliContext['out']): void {
  daemon
    .command('run')
    .description('run the daemon and its supervisor in the foreground (what `start` runs)')
    .action(async () => {
      const { loadConfig } = await import('../../config/config.js');
      const config = loadConfig({ home: g().home, namespace: g().namespace });
      const logLine = (role: string) => (l: Record<string, unknown>) =>
        process.stderr.write(JSON.stringify({ time: new Date().toISOString(), role, ...l }) + '\n');
      if (process.env.AWC_DAEMON_WORKER !== '1') {
        // the supervisor: keeps the content FUSE connection and starts the daemon (this command with AWC_DAEMON_WORKER=1)
        const { runSupervisor } = await import('../../daemon/supervisor/supervisor.js');
        process.exit(await runSupervisor(config, logLine('supervisor')));
      }
      const fuseFd = process.env.AWC_FUSE_FD === undefined ? undefined : Number(process.env.AWC_FUSE_FD);
      const resume = process.env.AWC_FUSE_RESUME === '1';
      const { HostDaemon } = await import('../../daemon/session/host-daemon.js');
      const d = new HostDaemon(config, { fuseFd, resume, version: packageVersion() });
      d.on('log', logLine('daemon'));
      // the `users` of config.json again (per-user sockets)
      process.on(
        'SIGHUP',
        () => void d.reload().catch((err: unknown) => logLine('daemon')({ level: 'error', msg: 'reload failed', err: String(err) })),
      );
      const stop = () => void d.stop().then(() => process.exit(0));
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
      d.on('stopped', () => process.exit(0));
      try {
        await d.start();
      } catch (err) {
        const e = err instanceof AwcError ? err : undefined;
        logLine('daemon')({ level: 'error', msg: 'start failed', code: e?.code, err: String(err) });
        const [{ EXIT_REFUSED, EXIT_SESSION_LOST }, { recordStartError, REFUSED_START_CODES }, { pathsOf }] = await Promise.all([
          import('../../daemon/supervisor/supervisor.js'),
          import('../../daemon/supervisor/start-error.js'),
          import('../../config/config.js'),
        ]);
        // `awc daemon start` reports it with its own code and hint (src/daemon/supervisor/start-error.ts)
        recordStartError(pathsOf(config).hostDir, err);
        process.exit(REFUSED_START_CODES.has(e?.code ?? '') ? EXIT_REFUSED : resume && e?.code === 'E_FUSE' ? EXIT_SESSION_LOST : 1);
      }
      await new Promise(() => undefined);
    });
}
