import { AwcError } from '../core/errors.js';

/**
 * The root daemon's per-user resource caps (docs/explanation/security.md "Per-user resource
 * caps"; docs/reference/configuration.md). Read at daemon start.
 */
export interface DaemonLimits {
  /** Connections one user may hold open on their sockets at once (`userMaxConnections`; default 64). */
  userMaxConnections: number;
  /**
   * A user's connection with no request in progress is closed after this many ms, and a request's
   * headers must arrive within it (`userIdleTimeoutMs`; default 30000).
   */
  userIdleTimeoutMs: number;
  /**
   * A user's request body that sends nothing for this many ms is ended (E_REQUEST_STALLED;
   * `userRequestTimeoutMs`; default 60000). Inactivity only: a body that keeps sending (an
   * import's tar of hours) is never cut off, and the answer may take as long as it needs.
   */
  userRequestTimeoutMs: number;
  /** Bytes of request bodies the daemon holds in memory at once, all users together (`requestBodyBudgetBytes`; default 128 MiB); one user at most a quarter of it. */
  requestBodyBudgetBytes: number;
  /** Descriptors kept free for the content FUSE server and mounts: no new connection once fewer are left (`fdReserve`; default 1024). */
  fdReserve: number;
  /** Workspaces one user may have mounted through the daemon at once (`userMaxMounts`; default 64). */
  userMaxMounts: number;
  /**
   * Warm CLI workers the daemon keeps loaded for its own user (`warmWorkers`; default 2): as
   * many commands as this start at once without waiting for a worker to load (about 0.3 s of
   * CPU each); a burst of more gets a worker loading for each at once.
   */
  warmWorkers: number;
}

/** The defaults of {@link DaemonLimits}. */
export const DEFAULT_DAEMON_LIMITS: DaemonLimits = {
  userMaxConnections: 64,
  userIdleTimeoutMs: 30_000,
  userRequestTimeoutMs: 60_000,
  requestBodyBudgetBytes: 128 * 1024 * 1024,
  fdReserve: 1024,
  userMaxMounts: 64,
  warmWorkers: 2,
};

/** Each key of {@link DaemonLimits}: its environment variable, and its range [min, max] with the unit in the hint. */
export const DAEMON_LIMIT_KEYS = {
  userMaxConnections: { env: 'AWC_USER_MAX_CONNECTIONS', type: 'number', min: 1, max: 100_000, unit: 'connections' },
  userIdleTimeoutMs: { env: 'AWC_USER_IDLE_TIMEOUT_MS', type: 'number', min: 100, max: 3_600_000, unit: 'ms' },
  userRequestTimeoutMs: { env: 'AWC_USER_REQUEST_TIMEOUT_MS', type: 'number', min: 1000, max: 86_400_000, unit: 'ms' },
  // one user may hold a quarter: at least one largest JSON body (8 MiB) each
  requestBodyBudgetBytes: { env: 'AWC_REQUEST_BODY_BUDGET_BYTES', type: 'number', min: 32 * 1024 * 1024, max: 2 ** 40, unit: 'bytes' },
  fdReserve: { env: 'AWC_FD_RESERVE', type: 'number', min: 0, max: 2_147_483_647, unit: 'descriptors' },
  userMaxMounts: { env: 'AWC_USER_MAX_MOUNTS', type: 'number', min: 1, max: 100_000, unit: 'mounts' },
  warmWorkers: { env: 'AWC_WARM_WORKERS', type: 'number', min: 1, max: 64, unit: 'workers' },
} as const;

/**
 * The limits of a merged configuration (defaults for the keys it leaves out).
 * @throws E_CONFIG naming the key, when a value is not a whole number in its range
 */
export function parseDaemonLimits(merged: Record<string, unknown>): DaemonLimits {
  const out = { ...DEFAULT_DAEMON_LIMITS };
  for (const [key, spec] of Object.entries(DAEMON_LIMIT_KEYS) as [keyof DaemonLimits, (typeof DAEMON_LIMIT_KEYS)[keyof DaemonLimits]][]) {
    const v = merged[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < spec.min || v > spec.max)
      throw new AwcError('E_CONFIG', `invalid ${key} ${JSON.stringify(v)}`, {
        hint: `Use a whole number of ${spec.unit} from ${spec.min} to ${spec.max} (default ${DEFAULT_DAEMON_LIMITS[key]}).`,
      });
    out[key] = v;
  }
  return out;
}

/** The limits of `config`, defaults for what it leaves out (a configuration made in code). */
export function limitsOf(config: Partial<DaemonLimits>): DaemonLimits {
  return {
    ...DEFAULT_DAEMON_LIMITS,
    ...Object.fromEntries(Object.entries(config).filter(([k, v]) => k in DEFAULT_DAEMON_LIMITS && v !== undefined)),
  };
}
