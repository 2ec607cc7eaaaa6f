#!/usr/bin/env node
import { constants as osConstants } from 'node:os';
import { Command, CommanderError } from 'commander';
import { AwcError, ERROR_CODES } from '../../core/errors.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { OpenMode } from '../remote/open-awc.js';
import { Output, formatBytes } from '../output/output.js';
import { registerKeptCommands } from '../commands/kept.js';
import type { LeaseView } from '../../service/workspace/lease-guard.js';
import { leaseWords } from '../output/lease-words.js';
import { registerGcCommands } from '../commands/gc-commands.js';
import { registerFsckCommand } from '../commands/fsck-command.js';
import { registerUserGuards } from '../commands/user-guards.js';

// CLI latency (docs/explanation/cli-latency.md): this module and what it imports statically stay
// tiny (commander, the error codes, Output); each command loads its implementation in its action.

import { registerAttachCommands } from '../commands/attach.js';
import { registerRunCommand } from '../commands/run.js';
import { describeCleaned, registerDaemonCommands } from '../commands/daemon.js';
import { registerClaudeCommands } from '../commands/claude.js';
import type { ImportCliOptions } from '../output/git-options.js';
import type { GitExportCliOptions } from '../commands/git-export-cli.js';
import { packageVersion } from '../output/package-version.js';
import { collectLabel, labelsOf, labelWords, registerLabelCommands } from '../commands/label.js';
import type { Labels } from '../../catalog/port/labels.js';

interface Globals {
  home?: string;
  json?: boolean;
  namespace?: string;
}

const program = new Command();
program
  .name('awc')
  .description('Agent Workspace Cache: snapshot → fork → mount → checkpoint → diff / export')
  .option('--home <dir>', 'data directory (default: $AWC_HOME, /var/lib/awc for root, ~/.local/share/awc)')
  .option('--namespace <ns>', 'tenant namespace (default: $AWC_NAMESPACE or "default")')
  .option('--json', 'machine-readable output on stdout; errors as JSON on stderr')
  .version(packageVersion(), '-V, --version')
  .exitOverride();

function globals(): Globals {
  return program.opts<Globals>();
}

function out(): Output {
  return new Output(globals().json === true);
}

/**
 * Runs `fn` with an open service, closing it afterwards. Only `create` (snapshot import)
 * makes a missing home; every other command answers E_NO_HOME there.
 */
async function withAwc<T>(fn: (awc: Awc, o: Output) => Promise<T>, opts: OpenMode = {}): Promise<T> {
  const g = globals();
  // an ordinary user allowed to use root's daemon: every command goes through their socket (docs/how-to/ordinary-users.md)
  const { userSocketFor } = await import('../remote/user-socket.js');
  const socket = userSocketFor(g.home);
  if (socket !== undefined && opts.adopting) throw new AwcError('E_PERMISSION', "`awc fsck --adopt-store` is for the home's owner");
  if (socket !== undefined) {
    const { remoteAwc } = await import('../remote/remote-awc.js');
    return fn(remoteAwc(socket, g.namespace ?? process.env.AWC_NAMESPACE ?? 'default') as unknown as Awc, out());
  }
  const { openAwc } = await import('../remote/open-awc.js');
  const awc = await openAwc({ home: g.home, namespace: g.namespace }, { ...opts, create: opts.create ?? false });
  try {
    return await fn(awc, out());
  } finally {
    await awc.close();
  }
}

function progress(o: Output, verb: string) {
  let last = 0;
  return (p: { files: number; bytes: number }) => {
    const now = Date.now();
    if (now - last < 200) return;
    last = now;
    o.progress(`${verb}: ${p.files} files, ${formatBytes(p.bytes)}`);
  };
}

