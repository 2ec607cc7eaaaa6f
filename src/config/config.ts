import { readFileSync } from 'node:fs';
import { lstat } from 'node:fs/promises';
import { homedir, hostname } from 'node:os';
import { createHash } from 'node:crypto';
import { join, resolve } from 'node:path';
import { AwcError, toAwcError } from '../core/errors.js';
import { MOUNT_DRIVER_NAMES, type MountDriverName } from '../core/mount-driver-name.js';
import { fileUrl, parseCatalogUrl, parseObjectStoreUrl, sqliteUrl } from './backend-url.js';
import { parseUserRules, type UserRule } from './users-config.js';
import { DAEMON_LIMIT_KEYS, parseDaemonLimits, type DaemonLimits } from './daemon-limits.js';
import { parseMetricsAddress, type MetricsAddress } from './metrics-address.js';

/** Which mount driver to use: `auto` picks overlay when the host allows it (see `awc doctor`). */
export type MountDriverChoice = 'auto' | MountDriverName;

/**
 * Validated configuration (from `<home>/config.json`, then `AWC_*` variables, then flags). The
 * daemon's per-user caps (DaemonLimits, src/config/daemon-limits.ts) are optional here: loadConfig
 * fills them, a configuration made in code may leave them out (limitsOf gives the defaults).
 */
export interface AwcConfig extends Partial<DaemonLimits> {
  /** Data directory: catalog, object store, host state. */
  home: string;
  /** Tenant namespace used by commands. */
  namespace: string;
  mountDriver: MountDriverChoice;
  /** Target pack size in bytes. */
  packBytes: number;
  /** Byte budget of the host chunk cache (`AWC_CACHE_BYTES`; default 10 GiB). */
  cacheBytes: number;
  /** This host's name in the catalog (mount records). */
  host: string;
  /**
   * Where the catalog lives (`catalog`, `AWC_CATALOG`): `sqlite:/path` or `postgres://…`
   * (src/config/backend-url.ts). Default `sqlite:<home>/catalog.sqlite`.
   */
  catalog: string;
  /**
   * Where the bytes live (`objectStore`, `AWC_OBJECT_STORE`): `file:/dir` or
   * `s3://bucket/prefix?endpoint=…`. Default `file:<home>/objects`.
   */
  objectStore: string;
  /** Directory of the host chunk cache (`cacheDir`, `AWC_CACHE_DIR`; absolute). Default `<home>/host/cache`. */
  cacheDir?: string;
  /** The daemon's API socket (`socket`, `AWC_SOCKET`); unset: see {@link pathsOf}. */
  socket?: string;
  /**
   * Group (name or number) allowed to use the daemon socket (`socketGroup`,
   * `AWC_SOCKET_GROUP`): the socket is then 0660 root:<group>; unset: 0600, root only.
   */
  socketGroup?: string;
  /**
   * Lease TTL in ms (`leaseTtlMs`, `AWC_LEASE_TTL_MS`; default 30000): a host whose daemon has
   * not renewed its session for this long (by the catalog's clock) has lost its leases
   * (docs/explanation/leases.md).
   */
  leaseTtlMs: number;
  /** How often the daemon renews its session, in ms (`heartbeatMs`, `AWC_HEARTBEAT_MS`; default leaseTtlMs / 3). */
  heartbeatMs: number;
  /**
   * How often the host daemon runs the host-local sweep, in ms (`sweepIntervalMs`,
   * `AWC_SWEEP_INTERVAL_MS`; default 3600000, 1 h; 0: only on demand, `awc gc --local`):
   * docs/explanation/gc.md#host-local-state.
   */
  sweepIntervalMs: number;
  /**
   * How often the host daemon looks for worktrees their tool removed behind AWC's back and
   * releases them as `awc prune` does, in ms (`pruneIntervalMs`, `AWC_PRUNE_INTERVAL_MS`;
   * default 300000, 5 min; 0: never, only `awc prune`): docs/explanation/attach.md#when-the-tool-removes-the-worktree.
   */
  pruneIntervalMs: number;
  /**
   * Idle release (docs/explanation/lifecycle.md#idle-release): how long a workspace mounted on
   * this host may stay idle (no process holding its mount, no write) before it is
   * checkpointed, unmounted and recorded as released, in ms (`idleReleaseMs`,
   * `AWC_IDLE_RELEASE_MS`; default 86400000, 24 h; 0: never). A workspace's `awc.idle-ttl`
   * label overrides it.
   */
  idleReleaseMs: number;
  /**
   * How often the host daemon runs the idle sweep, in ms (`idleSweepIntervalMs`,
   * `AWC_IDLE_SWEEP_INTERVAL_MS`; default 600000, 10 min; 0: only `awc release --idle`).
   */
  idleSweepIntervalMs: number;
  /**
   * How long a released workspace is kept before the idle sweep removes it (`rm`, once nothing
   * of it is left uncheckpointed), in ms (`releasedRetentionMs`, `AWC_RELEASED_RETENTION_MS`;
   * default 604800000, 7 days; 0: kept until removed by hand).
   */
  releasedRetentionMs: number;
  /**
   * Who besides root may use the host daemon, and in which namespaces (`users`, config.json
   * only; see users-config.ts): the daemon gives each a socket of their own (see {@link pathsOf}).
   */
  users?: UserRule[];
  /**
   * Whether the host daemon keeps warm CLI workers (`warmCli`, `AWC_WARM_CLI`: `on`, the default,
   * or `off`): docs/explanation/cli-latency.md "Warm workers".
   */
  warmCli: 'on' | 'off';
  /**
   * Whether hosts share layer images through the object store (`layerImages`,
   * `AWC_LAYER_IMAGES`): `auto` (the default) builds and shares them when the catalog is
   * PostgreSQL (a fleet), `on` always, `off` never; a host uses a shared image it can mount
   * unless this is `off` (docs/explanation/layer-images.md).
   */
  layerImages?: 'off' | 'auto' | 'on';
  /**
   * Whether the host keeps whole content objects it has read in the host object cache, mounted
   * as a data-only lower between each layer and the content FUSE mount (`objectCache`,
   * `AWC_OBJECT_CACHE`; `on`, the default, or `off`): docs/explanation/host-cache-lower.md.
   */
  objectCache?: 'on' | 'off';
  /**
   * Where the host daemon also serves `GET /metrics` over TCP for a scraper (`metricsAddress`,
   * `AWC_METRICS_ADDRESS`: `off`, the default, `on` for 127.0.0.1:9464, a port on 127.0.0.1, or
   * `<ip>:<port>`; see metrics-address.ts); undefined: the Unix socket only.
   */
  metricsAddress?: MetricsAddress;
  /**
   * The most bytes an ordinary user's `snapshot import` may upload to the root daemon
   * (`uploadMaxBytes`, `AWC_UPLOAD_MAX_BYTES`; default 32 GiB): the tar the user's process
   * makes, with sparse files as their data only (docs/explanation/security.md "Uploads").
   * Over it: E_UPLOAD_TOO_LARGE, nothing left in `<home>/host/uploads`.
   */
  uploadMaxBytes: number;
}

