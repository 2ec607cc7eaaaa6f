import { progress, type CliCommand } from './command.js';

/** `awc mount <workspace> <dir>`. */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('mount <workspace> <dir>')
      .description('mount a workspace as a directory (overlay driver, or the copy driver where overlay is not possible)')
      .option(
        '--steal',
        "take over a workspace whose lease expired on another host (at its last checkpoint; that host's uncheckpointed changes are lost)",
      )
      .option('--warm', 'then look up every path once, so the first walk of the tree (git status) finds it warm (docs/explanation/git.md)')
      .action((ws: string, dir: string, opts: { steal?: boolean; warm?: boolean }) =>
        ctx.withAwc(async (awc, o) => {
          const mounted = await awc.mount(ws, dir, { onProgress: progress(o, 'materialising'), steal: opts.steal === true });
          o.progressDone();
          const r = opts.warm
            ? { ...mounted, warmed: await (await import('../../service/git/warm-workspace.js')).warmWorkspace(mounted.path) }
            : mounted;
          const left = r.leftOut?.length
            ? `\nleft out (no nosuid,nodev mount as an ordinary user):\n${r.leftOut.map((l) => `  ${l.path}: ${l.reason}`).join('\n')}`
            : '';
          const warmed =
            'warmed' in r
              ? `; ${r.warmed.entries} paths looked up${r.warmed.git ? ' and git status run' : ''} in ${Math.round(r.warmed.ms)} ms`
              : '';
          o.result(
            r,
            () => `${r.workspace} mounted at ${r.path} (${r.driver}${r.resumed ? ', resumed uncheckpointed changes' : ''}${warmed})${left}`,
          );
        }),
      );
  },
};