const snapshot = program.command('snapshot').description('import and list snapshots');
snapshot
  .command('import [source]')
  .description('import a directory or a tar file (or, with --git, a git repository) as a new snapshot')
  .option('--name <name>', 'name the snapshot')
  .option('-m, --message <msg>', 'message')
  .option('--allow-changing', 'store files that keep changing while read as read (listed in "changing") instead of failing')
  .option('--label <key=value>', 'label the snapshot (repeatable)', collectLabel, [])
  .option('--git <repo>', 'import a git repository (path or URL) at --rev, with its .git: forks are working clones')
  .option('--rev <rev>', 'with --git: the branch, tag or commit to check out (default HEAD)')
  .action((source: string | undefined, opts: ImportCliOptions) =>
    withAwc(
      async (awc, o) => {
        const { checkImportSource } = await import('../output/git-options.js');
        checkImportSource(source, opts);
        const common = { name: opts.name, message: opts.message, labels: labelsOf(opts.label), onProgress: progress(o, 'importing') };
        const onWarning = (w: { path: string; message: string }) => o.warn(`${w.path}: ${w.message}`);
        const r =
          opts.git !== undefined
            ? await awc.importGit(opts.git, { ...common, rev: opts.rev, onWarning })
            : await awc.importSnapshot(source!, { ...common, allowChanging: opts.allowChanging, onWarning });
        o.progressDone();
        for (const p of r.changing ?? []) o.warn(`${p}: kept changing while read; stored as last read`);
        for (const k of r.secrets) o.warn(`${k.path}: secret, not stored (opt it in with "allowSecrets" in .awc.json)`);
        o.result(
          r,
          () =>
            `${r.id}${r.name ? ` (${r.name})` : ''}: ${r.files} files, ${formatBytes(r.bytes)}; stored ${formatBytes(r.storedBytes)} new`,
        );
      },
      { create: true },
    ),
  );
snapshot
  .command('ls')
  .description('list snapshots, newest first')
  .option('--label <key=value>', 'only snapshots with this label (repeatable: all must match)', collectLabel, [])
  .action((opts: { label: string[] }) =>
    withAwc(async (awc, o) => {
      const rows = await awc.listSnapshots({ labels: labelsOf(opts.label) });
      o.result({ snapshots: rows }, () =>
        rows
          .map(
            (s) =>
              `${s.id}  ${s.name ?? '-'}  ${s.fileCount} files  ${formatBytes(s.byteCount)}  ${s.createdAt}  ${s.message ?? ''}${labelWords(s.labels)}`,
          )
          .join('\n'),
      );
    }),
  );

program
  .command('ls')
  .description('list workspaces')
  .option('--label <key=value>', 'only workspaces with this label (repeatable: all must match)', collectLabel, [])
  .action((opts: { label: string[] }) =>
    withAwc(async (awc, o) => {
      const withLeases = await awc.leases.list(await awc.listWorkspaces({ labels: labelsOf(opts.label) }));
      o.result({ workspaces: withLeases }, () =>
        withLeases
          .map(
            (w) =>
              `${w.id}  ${w.name ?? '-'}  head ${w.headSnapshotId}  ${w.mountState === 'mounted' ? `mounted at ${w.mountPath} (${w.mountDriver}) on ${w.mountHost}` : 'unmounted'}${leaseWords(w.lease)}${labelWords(w.labels)}`,
          )
          .join('\n'),
      );
    }),
  );

program
  .command('show <ref>')
  .description('show a snapshot or a workspace')
  .action((ref: string) =>
    withAwc(async (awc, o) => {
      const r = await awc.resolve(ref);
      const data = r.kind === 'snapshot' ? { kind: 'snapshot', ...r.snapshot } : await awc.leases.show(r.workspace);
      o.result(data, () =>
        Object.entries(data)
          .map(([k, v]) =>
            k === 'lease'
              ? `lease:${leaseWords(v as LeaseView)}`
              : k === 'labels'
                ? `labels:${labelWords(v as Labels) || ' -'}`
                : `${k}: ${v ?? '-'}`,
          )
          .join('\n'),
      );
    }),
  );

