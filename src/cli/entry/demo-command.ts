import type { CliCommand } from '../commands/command.js';

/** `awc demo main` and `awc demo fanout` (src/cli/demo/). */
export const command: CliCommand = {
  register(program, ctx) {
    const demo = program.command('demo').description('guided demonstrations');
    demo
      .command('main')
      .description('the main job end to end on a real tree: import, fork, mount, edit, checkpoint, diff, export')
      .option('--source <dir>', 'tree to import (default: this project checkout with its node_modules)')
      .action(async (opts: { source?: string }) => {
        const { runMainDemo } = await import('../demo/demo-main.js');
        await runMainDemo({ home: ctx.globals().home, source: opts.source, json: ctx.globals().json === true });
      });
    demo
      .command('fanout')
      .description(
        'N workspaces of one snapshot read the same files at once: backend reads, cache, host disk and daemon memory against N copies',
      )
      .option('--workspaces <n>', 'workspaces to fork and mount', '100')
      .option('--files <f>', 'read only the first F regular files (default: all)')
      .option('--source <dir>', 'tree to import (default: this project checkout with its node_modules)')
      .option('--concurrency <c>', 'reads in flight at once across all mounts', '32')
      .action(async (opts: { workspaces: string; files?: string; source?: string; concurrency: string }) => {
        const { runFanoutDemo } = await import('../demo/demo-fanout.js');
        await runFanoutDemo({
          home: ctx.globals().home,
          source: opts.source,
          workspaces: Number(opts.workspaces),
          files: opts.files === undefined ? undefined : Number(opts.files),
          concurrency: Number(opts.concurrency),
          json: ctx.globals().json === true,
        });
      });
  },
};
