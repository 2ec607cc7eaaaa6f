import type { UserStatus } from '../../daemon/users/user-client.js';
import type { ImportResult } from '../../service/workspace/awc.js';
import type { ApiImportOptions, AwcApi } from '../../service/workspace/awc-api.js';
import type { KeptFiles } from '../../service/kept/kept-commands.js';
import type { UsageReport } from '../../service/workspace/usage.js';
import type { HostStatusReport } from '../../service/workspace/host-status.js';
import type { AttachResult, DetachResult } from '../../service/attach/attach.js';

/**
 * The workspace service as an ordinary user's CLI gets it: every method of REMOTE_METHODS
 * (src/service/workspace/remote-methods.ts) goes to the root daemon as `POST /v1/call`;
 * `importSnapshot` and `export` move their files as tar streams made and read by this
 * process, as the user. Besides the AwcApi, what the daemon answers for a user.
 */
export interface RemoteAwc extends AwcApi {
  /** `awc attach` / `awc detach` of a worktree of this user (src/service/attach/attach.ts with asUser, in the daemon). */
  attach(dir: string, opts?: { snapshot?: string }): Promise<AttachResult>;
  detach(dir: string, opts?: { force?: boolean }): Promise<DetachResult>;
  /** The usage report of the namespace, made by the daemon (src/daemon/users/user-methods.ts). */
  usage(): Promise<UsageReport>;
  /** `awc status` of this host for this user, made by the daemon: only their workspaces (src/daemon/users/user-methods.ts). */
  status(): Promise<HostStatusReport>;
  /** The kept sets of workspaces this user mounted; restore writes them as the user. */
  kept: { [K in keyof KeptFiles]: (...a: Parameters<KeptFiles[K]>) => Promise<ReturnType<KeptFiles[K]>> };
  importSnapshot(source: string, opts?: RemoteImportOptions): Promise<ImportResult>;
  /** `GET /v1/status` of the daemon (who it takes this user for; its host). @throws E_DAEMON_UNAVAILABLE */
  userStatus(): Promise<UserStatus>;
}

/** The import options a user's import takes: `skip` (a function) cannot cross to the daemon; `exclude` says the same as data. */
export type RemoteImportOptions = ApiImportOptions & {
  /** Paths left out of a directory import, relative to its root with `/` (each with everything below it). */
  exclude?: readonly string[];
};