/** Paths derived from the home directory. */
export interface AwcPaths {
  home: string;
  catalog: string;
  objects: string;
  hostDir: string;
  socket: string;
  pidFile: string;
  /** Pid of the daemon's supervisor (keeps the content FUSE connection across daemon restarts). */
  supervisorPidFile: string;
  /** The content FUSE connection a restarted daemon takes over (src/host/fuse/fuse-session.ts). */
  fuseSession: string;
  /** Node ids handed out on that connection, in order. */
  fuseNodes: string;
  logFile: string;
  content: string;
  cache: string;
  layers: string;
  workspaces: string;
  /** The directory of the per-user sockets of a root daemon (`<uid>.sock`; see {@link userSocketsDirOf}). */
  userSockets: string;
  /** Overlay layers built for an ordinary user (`<uid>/<root hex>`: owners mapped to that user). */
  userLayers: string;
  /** Per-class counts of snapshot roots (`<root hex>.json`; src/service/capture/class-cache.ts). */
  classCounts: string;
  /** Layer images being built to be shared (src/drivers/overlay/shared-image.ts; emptied when the daemon starts). */
  imageBuilds: string;
  /** The host object cache (CACHE, src/host/read-path/object-cache.ts): `<cache>/objects`, its staging `<cache>/objects.tmp` and its marker `<cache>/objects.unsynced`. */
  objectCache: { dir: string; staging: string; marker: string };
}

