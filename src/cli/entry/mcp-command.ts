import { collectLabel, labelsOf } from '../commands/label.js';
import { packageVersion } from '../output/package-version.js';
import type { CliCommand } from '../commands/command.js';

/** `awc mcp`: the MCP server over stdio (src/cli/mcp/). */
export const command: CliCommand = {
  register(program, ctx) {
    program
      .command('mcp')
      .description('serve the workspace primitives as MCP tools over stdio (docs/reference/mcp.md); stdout carries MCP frames only')
      .option(
        '--scope <id>',
        'act only on workspaces forked under this id (kept across restarts); "all": every workspace and snapshot (default: a fresh id)',
      )
      .option('--root <dir>', 'read, write, mount and export only under this directory (default: the current directory)')
      .option('--snapshot <ref>', 'a snapshot the server sees (repeatable; besides its own checkpoints)', collectLabel, [])
      .option('--snapshot-label <k=v>', 'the server sees the snapshots carrying every such label (repeatable)', collectLabel, [])
      .action(async (opts: { scope?: string; root?: string; snapshot: string[]; snapshotLabel: string[] }) => {
        // the SDK is loaded only here: other commands never pay for it
        const { runMcpServer } = await import('../mcp/server.js');
        await runMcpServer({
          home: ctx.globals().home,
          namespace: ctx.globals().namespace,
          scope: opts.scope,
          root: opts.root,
          snapshots: opts.snapshot,
          snapshotLabels: opts.snapshotLabel.length > 0 ? labelsOf(opts.snapshotLabel) : undefined,
          version: packageVersion(),
        });
        process.exit(0);
      });
  },
};
