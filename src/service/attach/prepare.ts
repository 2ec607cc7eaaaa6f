import * as fs from 'node:fs/promises';
import { resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { SnapshotRow } from '../../catalog/port/catalog.js';
import type { BuildLeasePort } from '../../catalog/port/build-leases.js';
import type { ImportResult } from '../workspace/awc.js';
import type { AwcApi } from '../workspace/awc-api.js';
import type { ImportOptions } from '../import/import-snapshot.js';
import { SOURCE_PATH_LABEL } from '../refs/run-target.js';
import { envKey, type EnvKeyOptions, type EnvKeyResult } from './env-key.js';
import { ENV_DIRS_LABEL, ENV_KEY_LABEL } from './attach.js';
import { buildOnce, type BuildOnceTiming } from './build-once.js';

/**
 * What `prepare` made: the snapshot, its environment key and the dependency directories it
 * holds. `waitedFor`: another prepare of the same key was building, and this one took its
 * snapshot (nothing imported here: the counts are the snapshot's, newBytes 0). `replaced`:
 * with `update`, the earlier prepared snapshot of the directory, removed unless something uses it.
 */
export interface PrepareResult extends ImportResult {
  envKey: string;
  envDirs: string[];
  waitedFor?: string;
  replaced?: { id: string; removed: boolean };
}

/** What `prepare` needs of the service. */
export type PrepareAwc = Pick<AwcApi, 'importSnapshot' | 'listSnapshots' | 'getSnapshot' | 'rm' | 'namespace'>;

/** Options of {@link prepare}. */
export type PrepareOptions = Pick<ImportOptions, 'name' | 'message' | 'onProgress' | 'onWarning'> &
  EnvKeyOptions & {
    /**
     * Re-import incrementally: the directory's newest prepared snapshot (label `awc.path`) is
     * the new one's parent, files unchanged since its import are not read (the stat cache), and
     * it is removed afterwards unless it is named, has another environment key, or something uses it.
     */
    update?: boolean;
    /** The build leases (an Awc's catalog): concurrent prepares of one key build once. None: no lease (a daemon's client). */
    buildLeases?: BuildLeasePort;
    /** Lease timing (tests). */
    lease?: BuildOnceTiming;
  };

/**
 * `awc prepare <dir>`: imports a checkout whose dependencies are installed as a snapshot
 * labelled `awc.env-key=<its environment key>` and `awc.env-dirs=<the dependency
 * directories present>` (docs/explanation/attach.md), which `awc attach` picks for every
 * worktree with the same key. Only real directories count (a symlinked node_modules is not
 * a dependency directory of the checkout). Every prepare keeps a stat cache of its import;
 * `update` uses it (docs/explanation/incremental-prepare.md). With `buildLeases`, concurrent
 * prepares of one key in the namespace build once: the others wait and return its snapshot.
 * @throws E_USAGE (no lockfile, or none of the lockfiles' dependency directories exists: the hint names the installs),
 *   and what Awc.importSnapshot throws
 */
export async function prepare(awc: PrepareAwc, dir: string, opts: PrepareOptions = {}): Promise<PrepareResult> {
  const key: EnvKeyResult = await envKey(dir, opts);
  if (key.lockfiles.length === 0)
    throw new AwcError('E_USAGE', `${dir} has no lockfile: there is no environment key to prepare`, {
      hint: 'Prepare a checkout with a lockfile (package-lock.json, yarn.lock, uv.lock, requirements.txt, Cargo.lock, …).',
    });
  const envDirs: string[] = [];
  for (const rel of key.envDirs) {
    const st = await fs.lstat(`${dir}/${rel}`).catch(() => undefined);
    if (st?.isDirectory()) envDirs.push(rel);
  }
  if (envDirs.length === 0)
    throw new AwcError('E_USAGE', `${dir} holds none of its dependency directories (${key.envDirs.join(', ')})`, {
      hint: `Install the dependencies first (\`${key.installs.join(' && ')}\`), then prepare again.`,
      details: { installs: key.installs },
    });
  const build = () => importPrepared(awc, dir, opts, key.key, envDirs);
  if (!opts.buildLeases) return build();
  const out = await buildOnce(opts.buildLeases, awc.namespace, `prepare:${key.key}`, build, (r) => r.id, opts.lease);
  if ('built' in out) return out.built;
  const snap = await awc.getSnapshot(out.waitedFor.result);
  return { ...resultOfRow(snap), envKey: key.key, envDirs: envDirsOf(snap), waitedFor: out.waitedFor.holder };
}

/** The import of a prepare (with `update`: incremental on the directory's newest prepared snapshot, which it then replaces). */
async function importPrepared(awc: PrepareAwc, dir: string, opts: PrepareOptions, key: string, envDirs: string[]): Promise<PrepareResult> {
  const previous = opts.update ? await newestPrepared(awc, dir) : undefined;
  const r = await awc.importSnapshot(dir, {
    name: opts.name,
    message: opts.message,
    onProgress: opts.onProgress,
    onWarning: opts.onWarning,
    labels: { [ENV_KEY_LABEL]: key, [ENV_DIRS_LABEL]: envDirs.join(',') },
    statCache: true,
    ...(previous && { parent: previous.id }),
  });
  const out: PrepareResult = { ...r, envKey: key, envDirs };
  // one with another key stays: worktrees on the old lockfile still attach it
  if (previous && previous.name === null && previous.labels[ENV_KEY_LABEL] === key) {
    // the base of a live workspace stays (rm refuses it); otherwise gc may take the bytes only it held
    const removed = await awc.rm(previous.id).then(
      () => true,
      () => false,
    );
    out.replaced = { id: previous.id, removed };
  }
  return out;
}

/** The newest prepared snapshot (one with an environment key) imported from `dir`'s path, or undefined. */
async function newestPrepared(awc: PrepareAwc, dir: string): Promise<SnapshotRow | undefined> {
  const rows = await awc.listSnapshots({ labels: { [SOURCE_PATH_LABEL]: resolve(dir) } });
  return rows.find((s) => s.labels[ENV_KEY_LABEL] !== undefined);
}

/** An ImportResult that describes an existing snapshot (nothing imported). */
function resultOfRow(s: SnapshotRow): ImportResult {
  return {
    id: s.id,
    name: s.name,
    root: s.root,
    labels: s.labels,
    files: s.fileCount,
    bytes: s.byteCount,
    newBytes: 0,
    storedBytes: 0,
    skipped: [],
    secrets: [],
  };
}

function envDirsOf(s: SnapshotRow): string[] {
  return (s.labels[ENV_DIRS_LABEL] ?? '').split(',').filter((d) => d !== '');
}