/** The host object cache's paths inside the cache directory (names the chunk cache never uses: it keeps two-hex-digit directories). */
function objectCachePaths(cache: string): AwcPaths['objectCache'] {
  return { dir: join(cache, 'objects'), staging: join(cache, 'objects.tmp'), marker: join(cache, 'objects.unsynced') };
}

/** The default of `uploadMaxBytes`: 32 GiB. */
export const DEFAULT_UPLOAD_MAX_BYTES = 32 * 2 ** 30;

/** The default home: `/var/lib/awc` for root, else `~/.local/share/awc`. */
export function defaultHome(): string {
  return process.getuid?.() === 0 ? '/var/lib/awc' : join(homedir(), '.local', 'share', 'awc');
}

/**
 * The keys of `<home>/config.json` (camelCase) and the environment variable that overrides
 * each, with its type: docs/reference/configuration.md lists them. `AWC_HOME` has no key
 * (the file lives in the home).
 */
export const CONFIG_KEYS = {
  namespace: { env: 'AWC_NAMESPACE', type: 'string' },
  mountDriver: { env: 'AWC_MOUNT_DRIVER', type: 'string' },
  packBytes: { env: 'AWC_PACK_BYTES', type: 'number' },
  cacheBytes: { env: 'AWC_CACHE_BYTES', type: 'number' },
  host: { env: 'AWC_HOST', type: 'string' },
  catalog: { env: 'AWC_CATALOG', type: 'string' },
  objectStore: { env: 'AWC_OBJECT_STORE', type: 'string' },
  cacheDir: { env: 'AWC_CACHE_DIR', type: 'string' },
  socket: { env: 'AWC_SOCKET', type: 'string' },
  socketGroup: { env: 'AWC_SOCKET_GROUP', type: 'string' },
  leaseTtlMs: { env: 'AWC_LEASE_TTL_MS', type: 'number' },
  heartbeatMs: { env: 'AWC_HEARTBEAT_MS', type: 'number' },
  sweepIntervalMs: { env: 'AWC_SWEEP_INTERVAL_MS', type: 'number' },
  pruneIntervalMs: { env: 'AWC_PRUNE_INTERVAL_MS', type: 'number' },
  idleReleaseMs: { env: 'AWC_IDLE_RELEASE_MS', type: 'number' },
  idleSweepIntervalMs: { env: 'AWC_IDLE_SWEEP_INTERVAL_MS', type: 'number' },
  releasedRetentionMs: { env: 'AWC_RELEASED_RETENTION_MS', type: 'number' },
  warmCli: { env: 'AWC_WARM_CLI', type: 'string' },
  uploadMaxBytes: { env: 'AWC_UPLOAD_MAX_BYTES', type: 'number' },
  layerImages: { env: 'AWC_LAYER_IMAGES', type: 'string' },
  objectCache: { env: 'AWC_OBJECT_CACHE', type: 'string' },
  metricsAddress: { env: 'AWC_METRICS_ADDRESS', type: 'string' },
  ...DAEMON_LIMIT_KEYS,
} as const satisfies Record<string, { env: string; type: 'string' | 'number' }>;

/**
 * Loads and validates the configuration once. Order: defaults, `<home>/config.json`, the
 * `AWC_*` variables of CONFIG_KEYS, then `overrides`. The home comes from `overrides.home`,
 * else `AWC_HOME`, else `defaultHome()`.
 * @throws E_CONFIG on an unreadable file, a key it does not know (the message lists the
 *   valid ones) or an invalid value (with the offending key).
 */
export function loadConfig(overrides: Partial<AwcConfig> = {}, env: NodeJS.ProcessEnv = process.env): AwcConfig {
  const home = resolve(overrides.home ?? env.AWC_HOME ?? defaultHome());
  const merged = mergeSources(home, readConfigFile(join(home, 'config.json')), overrides, env);
  const { ns, pb, cb } = checkBasics(merged);
  const { socket, cacheDir, group } = checkLocations(merged);
  const { leaseTtlMs, heartbeatMs } = leaseTimes(merged.leaseTtlMs ?? 30_000, merged.heartbeatMs);
  const { sweepIntervalMs, users, warmCli, uploadMaxBytes, layerImages, objectCache } = checkDaemonKeys(merged);
  const pruneIntervalMs = checkInterval(merged, 'pruneIntervalMs', 300_000, 'look for removed worktrees only on `awc prune`');
  return {
    home,
    namespace: ns,
    mountDriver: merged.mountDriver as MountDriverChoice,
    packBytes: pb,
    cacheBytes: cb,
    host: merged.host as string,
    catalog: merged.catalog as string,
    objectStore: merged.objectStore as string,
    cacheDir,
    socket,
    socketGroup: group,
    leaseTtlMs,
    heartbeatMs,
    sweepIntervalMs,
    pruneIntervalMs,
    ...idleKeys(merged),
    warmCli,
    uploadMaxBytes,
    layerImages,
    objectCache,
    ...optionalMetricsAddress(merged.metricsAddress),
    ...parseDaemonLimits(merged),
    ...(users ? { users } : {}),
  };
}

