import { accessSync, constants, existsSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * The one error class of AWC and its code registry.
 *
 * Every failure a user can see carries a stable `code` (never renamed once released), a
 * human `message`, a `hint` that says what to do next, and `retryable`. The CLI prints
 * `{code, message, hint, retryable}` on stderr and exits with the code's `exit` status.
 */

/** Registry entry: exit status of the CLI, whether retrying may help, and a default hint. */
export interface ErrorSpec {
  exit: number;
  retryable: boolean;
  hint: string;
}

/**
 * The code registry. Exit codes: 2 usage, 3 not found, 4 conflict/state, 5 integrity, 6 environment, 7 unsupported,
 * 1 internal (a bug in AWC, and nothing else), 141 the reader of stdout went away (the CLI prints nothing, like a
 * program killed by SIGPIPE).
 */
export const ERROR_CODES = {
  E_USAGE: { exit: 2, retryable: false, hint: 'Run `awc --help` or `awc <command> --help` for usage.' },
  E_CONFIG: { exit: 2, retryable: false, hint: 'Check the configuration file and AWC_* environment variables.' },
  E_NOT_FOUND: { exit: 3, retryable: false, hint: 'List what exists with `awc snapshot ls` or `awc ls`.' },
  E_SOURCE_NOT_FOUND: { exit: 3, retryable: false, hint: 'Check the path you passed.' },
  E_NO_HOME: {
    exit: 3,
    retryable: false,
    hint: 'No AWC home exists there yet; create one with `awc snapshot import <dir>`, or pass --home / AWC_HOME.',
  },
  E_OBJECT_NOT_FOUND: {
    exit: 5,
    retryable: false,
    hint: 'The object store lacks an object the catalog refers to; restore the object store from a copy, or re-import the snapshot.',
  },
  E_AMBIGUOUS: {
    exit: 2,
    retryable: false,
    hint: 'Use the full id instead of a prefix or name, or say the kind: snapshot:<name>, workspace:<name>.',
  },
  E_NAME_TAKEN: {
    exit: 4,
    retryable: false,
    hint: 'Pick another name (names are unique per namespace among snapshots, and among workspaces).',
  },
  E_ALREADY_MOUNTED: { exit: 4, retryable: false, hint: 'Unmount it first with `awc unmount <workspace>`.' },
  E_NOT_MOUNTED: { exit: 4, retryable: false, hint: 'Mount it first with `awc mount <workspace> <dir>`.' },
  E_TARGET_BUSY: { exit: 4, retryable: true, hint: 'The directory is in use or not empty; pick an empty directory or close what uses it.' },
  E_TARGET_EXISTS: {
    exit: 4,
    retryable: false,
    hint: 'The target exists and is not empty; export to a new or empty directory, or pass --overwrite to replace it.',
  },
  E_IN_USE: { exit: 4, retryable: false, hint: 'Remove or unmount what refers to it first.' },
  E_CATALOG_BUSY: { exit: 4, retryable: true, hint: 'Another awc process holds the catalog lock; run the command again.' },
  E_TOO_MANY: {
    exit: 4,
    retryable: true,
    hint: "A per-user limit of the daemon was reached; the message and details.cap name it (a key of the root home's config.json, such as userMaxConnections or userMaxMounts); wait for some of yours to finish, then try again, or ask root to raise that key.",
  },
  E_CHANGED_DURING_READ: {
    exit: 4,
    retryable: true,
    hint: 'A file changed while it was read; run the command again, or pass --allow-changing to store what was read.',
  },
  E_STILL_MOUNTED: {
    exit: 4,
    retryable: true,
    hint: 'An earlier mount of this workspace is still alive (processes hold files in it); end those processes, then mount again.',
  },
  E_LEASED: {
    exit: 4,
    retryable: true,
    hint: 'Another host holds the workspace (details name it and when its lease expires); unmount it there, or once its lease has expired take it over with `awc mount <workspace> <dir> --steal` (its uncheckpointed changes are lost).',
  },
  E_LEASE_LOST: {
    exit: 4,
    retryable: false,
    hint: "This host's lease on the workspace expired or was taken over, so it may not commit; its uncheckpointed changes here are stale: drop them with `awc unmount <workspace> --discard` (see `awc show <workspace>`).",
  },
  E_INTEGRITY: { exit: 5, retryable: false, hint: 'Stored bytes do not match their digest; restore the object store from another copy.' },
  // A catalog and its object store know each other (docs/explanation/integrity.md#a-catalog-and-its-store-know-each-other):
  // exit 5 like E_OBJECT_NOT_FOUND, what export, fsck and gc exited with when the pair did not match.
  E_STORE_MISMATCH: {
    exit: 5,
    retryable: false,
    hint: 'The catalog and the object store belong to different homes; point AWC_CATALOG and AWC_OBJECT_STORE at the pair that belong together (the message names both identities). Nothing was written.',
  },
  E_CATALOG_EMPTY: {
    exit: 5,
    retryable: false,
    hint: 'The catalog is empty or missing but the object store holds packs: restore the catalog from a copy or fix AWC_CATALOG; to rebuild a catalog from the store instead, run `awc fsck --adopt-store` (docs/how-to/recover-a-catalog.md). Nothing was created.',
  },
  E_FORMAT: { exit: 5, retryable: false, hint: 'The object is not in a format this version reads; upgrade awc.' },
  E_PATH_TRAVERSAL: { exit: 5, retryable: false, hint: 'The archive or tree names a path outside its root; it was refused.' },
  E_UNSUPPORTED: { exit: 7, retryable: false, hint: 'This kind of entry is not supported yet; see docs/reference/formats.md.' },
  E_UNSUPPORTED_NAME: {
    exit: 7,
    retryable: false,
    hint: 'The name is not the escaped form of any byte string (a lone high surrogate, or escapes that spell UTF-8): the input is corrupt or hostile.',
  },
  E_NO_SPACE: {
    exit: 6,
    retryable: true,
    hint: 'The disk (or quota) is full; free space, or lower AWC_CACHE_BYTES, and run the command again.',
  },
  E_READ_ONLY: {
    exit: 6,
    retryable: false,
    hint: 'The file system is read-only; pass a writable --home (or AWC_HOME), or remount it read-write.',
  },
  E_NAME_TOO_LONG: {
    exit: 7,
    retryable: false,
    hint: 'A name is longer than 255 bytes, or a path given to a system call (or to GNU tar) longer than 4096; shorten it.',
  },
  E_IO: { exit: 6, retryable: false, hint: 'The operating system reported an I/O error; check the disk (`dmesg`) and its free space.' },
  E_CLOSED_PIPE: {
    exit: 141,
    retryable: false,
    hint: 'The program reading the output closed it early (e.g. `head`); awc stopped writing.',
  },
  E_PERMISSION: { exit: 6, retryable: false, hint: 'Run as root, or use the copy driver (AWC_MOUNT_DRIVER=copy).' },
  E_MOUNT_FAILED: { exit: 6, retryable: true, hint: 'Run `awc doctor` to see which mount driver this host can use.' },
  // layer images (docs/explanation/layer-images.md): a kernel that mounts a file as EROFS (or, for the reference builder, mkfs.erofs) is missing
  E_LAYER_IMAGE_UNSUPPORTED: {
    exit: 6,
    retryable: false,
    hint: 'Mounting a layer image needs Linux 6.12 or later with EROFS file-backed mounts (modprobe erofs); without them this host builds layer directories. (mkfs.erofs is needed only by buildLayerImage, the reference builder of the tests.)',
  },
  E_CATALOG_UNAVAILABLE: {
    exit: 6,
    retryable: true,
    hint: 'The catalog database cannot be reached; check that its server runs and the catalog URL, then run the command again.',
  },
  E_DAEMON_UNAVAILABLE: { exit: 6, retryable: true, hint: 'Start it with `awc daemon start` and check `awc daemon status`.' },
  E_FUSE: { exit: 6, retryable: true, hint: 'The FUSE connection failed; run `awc daemon stop` and mount again.' },
  // The object store's backend (S3): unreachable or failing, refusing our credentials, or without the bucket.
  E_OBJECT_STORE_UNAVAILABLE: {
    exit: 6,
    retryable: true,
    hint: 'The object store did not answer or kept failing (after retries); check its endpoint and health, then run the command again.',
  },
  E_OBJECT_STORE_DENIED: {
    exit: 6,
    retryable: false,
    hint: 'The object store refused the credentials; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and ~/.aws/credentials) and the bucket policy.',
  },
  E_BUCKET_NOT_FOUND: {
    exit: 6,
    retryable: false,
    hint: 'The bucket of the objectStore URL does not exist; create it (e.g. `aws s3 mb s3://BUCKET`) or fix the URL.',
  },
  E_OBJECT_STORE_ERROR: {
    exit: 6,
    retryable: false,
    hint: "The object store answered with an error AWC does not expect; see the message and the server's logs.",
  },
  E_GC_RUNNING: {
    exit: 4,
    retryable: true,
    hint: 'Another gc holds the fleet-wide gc lock; wait for it to finish (a lock left by a dead gc expires by itself), then run gc again.',
  },
  E_GC_LOCK_LOST: {
    exit: 4,
    retryable: true,
    hint: 'This gc stalled past its lock expiry and stopped before changing anything more; run gc again.',
  },
  E_PACK_CONDEMNED: {
    exit: 4,
    retryable: true,
    hint: 'gc condemned a pack this commit relied on; run the command again (it uploads those blobs anew).',
  },
  // quotas per namespace (docs/reference/quotas.md); a refusal of the daily limit is retryable (time frees it)
  E_QUOTA: {
    exit: 4,
    retryable: false,
    hint: "The commit would take the namespace over one of its quotas (`awc quota show`); free what the message names, or ask the home's owner to raise the limit. A refusal of the daily new-bytes limit is retryable: it fits again at details.retryAtMs, as the 24 h window moves.",
  },
  // `awc mcp`: a scoped server touches only the workspaces it created (docs/reference/mcp.md#scope).
  E_OUT_OF_SCOPE: {
    exit: 4,
    retryable: false,
    hint: 'This MCP server acts only on workspaces it created (its --scope) and on paths under its root (--root); use one it forked and a path under its root, or run a server with --scope all.',
  },
  // `awc attach` / `awc init <tool>` (docs/reference/attach.md)
  E_NO_ENV: {
    exit: 3,
    retryable: false,
    hint: 'No prepared environment matches the worktree; install its dependencies in a checkout and run `awc prepare <dir>`, or pass --snapshot.',
  },
  E_SYMLINK: {
    exit: 4,
    retryable: false,
    hint: 'AWC never writes or mounts through a symbolic link it did not make; replace the link with a real directory (or remove it) and run the command again.',
  },
  E_TOOL_CONFIG: {
    exit: 2,
    retryable: false,
    hint: "The tool's configuration file is malformed or has a shape AWC cannot merge into; it was left as it is: fix it, then run `awc init` again.",
  },
  // an ordinary user's upload to the root daemon (docs/explanation/security.md "Uploads")
  E_UPLOAD_TOO_LARGE: {
    exit: 4,
    retryable: false,
    hint: "The import is larger than the root daemon takes from a user (uploadMaxBytes in the root home's config.json); import a smaller tree or leave large files out (a sparse file's holes cost nothing), or ask root to raise uploadMaxBytes.",
  },
  // a user's request body that stopped sending (docs/explanation/security.md "Per-user resource caps")
  E_REQUEST_STALLED: {
    exit: 4,
    retryable: true,
    hint: "Your request's body (an import's tar) sent nothing for userRequestTimeoutMs of the root home's config.json, so the daemon ended it; check that what sends it (tar, a pipe) is not stuck, then run the command again, or ask root to raise userRequestTimeoutMs.",
  },
  // Claude Code worktree hooks (docs/how-to/claude-code.md)
  E_HOOK_INPUT: {
    exit: 2,
    retryable: false,
    hint: 'The hook reads one JSON object on stdin as Claude Code sends it (docs/how-to/claude-code.md#payloads).',
  },
  E_HOOK_EVENT: {
    exit: 2,
    retryable: false,
    hint: '`awc hook claude` handles WorktreeCreate and WorktreeRemove only; configure it for those events (`awc init claude`).',
  },
  E_NOT_PREPARED: {
    exit: 3,
    retryable: false,
    hint: 'Run `awc init claude <project>` once: it imports the project with its dependencies as the prepared snapshot.',
  },
  E_BRANCH_FAILED: { exit: 4, retryable: false, hint: "git could not make the worktree's branch; see git's message." },
  E_CLAUDE_SETTINGS: {
    exit: 5,
    retryable: false,
    hint: 'Fix the settings file the message names (.claude/settings.local.json or .claude/settings.json) by hand (it must be a JSON object; `hooks` an object of arrays); awc never overwrites it.',
  },
  E_GIT_NOT_A_REPO: {
    exit: 3,
    retryable: false,
    hint: 'Pass the path of a git checkout or bare repository (its top level), or a URL git can clone.',
  },
  E_GIT_BAD_REV: {
    exit: 3,
    retryable: false,
    hint: 'Pass a branch, tag or commit id of that repository (`git log --oneline` lists them).',
  },
  E_GIT_FAILED: {
    exit: 6,
    retryable: false,
    hint: "Read git's message above; check that git is installed and the repository is readable.",
  },
  E_GIT_NO_BASE: {
    exit: 2,
    retryable: false,
    hint: 'Fork from a snapshot made by `awc snapshot import --git`, or label the snapshot the files started from: `awc label <snapshot> awc.git.commit=<commit>`.',
  },
  E_GIT_BRANCH_EXISTS: {
    exit: 4,
    retryable: false,
    hint: 'The branch exists and its tip is not the base commit; pass --force to move it, or choose another --branch.',
  },
  E_GIT_BRANCH_CHECKED_OUT: {
    exit: 4,
    retryable: false,
    hint: 'The branch is checked out in a work tree of the repository; choose another --branch.',
  },
  E_CANCELLED: {
    exit: 4,
    retryable: true,
    hint: 'The work was cancelled because the daemon that did it stopped; it is done again when next needed.',
  },
  E_INTERNAL: { exit: 1, retryable: false, hint: 'This is a bug in awc; please report it with the command you ran.' },
} as const satisfies Record<string, ErrorSpec>;

/** A registered error code. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** JSON shape of an error as printed by the CLI and returned by the daemon API. */
export interface ErrorJson {
  code: ErrorCode;
  message: string;
  hint: string;
  retryable: boolean;
  details?: Record<string, unknown>;
}

/**
 * The error class of AWC. `hint` defaults to the registry's hint for the code.
 * @example throw new AwcError('E_NOT_FOUND', `no snapshot ${ref}`)
 */
export class AwcError extends Error {
  readonly code: ErrorCode;
  readonly hint: string;
  readonly retryable: boolean;
  readonly details?: Record<string, unknown>;

  /** `opts.retryable` overrides the registry's for this one error (e.g. E_QUOTA of a limit time frees). */
  constructor(
    code: ErrorCode,
    message: string,
    opts: { hint?: string; details?: Record<string, unknown>; cause?: unknown; retryable?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AwcError';
    this.code = code;
    this.hint = opts.hint ?? ERROR_CODES[code].hint;
    this.retryable = opts.retryable ?? ERROR_CODES[code].retryable;
    this.details = opts.details;
  }

  /** CLI exit status for this error. */
  get exitCode(): number {
    return ERROR_CODES[this.code].exit;
  }

  toJSON(): ErrorJson {
    const out: ErrorJson = { code: this.code, message: this.message, hint: this.hint, retryable: this.retryable };
    if (this.details) out.details = this.details;
    return out;
  }

  /** Rebuilds an AwcError from its JSON form (daemon API responses). Unknown codes become E_INTERNAL. */
  static fromJSON(j: Partial<ErrorJson>): AwcError {
    const code = j.code && j.code in ERROR_CODES ? j.code : 'E_INTERNAL';
    const retryable = code === j.code && typeof j.retryable === 'boolean' ? j.retryable : undefined;
    return new AwcError(code, j.message ?? 'unknown error', { hint: j.hint, details: j.details, retryable });
  }
}

/** Errno codes of the environment (not of AWC) and the code each one is reported as. */
const ERRNO_CODES: Record<string, ErrorCode> = {
  ENOSPC: 'E_NO_SPACE',
  EDQUOT: 'E_NO_SPACE',
  EROFS: 'E_READ_ONLY',
  ENAMETOOLONG: 'E_NAME_TOO_LONG',
  EACCES: 'E_PERMISSION',
  EPERM: 'E_PERMISSION',
  EIO: 'E_IO',
  // a network file system under a directory store or the home (NFS `soft,softerr`) that timed out
  ETIMEDOUT: 'E_IO',
};

/**
 * Node's recursive `mkdir` answers ENOENT when the real failure is a read-only file system
 * (or a permission); a recursive mkdir has no other reason for ENOENT than a race. Asks the
 * nearest existing ancestor why it cannot be written, or undefined when `e` is something else.
 */
function realMkdirError(e: NodeJS.ErrnoException | undefined): NodeJS.ErrnoException | undefined {
  if (e?.code !== 'ENOENT' || e.syscall !== 'mkdir' || typeof e.path !== 'string') return undefined;
  for (let dir = dirname(e.path); ; dir = dirname(dir)) {
    if (existsSync(dir)) {
      try {
        accessSync(dir, constants.W_OK);
        return undefined;
      } catch (probe) {
        const p = probe as NodeJS.ErrnoException;
        return Object.assign(new Error(`cannot create ${e.path}: ${p.message.replace(/, access .*$/, '')}`), {
          code: p.code,
          path: e.path,
        }) as NodeJS.ErrnoException;
      }
    }
    if (dir === dirname(dir)) return undefined;
  }
}

/**
 * Wraps any thrown value as an AwcError. An AwcError is returned as is; an error of the
 * environment is given its stable code (the one place where this mapping lives): errno
 * ENOSPC/EDQUOT → E_NO_SPACE, EROFS → E_READ_ONLY, ENAMETOOLONG → E_NAME_TOO_LONG,
 * EACCES/EPERM → E_PERMISSION, EIO/ETIMEDOUT → E_IO. (A SQL dialect's codes are mapped by that
 * dialect, at the catalog's boundary: src/catalog/sqlite/sqlite-errors.ts.) Anything else
 * is E_INTERNAL: a bug in AWC. (EPIPE is not mapped here: only the writer of stdout knows that
 * it means "the reader went away", E_CLOSED_PIPE; elsewhere, a pipe to a child, it may be a bug.)
 */
export function toAwcError(err: unknown): AwcError {
  if (err instanceof AwcError) return err;
  const e = realMkdirError(err as NodeJS.ErrnoException) ?? (err as NodeJS.ErrnoException);
  const raw = typeof e?.code === 'string' ? e.code : undefined;
  if (raw !== undefined && ERRNO_CODES[raw]) {
    const message = e.path && !e.message.includes(e.path) ? `${e.message} (${e.path})` : e.message;
    return new AwcError(ERRNO_CODES[raw], message, { cause: err });
  }
  return new AwcError('E_INTERNAL', e?.message ?? String(err), { cause: err });
}
