import type { CONFIG_KEYS } from './config.js';

/** What the configuration reference says of one key (Markdown; links relative to docs/reference/). */
export interface ConfigKeyDoc {
  /** The value's type as a reader needs it (`integer`, `string (URL)`, …). */
  type: string;
  /** The default, the value first (`\`30000\``), then a reading of it where that helps (`(1 h)`). */
  default: string;
  /** The unit, the range and what the key does. */
  meaning: string;
}

/**
 * The documentation of every key of `<home>/config.json`, in the order the reference lists them:
 * docs/reference/configuration.md's table is made from this and CONFIG_KEYS (`npm run docs:gen`,
 * src/docs/), so a key added to CONFIG_KEYS without its row here does not compile, and a test
 * (test/docs/generated.test.ts) fails when the committed page differs from what this makes.
 * `users` has no environment variable (config.json only).
 */
export const CONFIG_DOCS = {
  namespace: {
    type: 'string',
    default: '`default`',
    meaning:
      'The tenant namespace commands work in. Lowercase letters, digits, `.`, `_`, `-`; 1–63 characters. `--namespace` overrides it.',
  },
  mountDriver: {
    type: 'string',
    default: '`auto`',
    meaning: '`auto`, `overlay` or `copy`. `auto` picks overlay where the host allows it (`awc doctor` says which).',
  },
  packBytes: {
    type: 'integer',
    default: '`33554432` (32 MiB)',
    meaning: 'Bytes. Target size of a pack in the object store; 1 MiB to 1 GiB.',
  },
  cacheBytes: {
    type: 'integer',
    default: '`10737418240` (10 GiB)',
    meaning:
      "Bytes. Budget of the host's content caches on disk: the chunk cache and the host object cache together (the object cache takes what the chunk cache leaves; an object that enters it leaves the chunk cache); 0 turns both off.",
  },
  host: {
    type: 'string',
    default: "the machine's host name",
    meaning: "This host's name in the catalog's mount records.",
  },
  catalog: {
    type: 'string (URL)',
    default: '`sqlite:<home>/catalog.sqlite`',
    meaning:
      'Where the catalog (metadata) lives: `sqlite:/absolute/path` (embedded, one host) or `postgres://user:password@host:5432/database` (a fleet shares one: [how-to](../how-to/postgres-catalog.md)).',
  },
  objectStore: {
    type: 'string (URL)',
    default: '`file:<home>/objects`',
    meaning:
      'Where the bytes live: `file:/absolute/dir` (embedded) or `s3://bucket/prefix?endpoint=http://host:port&region=REGION&forcePathStyle=true` (a fleet shares one bucket). `endpoint` is for S3-compatible servers; `forcePathStyle` defaults to true when an endpoint is given. `multipartThreshold` and `partSize` (bytes) tune multipart uploads. Credentials come from the standard AWS variables and files; see [../how-to/s3-object-store.md](../how-to/s3-object-store.md).',
  },
  cacheDir: {
    type: 'string (absolute path)',
    default: '`<home>/host/cache`',
    meaning:
      "Directory of the host chunk cache (kept 0700), and of the host object cache in its `objects/` (with `objects.tmp/` and the marker `objects.unsynced`). A file system of its own here makes the object cache's budget exact ([host cache lower](../explanation/host-cache-lower.md#the-disk-budget-and-the-chunk-cache)).",
  },
  uploadMaxBytes: {
    type: 'integer',
    default: '`34359738368` (32 GiB)',
    meaning:
      "Bytes; at least 1 MiB. The most an ordinary user's `snapshot import` may upload to the root daemon (the tar the user's process makes; a sparse file counts only its data, its holes nothing), and the most all of one user's imports in flight at once may hold together (one that fits alone but not with the others fails with `E_TOO_MANY` naming the key, retryable). Over it the import fails with `E_UPLOAD_TOO_LARGE` and nothing of it stays in `<home>/host/uploads` ([../explanation/security.md](../explanation/security.md#uploads-sparse-and-capped)).",
  },
  socket: {
    type: 'string (absolute path)',
    default:
      'root: `/run/awc/awcd.sock` for `/var/lib/awc`, `/run/awc/<12 hex of sha256(home)>.sock` for other homes; other users: `<home>/host/awcd.sock`',
    meaning: "The host daemon's API socket.",
  },
  socketGroup: {
    type: 'string (group name or number)',
    default: 'unset: the socket is 0600, root only',
    meaning:
      "Deprecated: a group whose members may use root's whole daemon API (0660 root:group), every namespace, as root. Use `users` instead ([why](../explanation/security.md#per-user-sockets)).",
  },
  leaseTtlMs: {
    type: 'integer',
    default: '`30000`',
    meaning:
      "Milliseconds, 100 to 86400000. How long this host's leases outlive its last heartbeat, by the catalog's clock; after that another host may take its workspaces over (`awc mount --steal`). See [leases](../explanation/leases.md).",
  },
  heartbeatMs: {
    type: 'integer',
    default: '`leaseTtlMs / 3`',
    meaning:
      'Milliseconds, 10 to a third of `leaseTtlMs`. How often the host daemon renews its session (one statement for all its leases).',
  },
  users: {
    type: 'list of `{"user"\\|"group": name or number, "namespaces": [pattern…]}`',
    default: 'unset: only root uses the daemon',
    meaning:
      'Who besides root may use the root host daemon, and in which namespaces (`*` matches any run of characters: `team-*`, `*`). A `group` entry allows its members and the users whose primary group it is. Each allowed user gets a socket of their own ([how-to](../how-to/ordinary-users.md), [security](../explanation/security.md#per-user-sockets)); the daemon reads it at start and on `SIGHUP`. An entry that is not of this shape, or a user or group that does not exist (when the daemon starts), is `E_CONFIG`.',
  },
  sweepIntervalMs: {
    type: 'integer',
    default: '`3600000` (1 h)',
    meaning:
      'Milliseconds, 0 or 1000 to 604800000 (7 days). How often the host daemon drops the layers, chunk cache entries and cached class counts of removed snapshots ([host-local state](../explanation/gc.md#host-local-state)); 0: only on demand (`awc gc --local`, or after `awc gc` on this host).',
  },
  pruneIntervalMs: {
    type: 'integer',
    default: '`300000` (5 min)',
    meaning:
      "Milliseconds, 0 or 1000 to 604800000 (7 days). How often the host daemon does what [`awc prune`](claude-code.md#awc-prune) does: releases Claude Code hook worktrees and attached worktrees (`awc attach`) whose tool removed them behind AWC's back (directory deleted, `git worktree remove` / `prune`, mounts gone), after checkpointing any work; busy ones are left and logged with the processes holding them ([explanation](../explanation/attach.md#when-the-tool-removes-the-worktree)); 0: only on `awc prune`.",
  },
  idleReleaseMs: {
    type: 'integer',
    default: '`86400000` (24 h)',
    meaning:
      "Milliseconds, 0 to 315360000000. How long a workspace mounted on this host may be idle (no process with an open file, a mapping, its working directory or root inside it; no write) before the idle sweep checkpoints it, unmounts it and records it as released; a workspace's `awc.idle-ttl` label overrides it; 0: never ([explanation](../explanation/lifecycle.md#idle-release)).",
  },
  idleSweepIntervalMs: {
    type: 'integer',
    default: '`600000` (10 min)',
    meaning:
      'Milliseconds, 0 or 1000 to 604800000 (7 days). How often the host daemon runs the idle sweep (`awc release --idle` runs one now); 0: only by hand.',
  },
  releasedRetentionMs: {
    type: 'integer',
    default: '`604800000` (7 days)',
    meaning:
      'Milliseconds, 0 to 315360000000. How long a released workspace is kept before the idle sweep removes it (`awc rm`, refused while changes of it are left uncheckpointed on this host), so that `awc gc` frees what only it held; 0: kept until removed by hand.',
  },
  layerImages: {
    type: 'string',
    default: '`auto`',
    meaning:
      "`auto`, `on` or `off`. Whether snapshots' layers are shared as EROFS images through the object store, so that hosts mount the image instead of building the layer (Linux 6.12 or later; [layer images](../explanation/layer-images.md)): an import builds, uploads and records its image before it returns (reported as `image` in its result), the host daemon shares a checkpoint's in the background, and a layer it builds that has none. `auto` shares when the catalog is PostgreSQL (a fleet); a host uses an image another host shared unless this is `off`. Unless `off`, a host that can mount images also builds its own layers as images, on one host too ([built here](../explanation/layer-images.md#built-here)); `off` builds layer directories.",
  },
  objectCache: {
    type: 'string',
    default: '`on`',
    meaning:
      '`on` or `off`. Whether the host daemon keeps the whole content objects its workspaces read in the host object cache, mounted as a data-only lower between each layer and the content FUSE mount (`lowerdir=LAYER::CACHE::CONTENT`), so that later reads of them are served by the kernel from local disk without FUSE ([host cache lower](../explanation/host-cache-lower.md)). Read at daemon start; a workspace mounted before keeps the lowers it was mounted with.',
  },
  warmCli: {
    type: 'string',
    default: '`on`',
    meaning:
      "`on` or `off`. Whether the host daemon keeps warm CLI workers, which run a command for a caller it cannot be told apart from, without the CLI's start-up cost ([warm workers](../explanation/cli-latency.md#third-step-2026-12-02-warm-workers)). The CLI's `AWC_NO_WARM=1` runs one command in its own process whatever the daemon does.",
  },
  metricsAddress: {
    type: 'string',
    default: '`off`',
    meaning:
      'Where the host daemon also serves `GET /metrics` over TCP, for Prometheus: `off` (the Unix socket only, `awc metrics`), `on` (127.0.0.1:9464), a port (on 127.0.0.1), or `<ip>:<port>` (`[::1]:9464`). IP literals only; nothing but `GET /metrics` answers there. The figures name namespaces and uids: an address other than loopback shows them to whoever reaches it. Read at daemon start ([metrics](../how-to/scrape-metrics.md)).',
  },
  warmWorkers: {
    type: 'integer',
    default: '`2`',
    meaning:
      "Workers, 1 to 64. Warm CLI workers the daemon keeps loaded for its own user: that many commands start at once without waiting for a worker to load (about 0.3 s of CPU each). A burst of more (five agents' WorktreeCreate at once) gets a worker loading for each at once; a host that starts N agents together sets N ([five at once](../explanation/cli-latency.md#bursts)). Each idle worker holds about 60 MiB. Read at daemon start.",
  },
  userMaxConnections: {
    type: 'integer',
    default: '`64`',
    meaning:
      'Connections, 1 to 100000. How many connections one ordinary user may hold open at once on their sockets of the root daemon (API socket, and warm CLI connections waiting for a worker); one more is answered `E_TOO_MANY` naming the cap ([per-user resource caps](../explanation/security.md#per-user-resource-caps)). Read at daemon start.',
  },
  userIdleTimeoutMs: {
    type: 'integer',
    default: '`30000`',
    meaning:
      "Milliseconds, 100 to 3600000. A user's connection with no request in progress is closed after this long, and a request's headers must arrive within it. Read at daemon start.",
  },
  userRequestTimeoutMs: {
    type: 'integer',
    default: '`60000` (1 min)',
    meaning:
      "Milliseconds, 1000 to 86400000. An inactivity limit, not a limit on a request's length: a user's request body (an import's tar too) that sends nothing for this long is ended with `E_REQUEST_STALLED` naming the key; one that keeps sending is never cut off, however long it takes (an import of a big tree over the user's socket), and the answer may take as long as it needs. (Before the issue 24 review it limited the whole request, 5 min by default, and cut off large imports.) Read at daemon start.",
  },
  requestBodyBudgetBytes: {
    type: 'integer',
    default: '`134217728` (128 MiB)',
    meaning:
      "Bytes, 32 MiB to 1 TiB. The JSON request bodies the host daemon holds in memory at once, all callers together; one user (or the root API socket) at most a quarter of it. A body's bytes count as they arrive, never by its declared `content-length` (a caller that declares a large body and sends nothing holds nothing). A body that does not fit waits up to 1 s in all, then is refused with `E_TOO_MANY` naming the budget. Read at daemon start.",
  },
  fdReserve: {
    type: 'integer',
    default: '`1024`',
    meaning:
      "Descriptors, 0 to 2147483647. Descriptors the host daemon keeps free for its content FUSE server and mounts: once fewer than this are left below its limit (`RLIMIT_NOFILE`, which Node raises to the hard limit at start), new connections on the users' sockets are closed unanswered. The daemon refuses to start (`E_CONFIG` naming `fdReserve`, reported by `awc daemon start`) when the reserve leaves fewer than 64 descriptors below the limit for connections. Read at daemon start.",
  },
  userMaxMounts: {
    type: 'integer',
    default: '`64`',
    meaning:
      'Mounts, 1 to 100000. Workspaces one ordinary user may have mounted through the root daemon at once; one more is `E_TOO_MANY` naming the cap. Read at daemon start.',
  },
} as const satisfies Record<keyof typeof CONFIG_KEYS | 'users', ConfigKeyDoc>;