/** `{ metricsAddress }` when config `metricsAddress` names one, else `{}`. @throws E_CONFIG */
function optionalMetricsAddress(value: unknown): Pick<AwcConfig, 'metricsAddress'> {
  const at = parseMetricsAddress(value);
  return at ? { metricsAddress: at } : {};
}

/** The home's config.json as an object of known keys ({} when there is none). @throws E_CONFIG, the environment's code (a path too long, a permission…) */
function readConfigFile(path: string): Record<string, unknown> {
  let file: Record<string, unknown> = {};
  try {
    file = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      const mapped = toAwcError(err); // a path too long, a permission…: the environment's code
      throw mapped.code === 'E_INTERNAL' ? new AwcError('E_CONFIG', `cannot read ${path}: ${(err as Error).message}`) : mapped;
    }
  }
  checkKeys(file, path);
  return file;
}

/** Defaults, then config.json, then the environment (CONFIG_KEYS' variables), then the overrides that are defined: the later wins. */
function mergeSources(
  home: string,
  file: Record<string, unknown>,
  overrides: Partial<AwcConfig>,
  env: NodeJS.ProcessEnv,
): Record<string, unknown> {
  const merged: Record<string, unknown> = {
    namespace: 'default',
    mountDriver: 'auto',
    packBytes: 32 * 1024 * 1024,
    cacheBytes: 10 * 2 ** 30,
    host: hostname(),
    catalog: sqliteUrl(join(home, 'catalog.sqlite')),
    objectStore: fileUrl(join(home, 'objects')),
    ...file,
  };
  for (const [key, spec] of Object.entries(CONFIG_KEYS)) {
    const v = env[spec.env];
    if (v) merged[key] = spec.type === 'number' ? Number(v) : v;
  }
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) merged[k] = v;
  return merged;
}

/** Checks namespace, mountDriver, packBytes, host and cacheBytes of merged settings. @throws E_CONFIG naming the key */
function checkBasics(merged: Record<string, unknown>): { ns: string; pb: number; cb: number } {
  const ns = merged.namespace;
  if (typeof ns !== 'string' || !/^[a-z0-9][a-z0-9_.-]{0,62}$/.test(ns))
    throw new AwcError('E_CONFIG', `invalid namespace ${JSON.stringify(ns)}`, { hint: 'Use lowercase letters, digits, ".", "_" or "-".' });
  if (!['auto', ...MOUNT_DRIVER_NAMES].includes(merged.mountDriver as string))
    throw new AwcError('E_CONFIG', `invalid mountDriver ${JSON.stringify(merged.mountDriver)}`, { hint: 'Use auto, overlay or copy.' });
  const pb = merged.packBytes as number;
  if (!Number.isInteger(pb) || pb < 1024 * 1024 || pb > 1024 * 1024 * 1024)
    throw new AwcError('E_CONFIG', `invalid packBytes ${JSON.stringify(merged.packBytes)}`, {
      hint: 'Use a whole number of bytes between 1 MiB and 1 GiB.',
    });
  if (typeof merged.host !== 'string' || merged.host === '') throw new AwcError('E_CONFIG', 'invalid host name');
  const cb = merged.cacheBytes as number;
  if (!Number.isSafeInteger(cb) || cb < 0)
    throw new AwcError('E_CONFIG', `invalid cacheBytes ${JSON.stringify(merged.cacheBytes)}`, {
      hint: 'Use a whole number of bytes (0 disables the disk cache).',
    });
  return { ns, pb, cb };
}

