import type { CliCommand } from './command.js';

/** `awc usage`: what the namespace costs. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('usage')
      .description('what the current namespace costs: logical bytes, unique stored bytes, bytes materialised on this host')
      .action(() =>
        ctx.withAwc(async (awc, o) => {
          const { computeUsage, formatUsage } = await import('../../service/workspace/usage.js');
          const { throughDaemon } = await import('../remote/through-daemon.js');
          const u = throughDaemon(awc) ? await awc.usage() : await computeUsage(awc);
          o.result(u, () => formatUsage(u));
        }),
      );
  },
};
