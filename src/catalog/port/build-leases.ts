/**
 * Build leases: one builder at a time for what a key names in a namespace (`awc prepare` of
 * one environment key: concurrent prepares of a key build once, the others wait and take its
 * snapshot; docs/explanation/incremental-prepare.md). A lease is the holder's until its
 * expiry, judged by the database's clock (never a host's), so it works across hosts on
 * PostgreSQL as on SQLite; the holder renews it while it builds, and a builder that crashed
 * stops renewing: its lease expires and the next caller takes it (epoch + 1). A release
 * records what the build made (`result`, a snapshot id; null when it failed), which the
 * waiters read.
 */

/** A build lease as the database's clock judges it now (times: ms since the Unix epoch by that clock). */
export interface BuildLease {
  key: string;
  /** The builder (`host:pid`), null once released. */
  holder: string | null;
  /** Raised by every acquisition: the holder's token. */
  epoch: number;
  /** `live`: held and unexpired; `expired`: held, but the holder stopped renewing; `released`: nobody builds. */
  state: 'live' | 'expired' | 'released';
  acquiredAtMs: number;
  expiresAtMs: number;
  /** What the last released build made (a snapshot id), null when it failed or one still runs. */
  result: string | null;
  nowMs: number;
}

/** The catalog's build leases (implemented by KyselyCatalog; the contract: test/contracts/catalog-build-leases.contract.ts). */
export interface BuildLeasePort {
  /**
   * Takes the lease of `key` in `namespace` for `holder` for `ttlMs` when nobody holds it
   * (never taken, released, or expired): `acquired` true and the lease with its new epoch (the
   * token). Otherwise `acquired` false and the live lease of another caller. One transaction;
   * of concurrent callers exactly one acquires. Creates the namespace on first use.
   * @throws E_USAGE (ttlMs not a positive whole number, an empty key or holder)
   */
  acquireBuildLease(namespace: string, key: string, holder: string, ttlMs: number): Promise<{ acquired: boolean; lease: BuildLease }>;
  /** Extends the lease held under `epoch` to now + ttlMs; false when it is no longer that epoch's (taken over or released). */
  renewBuildLease(namespace: string, key: string, epoch: number, ttlMs: number): Promise<boolean>;
  /** Releases the lease held under `epoch`, recording `result` (null: the build failed); false when it was not that epoch's any more. */
  releaseBuildLease(namespace: string, key: string, epoch: number, result: string | null): Promise<boolean>;
  /** The lease of `key` now, or undefined when it was never taken. */
  getBuildLease(namespace: string, key: string): Promise<BuildLease | undefined>;
}