/** Checks socket, catalog, objectStore, cacheDir and socketGroup of merged settings. @throws E_CONFIG naming the key */
function checkLocations(merged: Record<string, unknown>): { socket?: string; cacheDir?: string; group?: string } {
  const socket = merged.socket;
  if (socket !== undefined && (typeof socket !== 'string' || !socket.startsWith('/')))
    throw new AwcError('E_CONFIG', `invalid socket ${JSON.stringify(socket)}`, { hint: 'Use an absolute path for the daemon socket.' });
  parseCatalogUrl(merged.catalog as string);
  parseObjectStoreUrl(merged.objectStore as string);
  const cacheDir = merged.cacheDir;
  if (cacheDir !== undefined && (typeof cacheDir !== 'string' || !cacheDir.startsWith('/')))
    throw new AwcError('E_CONFIG', `invalid cacheDir ${JSON.stringify(cacheDir)}`, { hint: 'Use an absolute path for the chunk cache.' });
  const group = merged.socketGroup;
  if (group !== undefined && (typeof group !== 'string' || !/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$/.test(group)))
    throw new AwcError('E_CONFIG', `invalid socketGroup ${JSON.stringify(group)}`, { hint: 'Use a group name or number.' });
  return { socket, cacheDir, group };
}

/** Checks sweepIntervalMs, users, warmCli and uploadMaxBytes of merged settings. @throws E_CONFIG naming the key */
function checkDaemonKeys(
  merged: Record<string, unknown>,
): Pick<AwcConfig, 'sweepIntervalMs' | 'users' | 'warmCli' | 'uploadMaxBytes' | 'layerImages' | 'objectCache'> {
  const sweepIntervalMs = merged.sweepIntervalMs ?? 3_600_000;
  if (
    typeof sweepIntervalMs !== 'number' ||
    !Number.isSafeInteger(sweepIntervalMs) ||
    (sweepIntervalMs !== 0 && (sweepIntervalMs < 1000 || sweepIntervalMs > 7 * 86_400_000))
  )
    throw new AwcError('E_CONFIG', `invalid sweepIntervalMs ${JSON.stringify(merged.sweepIntervalMs)}`, {
      hint: 'Use 0 (sweep only on demand) or a whole number of ms from 1000 to 604800000 (default 3600000).',
    });
  const users = merged.users === undefined ? undefined : parseUserRules(merged.users);
  const warmCli = merged.warmCli ?? 'on';
  if (warmCli !== 'on' && warmCli !== 'off')
    throw new AwcError('E_CONFIG', `invalid warmCli ${JSON.stringify(merged.warmCli)}`, { hint: 'Use "on" (the default) or "off".' });
  const uploadMaxBytes = merged.uploadMaxBytes ?? DEFAULT_UPLOAD_MAX_BYTES;
  if (typeof uploadMaxBytes !== 'number' || !Number.isSafeInteger(uploadMaxBytes) || uploadMaxBytes < 1024 * 1024)
    throw new AwcError('E_CONFIG', `invalid uploadMaxBytes ${JSON.stringify(merged.uploadMaxBytes)}`, {
      hint: `Use a whole number of bytes, at least 1048576 (1 MiB; default ${DEFAULT_UPLOAD_MAX_BYTES}, 32 GiB).`,
    });
  const layerImages = merged.layerImages ?? 'auto';
  if (layerImages !== 'auto' && layerImages !== 'on' && layerImages !== 'off')
    throw new AwcError('E_CONFIG', `invalid layerImages ${JSON.stringify(merged.layerImages)}`, {
      hint: 'Use "auto" (the default), "on" or "off".',
    });
  const objectCache = merged.objectCache ?? 'on';
  if (objectCache !== 'on' && objectCache !== 'off')
    throw new AwcError('E_CONFIG', `invalid objectCache ${JSON.stringify(merged.objectCache)}`, {
      hint: 'Use "on" (the default) or "off".',
    });
  return { sweepIntervalMs, users, warmCli, uploadMaxBytes, layerImages, objectCache };
}

/**
 * Checks an interval key of merged settings: 0 (`zero` says what that means) or a whole
 * number of ms from 1000 to 7 days; `def` when unset.
 * @throws E_CONFIG naming the key
 */
