import { hostname } from 'node:os';
import type { BuildLease, BuildLeasePort } from '../../catalog/port/build-leases.js';

/** Timing of {@link buildOnce} (ms). */
export interface BuildOnceTiming {
  /** How long a lease lasts without renewal: a crashed builder's lease expires after this (default 30 s). */
  ttlMs?: number;
  /** How often a waiter looks at the lease (default 250 ms). */
  pollMs?: number;
}

/** Default lease TTL of a build (ms): renewed every third of it while the build runs. */
export const BUILD_LEASE_TTL_MS = 30_000;

/** What {@link buildOnce} returns: this caller's build, or the snapshot id another caller's build made while this one waited. */
export type BuildOutcome<T> = { built: T } | { waitedFor: { holder: string; result: string } };

/** `host:pid`, the holder name of this process's builds. */
export function buildHolder(): string {
  return `${hostname()}:${process.pid}`;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Runs `build` under the build lease of `key` in `namespace` (src/catalog/port/build-leases.ts),
 * so that concurrent callers of one key build once: the caller that takes the lease builds
 * (renewing it every ttl/3; released with `resultOf(built)`, or with no result when the build
 * throws); the others wait for that build and get its result (`waitedFor`). A waiter whose
 * builder failed, released nothing or stopped renewing (crashed: its lease expired) takes the
 * lease and builds itself.
 * @throws what `build` throws, what the catalog throws
 */
export async function buildOnce<T>(
  leases: BuildLeasePort,
  namespace: string,
  key: string,
  build: () => Promise<T>,
  resultOf: (built: T) => string,
  timing: BuildOnceTiming = {},
): Promise<BuildOutcome<T>> {
  const ttlMs = timing.ttlMs ?? BUILD_LEASE_TTL_MS;
  const pollMs = timing.pollMs ?? 250;
  const holder = buildHolder();
  for (;;) {
    const got = await leases.acquireBuildLease(namespace, key, holder, ttlMs);
    if (got.acquired) return { built: await buildHeld(leases, namespace, key, got.lease.epoch, ttlMs, build, resultOf) };
    const done = await waitForBuild(leases, namespace, key, got.lease, pollMs);
    if (done) return { waitedFor: done };
  }
}

/** Runs `build` while holding the lease of `epoch`, renewing it; releases it with the result (or none when `build` throws). */
async function buildHeld<T>(
  leases: BuildLeasePort,
  namespace: string,
  key: string,
  epoch: number,
  ttlMs: number,
  build: () => Promise<T>,
  resultOf: (built: T) => string,
): Promise<T> {
  // a failed renewal is retried on the next tick (the lease expires only after ttlMs); one taken over
  // meanwhile only lets a second build run: each build's snapshot is complete on its own
  const timer = setInterval(
    () => void leases.renewBuildLease(namespace, key, epoch, ttlMs).catch(() => undefined),
    Math.max(1, Math.floor(ttlMs / 3)),
  );
  timer.unref();
  let result: string | null = null;
  try {
    const built = await build();
    result = resultOf(built);
    return built;
  } finally {
    clearInterval(timer);
    await leases.releaseBuildLease(namespace, key, epoch, result).catch(() => undefined);
  }
}

/**
 * Waits while `seen`'s build runs: its holder and snapshot id once it released with a result,
 * undefined when it ended without one (failed) or expired (the caller then tries to take the lease).
 */
async function waitForBuild(
  leases: BuildLeasePort,
  namespace: string,
  key: string,
  seen: BuildLease,
  pollMs: number,
): Promise<{ holder: string; result: string } | undefined> {
  const holder = seen.holder ?? '';
  for (;;) {
    if (seen.state !== 'live') return undefined;
    await sleep(pollMs);
    const now = await leases.getBuildLease(namespace, key);
    if (!now || now.epoch !== seen.epoch) return undefined; // another build began meanwhile: the caller looks again
    if (now.state === 'released') return now.result === null ? undefined : { holder, result: now.result };
    seen = now;
  }
}