program
  .command('fork <snapshot>')
  .description('create workspaces from a snapshot (catalog rows only, constant time)')
  .option('--name <name>', 'name (with --count K: <name>-1 … <name>-K)')
  .option('--count <k>', 'how many workspaces', '1')
  .option('--label <key=value>', 'label every new workspace (repeatable)', collectLabel, [])
  .action((snap: string, opts: { name?: string; count: string; label: string[] }) =>
    withAwc(async (awc, o) => {
      if (!/^\d+$/.test(opts.count))
        throw new AwcError('E_USAGE', `--count must be a whole number from 1 to 100000, got ${JSON.stringify(opts.count)}`);
      const count = Number(opts.count);
      const rows = await awc.fork(snap, { name: opts.name, count, labels: labelsOf(opts.label) });
      o.result({ workspaces: rows.map((w) => ({ id: w.id, name: w.name })) }, () =>
        rows.map((w) => `${w.id}${w.name ? `  ${w.name}` : ''}`).join('\n'),
      );
    }),
  );

program
  .command('mount <workspace> <dir>')
  .description('mount a workspace as a directory (overlay driver, or the copy driver where overlay is not possible)')
  .option(
    '--steal',
    "take over a workspace whose lease expired on another host (at its last checkpoint; that host's uncheckpointed changes are lost)",
  )
  .option('--warm', 'then look up every path once, so the first walk of the tree (git status) finds it warm (docs/explanation/git.md)')
  .action((ws: string, dir: string, opts: { steal?: boolean; warm?: boolean }) =>
    withAwc(async (awc, o) => {
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

program
  .command('unmount <target>')
  .alias('umount')
  .description('unmount a workspace (by id, name or mount path)')
  .option('--discard', 'drop changes that are not checkpointed')
  .option('--force', 'detach even when busy (lazy unmount)')
  .action((target: string, opts: { discard?: boolean; force?: boolean }) =>
    withAwc(async (awc, o) => {
      const r = await awc.unmount(target, opts);
      for (const k of r.kept ?? []) o.warn(`${k.path}: secret, kept on this host at ${k.keptAt} (awc kept ls)`);
      o.result(
        r,
        () =>
          `${r.workspace} unmounted from ${r.path}${r.holders ? ` (detached lazily: still used by ${r.holders.map((h) => `pid ${h.pid} ${h.command}`).join(', ')}; it cannot be mounted again until they exit)` : r.pending ? ' (uncheckpointed changes kept on this host; the next mount resumes them)' : ''}`,
      );
    }),
  );

program
  .command('checkpoint <workspace>')
  .description("turn a workspace's current state into a new snapshot and move its head there")
  .option('-m, --message <msg>', 'message')
  .option('--allow-changing', 'store files that keep changing while read as read (listed in "changing") instead of failing')
  .option('--git-branch <branch>', 'then export the new head as a commit on this branch (docs/how-to/git-in-and-out.md)')
  .option('--git <repo>', 'with --git-branch: the local repository (default: the recorded origin)')
  .option('--force', 'with --git-branch: move the branch even when its tip is not the base commit')
  .action((ws: string, opts: GitExportCliOptions) =>
    withAwc(async (awc, o) => {
      if (opts.gitBranch !== undefined || opts.git !== undefined || opts.force)
        return (await import('../commands/git-export-cli.js')).runCheckpointGit(awc, o, ws, opts);
      const r = await awc.checkpoint(ws, opts);
      for (const p of r.changing ?? []) o.warn(`${p}: kept changing while read; stored as last read`);
      for (const k of r.skipped) o.warn(`${k.path}: skipped (${k.reason}: a snapshot cannot hold it)`);
      for (const k of r.secrets)
        o.warn(`${k.path}: secret, not stored (it stays on this host; opt it in with "allowSecrets" in .awc.json)`);
      for (const k of r.dropped) o.warn(`${k.path}: scratch, dropped (${k.files} files, ${formatBytes(k.bytes)})`);
      o.result(r, () =>
        r.changed
          ? `${r.id}: ${r.files} files, ${formatBytes(r.bytes)}; read ${r.filesRead} changed files, stored ${formatBytes(r.newBytes)} new`
          : `${r.id}: no changes since the head`,
      );
    }),
  );

program
  .command('diff <from> [to]')
  .description('compare snapshots or workspaces (a mounted workspace means its live state)')
  .option('--patch', 'print a git-style patch')
  .option('--binary', 'with --patch: full git binary patches, so that `git apply` can apply binary changes')
  .option('--metadata', 'also report owner, mtime and xattr changes')
  .action((from: string, to: string | undefined, opts: { patch?: boolean; binary?: boolean; metadata?: boolean }) =>
    withAwc(async (awc, o) => {
      const { formatChanges } = await import('../../service/diff/diff.js');
      const { formatLeftOut } = await import('../../service/diff/diff-secrets.js');
      const r = await awc.diff(from, to, { patch: opts.patch, binary: opts.binary, metadata: opts.metadata });
      const left = r.secrets ? { secrets: r.secrets, dropped: r.dropped } : {};
      const leftOut = formatLeftOut(r.secrets ?? [], r.dropped ?? []);
      if (opts.patch && !o.json) {
        // the patch holds stored changes only (never a secret's bytes); what a checkpoint leaves out goes to stderr
        process.stdout.write(r.patch ?? '');
        process.stderr.write(leftOut);
      } else o.result({ changes: r.changes, ...left, ...(opts.patch ? { patch: r.patch } : {}) }, () => formatChanges(r.changes) + leftOut);
    }),
  );

program
  .command('export <ref>')
  .description('write a snapshot (or a workspace head) out as a tar file or a directory')
  .option('--tar <file>', 'tar file (pax, exact mtimes; - for stdout)')
  .option('--dir <dir>', 'new or empty directory (appears only when complete)')
  .option('--overwrite', 'with --dir: replace a non-empty directory')
  .option('--keep-privileges', 'with --dir: keep setuid/setgid bits and device nodes (left out by default)')
  .option('--git <repo>', 'write the changes against the base commit as one commit in this local repository (with --branch)')
  .option('--branch <branch>', 'with --git: the branch to write (new, at the base commit, or moved with --force)')
  .option('-m, --message <msg>', 'with --git: the commit message')
  .option('--force', 'with --git: move the branch even when its tip is not the base commit')
  .action((ref: string, opts: { tar?: string; dir?: string; overwrite?: boolean; keepPrivileges?: boolean } & GitExportCliOptions) =>
    withAwc(async (awc, o) => {
      if (opts.git !== undefined) return (await import('../commands/git-export-cli.js')).runExportGit(awc, o, ref, opts);
      const { PendingFile } = await import('../../service/tar/pending-file.js');
      // Ctrl-C or a kill: remove the half-written archive, then exit as the signal would (128 + n)
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
        process.once(sig, () => {
          PendingFile.removeAllSync();
          process.exit(128 + osConstants.signals[sig]);
        });
      }
      const r = await awc.export(ref, { ...opts, onProgress: progress(o, 'exporting') });
      o.progressDone();
      for (const l of r.leftOut ?? []) o.warn(`${l.path}: left out: ${l.reason} (pass --keep-privileges to keep it)`);
      if (opts.tar !== '-') o.result(r, () => `${r.id}: ${r.files} files, ${formatBytes(r.bytes)} written to ${opts.tar ?? opts.dir}`);
    }),
  );

program
  .command('doctor')
  .description(
    'say which mount driver this host will use and why, whether the home, the catalog and the object store are usable; clean mounts a dead daemon left',
  )
  .action(async () => {
    // needs no home and creates nothing: it also answers on a missing or read-only home
    const o = out();
    if (await (await import('../commands/user-guards.js')).answerForUser('doctor', globals(), o)) return;
    const [{ loadConfig, pathsOf }, { detectDriver }, { checkHome }, { checkBackends }, { livePid }, { cleanDeadDaemon }] =
      await Promise.all([
        import('../../config/config.js'),
        import('../../drivers/detect/detect-driver.js'),
        import('../output/check-home.js'),
        import('../../service/doctor/backend-checks.js'),
        import('../../daemon/supervisor/pid-file.js'),
        import('../../daemon/supervisor/stop.js'),
      ]);
    const config = loadConfig({ home: globals().home, namespace: globals().namespace });
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

registerDaemonCommands(program, globals, out);

program
  .command('usage')
  .description('what the current namespace costs: logical bytes, unique stored bytes, bytes materialised on this host')
  .action(() =>
    withAwc(async (awc, o) => {
      const { computeUsage, formatUsage } = await import('../../service/workspace/usage.js');
      const { throughDaemon } = await import('../remote/through-daemon.js');
      const u = throughDaemon(awc) ? await awc.usage() : await computeUsage(awc);
      o.result(u, () => formatUsage(u));
    }),
  );

program
  .command('metrics')
  .description("print the host daemon's Prometheus metrics (never starts the daemon)")
  .action(async () => {
    // --json: {running: false} | {running: true, metrics: {<sample name>: number | [{labels, value}]}}
    const o = out();
    const [{ loadConfig, pathsOf }, { DaemonClient }, { fetchDaemonText, flattenMetrics }] = await Promise.all([
      import('../../config/config.js'),
      import('../../daemon/supervisor/client.js'),
      import('../../daemon/metrics/metrics.js'),
    ]);
    const config = loadConfig({ home: globals().home, namespace: globals().namespace });
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

const demo = program.command('demo').description('guided demonstrations');
demo
  .command('main')
  .description('the main job end to end on a real tree: import, fork, mount, edit, checkpoint, diff, export')
  .option('--source <dir>', 'tree to import (default: this project checkout with its node_modules)')
  .action(async (opts: { source?: string }) => {
    const { runMainDemo } = await import('../demo/demo-main.js');
    await runMainDemo({ home: globals().home, source: opts.source, json: globals().json === true });
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
      home: globals().home,
      source: opts.source,
      workspaces: Number(opts.workspaces),
      files: opts.files === undefined ? undefined : Number(opts.files),
      concurrency: Number(opts.concurrency),
      json: globals().json === true,
    });
  });

registerKeptCommands(program, (fn) => withAwc(fn));
registerUserGuards(program, globals);
registerGcCommands(program, (fn) => withAwc(fn));
registerFsckCommand(
  program,
  (fn) => withAwc(fn, { checking: true }),
  (fn) => withAwc(fn, { create: true, adopting: true }),
);
registerLabelCommands(program, (fn) => withAwc(fn));
registerAttachCommands(program, withAwc, out);
registerRunCommand(program, withAwc, globals);
registerClaudeCommands(
  program,
  (fn) => withAwc(fn),
  (fn) => withAwc(fn, { create: true }),
);

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
      home: globals().home,
      namespace: globals().namespace,
      scope: opts.scope,
      root: opts.root,
      snapshots: opts.snapshot,
      snapshotLabels: opts.snapshotLabel.length > 0 ? labelsOf(opts.snapshotLabel) : undefined,
      version: packageVersion(),
    });
    process.exit(0);
  });