function checkInterval(merged: Record<string, unknown>, key: string, def: number, zero: string): number {
  const v = merged[key] ?? def;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || (v !== 0 && (v < 1000 || v > 7 * 86_400_000)))
    throw new AwcError('E_CONFIG', `invalid ${key} ${JSON.stringify(merged[key])}`, {
      hint: `Use 0 (${zero}) or a whole number of ms from 1000 to 604800000 (default ${def}).`,
    });
  return v;
}

/** The idle release keys (idleReleaseMs, idleSweepIntervalMs, releasedRetentionMs) of merged settings. @throws E_CONFIG naming the key */
function idleKeys(merged: Record<string, unknown>): Pick<AwcConfig, 'idleReleaseMs' | 'idleSweepIntervalMs' | 'releasedRetentionMs'> {
  return {
    idleReleaseMs: checkDuration(merged, 'idleReleaseMs', 86_400_000, 'never release idle workspaces'),
    idleSweepIntervalMs: checkInterval(merged, 'idleSweepIntervalMs', 600_000, 'sweep idle workspaces only on `awc release --idle`'),
    releasedRetentionMs: checkDuration(merged, 'releasedRetentionMs', 7 * 86_400_000, 'keep released workspaces until removed by hand'),
  };
}

/** A duration key: 0 or a whole number of ms up to 10 years. @throws E_CONFIG naming the key */
function checkDuration(merged: Record<string, unknown>, key: string, def: number, zero: string): number {
  const v = merged[key] ?? def;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v > 3650 * 86_400_000)
    throw new AwcError('E_CONFIG', `invalid ${key} ${JSON.stringify(merged[key])}`, {
      hint: `Use 0 (${zero}) or a whole number of ms up to 315360000000 (default ${def}).`,
    });
  return v;
}

/**
 * Validates the lease TTL (100 ms … 1 day) and the heartbeat interval (at least 10 ms, at most
 * a third of the TTL, so two heartbeats may fail before the lease expires; default TTL / 3).
 * @throws E_CONFIG naming the key
 */
function leaseTimes(ttl: unknown, beat: unknown): { leaseTtlMs: number; heartbeatMs: number } {
  if (typeof ttl !== 'number' || !Number.isSafeInteger(ttl) || ttl < 100 || ttl > 86_400_000)
    throw new AwcError('E_CONFIG', `invalid leaseTtlMs ${JSON.stringify(ttl)}`, {
      hint: 'Use a whole number of ms from 100 to 86400000 (default 30000).',
    });
  const heartbeatMs = beat ?? Math.floor(ttl / 3);
  if (typeof heartbeatMs !== 'number' || !Number.isSafeInteger(heartbeatMs) || heartbeatMs < 10 || heartbeatMs > Math.floor(ttl / 3))
    throw new AwcError('E_CONFIG', `invalid heartbeatMs ${JSON.stringify(beat)}`, {
      hint: `Use a whole number of ms from 10 to a third of leaseTtlMs (${Math.floor(ttl / 3)}).`,
    });
  return { leaseTtlMs: ttl, heartbeatMs };
}

/** config.json must be an object of CONFIG_KEYS only. @throws E_CONFIG naming the unknown key and the valid ones */
function checkKeys(file: unknown, path: string): void {
  const valid = [...Object.keys(CONFIG_KEYS), 'users'];
  if (typeof file !== 'object' || file === null || Array.isArray(file))
    throw new AwcError('E_CONFIG', `${path} must hold a JSON object`, {
      hint: `Write {"key": value, …} with the keys ${valid.join(', ')}.`,
    });
  for (const key of Object.keys(file)) {
    if (valid.includes(key)) continue;
    const env = Object.entries(CONFIG_KEYS).find(([, s]) => s.env === key)?.[0];
    throw new AwcError('E_CONFIG', `unknown key ${JSON.stringify(key)} in ${path}`, {
      hint: `Valid keys: ${valid.join(', ')}${env ? ` (AWC_* names are for the environment; in config.json it is "${env}")` : ''}. See docs/reference/configuration.md.`,
      details: { key, valid },
    });
  }
}

/**
 * Commands that only read (everything but `snapshot import`) call this instead of creating a
 * home: with an embedded (`sqlite:`) catalog, a home is a directory with its catalog file.
 * With a shared catalog (`postgres://`) there is nothing to check here: the catalog exists
 * or opening it fails with its own error.
 * @throws E_NO_HOME naming `home` (nothing is created), E_NAME_TOO_LONG / E_PERMISSION… when it cannot be looked at
 */
