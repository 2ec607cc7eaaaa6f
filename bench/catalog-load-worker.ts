import { createHash } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import { openCatalog } from '../src/catalog/open/open-catalog.js';
import type { Catalog, NewSnapshot } from '../src/catalog/port/catalog.js';
import type { Digest } from '../src/core/digest.js';
import type { WrittenPack } from '../src/store/pack/pack-types.js';

/**
 * One client of bench/catalog-load.ts, in a worker thread with a catalog connection of its
 * own (better-sqlite3 blocks its thread while it waits for the file lock), acting as one host
 * (it registers a host session first). Each round: fork a workspace, take its lease with the
 * mount record, heartbeat, commit a checkpoint under the lease with a pack (half of its blobs
 * shared by every client, half its own), record the unmount and release the lease. Bounded: `rounds` rounds.
 * Posts `{ ready: true }` once its catalog is open, starts on the message `'go'` (so every
 * client starts together and the wall time leaves out start-up), and posts
 * `{ latencies: Record<op, ms[]>, errors: Record<code, n> }` when done.
 */

export interface LoadJob {
  url: string;
  client: number;
  rounds: number;
  snapshotId: string;
  namespace: string;
  blobsPerCheckpoint: number;
}

/**
 * The operations one round runs, in order: `mount` takes the workspace's lease with the mount
 * record (`mountLeased`), `heartbeat` is the host's one renewal statement (every lease of the
 * client's host at once), `checkpoint` carries the lease's epoch (the fence), `unmount`
 * clears the mount record and releases the lease.
 */
export const OPS = ['fork', 'mount', 'heartbeat', 'checkpoint', 'unmount'] as const;
export type Op = (typeof OPS)[number];

const digest = (s: string): Digest => `sha256:${createHash('sha256').update(s).digest('hex')}` as Digest;

function pack(key: string, job: LoadJob, round: number): WrittenPack {
  const n = job.blobsPerCheckpoint;
  const blobs = Array.from({ length: n }, (_, i) => ({
    digest: digest(i % 2 === 0 ? `shared/${round}/${i}` : `own/${job.client}/${round}/${i}`),
    kind: 'chunk' as const,
    codec: 'lz4' as const,
    offset: i * 1000,
    storedLength: 900,
    rawLength: 1000,
    pack: key,
  }));
  return { key, size: n * 1000, blobs };
}

async function run(job: LoadJob): Promise<{ latencies: Record<Op, number[]>; errors: Record<string, number> }> {
  const cat: Catalog = await openCatalog(job.url);
  const host = `load-host-${job.client}`;
  const { session } = await cat.registerHost({ id: host, ttlMs: 60_000 });
  const go = new Promise((resolve) => parentPort!.once('message', resolve));
  parentPort!.postMessage({ ready: true });
  await go;
  const latencies = Object.fromEntries(OPS.map((o) => [o, [] as number[]])) as Record<Op, number[]>;
  const errors: Record<string, number> = {};
  const timed = async <T>(op: Op, fn: () => Promise<T>): Promise<T | undefined> => {
    const t0 = performance.now();
    try {
      const v = await fn();
      latencies[op].push(performance.now() - t0);
      return v;
    } catch (err) {
      const code = (err as { code?: string }).code ?? 'unknown';
      errors[`${op}:${code}`] = (errors[`${op}:${code}`] ?? 0) + 1;
      return undefined;
    }
  };
  try {
    for (let r = 0; r < job.rounds; r++) {
      const ws = await timed('fork', () => cat.forkWorkspaces(job.namespace, job.snapshotId, [`c${job.client}-r${r}`]));
      if (!ws) continue;
      const id = ws[0]!.id;
      const leased = await timed('mount', () => cat.mountLeased(id, { path: `/mnt/load/${job.client}/${r}`, driver: 'overlay', host }));
      if (!leased) continue;
      await timed('heartbeat', async () => {
        if (!(await cat.heartbeat(host, session))) throw Object.assign(new Error('session expired'), { code: 'E_LEASE_LOST' });
      });
      const snapshot: NewSnapshot = {
        namespace: job.namespace,
        root: digest(`root/${job.client}/${r}`),
        fileCount: 1,
        byteCount: 1000,
        packs: [pack(`packs/load-${job.client}-${r}`, job, r)],
      };
      const lease = { host, epoch: leased.lease.epoch };
      await timed('checkpoint', () => cat.commitCheckpoint({ workspaceId: id, expectedHeadId: job.snapshotId, snapshot, lease }));
      await timed('unmount', async () => {
        await cat.setMount(id, null);
        await cat.releaseLease(id, host);
      });
    }
  } finally {
    await cat.close();
  }
  return { latencies, errors };
}

if (parentPort) {
  run(workerData as LoadJob).then(
    (result) => parentPort!.postMessage(result),
    (err) => parentPort!.postMessage({ fatal: String((err as Error)?.stack ?? err) }),
  );
}
