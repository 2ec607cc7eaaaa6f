import type { CliCommand } from './command.js';

/** `awc metrics`: the host daemon's Prometheus metrics. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('metrics')
      .description("print the host daemon's Prometheus metrics (never starts the daemon)")
      .action(async () => {
        // --json: {running: false} | {running: true, metrics: {<sample name>: number | [{labels, value}]}}
        const o = ctx.out();
        const [{ loadConfig, pathsOf }, { DaemonClient }, { fetchDaemonText, flattenMetrics }] = await Promise.all([
          import('../../config/config.js'),
          import('../../daemon/supervisor/client.js'),
          import('../../daemon/metrics/metrics.js'),
        ]);
        const config = loadConfig({ home: ctx.globals().home, namespace: ctx.globals().namespace });
        const client = new DaemonClient(config);
        if (!(await client.running())) {
          o.result({ running: false }, () => 'awcd is not running: metrics live in the host daemon (start it with `awc daemon start`)');
          return;
        }
        if (o.json) {
          const json = (await client.call('GET', '/v1/metrics.json', undefined, { start: false, timeoutMs: 10_000 })) as Parameters<
            typeof flattenMetrics
          >[0];
          o.result({ running: true, metrics: flattenMetrics(json) }, () => '');
        } else {
          process.stdout.write((await fetchDaemonText(pathsOf(config).socket, '/metrics')).text);
        }
      });
  },
};