export async function assertHome(config: Pick<AwcConfig, 'home' | 'catalog'>): Promise<void> {
  const home = config.home;
  const where = parseCatalogUrl(config.catalog);
  if (where.kind !== 'sqlite') return;
  try {
    await lstat(where.path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw toAwcError(err);
    throw new AwcError('E_NO_HOME', `there is no AWC home at ${home} (no catalog at ${where.path})`, { details: { home } });
  }
}

/** Where root's daemons put their sockets: a root-owned directory outside every home. */
export const ROOT_RUN_DIR = '/run/awc';

/**
 * The daemon socket of a home: `config.socket` when set; else, for root, in
 * {@link ROOT_RUN_DIR} (`awcd.sock` for the default home `/var/lib/awc`,
 * `<first 12 hex of sha256(home)>.sock` for any other, so several homes on one host never
 * share a socket); for other users, `<home>/host/awcd.sock` (inside their private home).
 */
export function socketPathOf(config: Pick<AwcConfig, 'home' | 'socket'>): string {
  if (config.socket !== undefined) return config.socket;
  const home = resolve(config.home);
  if (process.getuid?.() !== 0) return join(home, 'host', 'awcd.sock');
  if (home === '/var/lib/awc') return join(ROOT_RUN_DIR, 'awcd.sock');
  return join(ROOT_RUN_DIR, `${createHash('sha256').update(home).digest('hex').slice(0, 12)}.sock`);
}

/**
 * Where a root daemon puts the per-user sockets of a home, whoever asks (a user's CLI
 * computes it without reading the home): `<socket>.users` when `socket` is set; else
 * `/run/awc/users` for the default home, `/run/awc/<first 12 hex of sha256(home)>.users`
 * for any other.
 */
export function userSocketsDirOf(config: Pick<AwcConfig, 'home' | 'socket'>): string {
  if (config.socket !== undefined) return `${config.socket}.users`;
  const home = resolve(config.home);
  if (home === '/var/lib/awc') return join(ROOT_RUN_DIR, 'users');
  return join(ROOT_RUN_DIR, `${createHash('sha256').update(home).digest('hex').slice(0, 12)}.users`);
}

/**
 * Paths of a home: everything under the home directory (kept 0700 / 0600), except the
 * daemon socket (see {@link socketPathOf}), the single source of truth for where it is,
 * and what the configuration puts elsewhere: `catalog` is the SQLite file of a `sqlite:`
 * catalog, `objects` the directory of a `file:` object store (both under the home for
 * other backends, where nothing uses them), `cache` the `cacheDir`.
 */
export function pathsOf(
  config: Pick<AwcConfig, 'home'> & Partial<Pick<AwcConfig, 'socket' | 'catalog' | 'objectStore' | 'cacheDir'>>,
): AwcPaths {
  const home = resolve(config.home);
  const hostDir = join(home, 'host');
  const cat = config.catalog === undefined ? undefined : parseCatalogUrl(config.catalog);
  const obj = config.objectStore === undefined ? undefined : parseObjectStoreUrl(config.objectStore);
  return {
    home,
    catalog: cat?.kind === 'sqlite' ? cat.path : join(home, 'catalog.sqlite'),
    objects: obj?.kind === 'file' ? obj.path : join(home, 'objects'),
    hostDir,
    socket: socketPathOf(config),
    pidFile: join(hostDir, 'awcd.pid'),
    supervisorPidFile: join(hostDir, 'awcd-supervisor.pid'),
    fuseSession: join(hostDir, 'content-session.json'),
    fuseNodes: join(hostDir, 'content-nodes.bin'),
    logFile: join(hostDir, 'awcd.log'),
    content: join(hostDir, 'content'),
    cache: config.cacheDir ?? join(hostDir, 'cache'),
    layers: join(hostDir, 'layers'),
    workspaces: join(hostDir, 'workspaces'),
    userSockets: userSocketsDirOf(config),
    userLayers: join(hostDir, 'user-layers'),
    classCounts: join(hostDir, 'class-counts'),
    imageBuilds: join(hostDir, 'image-builds'),
    objectCache: objectCachePaths(config.cacheDir ?? join(hostDir, 'cache')),
  };
}
