import { AwcError } from '../../core/errors.js';
import { isMounted } from '../../host/mount/mount-table.js';
import { unmount } from '../../host/mount/mount-commands.js';
import { describeHolders, type Holder } from '../port/mount-use.js';
import { upperInUse } from './upper-use.js';
import { readHostState, workspaceDirs } from '../port/workspace-state.js';
import type { Logger } from '../../core/log.js';

/** A workspace waiting for its old overlay to have no users. */
export interface WaitingRemount {
  namespace: string;
  path: string;
  /** Who held the old mount at the last try. */
  holders: Holder[];
}

/**
 * Workspaces to remount whose old overlay sits on a dead content FUSE connection (the daemon
 * and its supervisor died). The old overlay is replaced only once nobody uses it — a plain
 * unmount fails while it is used here, and the upper probe (upper-use.ts) sees a detached or
 * other-namespace copy — so there are never two overlays on one upper. Until then the
 * workspace waits, retried every second. Emits log lines through `log`.
 */
export class PendingRemounts {
  private readonly waiting = new Map<string, WaitingRemount>();
  private timer?: NodeJS.Timeout;
  private retrying = false;
  private stopped = false;

  /**
   * @param workspacesDir `<home>/host/workspaces`
   * @param remount mounts the workspace anew at `path` (its old overlay is gone and unused)
   */
  constructor(
    private readonly workspacesDir: string,
    private readonly remount: (ns: string, wsId: string, path: string) => Promise<void>,
    private readonly log: Logger,
  ) {}

  /**
   * Replaces the workspace's old overlay at `path` now when it is free (true), else queues it
   * (false). @throws what `remount` or the unmount throws (E_MOUNT_FAILED …), not E_TARGET_BUSY
   */
  async tryRemount(ns: string, wsId: string, path: string): Promise<boolean> {
    const dirs = workspaceDirs(this.workspacesDir, wsId);
    const state = await readHostState(this.workspacesDir, wsId);
    let busyHere = false;
    if (isMounted(path)) {
      try {
        await unmount(path, false);
      } catch (err) {
        if (!(err instanceof AwcError && err.code === 'E_TARGET_BUSY')) throw err;
        busyHere = true;
      }
    }
    const use = await upperInUse(dirs.upper, dirs.dir, state?.mount ? [state.mount.id] : []);
    if (busyHere || use.inUse) {
      if (!this.waiting.has(wsId))
        this.log({
          level: 'warn',
          msg: 'remount waits: the old mount is still in use',
          workspace: wsId,
          path,
          holders: describeHolders(use.holders),
        });
      this.waiting.set(wsId, { namespace: ns, path, holders: use.holders });
      if (!this.stopped) this.timer ??= setInterval(() => void this.retry(), 1000);
      return false;
    }
    this.waiting.delete(wsId);
    await this.remount(ns, wsId, path);
    return true;
  }

  /** Stops waiting for a workspace (it was unmounted). */
  delete(wsId: string): void {
    this.waiting.delete(wsId);
  }

  /** The waiting workspaces by id. */
  entries(): [string, WaitingRemount][] {
    return [...this.waiting.entries()];
  }

  /** No more retries (the daemon stops). */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async retry(): Promise<void> {
    if (this.retrying || this.stopped) return;
    this.retrying = true;
    try {
      for (const [id, w] of this.entries()) {
        try {
          if (await this.tryRemount(w.namespace, id, w.path)) this.log({ level: 'info', msg: 'remounted', workspace: id, path: w.path });
        } catch (err) {
          this.waiting.delete(id);
          this.log({ level: 'error', msg: 'remount failed', workspace: id, err: String(err) });
        }
      }
    } finally {
      this.retrying = false;
      if (this.waiting.size === 0 && this.timer) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    }
  }
}
