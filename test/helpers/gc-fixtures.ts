import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Awc } from '../../src/service/workspace/awc.js';
import type { CommitHooks } from '../../src/service/refs/commit-retry.js';
import { markLive } from '../../src/service/gc/gc-mark.js';
import { listObjects } from './list-objects.js';

/** Writes a small source tree under `dir` whose files are `files` (name → content). */
export function writeTree(dir: string, files: Record<string, string>): string {
  mkdirSync(dir, { recursive: true });
  for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), body);
  return dir;
}

/** A git repository under `dir` holding `files` (name → content), committed once: its import stores a git-index proof. */
export function gitRepo(dir: string, files: Record<string, string | Buffer>): string {
  mkdirSync(dir, { recursive: true });
  for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), body);
  const git = (...args: string[]) => execFileSync('git', ['-C', dir, ...args], { stdio: 'ignore' });
  git('init', '-q');
  git('add', '-A');
  git('-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qm', 'first');
  return dir;
}

/** sha256 of `awc export <id> --tar` (one tar per call under `tmp`). */
export async function tarHash(awc: Awc, id: string, tmp: string): Promise<string> {
  const file = join(tmp, `export-${id}-${Math.random().toString(36).slice(2)}.tar`);
  await awc.export(id, { tar: file });
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/** Export hashes of every snapshot of the namespace. */
export async function exportAll(awc: Awc, tmp: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const s of await awc.listSnapshots()) out.set(s.id, await tarHash(awc, s.id, tmp));
  return out;
}

/**
 * Asserts the invariant gc must keep: every blob of every snapshot row is indexed in a pack
 * that is not deleting or deleted and whose object is in the store. Returns the live pack keys.
 */
export async function assertEveryBlobStored(awc: Awc): Promise<Set<string>> {
  const snaps = await awc.catalog.gc().listSnapshots();
  const mark = await markLive(awc.catalog, awc.store, snaps);
  const objects = await listObjects(awc.store, 'packs/');
  const states = new Map((await awc.catalog.gc().listPacks()).map((p) => [p.key, p.state]));
  for (const [ns, digests] of mark.digests) {
    const found = await awc.catalog.blobIndex(ns).lookup([...digests]);
    for (const d of digests) {
      const loc = found.get(d);
      if (!loc) throw new Error(`live blob ${d} has no index row`);
      const st = states.get(loc.pack);
      if (st !== 'live' && st !== 'condemned') throw new Error(`live blob ${d} is in pack ${loc.pack} in state ${st}`);
      if (!objects.has(loc.pack)) throw new Error(`live blob ${d} is in pack ${loc.pack}, which the store lacks`);
    }
  }
  return mark.packs;
}

/** A promise and its resolver (a gate the test opens). */
export function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/**
 * Starts a write (`start` gets the commit hooks) whose first commit waits until `release()`;
 * `atCommit` resolves once it got there (it deduplicated and uploaded). Attempts are recorded.
 */
export function paused<T>(start: (hooks: CommitHooks) => Promise<T>, attempts: number[]) {
  const atCommit = gate();
  const release = gate();
  const result = start({
    beforeCommit: async (a) => {
      attempts.push(a);
      if (a === 0) {
        atCommit.open();
        await release.wait;
      }
    },
  });
  return { result, atCommit: atCommit.wait, release: release.open };
}
