import type { Command } from 'commander';
import type { CliCommand, CliContext, WithAwc } from './command.js';
import type { InitTool } from '../../service/attach/init-tool.js';
import type { PrepareResult } from '../../service/attach/prepare.js';
import type { GitHooksResult } from '../../service/attach/git-hooks.js';

/**
 * Registers `awc env-key`, `awc prepare`, `awc attach`, `awc detach` and `awc init
 * cursor|codex|conductor` (docs/reference/attach.md) on `program`. The implementations are
 * loaded inside the actions (the CLI starts fast). `out` makes the Output of a command that
 * needs no home.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc, out }: CliContext): void {
    program
      .command('env-key [dir]')
      .description("print a worktree's environment key: a digest of its lockfiles and runtime versions (default: .)")
      .action(async (dir: string | undefined) => {
        const { envKey } = await import('../../service/attach/env-key.js');
        const r = await envKey(dir ?? '.');
        out().result(r, () => (r.lockfiles.length ? r.key : `${r.key} (no lockfile found)`));
      });

    program
      .command('prepare <dir>')
      .description('import a checkout with its installed dependencies as the snapshot `awc attach` picks by environment key')
      .option('--name <name>', 'name the snapshot')
      .option('-m, --message <msg>', 'message')
      .option('--update', "import again reading only the files changed since this directory's last prepare, replacing that snapshot")
      .option('--background', 'run in a detached process (for a git hook): print its pid and log file, return at once')
      .action((dir: string, opts: PrepareFlags) =>
        withAwc(
          async (awc, o) => {
            if (opts.background) {
              const { prepareInBackground } = await import('./prepare-background.js');
              const r = await prepareInBackground(awc, dir);
              return o.result(r, () => `preparing ${r.dir} in the background (pid ${r.pid}, log ${r.log})`);
            }
            const { prepare } = await import('../../service/attach/prepare.js');
            const { throughDaemon } = await import('../remote/through-daemon.js');
            const r = await prepare(awc, dir, {
              ...opts,
              onWarning: (w) => o.warn(`${w.path}: ${w.message}`),
              buildLeases: throughDaemon(awc) ? undefined : awc.catalog,
            });
            o.result(r, () => prepareLine(r));
          },
          { create: true },
        ),
      );

    program
      .command('attach <dir>')
      .description("mount a prepared environment's dependency directories (node_modules, .venv, …) into a worktree")
      .option('--snapshot <ref>', "attach this snapshot instead of the newest one with the worktree's environment key")
      .action((dir: string, opts: { snapshot?: string }) =>
        withAwc(async (awc, o) => {
          const { throughDaemon } = await import('../remote/through-daemon.js');
          const r = throughDaemon(awc)
            ? await awc.attach(dir, opts)
            : await (await import('../../service/attach/attach.js')).attach(awc, dir, opts);
          o.result(r, () =>
            r.already
              ? `${r.dir} is attached already (workspace ${r.workspace})`
              : r.restored
                ? `${r.dir}: bind mounts made again on workspace ${r.workspace} (its mount had changed)`
                : `attached ${r.snapshot} to ${r.dir}: ${r.binds.map((b) => b.rel).join(', ')} (workspace ${r.workspace})`,
          );
        }),
      );

    program
      .command('detach <dir>')
      .description('undo `awc attach`: unmount the dependency directories and remove the private workspace (no checkpoint)')
      .option('--force', 'detach mounts that are still in use lazily')
      .action((dir: string, opts: { force?: boolean }) =>
        withAwc(async (awc, o) => {
          const { throughDaemon } = await import('../remote/through-daemon.js');
          const r = throughDaemon(awc)
            ? await awc.detach(dir, opts)
            : await (await import('../../service/attach/attach.js')).detach(awc, dir, opts);
          o.result(r, () => `detached ${r.dir}: unmounted ${r.unmounted.length}, removed workspace ${r.workspace}`);
        }),
      );

    registerInitTools(program, withAwc);
  },
};

/** Writes the git hooks of `--git-hooks`: the launcher runs `prepare --update` of the checkout. */
async function prepareHooks(launcher: string, dir: string): Promise<GitHooksResult> {
  const { installPrepareHooks } = await import('../../service/attach/git-hooks.js');
  const { shellWord } = await import('./self-command.js');
  const { resolve } = await import('node:path');
  return installPrepareHooks(dir, ['sh', shellWord(launcher), 'prepare', '--update', shellWord(resolve(dir))]);
}

