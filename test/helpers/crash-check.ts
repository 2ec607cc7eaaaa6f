import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Awc } from '../../src/service/workspace/awc.js';
import type { AwcConfig } from '../../src/config/config.js';
import { CLI, readTreeInfo, type NodeInfo } from './cli.js';
import { assertEveryBlobStored } from './gc-fixtures.js';

/** What a CLI run that was meant to die at a kill point did. */
export interface KilledRun {
  signal: NodeJS.Signals | null;
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `awc --home HOME --json ...args` in this process's own child (AWC_NO_WARM=1: the CLI
 * process is the one doing the work) with `AWC_TEST_KILL_AT=point` (src/core/kill-point.ts),
 * and asserts it died of SIGKILL there: a run that finished instead never reached the point.
 */
export function runToKill(home: string, args: string[], point: string, env: NodeJS.ProcessEnv = {}): KilledRun {
  const r = spawnSync(process.execPath, [CLI, '--home', home, '--json', ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env, AWC_NO_WARM: '1', AWC_TEST_KILL_AT: point },
    timeout: 120_000,
  });
  const run = { signal: r.signal, status: r.status, stdout: r.stdout, stderr: r.stderr };
  assert.equal(r.signal, 'SIGKILL', `awc ${args.join(' ')} was not killed at ${point} (exit ${r.status}): ${r.stderr}`);
  return run;
}

/** Exports `id` into a fresh directory under `tmp` and returns its tree (readTreeInfo). */
export async function exportedTree(svc: Awc, id: string, tmp: string): Promise<Map<string, NodeInfo>> {
  const out = mkdtempSync(join(tmp, 'export-'));
  rmSync(out, { recursive: true });
  await svc.export(id, { dir: out });
  const tree = readTreeInfo(out);
  rmSync(out, { recursive: true, force: true });
  return tree;
}

/**
 * Opens the home in this process (the same catalog and store the CLI uses), runs `fn`, closes it.
 * `config` adds what the home's CLI runs set through the environment (e.g. `objectStore`).
 */
export async function withHome<T>(home: string, config: Partial<AwcConfig>, fn: (svc: Awc) => Promise<T>): Promise<T> {
  const svc = await Awc.open({ home, ...config });
  try {
    return await fn(svc);
  } finally {
    await svc.close();
  }
}

/**
 * The store's consistency after a crash, the one place that checks it:
 * every snapshot of the namespace exports (every tree and chunk it reaches is read and verified
 * against its digest), every blob of every snapshot row is indexed in a live or condemned
 * pack whose object is in the store (assertEveryBlobStored), and `awc fsck --read-data` finds no
 * problem (what a crash may leave, packs no row names, is `unreferenced`, not a problem).
 * Returns each snapshot's tree.
 */
export async function assertStoreConsistent(svc: Awc, tmp: string): Promise<Map<string, Map<string, NodeInfo>>> {
  const trees = new Map<string, Map<string, NodeInfo>>();
  for (const s of await svc.listSnapshots()) trees.set(s.id, await exportedTree(svc, s.id, tmp));
  await assertEveryBlobStored(svc);
  const fsck = await svc.fsck({ readData: true });
  assert.deepEqual(fsck.problems, [], 'awc fsck --read-data finds no problem');
  assert.equal(fsck.ok, true);
  return trees;
}
