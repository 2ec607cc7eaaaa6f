import { appendFileSync, chmodSync, existsSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { ImportResult } from '../../service/import/import-snapshot.js';
import type { CheckpointResult } from '../../service/workspace/awc-api.js';
import { openAwc } from '../remote/open-awc.js';
import { formatChanges } from '../../service/diff/diff.js';
import { DaemonClient } from '../../daemon/supervisor/client.js';
import { formatBytes } from '../output/output.js';

/** What the steps of one main demo share. */
interface MainRun {
  awc: Awc;
  /** The fresh temporary directory: mounts (`mnt/<name>`), the exported tar and directory. */
  work: string;
  /** Prints a line of the text report (nothing with --json). */
  say: (s: string) => void;
  /** The record printed with --json: home, source, driver, snapshot, workspaces, checkpoint, changes. */
  log: Record<string, unknown>;
}

/** Milliseconds on the monotonic clock. */
const now = (): number => performance.now();

/**
 * `awc demo main`: the main job end to end on a real tree, printing each step. Uses a
 * fresh home under the system temp dir unless `home` is given, imports `source` (default:
 * this project's checkout with its node_modules), forks two workspaces, mounts both,
 * edits one (create, modify, delete, chmod, symlink, rename), runs git and node in it,
 * checkpoints, diffs, exports, checks the other workspace is untouched, and cleans up.
 */
export async function runMainDemo(opts: { home?: string; source?: string; json?: boolean }): Promise<void> {
  const projectRoot = resolve(fileURLToPath(new URL('../../../..', import.meta.url)));
  const source = resolve(opts.source ?? projectRoot);
  // mounts live beside the data directory, never inside it
  const work = mkdtempSync(join(tmpdir(), 'awc-demo-'));
  const home = resolve(opts.home ?? join(work, 'home'));
  const log: Record<string, unknown> = { home, source };
  const say = (s: string) => {
    if (!opts.json) process.stdout.write(s + '\n');
  };
  say(`AWC demo — home ${home}`);
  const awc = await openAwc({ home });
  const run: MainRun = { awc, work, say, log };
  try {
    const report = awc.doctor();
    say(`\n$ awc doctor\n  driver: ${report.driver} — ${report.reason}`);
    log.driver = report.driver;
    const snap = await importBase(run, source);
    const wss = await forkAndMount(run);
    const ws = join(work, 'mnt', wss[0].name!);
    editWorkspace(ws, say);
    runToolsIn(ws, say);
    const cp = await checkpointAndDiff(run, wss[0], snap.id);
    await exportAndCompare(run, cp.id, wss[1]);
    await unmountAll(run, wss, report.driver);
    say(`\nDone. Everything lives in ${work}${opts.home ? ` and ${home}` : ''}; remove it with: rm -rf ${work}`);
    if (opts.json) process.stdout.write(JSON.stringify(log, null, 2) + '\n');
  } finally {
    await awc.close();
  }
}

/** Imports `source` as the snapshot named `base`. */
async function importBase({ awc, say, log }: MainRun, source: string): Promise<ImportResult> {
  const t0 = now();
  const snap = await awc.importSnapshot(source, { name: 'base', message: 'demo base' });
  say(
    `\n$ awc snapshot import ${source} --name base\n  ${snap.id}: ${snap.files} files, ${formatBytes(snap.bytes)} (stored ${formatBytes(snap.storedBytes)}) in ${(now() - t0).toFixed(0)} ms`,
  );
  log.snapshot = snap;
  return snap;
}

/** Forks two workspaces of `base` (agent-1, agent-2) and mounts each at `<work>/mnt/<name>`. */
async function forkAndMount({ awc, work, say, log }: MainRun): Promise<WorkspaceRow[]> {
  let t0 = now();
  const wss = await awc.fork('base', { name: 'agent', count: 2 });
  say(
    `\n$ awc fork base --name agent --count 2\n  ${wss.map((w) => `${w.id} (${w.name})`).join(', ')} in ${(now() - t0).toFixed(1)} ms — catalog rows only`,
  );
  log.workspaces = wss.map((w) => w.id);
  const mnt = wss.map((w) => join(work, 'mnt', w.name!));
  for (let i = 0; i < wss.length; i++) {
    t0 = now();
    const m = await awc.mount(wss[i].id, mnt[i]);
    say(`$ awc mount ${wss[i].name} ${mnt[i]}\n  ${m.driver} mount in ${(now() - t0).toFixed(0)} ms`);
  }
  return wss;
}

/** Edits the mounted workspace `ws` as an agent would: create, modify, delete, chmod, symlink, rename. */
function editWorkspace(ws: string, say: (s: string) => void): void {
  say(`\nEditing ${ws}:`);
  writeFileSync(join(ws, 'NOTES.md'), '# Notes\n\nWritten inside a workspace.\n');
  say('  created NOTES.md');
  if (existsSync(join(ws, 'README.md'))) {
    appendFileSync(join(ws, 'README.md'), '\nEdited by an agent.\n');
    say('  modified README.md');
  }
  if (existsSync(join(ws, 'tsconfig.json'))) {
    rmSync(join(ws, 'tsconfig.json'));
    say('  deleted tsconfig.json');
  }
  if (existsSync(join(ws, 'scripts', 'setup.mjs'))) {
    chmodSync(join(ws, 'scripts', 'setup.mjs'), 0o755);
    say('  chmod 755 scripts/setup.mjs');
  }
  symlinkSync('NOTES.md', join(ws, 'LATEST'));
  say('  symlink LATEST -> NOTES.md');
  if (existsSync(join(ws, 'docs'))) {
    renameSync(join(ws, 'docs'), join(ws, 'documentation'));
    say('  renamed docs/ -> documentation/');
  }
}

/** Runs git (when `ws` is a checkout) and node in the mounted workspace `ws`. */
function runToolsIn(ws: string, say: (s: string) => void): void {
  if (existsSync(join(ws, '.git'))) {
    const st = execFileSync('git', ['--no-optional-locks', 'status', '--short'], { cwd: ws, encoding: 'utf8' });
    say(
      `  $ git status --short\n${st
        .trimEnd()
        .split('\n')
        .map((l) => `    ${l}`)
        .join('\n')}`,
    );
  }
  const nodeOut = execFileSync(process.execPath, ['-e', 'console.log(require("./package.json").name)'], {
    cwd: ws,
    encoding: 'utf8',
  }).trim();
  say(`  $ node -e 'require("./package.json").name' → ${nodeOut}`);
}

/** Diffs the edited workspace live, checkpoints it, and diffs the checkpoint against the base (`baseId`). */
async function checkpointAndDiff({ awc, say, log }: MainRun, edited: WorkspaceRow, baseId: string): Promise<CheckpointResult> {
  const live = await awc.diff(edited.id);
  say(`\n$ awc diff ${edited.name}   (live state against its head)\n${indent(formatChanges(live.changes))}`);
  const t0 = now();
  const cp = await awc.checkpoint(edited.id, { message: 'demo edits' });
  say(
    `\n$ awc checkpoint ${edited.name} -m "demo edits"\n  ${cp.id} in ${(now() - t0).toFixed(0)} ms: read ${cp.filesRead} changed files, stored ${formatBytes(cp.newBytes)} new`,
  );
  log.checkpoint = cp;
  const d = await awc.diff(baseId, cp.id, { patch: true });
  say(`\n$ awc diff base ${cp.id}\n${indent(formatChanges(d.changes))}`);
  say(`\n$ awc diff base ${cp.id} --patch | head -20\n${indent((d.patch ?? '').split('\n').slice(0, 20).join('\n'))}`);
  log.changes = d.changes.length;
  return cp;
}

/** Exports the checkpoint `cpId` as a tar and as a directory, then shows the `other` workspace is untouched. */
async function exportAndCompare({ awc, work, say }: MainRun, cpId: string, other: WorkspaceRow): Promise<void> {
  const tar = join(work, 'checkpoint.tar');
  const ex = await awc.export(cpId, { tar });
  say(`\n$ awc export ${cpId} --tar ${tar}\n  ${ex.files} files, ${formatBytes(ex.bytes)}`);
  const exDir = join(work, 'export');
  await awc.export(cpId, { dir: exDir });
  say(`$ awc export ${cpId} --dir ${exDir}\n  NOTES.md: ${JSON.stringify(readFileSync(join(exDir, 'NOTES.md'), 'utf8').split('\n')[0])}`);
  const diff = await awc.diff(other.id);
  say(`\nThe other workspace (${other.name}) is untouched: ${diff.changes.length} changes against the base.`);
}

/** Unmounts the workspaces, then stops the host daemon when the overlay driver started it. */
async function unmountAll({ awc, say }: MainRun, wss: WorkspaceRow[], driver: string): Promise<void> {
  for (let i = 0; i < wss.length; i++) {
    const u = await awc.unmount(wss[i].id);
    say(`$ awc unmount ${wss[i].name}${u.pending ? ' (pending changes kept)' : ''}`);
  }
  if (driver === 'overlay') {
    await new DaemonClient(awc.config).call('POST', '/v1/stop', {}, { start: false }).catch(() => undefined);
    say('$ awc daemon stop');
  }
}

function indent(s: string): string {
  return s
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => `  ${l}`)
    .join('\n');
}
