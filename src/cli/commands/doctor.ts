import { describeCleaned } from './daemon.js';
import type { CliCommand } from './command.js';

/** `awc doctor`: the mount driver, the home and the backends; cleans what a dead daemon left. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('doctor')
      .description(
        'say which mount driver this host will use and why, whether the home, the catalog and the object store are usable; clean mounts a dead daemon left',
      )
      .action(async () => {
        // needs no home and creates nothing: it also answers on a missing or read-only home
        const o = ctx.out();
        if (await (await import('./user-guards.js')).answerForUser('doctor', ctx.globals(), o)) return;
        const [{ loadConfig, pathsOf }, { detectDriver }, { checkHome }, { checkBackends }, { livePid }, { cleanDeadDaemon }] =
          await Promise.all([
            import('../../config/config.js'),
            import('../../drivers/detect/detect-driver.js'),
            import('../output/check-home.js'),
            import('../../service/doctor/backend-checks.js'),
            import('../../daemon/supervisor/pid-file.js'),
            import('../../daemon/supervisor/stop.js'),
          ]);
        const config = loadConfig({ home: ctx.globals().home, namespace: ctx.globals().namespace });
        const d = detectDriver(config.mountDriver);
        const home = checkHome(config);
        const backends = await checkBackends(config);
        // a daemon that died left mounts behind: clean them (nothing is touched while a daemon or its supervisor lives; nothing to clean in a home that is missing or read-only)
        const paths = pathsOf(config);
        const daemon = { running: livePid(paths.pidFile) !== undefined, supervisor: livePid(paths.supervisorPidFile) ?? null };
        // (and nothing when the catalog cannot be opened: its check says why)
        const cleaned = home.ok && backends[0].ok ? await cleanDeadDaemon(config) : [];
        const r = { ...d, checks: [...d.checks, home, ...backends], daemon, cleaned };
        o.result(r, () =>
          [
            `driver: ${r.driver}`,
            `why: ${r.reason}`,
            ...r.checks.flatMap((c) => [
              `  [${c.ok ? 'ok' : '--'}] ${c.name}: ${c.detail}`,
              ...('hint' in c && c.hint ? [`       hint: ${c.hint}`] : []),
            ]),
            `daemon: ${daemon.running ? 'running' : 'not running'}${daemon.supervisor ? ` (supervisor pid ${daemon.supervisor})` : ''}`,
            ...cleaned.map((c) => `left by a dead daemon: ${describeCleaned(c)}`),
          ].join('\n'),
        );
      });
  },
};