/**
 * Runs the CLI on `argv` (`[node, script, ...words]`) in this process: src/cli/entry/cli-main.ts for
 * the bundle's entry, src/cli/entry/warm-worker.ts in a warm worker (which has made this process the
 * caller's: directory, environment, stdio). Builds nothing at import (a warm worker imports this
 * module before it knows its command). Ends the process with the command's status when it fails.
 */
export async function runCli(argv: string[]): Promise<void> {
  // A closed pipe (`awc ls | head -1`): stop quietly with status 141, as GNU tools and git do (docs/reference/errors.md).
  process.stdout.on('error', (err: NodeJS.ErrnoException) =>
    process.exit(err.code === 'EPIPE' ? ERROR_CODES.E_CLOSED_PIPE.exit : out().error(err)),
  );
  process.stderr.on('error', () => process.exit(ERROR_CODES.E_CLOSED_PIPE.exit)); // nowhere left to say anything
  if (argv.includes('--json')) program.configureOutput({ writeErr: () => undefined });
  else program.showHelpAfterError();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0 || err.code === 'commander.helpDisplayed' || err.code === 'commander.version') process.exit(0);
      if (err.code === 'commander.help') {
        // a command group without its subcommand: commander printed the help
        if (out().json) out().error(new AwcError('E_USAGE', 'a command is required'));
        process.exit(2);
      }
      process.exit(out().error(new AwcError('E_USAGE', err.message.replace(/^error: /, ''))));
    }
    process.exit(out().error(err));
  }
}
