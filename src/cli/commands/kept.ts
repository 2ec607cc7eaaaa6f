import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { formatBytes } from '../output/output.js';
import type { Awc } from '../../service/workspace/awc.js';

/** Awc.kept, in process (sync) or through the root daemon for an ordinary user (src/cli/remote/remote-awc.ts: promises). */
type KeptPort = {
  [K in keyof Awc['kept']]: (...a: Parameters<Awc['kept'][K]>) => ReturnType<Awc['kept'][K]> | Promise<ReturnType<Awc['kept'][K]>>;
};

/** Registers `awc kept ls|restore|rm` (docs/reference/kept.md) on `program`. */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    const kept = program.command('kept').description('secret files a remove or a discard kept on this host (they exist nowhere else)');
    kept
      .command('ls [workspace]')
      .description('list kept sets (of one workspace or set id)')
      .action((ref: string | undefined) =>
        withAwc(async (awc, o) => {
          const r = await (awc.kept as KeptPort).ls(ref);
          o.result(r, () =>
            r.sets
              .flatMap((s) => [
                `${s.id}  ${s.name ?? s.workspace}  ${new Date(s.atMs).toISOString()}`,
                ...s.files.map((f) => `  ${f.path}  ${formatBytes(f.size)}  ${f.keptAt}`),
              ])
              .join('\n'),
          );
        }),
      );
    kept
      .command('restore <ref> <dir>')
      .description("copy a kept set (a set id, or a workspace's newest) into a directory, never over an existing file")
      .action((ref: string, dir: string) =>
        withAwc(async (awc, o) => {
          const r = await (awc.kept as KeptPort).restore(ref, dir);
          o.result(r, () => `${r.id}: restored ${r.restored.join(', ')} into ${dir}`);
        }),
      );
    kept
      .command('rm <ref>')
      .description('delete a kept set (its files are gone for good)')
      .action((ref: string) =>
        withAwc(async (awc, o) => {
          const r = await (awc.kept as KeptPort).rm(ref);
          o.result(r, () => `${r.id}: deleted ${r.files} kept file(s)`);
        }),
      );
  },
};