/** The text line of `--git-hooks`. */
export function hooksLine(h: GitHooksResult): string {
  if (h.dir === null) return 'no git hooks written: not a git checkout';
  const kept = h.kept.length ? `; kept your own ${h.kept.join(', ')} (add the awc line by hand)` : '';
  return `git hooks ${h.written.join(', ') || 'none'} written in ${h.dir} (awc prepare --update in the background)${kept}`;
}

/** The flags of `awc prepare`. */
interface PrepareFlags {
  name?: string;
  message?: string;
  update?: boolean;
  background?: boolean;
}

/** The text answer of `awc prepare`. */
function prepareLine(r: PrepareResult): string {
  const what = `${r.id}${r.name ? ` (${r.name})` : ''}: environment ${r.envKey}, holding ${r.envDirs.join(', ')}`;
  if (r.waitedFor !== undefined) return `${what} (built by ${r.waitedFor}, which was preparing the same environment)`;
  const sc = r.statCache;
  const read =
    sc && r.parent !== undefined ? `; ${sc.read} files read, ${sc.reused} unchanged${sc.miss ? ` (stat cache: ${sc.miss})` : ''}` : '';
  const replaced = r.replaced ? `; replaced ${r.replaced.id}${r.replaced.removed ? '' : ' (kept: in use)'}` : '';
  return `${what}${read}${replaced}`;
}

/** Registers `awc init cursor|codex|conductor [dir] [--awc <command>]` (docs/reference/attach.md). */
function registerInitTools(program: Command, withAwc: WithAwc): void {
  const init =
    program.commands.find((c) => c.name() === 'init') ?? program.command('init').description("write a tool's configuration to use AWC");
  for (const [tool, what] of [
    ['cursor', '.cursor/worktrees.json: each new worktree runs `awc attach`'],
    ['codex', '.codex/environments/environment.toml: setup runs `awc attach`, cleanup `awc detach`'],
    ['conductor', 'conductor.json: setup runs `awc attach`, archive `awc detach`'],
  ] as const) {
    init
      .command(`${tool} [dir]`)
      .description(`${what} (merged into an existing file; default dir: .); .awc/awc (git-ignored) runs this AWC`)
      .option('--awc <command>', 'the command .awc/awc runs AWC with (default: this node and CLI, by absolute path)')
      .option('--git-hooks', 'also write post-merge and post-checkout git hooks that run `awc prepare --update` in the background')
      .action(async (dir: string | undefined, opts: { awc?: string; gitHooks?: boolean }) => {
        const { initTool, planTool } = await import('../../service/attach/init-tool.js');
        const { selfInvocation } = await import('./self-command.js');
        // a malformed configuration is refused before the home is opened
        await planTool(tool as InitTool, dir ?? '.');
        await withAwc(async (opened, o) => {
          const r = await initTool(tool as InitTool, dir ?? '.', { launcher: selfInvocation(program, opened, opts.awc) });
          const hooks = opts.gitHooks ? await prepareHooks(r.launcher, dir ?? '.') : undefined;
          o.result({ ...r, ...(hooks && { gitHooks: hooks }) }, () =>
            [
              `${r.unchanged ? 'already set up' : r.merged ? 'merged into' : 'wrote'} ${r.file}`,
              `wrote ${r.launcher} (this machine's AWC, home and namespace${r.excludedIn ? `; git-ignored in ${r.excludedIn}` : ''})`,
              ...(hooks ? [hooksLine(hooks)] : []),
            ].join('\n'),
          );
        });
      });
  }
}
