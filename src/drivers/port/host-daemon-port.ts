import type { Digest } from '../../core/digest.js';
import type { MountDriverName, MountResult } from './mount-driver.js';

/** A checkpoint, as the CLI reports it to the host daemon (HostDaemonPort.reportCheckpoint). */
export interface CheckpointReport {
  driver: MountDriverName;
  durationMs: number;
  newBytes: number;
  /** The workspace's namespace and the new root, for an overlay checkpoint that made one. */
  namespace?: string;
  root?: Digest;
}

/**
 * An import's layer image, as the CLI reports it (HostDaemonPort.reportImportImage): `published`
 * (built and shared by the import, reason `import`) or `failed` (reason: the error's code).
 */
export interface ImportImageReport {
  outcome: 'published' | 'failed';
  reason: string;
}

/**
 * What the service needs of the host daemon (the overlay mounts run there, in the process
 * that owns the content FUSE server; scans do not). Implemented by `DaemonClient`
 * (src/daemon/supervisor/client.ts, over the daemon's Unix socket) and handed in by the CLI
 * (`Awc.open(…, {daemon})`), so the service never imports the daemon.
 */
export interface HostDaemonPort {
  /**
   * Mounts an overlay workspace at `target` (`POST /v1/mount`), starting the daemon first
   * when it is not running.
   * `steal` takes over a workspace whose lease expired on another host.
   * @throws E_ALREADY_MOUNTED, E_STILL_MOUNTED, E_MOUNT_FAILED, E_TARGET_BUSY / E_USAGE (target), E_DAEMON_UNAVAILABLE,
   *   E_LEASED, E_LEASE_LOST
   */
  mount(req: {
    namespace: string;
    workspace: string;
    target: string;
    steal?: boolean;
    asUser?: { uid: number; gid: number };
  }): Promise<MountResult>;

  /**
   * Makes sure the host daemon runs (starting it when it does not): it holds this host's
   * session in the catalog, which keeps the leases of every workspace mounted here alive,
   * whatever the driver (docs/explanation/leases.md). @throws E_DAEMON_UNAVAILABLE
   */
  ensureRunning(): Promise<void>;

  /**
   * Unmounts an overlay workspace and clears its mount record (`POST /v1/unmount`); the
   * upper stays. A daemon that is not running is waited for only while its supervisor
   * lives (it is starting it again, and the mount is still served).
   * @throws E_DAEMON_UNAVAILABLE (no daemon: the mount is dead), E_NOT_MOUNTED, E_TARGET_BUSY (busy, without force)
   */
  unmount(req: { namespace: string; workspace: string; force: boolean }): Promise<void>;

  /**
   * Best effort: tells a running daemon about a checkpoint for its metrics; with `namespace` and
   * `root` (an overlay checkpoint that made a new root), the daemon shares the root's layer
   * image in the background (docs/explanation/layer-images.md): the checkpoint returns first.
   * Never starts the daemon, never throws, and waits at most ~1 s.
   */
  reportCheckpoint(r: CheckpointReport): Promise<void>;

  /**
   * Best effort: tells a running daemon what became of an import's layer image, for its
   * `awc_layer_images_total`. Never starts the daemon, never throws, and waits at most ~1 s.
   */
  reportImportImage(r: ImportImageReport): Promise<void>;
}
