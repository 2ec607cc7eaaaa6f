import * as fs from 'node:fs/promises';
import { AwcError } from '../../core/errors.js';
import type { ImportResult } from '../workspace/awc.js';
import type { AwcApi } from '../workspace/awc-api.js';
import type { ImportOptions } from '../import/import-snapshot.js';
import { envKey, type EnvKeyOptions, type EnvKeyResult } from './env-key.js';
import { ENV_DIRS_LABEL, ENV_KEY_LABEL } from './attach.js';

/** What `prepare` made: the snapshot, its environment key and the dependency directories it holds. */
export interface PrepareResult extends ImportResult {
  envKey: string;
  envDirs: string[];
}

/**
 * `awc prepare <dir>`: imports a checkout whose dependencies are installed as a snapshot
 * labelled `awc.env-key=<its environment key>` and `awc.env-dirs=<the dependency
 * directories present>` (docs/explanation/attach.md), which `awc attach` picks for every
 * worktree with the same key. Only real directories count (a symlinked node_modules is not
 * a dependency directory of the checkout).
 * @throws E_USAGE (no lockfile, or none of the lockfiles' dependency directories exists: the hint names the installs),
 *   and what Awc.importSnapshot throws
 */
export async function prepare(
  awc: Pick<AwcApi, 'importSnapshot'>,
  dir: string,
  opts: Pick<ImportOptions, 'name' | 'message' | 'onProgress' | 'onWarning'> & EnvKeyOptions = {},
): Promise<PrepareResult> {
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
  const r = await awc.importSnapshot(dir, {
    name: opts.name,
    message: opts.message,
    onProgress: opts.onProgress,
    onWarning: opts.onWarning,
    labels: { [ENV_KEY_LABEL]: key.key, [ENV_DIRS_LABEL]: envDirs.join(',') },
  });
  return { ...r, envKey: key.key, envDirs };
}
